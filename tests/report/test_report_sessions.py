"""Reports of real sessions driven through the service layer (``TuningService``), as an agent's calls would drive
them: a SIM run_candidates batch, a test that runs two kernels, two sessions on one operator, and an NPU session on
the emulated Ascend box (tests/npu_emulator/). The kernel runs are real; only the fewest that show each case."""

from __future__ import annotations

import re
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from pypto_tune.tools.session.ledger import Ledger
from pypto_tune.tools.report import render_report
from pypto_tune.tools.report.i18n import strings
from pypto_tune.tools.service import TuningService
from tests.conftest import OPERATORS

pytestmark = pytest.mark.process

VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"
SIM = [sys.executable, "softmax.py", "--run-mode", "sim"]


def _workspace(root: Path, operator: str = "softmax", file: str | None = None) -> Path:
    ws = root / f"ws-{operator}"
    ws.mkdir(parents=True)
    src = OPERATORS / operator / (file or f"{operator}.py")
    shutil.copy2(src, ws / src.name)
    return ws


def _rows(ws: Path, table: str, sid: str) -> list[dict[str, Any]]:
    ledger = Ledger.for_workspace(ws)
    try:
        return [dict(r) for r in ledger.rows(table, sid)]
    finally:
        ledger.close()


async def _to_frontend(svc: TuningService, ws: Path, files: list[str], cmd: list[str], **start: Any) -> str:
    sid = svc.start_session(workspace=str(ws), operator_files=files, test_command=cmd,
                            goal_speedup=start.pop("goal_speedup", 100.0), **start).session_id
    assert (await svc.run_precision_check(sid)).verdict == "passed"
    svc.enable_runtime_debug(sid)
    assert (await svc.collect_swimlane(sid)).valid
    assert svc.analyze_bubbles(sid, lang="en").stage == "FRONTEND"
    return sid


# ------------------------------------------------------------------------------------------- SIM batch
@pytest.fixture(scope="module")
def sim_batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One SIM session: baseline, a run_candidates batch of two candidates, stop, the report in both formats (en);
    then a second session on the same workspace, stopped at once and reported."""
    ws = _workspace(tmp_path_factory.mktemp("batch"))
    svc = TuningService(default_workspace=ws)
    out: dict[str, Any] = {"ws": ws}

    async def scenario() -> None:
        sid = await _to_frontend(svc, ws, ["softmax.py"], SIM, run_mode="sim")
        out["trials"] = await svc.run_candidates(sid, [
            {"id": "c-v32", "knob": VEC, "value": [1, 32, 256], "catalog_id": "F-10", "why": "full rows per tile"},
            {"id": "c-tb2", "knob": "softmax.py:TILE_B", "value": 2, "catalog_id": "F-3", "why": "smaller blocks"},
        ])
        svc.stop_session(sid, reason="batch shown")
        out["sid"], out["snap"] = sid, svc.snapshot(sid)
        out["report"] = svc.render_report(sid, fmt="both", lang="en")
        out["first_texts"] = {p: Path(p).read_bytes() for p in out["report"].paths}
        sid2 = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=SIM, run_mode="sim",
                                 goal_speedup=3.0).session_id
        assert sid2 != sid
        svc.stop_session(sid2, reason="second session, nothing tried")
        out["sid2"], out["report2"] = sid2, svc.render_report(sid2, fmt="md", lang="en")

    anyio.run(scenario)
    return out


@pytest.mark.sim
def test_a_sim_batch_appears_in_the_round_log_and_its_own_table(sim_batch: dict[str, Any]) -> None:
    s = strings("en")
    trials = sim_batch["trials"]
    assert trials.winner_round is not None and len(trials.trials) == 2
    md_path = next(p for p in sim_batch["report"].paths if p.endswith(f"_{sim_batch['sid']}_en.md"))
    md = Path(md_path).read_text()
    section = md.split(f"## {s['batches']}")[1].split("\n## ")[0]
    assert f"> ⚠️ {s['sim_short']}" in section  # the verdicts below are compile-and-simulate only
    assert f"### {s['batch']} {trials.batch}" in section
    for t in trials.trials:
        row = next(line for line in section.splitlines() if line.startswith(f"| {t.round} | {t.candidate} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"`{t.knob} = {t.value!r}`" and cells[3] == t.catalog_id  # source text: a list, an int
        assert cells[4] == s["v_passed_sim"] and cells[5] == f"{t.operator_time_us:.3f}"
        assert cells[6] == f"{t.delta_pct:+.1f}%" and cells[7] == s["rt_" + t.result_type]
        assert cells[8] == (f"★ {s['winner']}, {s['kept']}" if t.round == trials.winner_round else s[t.decision])
    # the round log: every candidate is a round of the batch; the kept one is starred
    log = md.split(f"## {s['rounds']}")[1].split("\n## ")[0]
    assert f"> ⚠️ {s['sim_short']}" in log
    for t in trials.trials:
        row = next(line for line in log.splitlines() if line.startswith(f"| {t.round} | FRONTEND |"))
        assert f"| {s['v_passed_sim']} |" in row
        assert row.endswith(f"| {trials.batch} ★ {s['winner']} |" if t.round == trials.winner_round
                            else f"| {trials.batch} |")
    # what admission recorded for each candidate, and the strict SIM comparison
    details = md.split(f"### {s['round_details']}")[1].split("\n## ")[0]
    for t in trials.trials:
        block = details.split(f"- **{s['round']} {t.round} — ")[1].split("- **")[0]
        # the knob id plainly: the same line goes into the HTML, where backticks would show as characters
        assert f"{s['admission']}: {s['adm_knob']} {t.knob} ({s['p_candidate']})" in block
        assert s["margin_sim"] in block
    # the search found all of this session's gain
    winner = next(t for t in trials.trials if t.round == trials.winner_round)
    gain = sim_batch["snap"].baseline_us - winner.operator_time_us
    assert s["search_share_text"].format(search=f"{gain:.3f}", total=f"{gain:.3f}", share="100.0%") in md


@pytest.mark.sim
def test_each_session_keeps_its_own_report_and_the_stable_name_holds_the_latest(sim_batch: dict[str, Any]) -> None:
    ws, sid, sid2 = sim_batch["ws"], sim_batch["sid"], sim_batch["sid2"]
    first = sim_batch["report"].paths
    assert first == [str(ws / f"softmax_tuning_report_{sid}_en.md"), str(ws / "softmax_tuning_report_en.md"),
                     str(ws / f"softmax_tuning_report_{sid}_en.html"), str(ws / "softmax_tuning_report_en.html")]
    assert sim_batch["first_texts"][first[0]] == sim_batch["first_texts"][first[1]]  # one rendering, two names
    assert sim_batch["report2"].paths == [str(ws / f"softmax_tuning_report_{sid2}_en.md"),
                                          str(ws / "softmax_tuning_report_en.md")]
    # the second session did not overwrite the first one's report; the stable name now holds the second's
    assert Path(first[0]).read_bytes() == sim_batch["first_texts"][first[0]]
    assert f"`{sid}`" in Path(first[0]).read_text()
    latest = (ws / "softmax_tuning_report_en.md").read_text()
    assert f"`{sid2}`" in latest and f"`{sid}`" not in latest
    assert latest == (ws / f"softmax_tuning_report_{sid2}_en.md").read_text()
    # the first session's HTML under the stable name was not touched by the md-only second report
    assert Path(first[3]).read_bytes() == sim_batch["first_texts"][first[3]]


def test_the_report_can_be_rendered_again_in_the_other_language(tmp_path: Path) -> None:
    """The server's own report files are not drift: a second format or language renders (it used to be refused)."""
    ws = _workspace(tmp_path)
    svc = TuningService(default_workspace=ws)
    sid = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=SIM, run_mode="sim",
                            goal_speedup=2.0).session_id
    svc.stop_session(sid, reason="nothing to do")
    svc.render_report(sid, fmt="md", lang="en")
    zh = svc.render_report(sid, fmt="md", lang="zh")
    assert (ws / "softmax_tuning_report.md").is_file() and len(zh.paths) == 2


