"""An NPU session's report and board say what the server did, with the ledger's numbers (issues #11, #12, #13).

The session is written row by row as the operations write them (``ledger_rows.py``): three chips left behind
before the baseline passed (a runtime error, a hang, another error), a person's confirmation at a terminal beside
an agent's that does not count, a test-command correction, a baseline of two kernels, a round that needed kept-state
references and carried a regression flag, then a run_candidates batch of two candidates of which one was kept.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from pypto_tune.tools.report import render_report, render_status_board
from pypto_tune.tools.report.i18n import server_text, strings
from pypto_tune.tools.snapshot import KnobChange, SessionSnapshot
from pypto_tune.tools.operations.snapshot_builder import build_snapshot
from pypto_tune.tools.session.state import derive_state, load_rows
from tests.report.ledger_rows import VEC, Writer, analysis, with_tile_b, with_vec_tile
from tests.report.test_report_fixtures import visible_text

BASE = [36.1, 36.4, 37.2]
KERNELS = {"softmax_kernel": [20.0, 20.2, 20.7], "scale_kernel": [16.1, 16.2, 16.5]}
REF = [36.6, 36.0, 36.3]
R1 = [35.6, 35.1, 35.9, 35.3, 35.5, 35.2]
R1_KERNELS = {"softmax_kernel": [18.4, 17.9, 18.6, 18.1, 18.3, 18.0], "scale_kernel": [17.2, 17.2, 17.3, 17.2, 17.2,
                                                                                     17.2]}
T2, T3 = [37.5, 37.9, 38.3], [8.6, 8.5, 8.7]
T3_KERNELS = {"softmax_kernel": [3.1, 3.0, 3.2], "scale_kernel": [5.5, 5.5, 5.5]}
BATCH = "b7c1d2e3f4"
FLAG = "FLAG: kernel scale_kernel got slower +6.2 % (16.200 → 17.200 µs)"
UNCHECKED = "softmax.py:35 view offset b * TILE_B: not evaluable"


def build_npu_session(ws: Path) -> Writer:
    w = Writer(ws, devices=["0", "1", "2"], repeats=3)
    w.correction(["python3", "softmax.py", "--run_mode", "npu"], w.argv)
    w.env_ok()
    # R5: chip 0 errors, chip 1 hangs, chip 2 errors; a person confirms the retry at a terminal; chip 0 then works
    r = w.run("precision", None, "0", w.sources, exit_code=2)
    w.precision(r, "error", None, "0", w.sources, key="PRECISION: error: RuntimeError: runtime error on device 0")
    r = w.run("precision", None, "1", w.sources, exit_code=None, timed_out=True)
    w.precision(r, "timeout", None, "1", w.sources, key="(no output before the timeout)")
    r = w.run("precision", None, "2", w.sources, exit_code=2)
    last = w.precision(r, "error", None, "2", w.sources, key="PRECISION: error: RuntimeError: device 2")
    q = w.question("The baseline precision check failed 3 times. Retry it once more?", last)
    w.confirmation(q, last, None)  # an agent's confirm_retry from before sources were recorded: never counted
    w.confirmation(q, last, "cli")
    r = w.run("precision", None, "0", w.sources)
    w.precision(r, "passed", None, "0", w.sources)
    w.transition("state", "S1_SETUP", "S2_COLLECT", "baseline precision passed (S1b)")
    w.debug_on()
    mid = w.measure("baseline", 0, w.kept, BASE, "0", analysis(36.4, active_util=79.67, busy_us=[30.0, 28.0],
                                                              aicpu_e2e=33.02), kernels=KERNELS, e2e=33.1)
    w.transition("state", "S2_COLLECT", "S3_ANALYZE", "baseline collected (S2)")
    w.ledger.insert("analyses", session_id=w.sid, at=w.now(), measurement_id=mid, stage=None,
                    report_path=str(ws / "analysis-m1.en.md"), suggestions=[])
    w.transition("state", "S3_ANALYZE", "S4_TUNE", "baseline analysed (S3)")
    w.transition("stage", None, "FRONTEND", "tuning starts with the frontend stage")

    # round 1: not decisive after 3 repeats → 3 samples of the kept state (round −2), 3 more of the round
    c1 = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 4, 256], after=[1, 8, 256])
    r1 = with_vec_tile(w.kept, "1, 8, 256")
    w.admission("knob", c1, checked=["softmax.py:33 set_vec_tile_shapes(1, 8, 256): 8 KiB per tile"],
                unchecked=[UNCHECKED])
    w.open_round(1, "FRONTEND", "F-10", c1, r1, before_us=36.4, rationale="AIV tasks are short")
    r = w.run("precision", 1, "0", r1)
    w.precision(r, "passed", 1, "0", r1)
    first = [w.run("measure", 1, "0", r1) for _ in range(3)]
    w.measure("kept-reference", -2, w.kept, REF, "0", analysis(36.3, active_util=79.5, busy_us=[29.9, 28.1],
                                                             aicpu_e2e=33.0), stage="FRONTEND")
    w.measure("measure", 1, r1, R1, "0", analysis(35.4, active_util=81.2, busy_us=[29.5, 28.4], aicpu_e2e=32.1),
              kernels=R1_KERNELS, stage="FRONTEND", prior_runs=first)
    j1 = statistics.median(R1)
    w.decide(1, "kept", "gain", j1, (j1 - 36.4) / 36.4 * 100,
             f"from the board; noise margin 2.40 %; {FLAG}", r1)

    # a batch of two candidates from the kept state of round 1, on chips 2 and 0; round 3 is kept
    kept_us = statistics.median(R1)
    c2 = KnobChange(knob_id="softmax.py:TILE_B", file="softmax.py", line=14, before=4, after=2)
    c3 = KnobChange(knob_id=VEC, file="softmax.py", line=33, before=[1, 8, 256], after=[1, 32, 256])
    s2, s3 = with_tile_b(w.kept, 2), w.kept["softmax.py"].replace("(1, 8, 256)", "(1, 32, 256)")
    s3 = {"softmax.py": s3}
    w.admission("candidate", c2, checked=["softmax.py:34 B // TILE_B = 16 iterations"])
    w.admission("candidate", c3, checked=["softmax.py:33 set_vec_tile_shapes(1, 32, 256): 32 KiB per tile"])
    for n, src, dev, samples, kernels in ((2, s2, "2", T2, None), (3, s3, "0", T3, T3_KERNELS)):
        r = w.run("trial-precision", n, dev, src, batch=BATCH)
        w.precision(r, "passed", n, dev, src)
        med = statistics.median(samples)
        w.measure("trial-measure", n, src, samples, dev,
                  analysis(med, active_util=85.0, busy_us=[6.0, 5.5], aicpu_e2e=round(med * 0.92, 3)),
                  kernels=kernels, batch=BATCH, stage="FRONTEND")
    for n, cand, change, src, samples, rt, decision, dev in (
            (2, {"id": "c-tb2", "knob": "softmax.py:TILE_B", "value": 2, "catalog_id": "F-3"}, c2, s2, T2,
             "regression", "reverted", "2"),
            (3, {"id": "c-v32", "knob": VEC, "value": [1, 32, 256], "catalog_id": "F-10"}, c3, s3, T3, "gain",
             "kept", "0")):
        med = statistics.median(samples)
        delta = (med - kept_us) / kept_us * 100
        w.open_round(n, "FRONTEND", cand["catalog_id"], change, src, before_us=kept_us, kind="trial",
                     rationale=f"candidate {cand['id']} of batch {BATCH}", batch=BATCH)
        w.decide(n, decision, rt, med, delta, "", src, trial=True)
        w.trial_row(BATCH, cand, n, decision if decision != "reverted" else rt, med,
                    {"verdict": "passed", "result_type": rt, "delta_pct": delta, "samples": samples,
                     "device_id": dev, "reason": ""})
    w.transition("state", "S4_TUNE", "S5_REPORT", "user stop: enough for today")
    return w


@pytest.fixture(scope="module")
def npu(tmp_path_factory: pytest.TempPathFactory) -> tuple[SessionSnapshot, Writer]:
    """One session for the module: the tests only read it (writing it takes seconds of libcst hashing)."""
    w = build_npu_session(tmp_path_factory.mktemp("npu") / "ws")
    snap = build_snapshot(derive_state(load_rows(w.ledger, w.sid)))
    return snap, w


def _cv(xs: list[float]) -> str:
    """The coefficient of variation of repeats (sample standard deviation ÷ mean), as the report prints it."""
    return f"{statistics.stdev(xs) / statistics.fmean(xs) * 100:.2f}%"


def test_the_snapshot_reads_batches_chips_references_flags_and_admissions(npu) -> None:
    snap, w = npu
    assert [r.kind for r in snap.rounds] == ["config", "trial", "trial"]
    assert [(r.batch, r.winner, r.candidate_id) for r in snap.rounds[1:]] == [(BATCH, False, "c-tb2"),
                                                                             (BATCH, True, "c-v32")]
    (b,) = snap.batches
    assert b.rounds == [2, 3] and b.winner_round == 3 and b.gain_us == pytest.approx(statistics.median(R1) - 8.6)
    ref = next(m for m in snap.measurements if m.round == -2)
    assert ref.for_round == 1 and ref.samples_us == REF and ref.device_ids == ["0"] * 3
    r1 = snap.rounds[0]
    assert r1.samples_us == R1 and r1.noise_margin_pct == 2.40 and not r1.margin_recomputed
    assert r1.kept_samples_n == 6 and r1.flags == [FLAG]  # baseline + the round's own kept-state references
    assert r1.admissions[0].unchecked == [UNCHECKED] and r1.admissions[0].path == "knob"
    assert [a.path for r in snap.rounds[1:] for a in r.admissions] == ["candidate", "candidate"]
    assert snap.rounds[2].admissions[0].checked == ["softmax.py:33 set_vec_tile_shapes(1, 32, 256): 32 KiB per tile"]
    assert [(e.device_id, e.reason, e.next_device) for e in snap.device_events] == [
        ("0", "baseline-failed", "1"), ("1", "timed-out", "2"), ("2", "baseline-failed", "0")]
    runs = Counter(r["device_id"] for r in w.ledger.rows("runs", w.sid))
    assert snap.runs_per_device == dict(runs) and snap.current_device == "0"
    assert snap.kept_samples_us == T3 and snap.best_us == statistics.median(T3)
    assert [(c.source, c.by_person) for c in snap.confirmations] == [(None, False), ("cli", True)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_npu_report_shows_repeats_spread_chips_and_no_sim_banner(npu, tmp_path: Path, lang: str) -> None:
    snap, w = npu
    s = strings(lang)
    md = render_report(snap, "md", lang, tmp_path).read_text()
    html = visible_text(render_report(snap, "html", lang, tmp_path).read_text())
    for text in (md, html):
        assert s["npu_note"].format(repeats=3) in text
        assert s["sim_note"] not in text and s["sim_short"] not in text and s["v_passed_sim"] not in text
        # every measurement: samples, median, min–max, σ, and the chips it ran on
        assert f"{min(BASE):.3f}–{max(BASE):.3f}" in text and _cv(BASE) in text
        assert f"{statistics.median(R1):.3f}" in text and f"{min(R1):.3f}–{max(R1):.3f}" in text and _cv(R1) in text
        assert s["m_ref"].format(n=1) in text and f"{min(REF):.3f}–{max(REF):.3f}" in text
        # the kept time is the median of every sample of the kept code
        assert f"{statistics.median(T3):.3f} µs (" + s["kept_time_def"].format(n=3) + ")" in text
        # the AICPU-side end-to-end time beside max_work_time and the writer's E2E (B.10)
        assert s["aicpu_e2e"] in text and "33.020" in text and "32.100" in text and f"{8.6 * 0.92:.3f}" in text
        # utilisation of the active cores and of the platform: (30 + 28) µs busy over 48 AIV × 36.4 µs
        assert f"{100 * 58 / (48 * 36.4):.1f}%" in text and "79.7%" in text
        # chips left behind (R5), runs per chip, and each precision record's chip
        for e in snap.device_events:
            assert s["rotation_line"].format(at=e.at, chip=e.device_id, why=s["de_" + e.reason], run=e.run_id,
                                             purpose=s["pu_" + e.purpose], next=e.next_device) in text
        runs = Counter(r["device_id"] for r in w.ledger.rows("runs", w.sid))
        assert ", ".join(f"{d}: {n}" for d, n in runs.items()) in text
        assert "0 ×3" in text and "0 ×6" in text  # the baseline's and round 1's repeats, all on chip 0
    assert md.count(f"| {s['m_ref'].format(n=1)} | 0 ×3 | 3 | {statistics.median(REF):.3f} |") == 1
    prec = md.split(f"## {s['precision_records']}")[1].split("\n## ")[0]
    assert [line.split(" | ")[3] for line in prec.splitlines() if re.match(r"\| \d+ \|", line)] == [
        "0", "1", "2", "0", "0", "2", "0"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_noise_margin_flags_and_admission_of_each_decision_are_shown(npu, tmp_path: Path, lang: str) -> None:
    snap, _ = npu
    s = strings(lang)
    md = render_report(snap, "md", lang, tmp_path).read_text()
    details = md.split(f"### {s['round_details']}")[1].split("\n## ")[0]
    r1 = details.split("- **")[1]
    assert f"{s['noise_margin']} 2.40%" in r1 and s["vs_kept"].format(n=6) in r1
    assert s["decided_chips"].format(n=6, chips="0 ×6") in r1
    assert f"⚑ {server_text(s, FLAG)}" in r1 and server_text(s, UNCHECKED) in r1 and s["legal_unchecked"] in r1
    if lang == "zh":  # the server's recurring English phrases are said in zh
        assert "got slower" not in r1 and "not evaluable" not in r1
    assert s["m_ref"].format(n=1) in r1 and f"{statistics.median(REF):.3f} µs" in r1
    log = md.split(f"## {s['rounds']}\n")[1]
    row1 = next(line for line in log.splitlines() if line.startswith("| 1 | FRONTEND |"))
    assert "⚑1" in row1
    # batch trials record no margin: the same judgement on the recorded samples, said so
    pool = R1  # the batch ran from round 1's code: every sample of it so far
    for n, samples in ((2, T2), (3, T3)):
        margin = _margin_from_first_principles(pool, samples)
        block = details.split(f"- **{s['round']} {n} — ")[1].split("- **")[0]
        assert f"{s['noise_margin']} {margin:.2f}% ({s['margin_recomputed']})" in block
        assert s["p_candidate"] in block and s["vs_kept"].format(n=len(pool)) in block


def _margin_from_first_principles(kept: list[float], after: list[float]) -> float:
    """The noise margin as README/domain E.1 define it, computed here independently of the server's code: the standard
    error of a difference of two medians, 1.2533·σ·√(1/n₁ + 1/n₂) (in % of the kept time), with σ pooled from both
    sides' residuals relative to their own medians (n − 2 degrees of freedom); the margin is max(2·se, 1 %)."""
    mk, ma = statistics.median(kept), statistics.median(after)
    resid = [x / mk - 1.0 for x in kept] + [x / ma - 1.0 for x in after]
    sigma = (sum(r * r for r in resid) / (len(resid) - 2)) ** 0.5
    se_pct = 1.2533 * sigma * (1.0 / len(kept) + 1.0 / len(after)) ** 0.5 * 100.0
    return max(2.0 * se_pct, 1.0)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_batch_table_names_each_candidate_its_numbers_and_the_winner(npu, tmp_path: Path, lang: str) -> None:
    snap, _ = npu
    s = strings(lang)
    kept = statistics.median(R1)
    md = render_report(snap, "md", lang, tmp_path).read_text()
    section = md.split(f"## {s['batches']}")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if re.match(r"\| [23] \|", line)]
    assert rows == [
        f"| 2 | c-tb2 | `softmax.py:TILE_B = 2` | F-3 | {s['v_passed']} | 37.900 | 3 ({s['sigma']} {_cv(T2)}) | 2 ×3 | "
        f"{(37.9 - kept) / kept * 100:+.1f}% | {s['rt_regression']} | {s['reverted']} |",
        f"| 3 | c-v32 | `{VEC} = [1, 32, 256]` | F-10 | {s['v_passed']} | 8.600 | 3 ({s['sigma']} {_cv(T3)}) | 0 ×3 | "
        f"{(8.6 - kept) / kept * 100:+.1f}% | {s['rt_gain']} | ★ {s['winner']}, {s['kept']} |",
    ]
    assert s["batch_won"].format(round=3, time="8.600", delta=f"{(8.6 - kept) / kept * 100:+.1f}%") in section
    # the round log carries the batch, ★ on the kept candidate
    log = md.split(f"## {s['rounds']}")[1]
    assert next(line for line in log.splitlines() if line.startswith("| 3 |")).endswith(f"| {BATCH} ★ {s['winner']} |")
    assert next(line for line in log.splitlines() if line.startswith("| 2 |")).endswith(f"| {BATCH} |")
    # the search's share of the session's gain: round 3's gain over rounds 1 and 3's
    search, total = kept - 8.6, (36.4 - kept) + (kept - 8.6)
    assert s["search_share_text"].format(search=f"{search:.3f}", total=f"{total:.3f}",
                                         share=f"{search / total * 100:.1f}%") in md


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_per_kernel_times_stand_beside_the_summed_metric(npu, tmp_path: Path, lang: str) -> None:
    snap, _ = npu
    s = strings(lang)
    md = render_report(snap, "md", lang, tmp_path).read_text()
    section = md.split(f"### {s['per_kernel']}")[1].split("\n## ")[0]
    for label, times in KERNELS.items():
        assert (f"| 1 | {s['m_baseline']} | {label} | 3 | {statistics.median(times):.3f} | "
                f"{statistics.median([x * 0.9 for x in times]):.3f} |") in section
    assert f"| 1 | {s['m_baseline']} | {s['sum_metric']} | 3 | 36.400 | 33.100 |" in section
    for label, times in R1_KERNELS.items():
        assert f"| {s['m_round'].format(n=1)} | {label} | 6 | {statistics.median(times):.3f} |" in section
    compare = md.split(f"## {s['before_after']}")[1].split("\n## ")[0]
    for label, times in KERNELS.items():  # baseline against the best state, kernel by kernel
        assert (f"| {s['kernel']} {label}: {s['kernel_time']} | {statistics.median(times):.3f} | "
                f"{statistics.median(T3_KERNELS[label]):.3f} |") in compare


