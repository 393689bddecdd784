"""The ALGORITHM stage over MCP stdio (R23), reached the only way there is: the configuration stages converge by
measurement — five rounds without gain in a row in INCORE_3 — and the server opens it.

There a declared algorithm change may rewrite the kernel and move tuning knobs along, but it is still held to what
a knob change is held to: it carries no new problem size, no run_mode and no debug option, and each knob it moves
stays inside its own domain. The mutation run over ``admission.py`` found both let through (issue #16); the fast
tests in ``test_admission_decisions.py`` pin the decisions, this one the agent's path to them: refused with the
rule named, nothing written, and a legitimate rewrite still measured and recorded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.admission.test_attack_gaps_over_stdio import _leave
from tests.admission.test_attacks_over_stdio import _diff, _round
from tests.conftest import sim_command
from tests.server.mcp_client import connect
from tests.sessions import to_frontend

pytestmark = pytest.mark.sim

KERNEL_EDIT = ("pypto.exp(xv - row_max)", "pypto.exp(xv)")
TILE_B = "softmax.py:TILE_B"
SUBMIT = "softmax.py:softmax_kernel.loop[LOOP_B].submit_before_loop"
# INCORE_3's rounds and what SIM decides for each (measured 2026-12-04; SIM is deterministic): one gain, then the
# five rounds without gain in a row that end the stage
INCORE_ROUNDS = [((TILE_B, "I-9", 2), "gain"), ((TILE_B, "I-9", 1), "no-gain"), ((SUBMIT, "I-8", True), "no-gain"),
                 ((SUBMIT, "I-8", False), "no-gain"), ((TILE_B, "I-9", 8), "regression"),
                 ((TILE_B, "I-9", 16), "regression")]
KEPT_TILE_B, OTHER_TILE_B = "\nTILE_B = 2\n", "\nTILE_B = 4\n"  # the kept value after round 1, and a legal other


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_an_algorithm_change_carries_no_problem_size_run_mode_or_knob_outside_its_domain(softmax_ws: Path) -> None:
    ws = softmax_ws
    op = ws / "softmax.py"

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], sim_command())
            for stage in ("FRONTEND", "SWIMLANE_1", "INCORE_1", "SWIMLANE_2", "INCORE_2", "SWIMLANE_3"):
                await _leave(s, sid, stage)
            assert (await s.ok("get_status", session_id=sid))["stage"] == "INCORE_3"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            await s.ok("analyze_bubbles", session_id=sid, lang="en")
            knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            for (knob, cid, _), _ in INCORE_ROUNDS:
                assert cid in knobs[knob]["catalog_ids"], knobs[knob]

            # convergence by measurement: R14's threshold for an in-core stage is 5 rounds without gain in a row
            for i, ((knob, cid, value), expected) in enumerate(INCORE_ROUNDS, 1):
                assert (await s.ok("get_status", session_id=sid))["stage"] == "INCORE_3"
                r = await _round(s, sid, knob=knob, value=value, catalog_id=cid)
                assert (r["round"], r["result_type"]) == (i, expected), r
                assert r["decision"] == ("kept" if expected == "gain" else "reverted"), r
            assert "stage ALGORITHM" in r["message"], r
            st = await s.ok("get_status", session_id=sid)
            assert st["stage"] == "ALGORITHM" and not st["finished"], st
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            await s.ok("analyze_bubbles", session_id=sid, lang="en")
            src = op.read_text()
            rows_before = (await s.ok("get_status", session_id=sid))["rounds"]

            async def refused(after: str) -> str:
                return await s.refused("apply_tuning_patch", session_id=sid, catalog_id="A-1", algorithm=True,
                                       rationale="an algorithm rewrite", diff=_diff("softmax.py", src, after))

            kernel = _edit(src, *KERNEL_EDIT)
            # a new problem size or run_mode beside a kernel rewrite, or beside another knob: never a tuning move
            for knob, moved in (("softmax.py:B", ("B, N, D = 32, 32, 256", "B, N, D = 16, 32, 256")),
                                ("softmax.py:softmax_kernel.runtime_options.run_mode",
                                 ('"run_mode": RUN_MODE', '"run_mode": pypto.RunMode.NPU'))):
                for beside in (kernel, _edit(src, KEPT_TILE_B, OTHER_TILE_B)):
                    msg = await refused(_edit(beside, *moved))
                    assert "GATE one-change:" in msg and f"{knob} is not a tuning knob" in msg, msg
            # each knob it moves is held to its own domain: beside another knob, and beside the kernel rewrite
            for beside in (kernel, _edit(src, KEPT_TILE_B, OTHER_TILE_B)):
                msg = await refused(_edit(beside, '"stitch_function_max_num": 128', '"stitch_function_max_num": 0'))
                assert "GATE legality:" in msg and "stitch_function_max_num = 0 is not legal" in msg, msg
            assert op.read_text() == src  # nothing refused was written
            st = await s.ok("get_status", session_id=sid)
            assert st["rounds"] == rows_before and st["stage"] == "ALGORITHM", st

            # the legitimate rewrite — the kernel, with a tuning knob moved along — is admitted, measured, recorded
            r = await _round(s, sid, catalog_id="A-1", algorithm=True,
                             diff=_diff("softmax.py", src, _edit(kernel, KEPT_TILE_B, OTHER_TILE_B)))
            assert r["round"] == rows_before + 1 and r["after_us"] is not None, r
            assert r["decision"] in ("kept", "reverted"), r

    anyio.run(scenario)