# ------------------------------------------------------------------------------------------- two kernels
@pytest.mark.sim
def test_a_test_that_runs_two_kernels_reports_each_beside_the_sum(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, "layer_norm_multi", "layer_norm_ops.py")
    svc = TuningService(default_workspace=ws)
    cmd = [sys.executable, "layer_norm_ops.py", "layer_norm_ops.py::test_add_rms_norm", "--run_mode", "sim"]

    async def scenario() -> str:
        sid = svc.start_session(workspace=str(ws), operator_files=["layer_norm_ops.py"], test_command=cmd,
                                run_mode="sim", goal_speedup=4.0).session_id
        assert (await svc.run_precision_check(sid)).verdict == "passed"
        svc.enable_runtime_debug(sid)
        assert (await svc.collect_swimlane(sid)).valid
        svc.stop_session(sid, reason="kernels shown")
        return sid

    sid = anyio.run(scenario)
    (m,) = _rows(ws, "measurements", sid)
    kernels = m["per_kernel"]
    assert len(kernels) == 2, kernels
    total = sum(v["time"][0] for v in kernels.values())
    assert total == pytest.approx(m["operator_time_us"], abs=1e-6)  # the session metric is their sum
    snap = svc.snapshot(sid)
    for lang in ("en", "zh"):
        s = strings(lang)
        md = render_report(snap, "md", lang, tmp_path / "out").read_text()
        section = md.split(f"### {s['per_kernel']}")[1].split("\n## ")[0]
        for label, figs in kernels.items():
            assert (f"| {m['id']} | {s['m_baseline']} | {label} | 1 | {figs['time'][0]:.3f} | "
                    f"{figs['e2e'][0]:.3f} |") in section
        assert (f"| {m['id']} | {s['m_baseline']} | {s['sum_metric']} | 1 | {m['operator_time_us']:.3f} | "
                f"{m['e2e_us']:.3f} |") in section
        compare = md.split(f"## {s['before_after']}")[1].split("\n## ")[0]
        for label, figs in kernels.items():
            assert f"| {s['kernel']} {label}: {s['kernel_time']} | {figs['time'][0]:.3f} | {figs['time'][0]:.3f} |" \
                in compare
    board = svc.get_status(sid, lang="en").board
    line = next(x for x in board.splitlines() if x.startswith("- Per kernel: "))
    for label, figs in kernels.items():
        assert f"{label} {figs['time'][0]:.3f} µs (E2E {figs['e2e'][0]:.3f})" in line
    assert line.endswith(f"sum (session metric) {m['operator_time_us']:.3f} µs")


