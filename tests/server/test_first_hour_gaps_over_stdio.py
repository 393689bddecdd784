"""The points of issue #11 that were proven only at library level or not at all, now over MCP stdio with the real
simulator (run mode sim):

* a test running several kernels is accounted per kernel, and knobs of kernels the test never ran are marked;
  a round flags the kernel, and the AICore end-to-end time, that got slower beyond the noise margin;
* ``pass_pattern`` / ``fail_pattern`` given to ``start_session`` decide the verdict and are shown in the deciding
  lines; a bad regex is refused naming the next call; a pattern is corrected like the command, until the baseline
  passed;
* a second window on a held workspace reads the status, ledger and analysis resources and analyses without
  recording, while every call that changes the session is refused with the holder's pid and since when.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect

pytestmark = pytest.mark.sim


def _copy(tmp_path: Path, name: str) -> Path:
    ws = tmp_path / name
    shutil.copytree(OPERATORS / name, ws, ignore=shutil.ignore_patterns("*.json", "__pycache__", "README.md"))
    return ws


async def _ledger(s: Session, sid: str) -> dict:
    """Every ledger table of the session, as the ledger resource gives it."""
    body = (await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
    return json.loads(body)["tables"]


def _kernel_us(measurement: dict, kernel: str) -> float:
    return next(k["operator_time_us"] for k in measurement["per_kernel"] if k["kernel"] == kernel)


async def _second_window_reads_and_changes_nothing(a: Session, ws: Path, sid: str, args: dict, m: dict,
                                                   knob: str) -> None:
    """A second server on the held workspace, once the holder has measured its baseline (``m``) and not yet analysed
    it: it attaches read-only, reads the status, ledger and analysis resources, analyses without recording, and is
    refused every call that changes the session, naming the holder's pid and since when."""
    mid = m["measurement_id"]
    holder = (ws / ".pypto-tune" / "server.lock").read_text().split()
    pid, since = holder[0], holder[1]
    async with connect(ws) as b:
        att = await b.ok("start_session", **args)
        assert att["read_only"] is True and att["session_id"] == sid

        # the session's resources, read through the second server
        board = (await b.client.read_resource(f"pypto-tune://sessions/{sid}/status")).contents[0].text
        assert "layer_norm_ops" in board and f"{m['operator_time_us']:.3f}" in board, board
        ledger = await _ledger(b, sid)
        assert [m["id"] for m in ledger["measurements"]] == [mid]
        whole = json.loads((await b.client.read_resource(
            f"pypto-tune://sessions/{sid}/analyses/{mid}")).contents[0].text)
        assert whole["measurement_id"] == mid and whole["valid"] is True and whole["analysis"]["cores"]

        # analysed here, but not recorded: the holder's session is still waiting for its own analysis
        an = await b.ok("analyze_bubbles", session_id=sid, lang="en")
        assert "not recorded" in an["message"] and f"pid {pid}, since {since}" in an["message"], an["message"]
        assert an["state"] == "S3_ANALYZE" and an["operator_time_us"] > 0
        assert (await a.ok("get_status", session_id=sid))["state"] == "S3_ANALYZE"
        after = await _ledger(b, sid)
        assert after["analyses"] == [] and after["transitions"] == ledger["transitions"]

        # every call that changes the session is refused, naming the holder and since when
        for tool, kw in (("apply_tuning_patch", {"knob": knob, "value": 2, "catalog_id": "F-3", "rationale": "x"}),
                         ("collect_swimlane", {}), ("enable_runtime_debug", {}), ("revert_patch", {}),
                         ("advance_stage", {"reason": "x"}), ("render_report", {"format": "md", "lang": "en"})):
            msg = await b.refused(tool, session_id=sid, **kw)
            assert "GATE session-lock:" in msg and f"pid {pid}, since {since}" in msg, (tool, msg)