def test_corrections_and_confirmations_are_in_the_overview_with_who_answered(npu, tmp_path: Path) -> None:
    snap, _ = npu
    for lang in ("en", "zh"):
        s = strings(lang)
        md = render_report(snap, "md", lang, tmp_path).read_text()
        overview = md.split(f"## {s['overview']}")[1].split("\n## ")[0]
        assert "python3 softmax.py --run_mode npu → python3 softmax.py --run-mode npu" in overview
        lines = [line for line in overview.splitlines() if s["confirmations"] in line]
        assert len(lines) == 2 and s["src_other"] in lines[0] and s["src_cli"] in lines[1]
        assert all(s["c_baseline-retry"] in line for line in lines)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_npu_board_shows_chips_kernels_platform_utilisation_and_the_batch(npu, lang: str) -> None:
    snap, _ = npu
    s = strings(lang)
    board = render_status_board(snap, lang, full=False)
    assert s["npu_note"].format(repeats=3) in board and s["sim_note"] not in board
    assert f"{s['chip_pool']}: 0, 1, 2 | {s['next_chip']} 0 | {s['chip_rotations']}: 3" in board
    assert s["kept_time_def"].format(n=3) in board
    latest = next(m for m in reversed(snap.measurements) if m.round != -2)
    assert f"#{latest.id} ({s['m_round'].format(n=3)}): 8.600 µs" in board and "8.500–8.700" in board
    assert f"{s['util_platform']}: {100 * 11.5 / (48 * 8.6):.1f}%" in board
    assert s["board_batch"].format(batch=BATCH, n=2, round=3, time="8.600",
                                   delta=f"{(8.6 - statistics.median(R1)) / statistics.median(R1) * 100:+.1f}%") in board
    kept = statistics.median(R1)
    assert s["search_share_text"].format(search=f"{kept - 8.6:.3f}", total=f"{36.4 - 8.6:.3f}",
                                         share=f"{(kept - 8.6) / (36.4 - 8.6) * 100:.1f}%") in board
    assert len([line for line in board.splitlines() if re.match(r"\| \d+ \|", line)]) == 3


def test_the_board_lists_each_kernel_of_a_multi_kernel_measurement(npu) -> None:
    snap, _ = npu
    base_only = snap.model_copy(update={"measurements": snap.measurements[:1]})
    board = render_status_board(base_only, "en", full=False)
    # the ledger stores per_kernel as a JSON object with sorted keys: kernels come in label order
    assert ("Per kernel: scale_kernel 16.200 µs (E2E 14.580); softmax_kernel 20.200 µs (E2E 18.180) — "
            "sum (session metric) 36.400 µs") in board
