"""The catalogue is complete package data, loaded once; suggestions carry evidence and respect preconditions."""

from __future__ import annotations

from .analysis_helpers import run_dirs
from pypto_tune.tools.analysis import analyze_runs, load_catalog


def test_catalog_has_every_item_once():
    cat = load_catalog()
    ids = [i.id for i in cat.items]
    expect = [f"F-{n}" for n in range(1, 16)] + [f"S-{n}" for n in range(1, 14)] + [f"I-{n}" for n in range(1, 10)]
    assert ids == expect
    for item in cat.items:
        assert item.stage == {"F": "frontend", "S": "swimlane", "I": "incore"}[item.id[0]]
        assert 1 <= item.stars <= 3 and item.p_level in {"P0", "P1", "P2", "P3", "P4"}
        assert item.title_zh and item.title_en and item.symptoms
        assert set(item.symptoms) <= set(cat.symptoms)
    assert cat.get("F-8").symptom_stars == {"A": 3}  # E.3.15: symptom table rates unroll higher
    assert load_catalog() is cat  # cached


def test_suggestions_are_ranked_by_stage_with_evidence():
    a = analyze_runs(run_dirs("sim_softmax"))
    stages = [s.stage for s in a.suggestions]
    assert stages == sorted(stages, key=["frontend", "swimlane", "incore"].index)
    assert [s.priority for s in a.suggestions] == list(range(1, len(a.suggestions) + 1))
    by_id = {s.catalog_id: s for s in a.suggestions}
    assert by_id["F-8"].evidence["active_bubble_rate_pct"] == 80.996
    assert by_id["S-5"].evidence["short_task_fraction"] == 1.0  # tasks of 1.12 µs: merge them
    assert not {"F-9", "S-6", "S-7", "I-1"} & set(by_id)  # no cube leaf
    assert "S-2" not in by_id  # the AIV leaf is FULL
    assert "S-4" not in by_id  # B.7 found nothing to merge


def test_a_catalogue_measurement_is_labelled_as_another_operators():
    # issue #17: "measured in SIM: softmax TILE_B 1→2 …" beside this operator's figures read as this operator's result
    cat = {it.id: it for it in load_catalog().items}
    a = analyze_runs(run_dirs("sim_softmax"))
    noted = [s for s in a.suggestions if cat[s.catalog_id].sim_check]
    assert noted
    for s in noted:
        assert "another operator measured in SIM (not this one)" in s.reason
        assert "— measured in SIM:" not in s.reason
        assert "非本算子" in s.reason_zh
