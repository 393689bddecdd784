"""Every rule, allowing and refusing, through the real MCP client talking to the real server over stdio, with the
real PyPTO simulator running our softmax fixture. One session walks the whole loop so the suite stays fast; its
baseline analysis also shows the suggestions an agent can act on (the current stage's items only, through this
operator's knobs)."""

from __future__ import annotations

import difflib
import json
import sqlite3
from pathlib import Path

import anyio
import pytest
from mcp.types import ResourceLink

from tests.conftest import sim_command
from tests.server.mcp_client import connect

pytestmark = pytest.mark.sim

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
TILE_B = "softmax.py:TILE_B"


def _two_knob_diff(src: str) -> str:
    new = src.replace("TILE_B = 4", "TILE_B = 2").replace("set_vec_tile_shapes(1, 4, 256)",
                                                          "set_vec_tile_shapes(1, 8, 256)")
    return "".join(difflib.unified_diff(src.splitlines(True), new.splitlines(True), "a/softmax.py", "b/softmax.py"))


def test_a_whole_session_enforces_every_gate(softmax_ws: Path) -> None:
    async def scenario() -> None:
        async with connect(softmax_ws) as s:
            base = dict(workspace=str(softmax_ws), operator_files=["softmax.py"], test_command=sim_command(),
                        run_mode="sim")
            # R1: no goal, no session.
            assert "GATE goal:" in await s.refused("start_session", **base)
            st = await s.ok("start_session", **base, goal_speedup=3.0)
            sid = st["session_id"]
            assert st["state"] == "S1_SETUP" and st["next_actions"][0] == "run_precision_check"

            # R6: nothing before a passing precision record.
            assert "GATE precision-first:" in await s.refused("collect_swimlane", session_id=sid)
            assert "GATE precision-first:" in await s.refused("enable_runtime_debug", session_id=sid)
            assert "GATE sequence:" in await s.refused("apply_tuning_patch", session_id=sid, knob=VEC,
                                                       value=[1, 8, 256], catalog_id="F-10", rationale="x")

            prec = await s.ok("run_precision_check", session_id=sid)
            assert prec["verdict"] == "passed" and prec["numerics_checked"] is False
            assert "NOT checked" in prec["message"]
            assert {c["name"] for c in prec["env_checks"]} and all(c["ok"] for c in prec["env_checks"])
            assert prec["state"] == "S2_COLLECT"

            # R2/R7: measuring needs runtime_debug_mode 1.
            assert "GATE debug-mode:" in await s.refused("collect_swimlane", session_id=sid)
            dbg = await s.ok("enable_runtime_debug", session_id=sid)
            assert dbg["changed_files"] == ["softmax.py"] and "runtime_debug_mode" in dbg["diff"]
            assert '"runtime_debug_mode": 1' in (softmax_ws / "softmax.py").read_text()

            base_m = await s.ok("collect_swimlane", session_id=sid)
            assert base_m["valid"] and base_m["round"] == 0
            assert base_m["operator_time_us"] == pytest.approx(36.405, abs=1e-3)  # = fixtures/runs/softmax_base (SIM is deterministic)
            assert base_m["target_us"] == pytest.approx(base_m["operator_time_us"] / 3.0)
            assert base_m["state"] == "S3_ANALYZE"
            assert "GATE sequence:" in await s.refused("collect_swimlane", session_id=sid)

            res = await s.call("analyze_bubbles", session_id=sid, lang="en")
            an = res.structured_content
            assert an["state"] == "S4_TUNE" and an["stage"] == "FRONTEND"
            assert Path(an["report_path"]).is_file()
            # a summary under 8 KB, and the whole analysis of that measurement one resource read away
            assert len(res.model_dump_json(by_alias=True, exclude_none=True)) <= 8 * 1024
            assert an["measurement_id"] == base_m["measurement_id"]
            uri = f"pypto-tune://sessions/{sid}/analyses/{base_m['measurement_id']}"
            assert an["detail_uri"] == uri
            assert [str(b.uri) for b in res.content if isinstance(b, ResourceLink)] == [uri]
            whole = json.loads((await s.client.read_resource(uri)).contents[0].text)
            assert whole["measurement_id"] == base_m["measurement_id"] and whole["valid"] is True
            assert len(whole["analysis"]["cores"]) == an["cores_total"]
            assert whole["operator_time_us"] == pytest.approx(an["operator_time_us"], abs=1e-3)

            # Suggestions an agent can act on: only the current stage's catalogue items, each naming knobs of THIS
            # operator that carry it out, or saying it is an analysis or needs a structural change.
            full = await s.ok("analyze_bubbles", session_id=sid, lang="en", detail="full")
            assert full["stage"] == "FRONTEND"
            sugg = full["suggestions"]
            assert sugg, full["message"]
            assert {x["stage"] for x in sugg} == {"frontend"}
            knob_ids = {k["id"] for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            for x in sugg:
                assert x["action"] in ("knob", "analysis", "structural"), x
                assert (x["action"] == "knob") == bool(x["knobs"]), x
                assert set(x["knobs"]) <= knob_ids, (x, knob_ids)
            # softmax's vector tile and block size serve frontend items: at least one suggestion names one
            assert any(x["action"] == "knob" for x in sugg), sugg
            # the compact default view (the call above) carries the same annotations
            assert [(x["catalog_id"], x["action"]) for x in an["suggestions"]] == \
                [(x["catalog_id"], x["action"]) for x in sugg[:len(an["suggestions"])]]

            # R9: one knob per round; R10: the id must belong to the stage.
            src = (softmax_ws / "softmax.py").read_text()
            msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_two_knob_diff(src), catalog_id="F-10",
                                  rationale="two at once")
            assert "GATE one-change:" in msg and "2 knobs" in msg
            assert (softmax_ws / "softmax.py").read_text() == src, "a refused patch must not touch the file"
            assert "GATE catalog-stage:" in await s.refused("apply_tuning_patch", session_id=sid, knob=VEC,
                                                            value=[1, 8, 256], catalog_id="S-12", rationale="x")
            assert "GATE catalog-stage:" in await s.refused("apply_tuning_patch", session_id=sid, knob=VEC,
                                                            value=[1, 8, 256], catalog_id="F-3", rationale="x")
            illegal = await s.refused("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 0, 256],
                                      catalog_id="F-10", rationale="x")
            assert "legal" in illegal

            p1 = await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 8, 256], catalog_id="F-10",
                            rationale="AIV tasks are short")
            assert p1["round"] == 1 and len(p1["knob_changes"]) == 1
            # R11: verify before measure or record; one round at a time.
            assert "GATE verify-after-change:" in await s.refused("record_round", session_id=sid)
            assert "GATE verify-after-change:" in await s.refused("collect_swimlane", session_id=sid)
            assert "GATE round-open:" in await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_B, value=2,
                                                         catalog_id="F-3", rationale="x")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            assert "GATE measure-first:" in await s.refused("record_round", session_id=sid)
            m1 = await s.ok("collect_swimlane", session_id=sid)
            r1 = await s.ok("record_round", session_id=sid)
            assert r1["decision"] == "kept" and r1["result_type"] == "gain"
            assert r1["after_us"] == pytest.approx(m1["operator_time_us"])
            assert r1["before_us"] == pytest.approx(base_m["operator_time_us"])

            # R12: a regression is rolled back byte-for-byte by the server itself.
            kept_src = (softmax_ws / "softmax.py").read_text()
            await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 4, 256], catalog_id="F-10",
                       rationale="back to the smaller tile to check")
            await s.ok("run_precision_check", session_id=sid)
            await s.ok("collect_swimlane", session_id=sid)
            r2 = await s.ok("record_round", session_id=sid)
            assert r2["decision"] == "reverted" and r2["result_type"] == "regression" and r2["delta_pct"] > 0
            assert (softmax_ws / "softmax.py").read_text() == kept_src

            # C/F-10: a tile that cannot fit the unified buffer is refused before anything is written or run
            # (it used to compile-fail in a round), whichever way it is written.
            tile_diff = "".join(difflib.unified_diff(
                kept_src.splitlines(True), kept_src.replace("set_vec_tile_shapes(1, 8, 256)",
                                                            "set_vec_tile_shapes(4, 32, 256)").splitlines(True),
                "a/softmax.py", "b/softmax.py"))
            for args in ({"knob": VEC, "value": [4, 32, 256]}, {"diff": tile_diff}):
                msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-10",
                                      rationale="one tile per body", **args)
                assert "GATE legality:" in msg and "128 KB" in msg
            assert (softmax_ws / "softmax.py").read_text() == kept_src
            # R19: the regression of round 2 is never tried again, written differently or not.
            assert "GATE no-retry:" in await s.refused("apply_tuning_patch", session_id=sid, knob=VEC,
                                                       value=[1, 4, 256], catalog_id="F-10", rationale="again")

            # Drift: an edit behind the server's back blocks tuning until reverted.
            (softmax_ws / "softmax.py").write_text(kept_src.replace("TILE_B = 4", "TILE_B = 8"))
            assert "GATE drift:" in await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_B, value=2,
                                                    catalog_id="F-3", rationale="x")
            status = await s.ok("get_status", session_id=sid)
            assert status["drift"] is True
            await s.ok("revert_patch", session_id=sid)
            assert (softmax_ws / "softmax.py").read_text() == kept_src

            # R14b user stop → reporting only; R22 the report restores debug options and records it.
            await s.ok("stop_session", session_id=sid, reason="test done")
            assert "GATE finished:" in await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_B, value=2,
                                                       catalog_id="F-3", rationale="x")
            rep = await s.ok("render_report", session_id=sid, format="md", lang="en")
            assert rep["debug_restored_now"] is True
            final = (softmax_ws / "softmax.py").read_text()
            assert "runtime_debug_mode" not in final and "set_vec_tile_shapes(1, 8, 256)" in final
            assert all(Path(p).is_file() for p in rep["paths"])

        # The ledger is append-only at the database level, not by convention.
        db = sqlite3.connect(softmax_ws / ".pypto-tune" / "ledger.sqlite3")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute("UPDATE round_decisions SET decision='kept'")
        rules = {r[0] for r in db.execute("SELECT rule FROM refusals")}
        assert {"goal", "precision-first", "debug-mode", "one-change", "catalog-stage", "verify-after-change",
                "round-open", "measure-first", "drift", "finished", "legality", "no-retry"} <= rules

    anyio.run(scenario)