def test_a_test_running_several_kernels_is_accounted_per_kernel_and_a_round_flags_the_one_that_got_slower(
        tmp_path: Path) -> None:
    """The same session also shows that a second window reads it and changes nothing (before its analysis)."""
    ws = _copy(tmp_path, "layer_norm_multi")
    cmd = [sys.executable, "layer_norm_ops.py", "layer_norm_ops.py::test_add_rms_norm", "--run_mode", "sim"]
    row_block = "layer_norm_ops.py:make_rms_norm.rms_norm.row_block"
    rms_tile = "layer_norm_ops.py:make_rms_norm.rms_norm.set_vec_tile_shapes#1"

    async def scenario() -> None:
        async with connect(ws) as s:
            args = dict(workspace=str(ws), operator_files=["layer_norm_ops.py"], test_command=cmd, run_mode="sim",
                        goal_speedup=100.0)
            sid = (await s.ok("start_session", **args))["session_id"]
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            await s.ok("enable_runtime_debug", session_id=sid)
            m = await s.ok("collect_swimlane", session_id=sid)
            assert m["valid"]
            await _second_window_reads_and_changes_nothing(s, ws, sid, args, m, row_block)
            # the baseline of a test running several kernels is accounted per kernel
            kernels = {k["kernel"]: k for k in m["per_kernel"]}
            assert set(kernels) == {"residual_add", "rms_norm"}, m["per_kernel"]
            assert m["operator_time_us"] == pytest.approx(sum(k["operator_time_us"] for k in kernels.values()),
                                                          rel=1e-6)
            assert all(k["e2e_us"] > 0 for k in kernels.values()) and "per kernel" in m["message"]
            # knobs of kernels the test never ran are marked
            listed = await s.ok("list_knobs", session_id=sid)
            knobs = listed["knobs"] + listed["dead_knobs"]  # the run-time probe puts the unrun kernel's apart
            # the summary leaves out what is unknown: a knob outside every kernel has no "kernel"
            by_kernel = {k["kernel"]: k["kernel_ran"] for k in knobs if k.get("kernel")}
            assert {k["kernel"] for k in listed["dead_knobs"] if k.get("kernel")} == {"layer_norm"}
            assert by_kernel == {"residual_add": True, "layer_norm": False, "rms_norm": True}, by_kernel
            assert "did not run" in (await s.ok("list_knobs", session_id=sid))["message"]
            # the holder carries on from where it was
            assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
            ledger = await _ledger(s, sid)
            base = ledger["measurements"][-1]
            base_rms = statistics.median(base["per_kernel"]["rms_norm"]["time"])

            # rms_norm in blocks of 8 rows: only rms_norm changes (residual_add runs the same code) and it gets
            # slower, so does the AICore end-to-end time; the round is rolled back and says which kernel
            await s.ok("apply_tuning_patch", session_id=sid, knob=row_block, value=8, catalog_id="F-3",
                       rationale="fewer loop iterations")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            m = await s.ok("collect_swimlane", session_id=sid)
            r = await s.ok("record_round", session_id=sid)
            assert r["decision"] == "reverted" and r["result_type"] == "regression"
            after_rms = _kernel_us(m, "rms_norm")
            kernel_flags = [f for f in r["flags"] if f.startswith("FLAG: kernel ")]
            rise_pct = (after_rms - base_rms) / base_rms * 100
            want = f"FLAG: kernel rms_norm got slower {rise_pct:+.1f} % ({base_rms:.3f} → {after_rms:.3f} µs)"
            assert kernel_flags == [want], r["flags"]
            assert not any("residual_add" in f for f in r["flags"]), r["flags"]  # unchanged: not flagged
            e2e = [f for f in r["flags"] if "end-to-end" in f]
            assert len(e2e) == 1 and f"→ {m['e2e_us']:.3f} µs" in e2e[0], r["flags"]
            # the flags are part of the recorded decision, not only of the reply
            ledger = await _ledger(s, sid)
            decision = ledger["round_decisions"][-1]
            assert decision["number"] == r["round"] and all(f in decision["notes"] for f in r["flags"])

            # a round that makes rms_norm faster flags nothing
            await s.ok("apply_tuning_patch", session_id=sid, knob=rms_tile, value=[2, 512], catalog_id="F-10",
                       rationale="two rows per tile")
            assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
            m2 = await s.ok("collect_swimlane", session_id=sid)
            r2 = await s.ok("record_round", session_id=sid)
            assert r2["decision"] == "kept" and _kernel_us(m2, "rms_norm") < base_rms
            assert r2["flags"] == []

    anyio.run(scenario)


