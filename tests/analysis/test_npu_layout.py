"""A hand-made NPU-layout run (data/npu_handmade/make_case.py): newer-build formats end to end."""

from __future__ import annotations

import json

import pytest

from .analysis_helpers import run_dirs
from pypto_tune.tools.analysis import analyze_runs, validate_run
from pypto_tune.tools.analysis.cli import analyze_command


@pytest.fixture(scope="module")
def a():
    return analyze_runs(run_dirs("npu_handmade"), outer_loops=2)


def test_layout_mode_and_labels(a):
    assert a.run_mode == "npu" and a.per_dir[0].layout == "npu"
    assert a.per_dir[0].label_layout == "ref"  # func = bits 16–25 in the newer writer
    assert validate_run(run_dirs("npu_handmade")[0], "npu") == []


def test_aicpu_view_does_not_become_a_cube_core(a):
    assert [c.name for c in a.cores] == ["AIC_1", "AIC_2", "AIV_25", "AIV_26"]  # AI-CPU lane not selected
    assert a.task_count == 7  # pid 0 phase events are not tasks


def test_figures(a):
    assert a.operator_time_us == 24.5 and a.e2e_us == 23.5
    assert a.load_balance_pct == pytest.approx(40.0)  # AIC busy 20 vs 5
    assert a.active_load_balance_pct == pytest.approx(40.0)  # worse of AIC 40 % and AIV 80 %
    util = {c.name: c.utilization_pct for c in a.cores}
    assert util == pytest.approx({"AIC_1": 2000 / 22, "AIC_2": 500 / 6, "AIV_25": 20.0, "AIV_26": 200 / 24.5})
    assert a.avg_core_utilization_pct == pytest.approx(a.active_core_utilization_pct)  # NPU: no idle lanes
    assert a.crosscheck.agrees


def test_leaves_hash_order_and_source(a):
    by = {r.leaf_hash: r for r in a.leaves}
    assert list(by) == ["111", "222", "333"]  # sorted by total
    mm = by["111"]
    assert (mm.core_type, mm.count, mm.total_us, mm.hash_order, mm.subgraph_count, mm.tasks_per_iter) == (
        "AIC", 3, 25.0, "func5_0", 4, 2.0)
    assert mm.source == "op.py:20" and mm.compute_ops == ["A_MUL_B", "A_MULACC_B"] and mm.is_cube
    # B.4 merge guide: t/iter 2 → granularities ≤ 8 (≤ 4·t/iter), 0.2.0 integer keys
    assert mm.merge_granularities == [2, 4, 8] and mm.merge_hint.startswith("cube_l1_reuse_setting={-1: 2}")
    assert by["333"].source == "(no source info)"  # pure copy leaf (E.4.30)
    assert a.load_gap.severe and a.load_gap.gap_pct == pytest.approx(84.0)


def test_core_usage_from_lanes_with_a_warning(a):
    full = {r.leaf_hash: (r.used_cores, r.theoretical_cores, r.full, r.theoretical_source) for r in a.core_usage.rows}
    assert full == {"111": (2, 2, True, "lanes"), "222": (2, 2, True, "lanes"), "333": (1, 2, False, "lanes")}
    assert any("theoretical core counts taken from the lanes" in w for w in a.warnings)
    given = analyze_runs(run_dirs("npu_handmade"), core_counts={"AIC": 24, "AIV": 48})
    assert given.core_usage.rows[0].theoretical_cores == 24 and not given.core_usage.rows[0].full


def test_sink_kept_so_the_scope_candidate_is_found(a):
    ch = a.aiv_chains
    assert ch.reference_task_count == 4  # the reference reader keeps only rows with successors
    (cand,) = ch.scope_candidates
    assert cand.leaf_hashes == ["222", "333"] and cand.psg_ids == [1, 2]
    ids = [s.catalog_id for s in a.suggestions]
    assert "S-4" in ids and "S-3" in ids


def test_cli_json_on_npu_folder(capsys, tmp_path):
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(run_dirs("npu_handmade")[0].parent, ws / "output")
    assert analyze_command([str(ws), "--json", "--outer-loops", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run_mode"] == "npu" and data["operator_time_us"] == 24.5
    assert data["report_path"] == str(run_dirs("npu_handmade")[0]).replace(
        str(run_dirs("npu_handmade")[0].parent), str(ws / "output")) + "/performance_analysis_report.md"
