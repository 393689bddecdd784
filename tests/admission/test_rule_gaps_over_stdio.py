"""Issue #16, item 6: the rule gaps a hostile agent found, each tried again over MCP stdio against the real server
and the real simulator, in one session (one baseline) that holds every attack below in order.

FRONTEND (one baseline):
* option keys no catalogue item names (``pass_options={"pg_upper_bound": -4}``, an unknown runtime key) were
  admitted with no catalogue id and no legality record → ``GATE catalog-stage`` (R10, domain C); a catalogued key's
  own domain is checked and recorded;
* two ``apply_tuning_patch`` calls at once: the refused one had already written the operator file → the synchronous
  tools hold the session's operation lock: one is admitted, the other refused before it writes anything;
* a knob value that names something (``RUN_MODE.value * 8``) ended in an internal RecursionError → admitted, its
  legality recorded as unchecked, shown so in the report.

SWIMLANE_1 (R19 keyed on the code state):
* a change whose precision failed, retried after one "correction" that was reverted before verification (the round
  closed as "abandoned") → refused, naming the round;
* a change whose measurement was invalid, reverted before record_round → the round is "failed", not "abandoned",
  and the same change is refused.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest

from tests.admission.test_attacks_over_stdio import _diff
from tests.conftest import make_workspace, sim_command
from tests.server.mcp_client import Session, connect
from tests.sessions import leave_stage_by_checklist, to_frontend

pytestmark = pytest.mark.sim

SM = "softmax.py:softmax_kernel."
VEC = SM + "set_vec_tile_shapes#1"
NBUF = SM + "pass_options.vec_nbuffer_setting"
STITCH = SM + "runtime_options.stitch_function_max_num"
JIT = '"stitch_function_max_num": 128}'  # the end of the jit's runtime_options dict


async def _ledger(s: Session, sid: str) -> dict:
    return json.loads((await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text)


def _intents(ws: Path) -> list[str]:
    """The tools that recorded an intent to write the operator files (the ledger's write_intents, read directly)."""
    con = sqlite3.connect(f"file:{ws / '.pypto-tune' / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT tool FROM write_intents ORDER BY id")]
    finally:
        con.close()