# ------------------------------------------------------------------------------------------- NPU (emulated box)
@pytest.mark.sim
def test_an_emulated_npu_session_reports_npu_repeats_chips_and_the_aicpu_time(tmp_path: Path, monkeypatch) -> None:
    """Chip 0 fails its first run (R5: the next run goes to chip 1); the baseline takes 3 repeats with 2 % noise;
    the box writes the AICPU trace on every run (so the AICPU-side end-to-end time exists) and, as an NPU re-runs
    the same binary, simulates identical code once (noise is drawn afresh for each run)."""
    from tests.npu_emulator.box import FIXTURE_REFERENCES, emulated_box

    env = emulated_box(tmp_path, chips=3, faults={0: {"fail_first_runs": 1}}, noise_pct=2.0, seed=5,
                       references=FIXTURE_REFERENCES, config={"aicpu_trace": "always", "cache_sim": True})
    # the box's PATH, stand-ins, PTO-ISA, and its declaration to the run sandbox (the box is the emulated device)
    for key in ("PATH", "PYTHONPATH", "PTO_TILE_LIB_CODE_PATH", "PYPTO_TUNE_SANDBOX_DEVICES", "PYPTO_TUNE_SANDBOX_ROOTS"):
        monkeypatch.setenv(key, env[key])
    ws = _workspace(tmp_path)
    svc = TuningService(default_workspace=ws)
    cmd = [sys.executable, "softmax.py", "--run-mode", "npu"]

    async def scenario() -> str:
        sid = svc.start_session(workspace=str(ws), operator_files=["softmax.py"], test_command=cmd, run_mode="npu",
                                goal_speedup=4.0, device_ids=["0", "1", "2"]).session_id
        first = await svc.run_precision_check(sid)
        assert first.verdict != "passed" and first.device_id == "0"
        second = await svc.run_precision_check(sid)
        assert second.verdict == "passed" and second.device_id == "1"
        svc.enable_runtime_debug(sid)
        base = await svc.collect_swimlane(sid)
        assert base.valid and len(base.samples_us) == 3
        svc.stop_session(sid, reason="baseline shown")
        return sid

    sid = anyio.run(scenario)
    rep = svc.render_report(sid, fmt="both", lang="en")
    (m,) = _rows(ws, "measurements", sid)
    runs = _rows(ws, "runs", sid)
    samples = m["samples"]
    assert len(set(samples)) > 1  # noise: the repeats differ
    aicpu = m["analysis"]["aicpu_e2e_us"]
    assert aicpu is not None and aicpu > 0
    snap = svc.snapshot(sid)
    for lang in ("en", "zh"):
        s = strings(lang)
        md = Path(rep.paths[0]).read_text() if lang == "en" else render_report(snap, "md", "zh", tmp_path).read_text()
        assert s["npu_note"].format(repeats=3) in md
        assert s["sim_note"] not in md and s["sim_short"] not in md and s["v_passed_sim"] not in md
        chips = [r["device_id"] for r in runs if r["id"] in m["run_ids"]]
        assert set(chips) == {"1"}  # the chip that worked stays in use
        # range and CV (sample standard deviation over the mean, in %) from the recorded samples themselves
        spread = f"{min(samples):.3f}–{max(samples):.3f}"
        cv = f"{statistics.stdev(samples) / statistics.fmean(samples) * 100.0:.2f}%"
        row = (f"| {m['id']} | {s['m_baseline']} | 1 ×3 | 3 | {statistics.median(samples):.3f} | {spread} | "
               f"{cv} | {m['e2e_us']:.3f} | {aicpu:.3f} |")
        assert row in md, row
        assert f"{s['kept_time']}: {statistics.median(samples):.3f} µs (" + s["kept_time_def"].format(n=3) in md
        event = snap.device_events[0]
        assert (event.device_id, event.reason, event.next_device) == ("0", "baseline-failed", "1")
        assert s["rotation_line"].format(at=event.at, chip="0", why=s["de_baseline-failed"], run=event.run_id,
                                         purpose=s["pu_precision"], next="1") in md
        prec = md.split(f"## {s['precision_records']}")[1].split("\n## ")[0]
        assert [line.split(" | ")[3] for line in prec.splitlines() if re.match(r"\| \d+ \|", line)] == ["0", "1"]
        assert f"| {s['aicpu_e2e']}[^aicpu] | {aicpu:.3f} | {aicpu:.3f} |" in md
    html = Path(rep.paths[2]).read_text()
    assert 'class="note npu"' in html and 'class="note sim"' not in html
