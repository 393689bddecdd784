"""The upstream benchmark's pure parts (benchmarks/search_upstream.py) on small hand-made inputs: which example tests
it finds, how a grid is built from a knob map, the de-tune rule, random search's expectation, the search's curve and
re-measured trials, and the table. Nothing here runs the simulator."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("search_upstream", ROOT / "benchmarks" / "search_upstream.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["search_upstream"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


su = _bench()


def test_discovery_takes_the_tests_an_example_main_dispatches_on(tmp_path):
    ex = tmp_path / "examples" / "ops"
    ex.mkdir(parents=True)
    (ex / "softmax.py").write_text(
        "def test_softmax():\n    pass\n\ndef test_helper_not_listed():\n    pass\n\n"
        "def main():\n    examples = {'softmax::test_softmax': {'function': test_softmax},\n"
        "                'ghost::test_missing': {}}\n")
    (ex / "util.py").write_text("examples = {'a': 1}\n")
    found = su.discover(tmp_path / "examples")
    assert [(t.file, t.selector, t.name) for t in found] == [
        ("ops/softmax.py", "softmax::test_softmax", "ops/softmax.py::test_softmax")]


KNOB_MAP = [
    # a vector tile whose value flows from a config field: the field stands for both
    {"id": "op.py:kernel.set_vec_tile_shapes#1", "kind": "vec_tile", "value": {"$expr": "*cfg.vec"}, "tunable": True,
     "live": True, "kernel_ran": True, "tune_by": ["op.py:kernel.set_vec_tile_shapes#1", "op.py:test.Cfg(vec)"],
     "effective": [[16, 32]]},
    {"id": "op.py:test.Cfg(vec)", "kind": "tile_source", "value": [16, 32], "tunable": True, "live": True,
     "kernel_ran": None, "tune_by": [], "feeds": ["op.py:kernel.set_vec_tile_shapes#1"], "effective": [[16, 32]]},
    {"id": "op.py:kernel.TILE_B", "kind": "tile_constant", "value": 4, "tunable": True, "live": True,
     "kernel_ran": True, "tune_by": []},
    {"id": "op.py:kernel.unroll_list", "kind": "loop_option", "value": [4, 2, 1], "tunable": True, "live": True,
     "kernel_ran": True, "tune_by": []},
    # dead, not tunable, or offered nothing: never in the grid
    {"id": "op.py:other.set_vec_tile_shapes#1", "kind": "vec_tile", "value": [8, 8], "tunable": True, "live": False},
    {"id": "op.py:kernel.run_mode", "kind": "jit_option", "value": 1, "tunable": False, "live": True},
    {"id": "op.py:kernel.vec_nbuffer_setting", "kind": "jit_option", "value": None, "tunable": True, "live": True},
]
CANDIDATES = {
    "op.py:kernel.set_vec_tile_shapes#1": [[32, 32]],
    "op.py:test.Cfg(vec)": [[64, 64], [8, 32], [16, 32], [32, 32], [16, 64], [32, 32]],  # current and a repeat dropped
    "op.py:kernel.TILE_B": [1, 2, 8, 16],
    "op.py:kernel.unroll_list": [[8, 4, 2, 1]],
    "op.py:other.set_vec_tile_shapes#1": [[16, 16]],
    "op.py:kernel.vec_nbuffer_setting": [],
}


def test_grid_knobs_are_the_live_tunable_knobs_offered_values_one_per_tile():
    knobs = su.grid_knobs(KNOB_MAP, CANDIDATES)
    assert [k.id for k in knobs] == ["op.py:test.Cfg(vec)", "op.py:kernel.TILE_B", "op.py:kernel.unroll_list"]
    assert knobs[0].candidates == [[64, 64], [8, 32], [32, 32], [16, 64]]


def test_the_grid_bound_gives_a_value_in_turn_to_the_knob_with_fewest_and_spreads_values_by_volume():
    knobs = su.pick_values(su.grid_knobs(KNOB_MAP, CANDIDATES), max_configs=12)
    # counts grow 1,1,1 -> 2,1,1 -> 2,2,1 -> 2,2,2 -> 3,2,2 -> 3,3,2 (18 > 12 stops TILE_B; unroll has 1 candidate)
    assert [len(k.values) for k in knobs] == [3, 2, 2]
    assert math.prod(len(k.values) for k in knobs) <= 12
    assert [k.values[0] for k in knobs] == [[16, 32], 4, [4, 2, 1]]  # current first
    # the field's candidates ordered by volume: (8,32) 256, (16,64) 1024, (32,32) 1024, (64,64) 4096; two spread
    # over them take both ends, three the ends and the middle, one the middle
    assert knobs[0].values[1:] == [[8, 32], [64, 64]]
    ordered = [[8, 32], [16, 64], [32, 32], [64, 64]]
    assert su._spread(ordered[::-1], 3) == [[8, 32], [32, 32], [64, 64]] and su._spread(ordered, 1) == [[16, 64]]
    configs = su.configurations(knobs)
    assert len(configs) == 12 and configs[0] == {k.id: k.values[0] for k in knobs}
    unbounded = su.pick_values(su.grid_knobs(KNOB_MAP, CANDIDATES), max_configs=1000)
    assert [len(k.values) for k in unbounded] == [5, 5, 2]


def test_a_grid_keeps_the_values_first_chosen_for_its_code_whatever_the_ranking_offers_later(tmp_path):
    cache = su.Cache(tmp_path)
    first = su.pick_values(su.grid_knobs(KNOB_MAP, CANDIDATES), max_configs=12)
    kept = su.frozen_knobs(cache, "code-a", first)
    assert [k.values for k in kept] == [k.values for k in first]
    # a later ranking offers the candidates in another order (or others): the grid of this code stays as it was
    reordered = {k: list(reversed(v)) + ([[128, 128]] if k == "op.py:test.Cfg(vec)" else []) for k, v in
                 CANDIDATES.items()}
    later = su.pick_values(su.grid_knobs(KNOB_MAP, reordered), max_configs=12)
    assert [k.values for k in later] != [k.values for k in first]
    assert [k.values for k in su.frozen_knobs(cache, "code-a", later)] == [k.values for k in first]
    # another code (sources, command or grid limit) is chosen for itself; --regrid chooses anew
    assert [k.values for k in su.frozen_knobs(cache, "code-b", later)] == [k.values for k in later]
    assert [k.values for k in su.frozen_knobs(cache, "code-a", later, regrid=True)] == [k.values for k in later]
    # a knob map that no longer has the frozen knobs, or whose current value moved, is chosen anew
    fewer = later[:2]
    assert [k.id for k in su.frozen_knobs(cache, "code-a", fewer)] == [k.id for k in fewer]


def test_detune_sets_every_dimension_to_the_smallest_legal_power_of_two_from_8():
    def legal_from(n):
        return lambda v: min(su._flat_ints(v)) >= n if isinstance(v, (list, dict)) else v >= n

    assert su.detune_value(("vec", 2), legal_from(8)) == [8, 8]
    assert su.detune_value(("vec", 4), legal_from(1)) == [1, 8, 8, 8]  # the leading, batch axis: 1
    assert su.detune_value(("vec", 3), legal_from(1)) == [1, 8, 8] and su.detune_value(("vec", 1), legal_from(1)) == [8]
    assert su.detune_value(("cube", 0), legal_from(16)) == {"m": [16, 16], "k": [16, 16], "n": [16, 16]}
    assert su.detune_value(("cube_src", 3), legal_from(32)) == [32, 32, 32]
    assert su.detune_value(("int", 0), legal_from(8)) == 8
    assert su.detune_value(("vec", 2), lambda v: False) is None
    # a higher floor where tiles of 8 leave no measurement
    assert su.detune_value(("vec", 2), legal_from(8), floor=16) == [16, 16]
    assert su.detune_value(("cube", 0), legal_from(8), floor=32) == {"m": [32, 32], "k": [32, 32], "n": [32, 32]}
    # the form follows the knob: a config field feeding a cube tile, a vector tile pinned from an expression
    assert su.detune_shape(KNOB_MAP[1]) == ("vec", 2)
    # a tiling source names the calls it feeds by file and line (as list_knobs does): the leading axis of one that
    # feeds a cube tile call is the cube's m, never a batch axis set to 1 (FFN's config: m = 1 cannot compile)
    cube_map = [{"id": "op.py:k.set_cube_tile_shapes#1", "kind": "cube_tile", "line": 12},
                {"id": "op.py:test.Cfg(cube)", "kind": "tile_source", "value": [16, 32, 32],
                 "feeds": ["op.py:9", "op.py:12"]}]
    sites = su.cube_call_sites(cube_map)
    assert sites == {"op.py:12"}
    assert su.detune_shape(cube_map[1], sites) == ("cube_src", 3)
    assert su.detune_shape(cube_map[1]) == ("vec", 3)  # without the map's cube calls it would look like a vector
    assert su.detune_shape(KNOB_MAP[0]) == ("vec", 2)
    assert su.is_tile(KNOB_MAP[1]) and not su.is_tile(KNOB_MAP[2]) and not su.is_tile(KNOB_MAP[3])


NORM = """import pypto


