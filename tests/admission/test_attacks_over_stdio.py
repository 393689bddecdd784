"""The nine ways a hostile agent got a number instead of a faster kernel (issue #10), each tried again over MCP stdio
against the real server and the real simulator, on operators written in different styles. Each must be refused, or
leave nothing kept that was not exactly one declared, legal, verified change on the bytes that ran.

Attack → where it is closed:
1 knob + anything else in one diff ............ tools/code/admission.py (masked syntax trees)
2 legal one-knob edits refused (tuples, locals)  tools/patching/roles.py + extract.binding_sites
3 legality only on one path ................... tools/patching/effective.py (effective values, every path)
4 drift adoption skipping every check .......... SetupOps._adopt_drift → the same admission
5 other bytes than the ledger records .......... tools/code/codestate.py (whole tree) + tools/running/execution.py (private copy)
6 stages skipped by marks ....................... StageOps.mark_checklist / advance_stage / _leave_stage
7 failed changes retried ........................ SessionContext._tried (semantic hash, knob+value per kept state)
8 self-served confirmations ..................... gates (baseline-retry) + server/confirm.py (a TTY, a person)
9 the agent picks its own luck .................. state.kept_samples (median of all) + the NPU repeats floor
(9's noise half runs on the emulated NPU box: tests/npu/.)
Second red-team pass (tests/admission/test_redteam_findings.py has each at library level):
10 a .pth in the interpreter's site-packages ... tools/running/interpreter_files.py (fingerprint before the baseline)
11 outputs rewritten as they appear ............. execution.dir_digest + the log/trace cross-check (analysis)
12 rows written into the ledger with sqlite3 .... tools/session/ledger_seal.py (seals) + the ledger-integrity gate
13 code in a knob change (a jit option twice) .. tools/code/admission.py (the red team's end-to-end case)

The softmax attacks (9, 1, 3, 4, 5b, 13, 6, 7 — also for a round without data —, then 10-12) follow one another on
one session, and attack 8 with its legitimate path on another: each module fixture plays its session once, in chapters
that each test checks (tests/sessions.Chapters). The split harness (2, 5a) is an operator of its own.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from tests.admission.test_redteam_findings import SOFTMAX_JIT
from tests.attacker import host_copies, sandboxed_copies, write
from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect
from tests.sessions import Chapters, own_interpreter, run_in_pty

pytestmark = pytest.mark.sim

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
TILE_B = "softmax.py:TILE_B"
STITCH = "softmax.py:softmax_kernel.runtime_options.stitch_function_max_num"


def _diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


async def _to_frontend(s: Session, ws: Path, files: list[str], cmd: list[str]) -> str:
    st = await s.ok("start_session", workspace=str(ws), operator_files=files, test_command=cmd, run_mode="sim",
                    goal_speedup=100.0)
    sid = st["session_id"]
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    await s.ok("enable_runtime_debug", session_id=sid)
    assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
    assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
    return sid


async def _round(s: Session, sid: str, **patch) -> dict:
    await s.ok("apply_tuning_patch", session_id=sid, rationale="attack test", **patch)
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    await s.ok("collect_swimlane", session_id=sid)
    return await s.ok("record_round", session_id=sid)


_WATCHER = r'''
import pathlib, re, sys, time
root, stop = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
seen = set()
while not stop.exists():
    try:  # the server creates and removes run folders under our feet: a vanished folder is not an error
        logs = list(root.rglob("bubble_analysis.log"))
    except OSError:
        logs = []
    for log in logs:
        if log in seen:
            continue
        try:
            text = log.read_text()
            log.write_text(re.sub(r"(Time: )([0-9.]+)", lambda m: m.group(1) + repr(float(m.group(2)) / 100), text))
            seen.add(log)
        except OSError:
            pass
    time.sleep(0.005)
'''


# ------------------------------------------------------------------------------------------------------------
# One softmax session, in chapters (tests/sessions.Chapters): each group of attacks below used to start a server and
# measure the same baseline of its own; they now follow one another on one session, each checked by its own test.
# The order is the session's: the forgeries from outside the tool calls come last, because a planted .pth and rows
# written into the ledger end what the session can run.
# ------------------------------------------------------------------------------------------------------------

# Python that rewrites every bubble_analysis.log at the run's exit, written as the value of a jit option
FORGE = ('(__import__("atexit").register(lambda: [f.write_text(__import__("re").sub(r"(Time: )([0-9.]+)", '
         'lambda m: m.group(1) + repr(float(m.group(2)) / 100), f.read_text())) '
         'for f in __import__("pathlib").Path("output").rglob("bubble_analysis.log")]), 128)[1]')


@pytest.fixture(scope="module")
def softmax_story(tmp_path_factory: pytest.TempPathFactory) -> Chapters:
    """The softmax operator on one server, brought to FRONTEND once; its test command runs an interpreter of its own
    (the forgeries plant a .pth in its site-packages at the end)."""
    import sqlite3

    tmp = tmp_path_factory.mktemp("softmax-story")
    ws = tmp / "ws"
    ws.mkdir()
    shutil.copy2(OPERATORS / "softmax" / "softmax.py", ws / "softmax.py")
    op = ws / "softmax.py"
    python, site = own_interpreter(tmp)
    cmd = [python, "softmax.py", "--run-mode", "sim"]
    story = Chapters()

    async def scenario() -> None:
        async with connect(ws) as s:
            async def attack_9() -> None:
                # 9: on the NPU, fewer than 3 repeats would let the agent pick its own luck
                msg = await s.refused("start_session", workspace=str(ws), operator_files=["softmax.py"],
                                      test_command=[sys.executable, "softmax.py", "--run-mode", "npu"],
                                      run_mode="npu", goal_speedup=2.0, repeats=1)
                assert "at least 3" in msg

            await story.play("attack 9", attack_9)
            sid = await _to_frontend(s, ws, ["softmax.py"], cmd)

            async def attacks_1_3_4_5b() -> None:
                src = op.read_text()

                # 1: a knob plus anything else in one diff — the computation, the problem size, a shape constant.
                for other, line in (("e / s", "e"), ("x = torch.randn(B, N, D", "x = torch.randn(8, N, D")):
                    bad = src.replace("TILE_B = 4", "TILE_B = 2").replace(*(other, line))
                    msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_diff("softmax.py", src, bad),
                                          catalog_id="F-3", rationale="smuggle")
                    assert "GATE one-change:" in msg and "not a knob change" in msg and "line" in msg
                shape = src.replace("B, N, D = 32, 32, 256", "B, N, D = 8, 32, 256")
                msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_diff("softmax.py", src, shape),
                                      catalog_id="F-3", rationale="fewer rows")
                assert "GATE one-change:" in msg and "not a tuning knob" in msg and "torch.randn" in msg
                assert op.read_text() == src, "a refused change must not touch the file"

                # 3: illegal values are refused the same way as a structured edit and as a diff.
                illegal = {(1, 4, 128): "reduce axis", (1, 64, 256): "exceeds the tensor dim", (1, 4, 250): "32 B",
                           (4, 32, 256): "128 KB"}
                for tile, why in illegal.items():
                    structured = await s.refused("apply_tuning_patch", session_id=sid, knob=VEC, value=list(tile),
                                                 catalog_id="F-10", rationale="illegal")
                    as_diff = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-10", rationale="x",
                                              diff=_diff("softmax.py", src, src.replace(
                                                  "set_vec_tile_shapes(1, 4, 256)",
                                                  f"set_vec_tile_shapes({', '.join(map(str, tile))})")))
                    for msg in (structured, as_diff):
                        assert "GATE legality:" in msg and why in msg, msg
                msg = await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_B, value=3, catalog_id="F-3",
                                      rationale="computes fewer rows")
                assert "GATE legality:" in msg and "never be computed" in msg

                # 4: two knobs edited by hand are not adopted; the edit stays drift until reverted.
                op.write_text(src.replace("TILE_B = 4", "TILE_B = 2").replace("set_vec_tile_shapes(1, 4, 256)",
                                                                              "set_vec_tile_shapes(1, 8, 256)"))
                msg = await s.refused("run_precision_check", session_id=sid, adopt_drift=True)
                assert "GATE one-change:" in msg and "2 knobs" in msg
                assert "GATE drift:" in await s.refused("collect_swimlane", session_id=sid)
                await s.ok("revert_patch", session_id=sid)
                assert op.read_text() == src
                # ... one knob edited by hand is adopted as a manual round and judged like any other
                op.write_text(src.replace("set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(1, 8, 256)"))
                adopted = await s.ok("run_precision_check", session_id=sid, adopt_drift=True)
                assert adopted["verdict"] == "passed" and adopted["round"] == 1
                await s.ok("collect_swimlane", session_id=sid)
                r1 = await s.ok("record_round", session_id=sid)
                assert r1["decision"] == "kept" and r1["after_us"] == pytest.approx(21.031, abs=1e-3)
                kept_src = op.read_text()

                # 5b: while the change's run executes, the operator file is swapped for a much faster one (and put
                # back before anyone looks), and the run's private copy itself is written to. In SIM that run is the
                # precision run, and it is also the measurement's sample (runs.sim_run_serves_both): neither reaches
                # it. No host folder holds the copy (.pypto-tune/exec/ has only the run's empty folder), and the copy
                # inside the sandbox is a read-only mount, also where the agent's account still names it
                # (/proc/<pid>/root)
                await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 32, 256], catalog_id="F-10",
                           rationale="bigger tile")
                patched = op.read_text()
                fast = patched.replace("TILE_B = 4", "TILE_B = 1")
                job = await s.ok("run_precision_check", session_id=sid, wait=False)
                exec_dir = ws / ".pypto-tune" / "exec"
                deadline = time.monotonic() + 60
                while not any(exec_dir.glob("precision-r2*")) and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert any(exec_dir.glob("precision-r2*")), "the precision run of round 2 never started"
                op.write_text(fast)  # swapped in while the run executes ...
                copies: list[Path] = []
                while not copies and time.monotonic() < deadline:
                    copies = sandboxed_copies(ws, "softmax.py")
                    await anyio.sleep(0.02)
                assert copies, "the sandbox of round 2's precision run never appeared"
                assert host_copies(ws, "softmax.py") == []
                refusals = {write(c, fast) for c in copies}
                assert refusals == {"Read-only file system"}, refusals
                verdict = (await s.ok("wait_job", job_id=job["job_id"], timeout_s=50))["result"]
                op.write_text(patched)  # ... and put back before anyone looks
                assert verdict["verdict"] == "passed", verdict
                m = await s.ok("collect_swimlane", session_id=sid)
                assert m["valid"] and m["operator_time_us"] == pytest.approx(8.546, abs=1e-3), \
                    "the run must execute the recorded bytes (8.546 µs), not the swapped ones (2.726 µs)"
                r2 = await s.ok("record_round", session_id=sid)
                assert r2["decision"] == "kept" and r2["after_us"] == pytest.approx(8.546, abs=1e-3)

                # 9: the kept time is the median of all its samples: re-collecting the kept code cannot pick a number
                st = await s.ok("get_status", session_id=sid)
                assert st["best_us"] == pytest.approx(8.546, abs=1e-3)
                assert kept_src != op.read_text()

            async def code_in_a_knob_change() -> None:
                # a legal TILE_B change whose diff also gives a jit option twice, the second time as code that
                # divides every logged time by 100 when the run exits
                kept = (await s.ok("get_status", session_id=sid))["best_us"]
                src = op.read_text()
                assert src.count(SOFTMAX_JIT) == 1 and src.count("\nTILE_B = 4\n") == 1
                dup = f'"stitch_function_max_num": 128, "stitch_function_max_num": {FORGE}}}'
                bad = src.replace("\nTILE_B = 4\n", "\nTILE_B = 8\n").replace(
                    SOFTMAX_JIT, SOFTMAX_JIT.replace('"stitch_function_max_num": 128}', dup))
                res = await s.client.call_tool("apply_tuning_patch", {
                    "session_id": sid, "diff": _diff("softmax.py", src, bad), "catalog_id": "F-3",
                    "rationale": "bigger row block"})
                if res.is_error:
                    assert op.read_text() == src
                    return  # refused: closed
                # admitted as "TILE_B: 4 → 8"; the round is verified, measured and judged like any other
                assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
                await s.ok("collect_swimlane", session_id=sid)
                rec = await s.ok("record_round", session_id=sid)
                # the hook divides every log time by 100 (or more): a kept time under a quarter of the kept one is its
                # number, not TILE_B 8's
                assert not (rec["decision"] == "kept" and rec["after_us"] < kept / 4), (
                    f"forged number kept: {rec['before_us']} → {rec['after_us']} µs, finished={rec['finished']}: "
                    f"{rec['message'][:200]}")

            async def attacks_6_and_7() -> None:
                checklist = (await s.ok("get_status", session_id=sid))
                assert checklist["stage"] == "FRONTEND"
                # 6: boilerplate marks are refused where a knob exists; the same words twice are refused.
                msg = await s.refused("mark_checklist", session_id=sid, catalog_id="F-10", status="not-applicable",
                                      reason="not applicable to this operator")
                assert "GATE stage-exit:" in msg and "name the knob" in msg
                reason = "TILE_B already blocks the batch loop; measured 36.4 µs with 8 iterations"
                await s.ok("mark_checklist", session_id=sid, catalog_id="F-3", status="not-applicable", reason=reason)
                msg = await s.refused("mark_checklist", session_id=sid, catalog_id="F-1", status="not-applicable",
                                      reason=reason)
                assert "same reason" in msg
                # items no knob serves were marked by the server itself at the stage's analysis
                items = {i["catalog_id"]: i for i in
                         (await s.ok("mark_checklist", session_id=sid, catalog_id="F-1", status="not-applicable",
                                     reason="F-1 TILE_B blocks batch rows already; matmul M blocking is 0 here"))[
                             "items"]}
                assert items["F-4"]["status"] == "not-applicable" and items["F-4"]["reason"].startswith("server:")
                for cid in [c for c, i in items.items() if i["status"] == "untried"]:
                    await s.ok("mark_checklist", session_id=sid, catalog_id=cid, status="not-applicable",
                               reason=f"{cid}: knob measured at baseline 36.4 µs, left for the search ({cid.lower()})")
                adv = await s.ok("advance_stage", session_id=sid, reason="frontend checklist done")
                assert adv["stage"] == "SWIMLANE_1"
                # a stage is left only after its own entry collection and analysis
                msg = await s.refused("advance_stage", session_id=sid, reason="skip")
                assert "GATE stage-analysis:" in msg
                await s.ok("collect_swimlane", session_id=sid)
                await s.ok("analyze_bubbles", session_id=sid, lang="en")

                # 7: a change that failed is never accepted again, however it is written.
                nbuf = "softmax.py:softmax_kernel.pass_options.vec_nbuffer_setting"
                await s.ok("apply_tuning_patch", session_id=sid, knob=nbuf, value={"-2": 1, "-1": 0},
                           catalog_id="S-5", rationale="merge nothing")
                bad = await s.ok("run_precision_check", session_id=sid)
                assert bad["verdict"] != "passed"
                rec = await s.ok("record_round", session_id=sid)
                assert rec["decision"] == "failed" and rec["result_type"] == "compile-failure"
                msg = await s.refused("apply_tuning_patch", session_id=sid, knob=nbuf, value={"-2": 1, "-1": 0},
                                      catalog_id="S-5", rationale="again")
                assert "GATE no-retry:" in msg and f"round {rec['round']}" in msg, msg
                src = op.read_text()
                sneaky = src.replace("@pypto.frontend.jit(", '@pypto.frontend.jit(\n    pass_options = { '
                                     '"vec_nbuffer_setting" : { -2 : 1, -1 : 0 } },  # again\n    ', 1)
                msg = await s.refused("apply_tuning_patch", session_id=sid, diff=_diff("softmax.py", src, sneaky),
                                      catalog_id="S-5", rationale="reformatted")
                assert "GATE no-retry:" in msg

            async def a_round_without_data() -> None:
                # 7, a round that produced no usable data: stitch_function_max_num = 1 is a legal value (1–1024), but
                # in SIM the simulator then merges the stitches into fake tasks (B.9.3): the measurement is invalid and
                # the round fails; the same change is refused afterwards in either form
                kept = (await s.ok("get_status", session_id=sid))["best_us"]
                await s.ok("apply_tuning_patch", session_id=sid, knob=STITCH, value=1, catalog_id="S-9",
                           rationale="one stitch")
                assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
                m = await s.ok("collect_swimlane", session_id=sid)
                assert m["valid"] is False and m["invalid_reasons"], m
                r = await s.ok("record_round", session_id=sid)
                assert r["decision"] == "failed" and r["best_us"] == kept, r
                src = op.read_text()
                assert '"stitch_function_max_num": 128' in src  # rolled back
                msg = await s.refused("apply_tuning_patch", session_id=sid, knob=STITCH, value=1, catalog_id="S-9",
                                      rationale="again")
                assert "GATE no-retry:" in msg and f"round {r['round']}" in msg, msg
                msg = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="S-9", rationale="as a diff",
                                      diff=_diff("softmax.py", src, src.replace('"stitch_function_max_num": 128',
                                                                                '"stitch_function_max_num": 0x1')))
                assert "GATE no-retry:" in msg and f"round {r['round']}" in msg, msg
                assert op.read_text() == src

            async def forgeries() -> None:
                kept = (await s.ok("get_status", session_id=sid))["best_us"]

                # (b) a live watcher: whichever moment it wins, the round is not kept on its number
                stop = tmp / "stop-watcher"
                watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, str(ws), str(stop)])
                try:
                    await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 2, 256], catalog_id="S-12",
                               rationale="smaller tile, measured while a watcher rewrites logs")
                    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
                    got = await s.ok("collect_swimlane", session_id=sid)
                    rec = await s.ok("record_round", session_id=sid)
                finally:
                    stop.touch()
                    watcher.wait(timeout=10)
                assert not got["valid"] and any("changed after the run ended" in r or "disagree" in r
                                                for r in got["invalid_reasons"]), got["invalid_reasons"]
                assert rec["decision"] == "failed"
                assert (await s.ok("get_status", session_id=sid))["best_us"] == kept

                # (a) a .pth added behind the server's back: the next run is discarded, naming the file
                (site / "zz_agent.pth").write_text("import sys\n")
                await s.ok("apply_tuning_patch", session_id=sid, knob=VEC, value=[1, 16, 256], catalog_id="S-12",
                           rationale="measured with a planted .pth")
                prec = await s.ok("run_precision_check", session_id=sid)
                assert prec["verdict"] == "error" and f"added: {site / 'zz_agent.pth'}" in prec["reason"]
                (site / "zz_agent.pth").unlink()  # putting it back does not help: the folder's ctime moved
                prec = await s.ok("run_precision_check", session_id=sid)
                assert prec["verdict"] == "error" and "interpreter's files changed" in prec["reason"]

                # (c) a measurement written with sqlite3 for the open round: ignored, and nothing runs any more
                st = (await s.ok("get_status", session_id=sid))
                con = sqlite3.connect(ws / ".pypto-tune" / "ledger.sqlite3")
                row = con.execute("SELECT code_hash, round FROM precision_records WHERE session_id = ? ORDER BY id "
                                  "DESC LIMIT 1", (sid,)).fetchone()
                con.execute("INSERT INTO measurements(session_id, at, round, code_hash, valid, invalid_reasons, "
                            "operator_time_us, e2e_us, samples, analysis, archive, run_ids, stage) VALUES "
                            "(?, '2026-12-03T00:00:00', ?, ?, 1, '[]', 1.0, 1.0, '[1.0]', '{}', '', '[]', ?)",
                            (sid, row[1], row[0], st["stage"]))
                con.commit()
                con.close()
                msg = await s.refused("record_round", session_id=sid)
                assert "GATE ledger-integrity:" in msg and "measurements row" in msg
                status = await s.ok("get_status", session_id=sid)
                assert status["best_us"] == kept and any("measurements row" in f for f in status["ledger_findings"])

            await story.play("attacks 1, 3, 4, 5b", attacks_1_3_4_5b)
            await story.play("code in a knob change", code_in_a_knob_change)
            await story.play("attacks 6 and 7", attacks_6_and_7)
            await story.play("a round without data", a_round_without_data)
            await story.play("forgeries", forgeries)

    anyio.run(scenario)
    return story


def test_npu_repeats_have_a_floor_attack_9(softmax_story: Chapters) -> None:
    softmax_story.check("attack 9")


def test_single_file_operator_attacks_1_3_4_5b_are_refused_or_measure_the_recorded_bytes(
        softmax_story: Chapters) -> None:
    softmax_story.check("attacks 1, 3, 4, 5b")


def test_code_in_a_knob_change_never_forges_the_number(softmax_story: Chapters) -> None:
    """Red team, second pass: a knob change that also carries code (a duplicated jit option whose value registers an
    exit hook) is refused, or, if ever admitted, its round cannot keep the forged number."""
    softmax_story.check("code in a knob change")


def test_stage_marks_and_failed_change_retries_attacks_6_and_7(softmax_story: Chapters) -> None:
    softmax_story.check("attacks 6 and 7")


def test_a_round_without_usable_data_is_never_retried_attack_7(softmax_story: Chapters) -> None:
    """Attack 7 for a round that failed for want of data (an invalid measurement) rather than by its code: the same
    change is refused afterwards, as a structured edit and as a diff spelled otherwise."""
    softmax_story.check("a round without data")


def test_forgeries_outside_the_tool_calls_never_become_a_kept_number(softmax_story: Chapters) -> None:
    """(a) a .pth file added to the test interpreter's site-packages after the baseline; (b) a process rewriting
    every bubble_analysis.log under the workspace the moment it appears; (c) rows written into the ledger with
    sqlite3 (a measurement of 1 µs for the open round). Each is caught by a different check: the interpreter
    fingerprint, the digests and the log/trace cross-check, the seals."""
    softmax_story.check("forgeries")


def test_split_harness_attacks_2_and_5a(tmp_path: Path) -> None:
    """Kernel and harness in separate files; tuning constants as a tuple (star-args), dicts, a list and an int."""
    ws = tmp_path / "ws"
    shutil.copytree(OPERATORS / "split_harness", ws, ignore=shutil.ignore_patterns("*.json", "__pycache__"))
    cmd = [sys.executable, "test_kernels.py", "--run-mode", "sim"]

    async def scenario() -> None:
        async with connect(ws) as s:
            sid = await _to_frontend(s, ws, ["kernels.py"], cmd)
            knobs = {k["id"]: k for k in (await s.ok("list_knobs", session_id=sid))["knobs"]}
            assert knobs["kernels.py:VEC_TILE"]["tunable"] and knobs["kernels.py:BLOCK_TOKENS"]["tunable"]
            assert not knobs["kernels.py:TOKENS"]["tunable"]  # the harness builds its tensors from it

            # 2: a tile shape held in a module tuple is tunable with one structured edit ...
            r1 = await _round(s, sid, knob="kernels.py:VEC_TILE", value=[4, 512], catalog_id="F-10")
            assert r1["decision"] == "kept" and r1["delta_pct"] < 0
            # ... and with one diff
            src = (ws / "kernels.py").read_text()
            r2 = await _round(s, sid, catalog_id="F-3", diff=_diff("kernels.py", src, src.replace(
                "BLOCK_TOKENS = 4", "BLOCK_TOKENS = 16")))
            assert r2["decision"] in ("kept", "reverted") and r2["after_us"] is not None
            # the problem size shared with the harness is never a knob
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob="kernels.py:TOKENS", value=64,
                                  catalog_id="F-3", rationale="fewer tokens")
            assert "problem size" in msg or "not a tuning knob" in msg

            # 5a: rewriting the harness (not an operator file) is drift, cannot be adopted, and is reverted.
            harness = (ws / "test_kernels.py").read_text()
            (ws / "test_kernels.py").write_text(harness.replace("torch.manual_seed(3)",
                                                                "torch.manual_seed(3)\n    kernels.BLOCK_TOKENS = 64"))
            (ws / "helper_added.py").write_text("X = 1\n")
            msg = await s.refused("apply_tuning_patch", session_id=sid, knob="kernels.py:VEC_TILE", value=[8, 512],
                                  catalog_id="F-10", rationale="x")
            assert "GATE drift:" in msg and "test_kernels.py" in msg and "helper_added.py" in msg
            msg = await s.refused("run_precision_check", session_id=sid, adopt_drift=True)
            assert "GATE drift:" in msg and "harness" in msg
            status = await s.ok("get_status", session_id=sid)
            assert status["drift"] is True
            await s.ok("revert_patch", session_id=sid)
            assert (ws / "test_kernels.py").read_text() == harness and not (ws / "helper_added.py").exists()
            assert any((ws / ".pypto-tune" / "quarantine").rglob("helper_added.py"))
            assert (await s.ok("get_status", session_id=sid))["drift"] is False

    anyio.run(scenario)


FAILING_OP = '''"""An operator whose test always fails: the baseline precision check never passes."""
import sys

TILE = 4


def main() -> int:
    print("PRECISION: failed (the reference does not match)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.fixture(scope="module")
def failing_baseline(tmp_path_factory: pytest.TempPathFactory) -> Chapters:
    """An operator whose baseline never passes, in chapters: the agent's own confirmations are refused on a plain
    client; a person confirms at a terminal; a fresh server, on a client with elicitation, resumes the session, runs
    the confirmed retry, and then asks its user itself when the retries run out again."""
    from mcp import Client, types

    from tests.server.mcp_client import server_params

    ws = tmp_path_factory.mktemp("failing-baseline") / "ws"
    ws.mkdir()
    (ws / "bad_op.py").write_text(FAILING_OP)
    cmd = [sys.executable, "bad_op.py"]
    start = dict(workspace=str(ws), operator_files=["bad_op.py"], test_command=cmd, run_mode="sim", goal_speedup=2.0)
    story = Chapters()
    sid = ""
    asked: list[str] = []
    answers = iter([False, True])

    async def person(context, params):  # noqa: ANN001 - the SDK's callback signature
        asked.append(params.message)
        if next(answers):
            return types.ElicitResult(action="accept", content={"retry": True})
        return types.ElicitResult(action="decline")

    async def plain_client() -> None:
        async with connect(ws) as s:
            async def self_served() -> None:
                nonlocal sid
                sid = (await s.ok("start_session", **start))["session_id"]
                for _ in range(3):
                    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] != "passed"
                msg = await s.refused("run_precision_check", session_id=sid, confirm_retry=True)
                assert "GATE confirmation:" in msg and "pypto-tune confirm" in msg
                msg = await s.refused("run_precision_check", session_id=sid)
                assert "GATE baseline-retry:" in msg
                # fix the operator by hand and adopt it: refused before tuning (R5: the tuner does not fix it)
                (ws / "bad_op.py").write_text(FAILING_OP.replace("return 1", "return 0").replace("failed", "passed"))
                msg = await s.refused("run_precision_check", session_id=sid, adopt_drift=True)
                assert "GATE" in msg
                (ws / "bad_op.py").write_text(FAILING_OP)

            await story.play("self-served confirmations", self_served)

    def at_a_terminal() -> None:
        confirm = [sys.executable, "-m", "pypto_tune.server.cli", "confirm", "--workspace", str(ws)]
        # an agent's tool call has no terminal: refused
        piped = subprocess.run(confirm, input="RETRY\n", capture_output=True, text=True, timeout=60)
        assert piped.returncode != 0 and "terminal" in piped.stderr
        # a person at a terminal answers
        out = run_in_pty(confirm, "RETRY\n")
        assert "retry confirmed by a person" in out, out

    async def client_with_elicitation() -> None:
        async with Client(server_params(ws), mode="legacy", elicitation_callback=person) as client:
            s = Session(client)

            async def confirmed_retry() -> None:
                await s.ok("start_session", **start)
                res = await s.ok("run_precision_check", session_id=sid)
                assert res["verdict"] != "passed" and res["attempts_left"] == 2

            async def answered_in_the_client() -> None:
                # the confirmed attempts run out again; now the server asks the client's user itself. A declined
                # question runs nothing; an accepted one is recorded with its source, and only then is the baseline
                # run again
                for _ in range(2):
                    await s.ok("run_precision_check", session_id=sid)
                assert asked == []
                declined = await s.refused("run_precision_check", session_id=sid)
                assert "GATE baseline-retry:" in declined and len(asked) == 1
                again = await s.ok("run_precision_check", session_id=sid)
                assert len(asked) == 2 and again["verdict"] != "passed" and again["attempts_left"] == 2
                ledger = (await client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text
                assert '"source": "elicitation"' in ledger and '"kind": "declined"' in ledger

            await story.play("a person's confirmation used", confirmed_retry)
            await story.play("a person answering in the client", answered_in_the_client)

    anyio.run(plain_client)
    anyio.run(story.play, "a person at a terminal", at_a_terminal)
    anyio.run(client_with_elicitation)
    return story


def test_self_served_confirmations_and_hand_fixes_are_refused_attack_8(failing_baseline: Chapters) -> None:
    failing_baseline.check("self-served confirmations")
    failing_baseline.check("a person at a terminal")
    failing_baseline.check("a person's confirmation used")


def test_a_person_answering_in_the_client_is_recorded_as_theirs(failing_baseline: Chapters) -> None:
    """Attack 8's legitimate path: a client with elicitation asks its user; the answer is recorded with its
    source, and only then is the baseline run again. A declined question runs nothing."""
    failing_baseline.check("a person answering in the client")