def test_option_keys_concurrent_patches_and_named_values_in_frontend_then_r19_in_swimlane(tmp_path: Path) -> None:
    """One session, one baseline: the FRONTEND attacks, then the stage left by its checklist and the R19 attacks."""
    ws = make_workspace(tmp_path)
    op = ws / "softmax.py"

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await to_frontend(s, ws, ["softmax.py"], sim_command())
            src = op.read_text()
            assert JIT in src

            # 1. option keys no catalogue item names, one with a negative bound: refused (R10, domain C), not
            #    admitted with no catalogue id and no legality record
            for new, key in ((JIT + ', pass_options={"pg_upper_bound": -4}', "pg_upper_bound"),
                             (JIT.replace("128}", '128, "stitch_function_outcast_memory": 0}'),
                              "stitch_function_outcast_memory")):
                msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-3", rationale="undeclared",
                                      diff=_diff("softmax.py", src, src.replace(JIT, new)))
                assert "GATE catalog-stage:" in msg and key in msg and "no declared legal domain" in msg, msg
            assert op.read_text() == src and (await s.ok("get_status", session_id=sid))["rounds"] == 0

            # 2. two patches at once: exactly one is admitted, and the other wrote nothing (no write intent, the
            #    file holds the admitted change's bytes, no drift)
            results: dict[int, object] = {}

            async def patch(i: int, value: list[int]) -> None:
                res = await s.client.call_tool("apply_tuning_patch", {
                    "session_id": sid, "knob": VEC, "value": value, "catalog_id": "F-10", "rationale": f"racer {i}"})
                results[i] = res

            async with anyio.create_task_group() as tg:
                tg.start_soon(patch, 0, [1, 8, 256])
                tg.start_soon(patch, 1, [1, 16, 256])
            ok = [i for i, r in results.items() if not r.is_error]
            refused = [i for i, r in results.items() if r.is_error]
            assert len(ok) == 1 and len(refused) == 1, results
            text = "".join(b.text for b in results[refused[0]].content)
            assert "GATE busy:" in text or "GATE round-open:" in text, text
            admitted = [1, 8, 256] if ok == [0] else [1, 16, 256]
            assert f"set_vec_tile_shapes({', '.join(map(str, admitted))})" in op.read_text()
            assert _intents(ws).count("apply_tuning_patch") == 1, "the refused call wrote the operator file"
            st = await s.ok("get_status", session_id=sid)
            assert st["drift"] is False and len((await _ledger(s, sid))["tables"]["rounds"]) == 1
            await s.ok("revert_patch", session_id=sid)  # the round is closed unrun (abandoned)
            assert op.read_text() == src

            # 3. a value that names something: admitted, legality recorded as unchecked, run, and in the report
            named = src.replace("set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(1, RUN_MODE.value * 8, 256)")
            p = await s.ok("apply_tuning_patch", session_id=sid, catalog_id="F-10", rationale="named value",
                           diff=_diff("softmax.py", src, named))
            assert p["legality_unchecked"] and "cannot evaluate" in " ".join(p["legality_unchecked"]), p
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            r = await s.ok("record_round", session_id=sid)
            assert r["decision"] in ("kept", "reverted") and r["after_us"] is not None
            # the same named change again is a retry (R19), not a crash
            if r["decision"] != "kept":
                msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-10", rationale="again",
                                      diff=_diff("softmax.py", src, named))
                assert "GATE no-retry:" in msg, msg

            # 4. R19 keyed on the code state, in SWIMLANE_1 (the same session: its FRONTEND baseline serves both)
            assert (await leave_stage_by_checklist(s, sid))["stage"] == "SWIMLANE_1"
            assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
            await s.ok("analyze_bubbles", session_id=sid, lang="en")
            kept = op.read_text()  # the named value's round may have been kept

            # a value that does not compile: the precision check fails
            bad = {"-2": 1, "-1": 0}
            r = await s.ok("apply_tuning_patch", session_id=sid, knob=NBUF, value=bad, catalog_id="S-5",
                           rationale="fails to compile")
            v = await s.ok("run_precision_check", session_id=sid)
            assert v["verdict"] != "passed", v
            # one "correction" of the same knob, rolled back before it is verified: the round ends "abandoned"
            await s.ok("apply_tuning_patch", session_id=sid, knob=NBUF, value={"-2": 1, "-1": 2}, catalog_id="S-5",
                       rationale="correction")
            rev = await s.ok("revert_patch", session_id=sid)
            assert rev["round"] == r["round"] and op.read_text() == kept
            # the failed code is never admitted again, as a structured edit or as a diff
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob=NBUF, value=bad, catalog_id="S-5",
                                  rationale="again")
            assert "GATE no-retry:" in msg and f"round {r['round']}" in msg and "failed" in msg, msg

            # a change whose measurement is invalid (SIM merges stitches into fake tasks, B.9.3), rolled back before
            # record_round: a failure, not "abandoned", and never retried
            r2 = await s.ok("apply_tuning_patch", session_id=sid, knob=STITCH, value=1, catalog_id="S-9",
                            rationale="one stitch")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            m = await s.ok("collect_swimlane", session_id=sid)
            assert m["valid"] is False, m
            rev = await s.ok("revert_patch", session_id=sid)
            assert rev["decision"] == "failed", rev
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob=STITCH, value=1, catalog_id="S-9",
                                  rationale="again")
            assert "GATE no-retry:" in msg and f"round {r2['round']}" in msg, msg
            assert op.read_text() == kept

            # the named value of step 3, in the report
            await s.ok("stop_session", session_id=sid, reason="test done")
            report = Path((await s.ok("render_report", session_id=sid, fmt="md", lang="en"))["paths"][0])
            text = report.read_text()
            line = next((x for x in text.splitlines() if "not evaluable, passed unchecked" in x), "")
            assert VEC in line and "RUN_MODE.value * 8" in line, "the report must show the unchecked value"

    anyio.run(scenario)
