"""A manual round whose run compiled, but left no output folder the server can count, is recorded as a runtime
error — never as a compile failure of the change.

The round's result type is what the search's history and the knowledge store learn about a value: a compile
failure says "this value (and any larger) does not compile". The search's trial path had this right; the manual
path (``run_precision_check`` → ``record_round``) classed the same run from its text, where the SIM verdict's own
note ("compiled and simulated only") read as a compile failure. Both paths now share ``runs.check_run``.

The harness here runs the operator's source under another file name when the tile is (1, 16, 256): PyPTO names
that file in ``program.json``, it is not the recorded copy, so the run's only folder is rejected. Real server,
real sandbox, real simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
ELSEWHERE = "/opt/elsewhere/softmax.py"
HARNESS = f'''"""Runs softmax; with the (1, 16, 256) tile, runs its source compiled under another file name."""
import linecache
import sys

import softmax

SOURCE = open(softmax.__file__).read()
if "set_vec_tile_shapes(1, 16, 256)" in SOURCE:
    # pypto reads the kernel's source back (inspect): serve it for the other name
    linecache.cache[{ELSEWHERE!r}] = (len(SOURCE), None, SOURCE.splitlines(True), {ELSEWHERE!r})
    scope = {{"__name__": "softmax_elsewhere"}}
    exec(compile(SOURCE, {ELSEWHERE!r}, "exec"), scope)
    sys.exit(scope["main"]())
sys.exit(softmax.main())
'''


def test_a_round_whose_only_output_folder_is_rejected_is_a_runtime_error(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "softmax.py").write_text((OPERATORS / "softmax" / "softmax.py").read_text())
    (ws / "test_softmax.py").write_text(HARNESS)
    cmd = [sys.executable, "test_softmax.py", "--run-mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], cmd)
            await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 16, 256], catalog_id="F-10",
                       rationale="wider tile")
            pre = await s.ok("run_precision_check", session_id=sid)
            assert pre["verdict"] == "failed", (pre["reason"], pre.get("deciding_lines"))
            assert ELSEWHERE in pre["reason"] and "not a file of this run's recorded copy" in pre["reason"], pre
            rec = await s.ok("record_round", session_id=sid)
            assert rec["decision"] == "failed"
            assert rec["result_type"] == "runtime-error", rec  # before: "compile-failure"

    anyio.run(scenario)
