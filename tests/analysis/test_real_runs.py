"""Exact figures on recorded pypto 0.2.0 SIM runs (data/<scenario>/): reference and corrected side by side."""

from __future__ import annotations

import pytest

from .analysis_helpers import run_dirs
from pypto_tune.tools.analysis import analyze_runs, validate_run

EXACT = pytest.approx  # with rel=1e-12: these are deterministic simulator numbers


def test_softmax_probe_reference_and_corrected_figures():
    a = analyze_runs(run_dirs("sim_softmax"), run_mode="sim")
    # B.10: max_work_time is the session metric, measured from T0 (set by a HUB task); E2E beside it
    assert a.operator_time_us == EXACT(35.928888888888885, rel=1e-12)
    assert a.e2e_us == EXACT(32.61611111111111, rel=1e-12)
    assert a.trace_span_us == EXACT(40.31833333333333, rel=1e-12)
    # reference (analyze_perf): 24 idle AIC lanes count as 0 % and make the AIC load balance 0
    assert a.avg_core_utilization_pct == EXACT(12.667650085792047, rel=1e-12)
    assert a.avg_bubble_rate_pct == EXACT(53.997630225525285, rel=1e-12)
    assert a.load_balance_pct == 0.0
    assert a.ratings == {"utilization": 1, "bubble": 1, "load_balance": 1, "overall": 1}
    # corrected: only the 48 AIV cores that ran tasks
    assert a.active_core_utilization_pct == EXACT(19.00147512868807, rel=1e-12)
    assert a.active_bubble_rate_pct == EXACT(80.99644533828793, rel=1e-12)
    assert a.active_load_balance_pct == EXACT(91.16116523516818, rel=1e-12)
    assert a.active_ratings["load_balance"] == 5
    assert len(a.cores) == 72 and sum(c.active for c in a.cores) == 48
    assert (a.task_count, a.fake_task_count, a.invalid_reasons) == (320, 0, [])
    lb = [b for b in a.bottlenecks if b.kind == "load_balance"]
    assert lb and lb[0].false_alarm  # the 0 % AIC balance of a vector-only kernel is flagged as a false alarm
    (leaf,) = a.leaves
    assert (leaf.leaf_hash, leaf.core_type, leaf.count, leaf.lanes_used) == ("15855036303422360413", "AIV", 256, 48)
    assert leaf.avg_us == EXACT(1.1238888888888907, rel=1e-9) and leaf.short_task
    assert leaf.source.endswith("add_probe.py:9-11") and leaf.compute_ops == ["EXP", "ROWSUM_SINGLE", "DIV"]
    assert leaf.root_name == "B_Unroll1_PATH0_hiddenfunc0_root_11"
    assert a.core_usage.rows[0].full and a.core_usage.rows[0].theoretical_source == "platform"
    assert a.short_task_fraction == 1.0
    ch = a.aiv_chains
    assert (ch.aiv_tasks, ch.total_tasks, ch.reference_task_count) == (256, 320, 288)
    assert [g.count for g in ch.groups] == [32] * 8 and ch.scope_candidates == []
    assert a.per_dir[0].label_layout == "0.2.0"


def test_trace_alone_reproduces_the_log_exactly():
    a = analyze_runs(run_dirs("sim_softmax"))
    c = a.crosscheck
    assert c.agrees and c.top10_equal and c.task_counts_equal
    assert max(c.max_delta_work_us, c.max_delta_wait_us, c.max_delta_schedule_us, c.max_delta_predecessor_us) < 1e-12


def test_matmul_not_full_and_cube_suggestions():
    good = run_dirs("sim_matmul")[-1]
    a = analyze_runs([good], run_mode="sim")
    assert a.operator_time_us == EXACT(18.00888888888889, rel=1e-12)  # domain appendix: 18.01 max_work
    assert a.e2e_us == EXACT(14.696111111111112, rel=1e-12)  # domain appendix: 14.70 E2E
    assert a.load_balance_pct == EXACT(29.28932188134522, rel=1e-12)  # 16 busy + 8 idle AIC lanes
    assert a.active_load_balance_pct == EXACT(100.0, abs=1e-9)
    (row,) = a.core_usage.rows
    assert (row.core_type, row.used_cores, row.theoretical_cores, row.full) == ("AIC", 16, 24, False)
    assert a.core_usage.aic_full is False
    ids = [s.catalog_id for s in a.suggestions]
    assert "S-2" in ids  # fill the NOT FULL cube leaf
    assert not {"S-6", "S-7", "S-8"} & set(ids)  # cube merges need FULL AIC leaves (R17)
    assert not {"S-5", "S-12", "F-10"} & set(ids)  # no vector leaf
    assert a.leaves[0].is_cube and a.leaves[0].compute_ops == ["A_MUL_B", "A_MULACC_B"]


