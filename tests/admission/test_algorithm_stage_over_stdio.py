"""The way into the ALGORITHM stage over MCP stdio (R23), and what an algorithm change is held to there.

The stage opens only one way: the configuration stages converge by measurement — five rounds without gain in a row
in INCORE_3 — and the server opens it. Leaving INCORE_3 early instead (its checklist marked) ends the session: no
ALGORITHM without measured convergence (issue #10, attack 6). Both branches start from the same INCORE_3 entry: the
workspace (operator and ledger) is copied there with the server stopped, and the second branch is a fresh server
resuming that session from the copied ledger at the same path — the stages before it are walked once.

Before the first analysis (S3), an external edit cannot be adopted: it would make unmeasured code the kept state
(attack 4 at S3, refused by the drift rule).

In ALGORITHM a declared algorithm change may rewrite the kernel and move tuning knobs along, but it is still held to
what a knob change is held to: it carries no new problem size, no run_mode and no debug option, and each knob it moves
stays inside its own domain. The mutation run over ``admission.py`` found both let through (issue #16); the fast
tests in ``test_admission_decisions.py`` pin the decisions, this one the agent's path to them: refused with the
rule named, nothing written, and a legitimate rewrite still measured and recorded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.admission.test_attacks_over_stdio import _diff, _round
from tests.conftest import sim_command
from tests.server.mcp_client import Session, connect
from tests.sessions import keep_copy, put_back

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
CONFIGURATION_STAGES = ["FRONTEND", "SWIMLANE_1", "INCORE_1", "SWIMLANE_2", "INCORE_2", "SWIMLANE_3", "INCORE_3"]


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


async def _mark_and_advance(s: Session, sid: str, stage: str) -> dict:
    """Leave ``stage`` early the legitimate way, once its entry collection and analysis are done: every untried
    checklist item marked with a specific reason, then advance_stage."""
    items = (await s.ok("get_status", session_id=sid))["checklist"]
    for cid in [i["catalog_id"] for i in items if i["status"] == "untried"]:
        await s.ok("mark_checklist", session_id=sid, catalog_id=cid, status="not-applicable",
                   reason=f"{cid} in {stage}: measured 36.4 µs at baseline, left for the search ({cid.lower()})")
    return await s.ok("advance_stage", session_id=sid, reason=f"{stage} checklist done")


async def _enter(s: Session, sid: str, stage: str) -> None:
    """A stage's own entry collection and analysis (FRONTEND reuses the baseline's)."""
    assert (await s.ok("get_status", session_id=sid))["stage"] == stage
    assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
    await s.ok("analyze_bubbles", session_id=sid, lang="en")


def test_algorithm_opens_only_by_measured_convergence_and_holds_a_change_to_what_a_knob_change_is_held_to(
        softmax_ws: Path, tmp_path: Path) -> None:
    ws = softmax_ws
    op = ws / "softmax.py"
    at_incore_3 = tmp_path / "at-INCORE_3"

    async def to_incore_3() -> tuple[str, float, str]:
        async with connect(ws) as s:
            sid = (await s.ok("start_session", workspace=str(ws), operator_files=["softmax.py"],
                              test_command=sim_command(), run_mode="sim", goal_speedup=100.0))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            st = await s.ok("get_status", session_id=sid)
            assert st["state"] == "S3_ANALYZE" and st["rounds"] == 0
            baseline = st["best_us"]

            # 4 at S3: one legal knob edited by hand after the baseline, before the first analysis. Adopting it would
            # make unmeasured code the kept state: refused by the drift rule, and nothing becomes kept.
            src = op.read_text()
            op.write_text(src.replace("TILE_B = 4", "TILE_B = 2"))
            msg = await s.refused("run_precision_check", session_id=sid, adopt_drift=True)
            assert "GATE drift:" in msg and "only be adopted while tuning (now S3_ANALYZE)" in msg, msg
            assert "GATE drift:" in await s.refused("collect_swimlane", session_id=sid)
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is True and st["rounds"] == 0 and st["best_us"] == baseline
            assert st["state"] == "S3_ANALYZE"
            await s.ok("revert_patch", session_id=sid)
            assert op.read_text() == src
            assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"

            # every configuration stage before INCORE_3 left early, each after its own collection and analysis
            for here, nxt in zip(CONFIGURATION_STAGES[:-1], CONFIGURATION_STAGES[1:]):
                if here != "FRONTEND":
                    await _enter(s, sid, here)
                assert (await _mark_and_advance(s, sid, here))["stage"] == nxt
            await _enter(s, sid, "INCORE_3")
            return sid, baseline, src

    async def converge_into_algorithm(sid: str) -> None:
        async with connect(ws) as s:  # a fresh server resumes the session from the ledger
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

    async def leave_incore_3_early(sid: str, baseline: float, src: str) -> None:
        async with connect(ws) as s:
            # 6: leaving the last configuration stage (INCORE_3) early must end the session, not open ALGORITHM
            # (R23: that needs convergence shown by measurement, a no-gain streak in the last stage).
            last = await _mark_and_advance(s, sid, "INCORE_3")
            assert last["stage"] != "ALGORITHM" and "ALGORITHM needs measured convergence" in last["message"], last
            st = await s.ok("get_status", session_id=sid)
            assert st["finished"] is True and st["stage"] != "ALGORITHM" and st["rounds"] == 0
            assert st["best_us"] == baseline
            # nothing, structural or not, can be applied any more
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_B, value=8, catalog_id="F-3",
                                  rationale="after the end")
            assert "GATE finished:" in msg
            msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="A-1", rationale="algorithm",
                                  diff=_diff("softmax.py", src, src.replace("e / s", "e")), algorithm=True)
            assert "GATE finished:" in msg
            assert op.read_text() == src

    sid, baseline, src = anyio.run(to_incore_3)
    keep_copy(ws, at_incore_3)
    anyio.run(converge_into_algorithm, sid)
    put_back(at_incore_3, ws)  # back to the INCORE_3 entry
    anyio.run(leave_incore_3_early, sid, baseline, src)
