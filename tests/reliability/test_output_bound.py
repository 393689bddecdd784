"""A test that prints 50 MB per run grows the ledger by a bounded amount per run: the ledger keeps the first and the
last 64 KiB of a run's output (``tools/operations/runs.py::stored_output``), the verdict is still read from what
the run printed last, and ``runs.output_bytes`` says how much there was."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import anyio
import pytest

from pypto_tune.tools.operations.runs import RUN_OUTPUT_KEPT_BYTES, stored_output
from pypto_tune.tools.service import TuningService
from tests.conftest import OPERATORS, sim_command

CHATTER = '        sys.stdout.write(("a chatty test logs this line again and again " * 4 + "\\n") * 300_000)\n'


def test_the_stored_output_is_bounded_per_run_and_per_session() -> None:
    head, tail = stored_output("h" * 2_000_000, "t" * 2_000_000, session_stored_bytes=0)
    assert (len(head), len(tail)) == (RUN_OUTPUT_KEPT_BYTES, RUN_OUTPUT_KEPT_BYTES) and tail == "t" * len(tail)
    head, tail = stored_output("h" * 2_000_000, "t" * 2_000_000, session_stored_bytes=10**9)
    assert len(head) + len(tail) == 8192  # past the session's budget: 4 KiB at each end
    # an output that fitted the capture's head whole keeps its end as the tail (where the verdict line is)
    head, tail = stored_output("x" * 200_000 + "PRECISION: passed", "", session_stored_bytes=0)
    assert tail.endswith("PRECISION: passed") and len(head) == RUN_OUTPUT_KEPT_BYTES
    assert stored_output("short", "", 0) == ("short", "")
    # a multi-byte character cut at the bound is dropped, never stored half
    head, _ = stored_output("é" * RUN_OUTPUT_KEPT_BYTES, "", 0)
    assert len(head.encode()) <= RUN_OUTPUT_KEPT_BYTES and set(head) == {"é"}


@pytest.mark.sim
def test_fifty_megabytes_per_run_grow_the_ledger_by_a_bounded_amount(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    text = (OPERATORS / "softmax" / "softmax.py").read_text()
    text = text.replace("        softmax_kernel(x_dev, y_dev)\n", CHATTER + "        softmax_kernel(x_dev, y_dev)\n")
    (ws / "softmax.py").write_text(text)
    svc = TuningService(default_workspace=ws)
    sid = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=sim_command(),
                            run_mode="sim", goal_speedup=2.0).session_id
    assert anyio.run(functools.partial(svc.run_precision_check, sid)).verdict == "passed"
    svc.enable_runtime_debug(sid)
    ledger = svc.ctx.find(sid).ledger
    ledger.checkpoint()
    before = (ws / ".pypto-tune" / "ledger.sqlite3").stat().st_size
    assert anyio.run(functools.partial(svc.collect_swimlane, sid)).valid
    ledger.checkpoint()
    grown = (ws / ".pypto-tune" / "ledger.sqlite3").stat().st_size - before
    runs = ledger.rows("runs", sid)
    assert all(r["output_bytes"] > 50_000_000 for r in runs), [r["output_bytes"] for r in runs]
    assert all(len(r["output_head"].encode()) + len(r["output_tail"].encode()) <= 2 * RUN_OUTPUT_KEPT_BYTES
               for r in runs)
    assert runs[-1]["output_tail"].rstrip().endswith("numerics not checked)")
    # one run, its measurement and analysis: well under the 4 MB of output a run once stored
    assert grown < 512 * 1024, grown
    shutil.rmtree(ws / "output", ignore_errors=True)
