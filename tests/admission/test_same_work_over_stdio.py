"""Attack: make the tiling decide how much work the test does, then collect the "gain".

The harness (written before the session starts, as an agent that wants a number could) runs upstream_mean_pool's
kernel twice; the second call goes through a helper that *guards* the tiling dict (``if tiling["seq_chunk"] > 32:
raise ValueError``), and the test catches that error and goes on to its verdict line. A guard that only raises is no
use of a value (it cannot change what a run computes), so the entry stays a knob; but here the raise is caught, and
at ``seq_chunk`` 64 the second kernel is skipped: the run measured one kernel where the kept state measured two. On
the old server that round was kept at 26.291 µs (-82 %), the grid's time of *one* call. Rule same-work refuses to
compare a run that called other kernels than the kept state's runs, on the search's trial path and the manual path
alike; a change that leaves both calls in place is measured and kept as before, both calls summed.

Real server, sandbox and simulator; expected times from the fixture's measured grid.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
SEQ = 'mean_pool_op.py:test_mean_pool.tiling["seq_chunk"]'
HIDDEN = 'mean_pool_op.py:test_mean_pool.tiling["hidden_chunk"]'
CMD = [sys.executable, "mean_pool_op.py", "mean_pool_op.py::test_mean_pool", "--run_mode", "sim"]
GUARDED = '''def build_mean_pool_checked(shape: tuple, tiling: dict, run_mode: str):
    """The pool of the second case, which supports sequence chunks of at most 32."""
    if tiling["seq_chunk"] > 32:
        raise ValueError("sequence chunks over 32 are not supported for the second case")
    return build_mean_pool(shape, tiling, run_mode)


'''
FIRST_CALL = "    kernel(x.to(device), mask.to(device), y)\n"
SECOND_CALL = '''    try:
        second = build_mean_pool_checked((BATCH, SEQ, HIDDEN), tiling, run_mode)
        second(x.to(device), mask.to(device), torch.zeros(BATCH, HIDDEN, dtype=torch.float32, device=device))
    except ValueError:
        pass
'''


def _grid_us(**knobs: int) -> float:
    grid = json.loads((ROOT / "benchmarks" / "grids" / "upstream_mean_pool.json").read_text())
    want = {"rows_per_block": 1, "seq_chunk": 8, "hidden_chunk": 64, "vec_nbuffer": 1, **knobs}
    return next(r["operator_time_us"] for r in grid["configs"] if r["knobs"] == want)


def test_a_tile_that_makes_the_test_skip_a_kernel_is_never_compared_on_either_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(OPERATORS / "upstream_mean_pool", ws, ignore=shutil.ignore_patterns("grid.json", "__pycache__"))
    op = ws / "mean_pool_op.py"
    src = op.read_text()
    marker = "# ----------------------------------------------------------------------------- tests\n"
    assert src.count(marker) == 1 and src.count(FIRST_CALL) == 1
    op.write_text(src.replace(marker, GUARDED + marker).replace(FIRST_CALL, FIRST_CALL + SECOND_CALL))

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["mean_pool_op.py"], CMD)
            base = (await s.ok("get_status", session_id=sid))["best_us"]
            assert base == pytest.approx(2 * _grid_us(), abs=2e-3)  # two calls at the shipped tiling
            # the search's path: a trial at 64 (the second call skipped) fails, nothing is kept
            prop = await s.ok("propose_candidates", session_id=sid, knob=SEQ, limit=8)
            at64 = next(c for c in prop["candidates"] if c["value"] == 64)
            trial = (await s.ok("run_candidates", session_id=sid, candidates=[at64["id"]]))["trials"][0]
            assert trial["decision"] == "failed", trial
            assert "same-work" in json.dumps(trial) and "mean_pool_kernel 1 time(s) now, 2" in json.dumps(trial)
            assert (await s.ok("get_status", session_id=sid))["best_us"] == pytest.approx(base, abs=1e-6)
            # the same code again, by hand, is a change that failed (R19)
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob=SEQ, value=64, catalog_id="F-10",
                                  rationale="the whole sequence per tile")
            assert "GATE no-retry" in msg and "called other kernels than the kept state" in msg, msg
            # a change that leaves both calls in place is measured and kept as before, at their sum
            await s.ok("apply_tuning_patch", session_id=sid, knob=HIDDEN, value=128, catalog_id="F-10",
                       rationale="wider hidden chunks")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            rec = await s.ok("record_round", session_id=sid)
            kept_us = 2 * _grid_us(hidden_chunk=128)
            assert rec["decision"] == "kept" and rec["after_us"] == pytest.approx(kept_us, abs=2e-3)
            # the manual path from the new kept state (new code): the second call skipped again
            await s.ok("apply_tuning_patch", session_id=sid, knob=SEQ, value=64, catalog_id="F-10",
                       rationale="the whole sequence per tile")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            got = await s.ok("collect_swimlane", session_id=sid)  # in an open round: answered, not refused
            msg = got["message"]
            assert not got["valid"] and got["samples_us"] == [] and got["operator_time_us"] is None, got
            assert "INVALID" in msg and "same-work" in msg and "mean_pool_kernel 1 time(s) now, 2" in msg, msg
            assert "stitch_function_max_num" not in msg  # not the advice for split device tasks
            rec = await s.ok("record_round", session_id=sid)
            assert rec["decision"] == "failed", rec
            status = await s.ok("get_status", session_id=sid)
            assert status["best_us"] == pytest.approx(kept_us, abs=2e-3)  # not one call's time

    anyio.run(scenario)