def core(x):
    return pypto.sum(x, dim=-1, keepdim=True)


@pypto.frontend.jit()
def norm_kernel(x: pypto.Tensor(), out: pypto.Tensor()):
    pypto.set_vec_tile_shapes(64, 128)
    pypto.assemble(core(x), [0, 0], out)
"""


def test_detune_keeps_an_axis_the_kernel_reduces_over_whole_at_the_length_that_ran():
    # the dims are run-time values to the edit planner (torch tensors made in the test): only the knob map's shapes,
    # what ran, tell that [8, 8] cuts the summed axis of 128 — which PyPTO refuses to compile (FC1001)
    knob = {"id": "norm.py:norm_kernel.set_vec_tile_shapes#1", "kind": "vec_tile", "line": 10, "value": [64, 128],
            "shapes": [[32, 128], [128]]}
    files = {"norm.py": NORM}
    assert su._reduced_axes(knob, files) == {1: 128}
    assert not su._legal_at_run_shapes(knob, [8, 8], files) and su._legal_at_run_shapes(knob, [8, 128], files)
    legal = lambda v: su._legal_at_run_shapes(knob, v, files)  # noqa: E731
    assert su.detune_value(("vec", 2), legal, keep=su._reduced_axes(knob, files)) == [8, 128]
    assert su.detune_value(("vec", 2), legal) is None  # the same power in every dimension never keeps it whole
    # a dimension the tensor has only 1 of stays at 1: PyPTO refuses a tile dimension over its tensor's (softmax's
    # (1, 32, 1, 256) view; its reduced last axis whole), where the same power everywhere is never legal
    soft = {"id": "norm.py:norm_kernel.set_vec_tile_shapes#1", "kind": "vec_tile", "line": 10, "value": [1, 4, 1, 64],
            "shapes": [[1, 32, 1, 256]]}
    legal = lambda v: su._legal_at_run_shapes(soft, v, files)  # noqa: E731
    assert su._ran_extent(soft) == [1, 32, 1, 256]
    assert su.detune_value(("vec", 4), legal, keep={3: 256}) is None
    assert su.detune_value(("vec", 4), legal, keep={3: 256}, cap=su._ran_extent(soft)) == [1, 8, 1, 256]
    # a cube tile is judged on the dtypes that ran: bf16 operands need L0 multiples of 16, so 8 cannot compile
    cube = {"id": "norm.py:norm_kernel.set_cube_tile_shapes#1", "kind": "cube_tile", "line": 9,
            "value": {"m": [64, 64], "k": [64, 64], "n": [64, 64]}, "dtypes": ["DT_BF16", "DT_FP32"]}
    legal = lambda v: su._legal_at_run_shapes(cube, v, files)  # noqa: E731
    assert su.detune_value(("cube", 0), legal) == {"m": [16, 16], "k": [16, 16], "n": [16, 16]}
    assert su._legal_at_run_shapes(dict(cube, dtypes=[]), {"m": [8, 8], "k": [8, 8], "n": [8, 8]}, files)
    # without shapes from a run nothing is known, and the rule stays the plain one
    assert su._reduced_axes(dict(knob, shapes=[]), files) == {} and su._legal_at_run_shapes(dict(knob, shapes=[]), [8, 8], files)


def test_random_expectation_counts_failures_in_n_and_good_configurations_in_k():
    # shipped 100, best 10 (10x): 90 % of 10x = 9x -> times <= 11.11; 99 % -> <= 10.10
    times = [100.0, 50.0, 11.0, 10.0, None, 20.0, 10.1]
    r90, k90, best = su.random_expectation(times, 100.0, 0.9)
    r99, k99, _ = su.random_expectation(times, 100.0, 0.99)
    assert best == 10.0 and (k90, k99) == (3, 2)
    assert r90 == (7 + 1) / (3 + 1) and r99 == (7 + 1) / (2 + 1)


def test_a_grid_row_whose_kernel_left_no_time_is_no_measurement():
    # PyPTO's sequential_functions with a GELU tile of 1: the GELU kernel ran past the simulator's swimlane limit and
    # wrote no bubble_analysis.log, so the "operator time" was the layer norm's alone — 3.25x that never happened
    sys.path.insert(0, str(ROOT / "benchmarks" / "grids"))
    from measure_grid import judge_complete, missing_kernels

    cut = {"compiled": True, "valid": True, "output_folders": 2, "operator_time_us": 2.827,
           "per_folder_operator_time_us": [2.827]}
    whole = {**cut, "operator_time_us": 9.194, "per_folder_operator_time_us": [2.827, 6.367]}
    assert missing_kernels(cut) == 1 and missing_kernels(whole) == 0
    judged = judge_complete(cut)
    assert judged["valid"] is False and "1 of 2 kernel run folders left no bubble_analysis.log" in \
        judged["invalid_reasons"][0]
    assert judge_complete(whole) == whole and cut["valid"] is True  # the cached row itself is not changed


def test_search_curve_reach_and_remeasured_trials():
    trials = [{"time_us": 80.0, "decision": "kept"}, {"time_us": 80.0, "decision": "reverted"},
              {"time_us": None, "decision": "reverted"}, {"time_us": 100.0, "decision": "reverted"},
              {"time_us": 50.0, "decision": "kept"}, {"time_us": None, "decision": "kept"}]
    curve = su.search_curve(100.0, trials)
    assert curve == [1.25, 1.25, 1.25, 1.25, 2.0, 2.0]  # a failed trial never counts, kept or not
    assert su.reach(curve, 1.25) == 1 and su.reach(curve, 1.9) == 5 and su.reach(curve, 2.1) is None
    # 80.0 from the state it was kept in: no effect; 100.0 from 80.0: the baseline's time again
    assert su.remeasured(100.0, trials) == (1, 1)
    assert su.remeasured(100.0, [{"time_us": 100.0, "decision": "reverted"}]) == (1, 0)
    assert su.best_curve([None, 50.0, 60.0], 100.0) == [1.0, 2.0, 2.0]


def test_xgb_encoding_uses_the_values_integers_or_their_index():
    knobs = [{"values": [[16, 32], [8, 8]]}, {"values": [{"m": [16, 16], "k": [32, 32], "n": [32, 32]},
                                                          {"m": [16, 16], "k": [64, 64], "n": [32, 32]}]},
             {"values": [None, [4, 2, 1], [8, 4, 2, 1]]}, {"values": [True, False]}]
    assert su.xgb_encoding(knobs) == [[[16, 32], [8, 8]], [[16, 16, 32, 32, 32, 32], [16, 16, 64, 64, 32, 32]],
                                      [[0], [1], [2]], [[0], [1]]]


def test_table_has_one_row_per_variant_and_names_what_did_not_run():
    rows = [{"operator": "ops/softmax.py::test_softmax", "variant": "shipped", "N": 27, "unwritable": 0,
             "baseline_us": 74.44, "grid_best_us": 12.0, "grid_speedup": 6.2, "search_best": 6.2, "search90": 1,
             "random90": 9.3, "xgb90": 12, "search99": None, "random99": 14.0, "xgb99": None, "xgb_runs": 100,
             "remeasured": [2, 1], "search_trials": 16, "failed": 1, "wall_s": 90.0, "uncached_s": 900.0},
            {"operator": "ops/x.py::test_x", "variant": "shipped", "error": "TypeError: boom", "wall_s": 20.0}]
    text = su.table(rows)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| operator | variant |")
    assert ("| ops/softmax.py::test_softmax | shipped | 27 (0) | 74.440 | 12.000 (6.20×) | 6.20 | 1 | 9.3 | 12 | "
            ">16 | 14.0 | >100 | 2 · 1/16 | 1 · 0 | 90 (900) |") == lines[2]
    assert lines[3].startswith("| ops/x.py::test_x | shipped | — |")


def test_tables_from_earlier_runs_summarise_each_row_again_from_its_trials(tmp_path):
    row = {"operator": "ops/a.py::test_a", "variant": "shipped", "N": 4, "unwritable": 0, "baseline_us": 10.0,
           "grid_best_us": 5.0, "grid_speedup": 2.0, "search_best": 2.0, "search_trials": 3, "failed": 0,
           "remeasured": 3,  # an older run's single count
           "trials": [{"time_us": 10.0, "decision": "reverted"}, {"time_us": 5.0, "decision": "kept"},
                      {"time_us": 10.0, "decision": "reverted"}, {"time_us": None, "refused": True}]}
    (tmp_path / "a.json").write_text(__import__("json").dumps({"results": [row]}))
    (tmp_path / "b.json").write_text(__import__("json").dumps(
        {"results": [{"operator": "ops/b.py::test_b", "variant": "shipped", "error": "no verdict line"}]}))
    lines = su.tables_from([tmp_path / "a.json", tmp_path / "b.json"]).splitlines()
    assert "| 1 · 1/3 | 0 · 1 |" in lines[2] and lines[3].startswith("| ops/b.py::test_b | shipped | — |")


@pytest.mark.process  # git names the commit
def test_a_run_records_the_commit_it_measures_and_refuses_another_checkouts_code(tmp_path, monkeypatch):
    import subprocess

    code = su.own_code()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code["commit"] == head and code["digest"] == su.code_digest() and isinstance(code["dirty"], bool)
    # A benchmark file in one checkout run by an interpreter whose editable install is another checkout's would
    # measure the other's code under this one's name.
    monkeypatch.setattr(su, "ROOT", tmp_path)
    try:
        su.own_code()
    except SystemExit as exc:
        assert str(ROOT / "tools") in str(exc) and str(tmp_path) in str(exc)
    else:
        raise AssertionError("another checkout's code was accepted")


def test_detuned_code_that_leaves_no_measurement_is_detuned_again_from_the_next_floor(monkeypatch):
    import argparse

    op = su.Operator(su.ExampleTest("op.py", "op::test_op"), Path("ex"), {"op.py": "tile = 64"}, {})
    monkeypatch.setattr(su, "load_operator", lambda checkout, test: op)
    monkeypatch.setattr(su, "run_session", lambda *a, **k: {"knobs": [], "candidates": {}})
    # tiles at 8 and 16 make too many tasks; 32 and 64 are one code (the tile's legal values start at 32)
    monkeypatch.setattr(su, "detune", lambda o, knobs, cands, floor=8: ({"op.py": f"tile = {max(floor, 32)}"}, []))
    ran = []

    def run_variant(cache, dop, variant, args, tuner_dir):
        ran.append(dop.sources["op.py"])
        too_many = dop.sources["op.py"] != "tile = 32"
        return ({"operator": "op.py::test_op", "variant": variant,
                 **({"error": "collect_swimlane: past the swimlane limit"} if too_many else {"N": 4})}, None)

    monkeypatch.setattr(su, "run_variant", run_variant)
    args = argparse.Namespace(arms=["grid"], variants=["detuned"], budget=0, batch=1)
    [row] = su.run_operator(None, Path("."), op.test, args, None)
    assert ran == ["tile = 32"] and row["detune_floor"] == 8 and not row.get("error")

    monkeypatch.setattr(su, "detune", lambda o, knobs, cands, floor=8: ({"op.py": f"tile = {floor}"}, []))
    ran.clear()
    [row] = su.run_operator(None, Path("."), op.test, args, None)
    assert ran == ["tile = 8", "tile = 16", "tile = 32"] and row["detune_floor"] == 32 and row["N"] == 4
    assert [f["floor"] for f in row["detune_floors_failed"]] == [8, 16]
    assert "detuned ≥32" in su.table([row])


def test_a_detuned_vector_tile_is_judged_on_the_dtypes_that_ran():
    # PyPTO's basic_ops.py sums a [2, 3] FP32 tensor under a tile of (8, 8): capped to [2, 3] the tail is 12 bytes,
    # which does not compile (FC1001); the server's check refuses it once it knows the dtype
    knob = {"id": "basic_ops.py:sum_kernel.set_vec_tile_shapes#1", "kind": "vec_tile", "line": 171, "value": [8, 8],
            "shapes": [[2, 3], [2]], "dtypes": ["DT_FP32"]}
    files = {"basic_ops.py": "import pypto\n"}
    assert not su._legal_at_run_shapes(knob, [2, 3], files)
    assert su._legal_at_run_shapes(knob | {"dtypes": []}, [2, 3], files)  # what it judged without them