def test_failed_run_folder_is_invalid_for_missing_files():
    empty, good = run_dirs("sim_matmul")
    reasons = validate_run(empty, "sim")
    assert len(reasons) == 4 and all("is missing" in r for r in reasons)
    assert validate_run(good, "sim") == [] and validate_run(good, "npu") == []


def test_multi_device_task_sim_run_is_invalid_and_disagrees():
    (d,) = run_dirs("sim_softmax_stitch8")
    reasons = validate_run(d, "sim")
    assert any("Fake Task: 48" in r for r in reasons)
    assert any("48 core(s) have a negative Wait Schedule Time" in r for r in reasons)
    assert validate_run(d, "npu") == []  # on NPU only missing files count
    a = analyze_runs([d], run_mode="sim")
    # the two log reasons plus the log/trace disagreement, which on its own also makes a run invalid
    assert len(a.invalid_reasons) == 3 and a.fake_task_count == 48
    assert any("disagree" in r for r in a.invalid_reasons)
    c = a.crosscheck
    assert not c.agrees and not c.top10_equal and not c.task_counts_equal
    # B.9.3: the trace-only work time differs by the 3.313 µs HUB offset, the schedule waits of AIV cores agree
    assert c.max_delta_work_us == EXACT(3.312777777777775, rel=1e-9)
    assert any("[HUB_80] task count log 64+0 fake vs trace 16+0 fake" in x for x in c.disagreements)


def test_two_calls_sum_operator_time_and_keep_per_dir():
    dirs = run_dirs("sim_two_calls")
    a = analyze_runs(dirs, run_mode="sim")
    one = analyze_runs(dirs[:1], run_mode="sim")
    assert len(a.per_dir) == 2
    assert a.operator_time_us == EXACT(2 * 35.928888888888885, rel=1e-12)
    assert a.e2e_us == EXACT(sum(p.e2e_us for p in a.per_dir), rel=1e-12)
    assert a.task_count == 640 and a.leaves[0].count == 512
    # identical calls: time-weighted merge gives the single-call percentages
    assert a.avg_core_utilization_pct == EXACT(one.avg_core_utilization_pct, rel=1e-9)
    assert a.active_bubble_rate_pct == EXACT(one.active_bubble_rate_pct, rel=1e-9)


def test_outer_loops_inferred_from_source(scenario):
    ws = scenario("sim_softmax")
    a = analyze_runs(sorted((ws / "output").iterdir()), source_root=ws)
    assert (a.outer_loops, a.outer_loops_source) == (1, "inferred")  # one pypto.loop level: nothing outside it
    b = analyze_runs(sorted((ws / "output").iterdir()), outer_loops=4)
    assert (b.outer_loops, b.outer_loops_source) == (4, "given")


def test_leaf_sources_name_the_workspace_file_not_the_deleted_private_copy(tmp_path) -> None:
    """Runs execute from `.pypto-tune/exec/<copy>/` (or a Ray worker's folder), deleted afterwards: the analysis
    names the workspace file the bytes came from, so a reader can open it."""
    from pypto_tune.tools.analysis.engine import _relocate_sources
    from pypto_tune.tools.analysis.models import LeafStat

    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    (ws / "kernels" / "softmax.py").write_text("x = 1\n")
    copy = ws / ".pypto-tune" / "exec" / "measure-r3-abc123"
    worker = tmp_path / "pypto-tune-ray-xyz" / "ws"
    leaf = LeafStat.model_construct(source=f"{copy}/kernels/softmax.py:36-39; {worker}/kernels/softmax.py:40")
    other = LeafStat.model_construct(source="/usr/lib/python3/dist-packages/pypto/ops.py:10; (no source info)")
    _relocate_sources([leaf, other], ws)
    assert leaf.source == f"{ws}/kernels/softmax.py:36-39; {ws}/kernels/softmax.py:40"
    assert other.source.startswith("/usr/lib/python3/dist-packages/pypto/ops.py:10")  # not in the workspace: kept