def test_session_patterns_decide_the_verdict_and_are_corrected_like_the_command(tmp_path: Path) -> None:
    ws = _copy(tmp_path, "upstream_softmax")
    cmd = [sys.executable, "softmax_op.py", "softmax_op.py::test_softmax", "--run_mode", "sim"]
    base = dict(workspace=str(ws), operator_files=["softmax_op.py"], test_command=cmd, run_mode="sim",
                goal_speedup=2.0)
    line = "✓ Softmax test passed"  # what the test prints (with a SIM note after it)

    async def scenario() -> None:
        async with connect(ws) as s:
            # a bad pattern is refused before anything is recorded, naming the pattern and the next call
            for kw, why in (({"pass_pattern": "✓ (Softmax"}, "pass_pattern is not a valid regular expression"),
                            ({"fail_pattern": "[FAIL"}, "fail_pattern is not a valid regular expression"),
                            ({"pass_pattern": ".*"}, "matches an empty line")):
                msg = await s.refused("start_session", **base, **kw)
                assert why in msg and "Next:" in msg, msg
            assert "call start_session again" in await s.refused("start_session", **base, pass_pattern="(")

            # fail_pattern: a line it matches fails the run, even the test's own pass line
            st = await s.ok("start_session", **base, fail_pattern=r"Softmax test passed")
            sid = st["session_id"]
            assert st["resumed"] is False  # the refusals above recorded no session
            v = await s.ok("run_precision_check", session_id=sid)
            assert v["verdict"] == "failed" and v["decided_by"] == "session-pattern", v
            assert "fail_pattern" in v["reason"]
            decided = next(d for d in v["deciding_lines"] if line in d["text"])
            assert (decided["role"], decided["recogniser"]) == ("fail", "session-pattern"), v["deciding_lines"]

            # corrected (same session) to a pass_pattern that matches nothing: the built-in recogniser does not
            # rescue the run, and the reason says so
            st = await s.ok("start_session", **base, pass_pattern=r"^verdict=GOOD$")
            assert st["session_id"] == sid and st["resumed"] and "verdict patterns corrected" in st["message"]
            v = await s.ok("run_precision_check", session_id=sid)
            assert v["verdict"] == "failed" and v["decided_by"] == "no-verdict-line", v
            assert "'^verdict=GOOD$' matched no line" in v["reason"] and "takes precedence" in v["reason"]

            # corrected to a pass_pattern naming the test's line: it passes, and the deciding line is that match
            good = r"^✓ Softmax test passed\b"
            st = await s.ok("start_session", **base, pass_pattern=good)
            assert st["session_id"] == sid and "verdict patterns corrected" in st["message"]
            v = await s.ok("run_precision_check", session_id=sid)
            assert v["verdict"] == "passed" and v["decided_by"] == "session-pattern", v
            assert "pass_pattern" in v["reason"]
            assert [(d["role"], d["recogniser"]) for d in v["deciding_lines"]] == [("pass", "session-pattern")]
            assert v["deciding_lines"][0]["text"].startswith(line)

            # once the baseline passed the patterns are fixed; the same ones resume the session
            msg = await s.refused("start_session", **base)
            assert "GATE command-fixed:" in msg and "verdict patterns" in msg
            assert (await s.ok("start_session", **base, pass_pattern=good))["session_id"] == sid
            ledger = await _ledger(s, sid)
            fixes = [(c["before_value"], c["after_value"]) for c in ledger["corrections"]]
            assert fixes == [({"pass_pattern": None, "fail_pattern": r"Softmax test passed"},
                              {"pass_pattern": r"^verdict=GOOD$", "fail_pattern": None}),
                             ({"pass_pattern": r"^verdict=GOOD$", "fail_pattern": None},
                              {"pass_pattern": good, "fail_pattern": None})], fixes

    anyio.run(scenario)
