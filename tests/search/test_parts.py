"""The parts the ranking stands on: the static kernel model, the generated values, the priors file, the hashes."""

from __future__ import annotations

from pypto_tune.tools.patching import extract_knobs
from pypto_tune.tools.search import load_priors, semantic_hash
from pypto_tune.tools.search.history import components, direction, history_signals
from pypto_tune.tools.search.kernel import KernelModel
from pypto_tune.tools.search.models import TriedChange
from pypto_tune.tools.search.values import (
    cube_tile_values,
    stitch_values,
    unroll_values,
    vec_tile_values,
)

from .conftest import ROOT, load_operator


def _features(op):
    kept, ctx = load_operator(op)
    return KernelModel(kept, ctx).features()


def test_kernel_model_reads_loops_blocks_and_tiles():
    (f,) = _features("rmsnorm_grid")
    assert f["trips"] == [64] and f["iterations"] == 64
    (v,) = f["vec"]
    assert v["tile"] == [1, 64] and v["block"] == [1, 512] and v["tasks_per_block"] == 8
    (f,) = _features("softmax")
    assert f["vec"][0]["block"] == [4, 32, 256] and f["vec"][0]["tasks_per_block"] == 32


def test_kernel_model_follows_factories_and_matmuls():
    # upstream layout: the jit lives inside build_softmax(shape, ...) called with a literal shape
    (f,) = _features("upstream_softmax")
    assert f["tensor_dims"] == [[32, 32, 256], [32, 32, 256]] and f["trips"] == [8]
    assert f["vec"][0]["block"] == [4, 32, 256]
    (f,) = _features("matmul_act")
    assert f["cube"]["mkn"] == (64, 512, 512)  # one iteration's view of A: M_BLOCK rows
    assert f["cube"]["tasks_per_iter"] == 2 * 8 and f["cube"]["l0c_bytes"] == 32 * 64 * 4


def test_kernel_model_evaluates_trial_values():
    kept, ctx = load_operator("rmsnorm_grid")
    km = KernelModel(kept, ctx)
    (f,) = km.features(env_override={"ROWS_PER_BLOCK": 2}, site_override={("rmsnorm_grid.py", 36): [32, 512]})
    v = f["vec"][0]
    assert f["iterations"] == 32 and v["eff_tile"] == [2, 512] and v["tasks_per_block"] == 1 and v["covers_block"]


def test_vector_tiles_never_split_a_reduce_axis_finer():
    vals = [v.value for v in vec_tile_values([1, 64], [64, 512], reduce_axes={-1})]
    assert vals and all(x[1] >= 64 for x in vals) and all(x[0] <= 64 and x[1] <= 512 for x in vals)
    assert [1, 64] not in vals


def test_unroll_lists_fit_the_trip_count():
    vals = [v.value for v in unroll_values(None, 4)]
    assert vals == [[2, 1], [4, 2, 1]]


def test_stitch_values_cover_the_root_instances():
    assert [v.value for v in stitch_values(128, 32)] == [32, 256, 512, 1024]
    assert all(v.value >= 300 for v in stitch_values(128, 300))


def test_cube_pairs_keep_l1_a_multiple_of_l0_within_the_axis():
    vals = [v.value for v in cube_tile_values({"m": [32, 32], "k": [64, 64], "n": [64, 64]}, (64, 512, 512),
                                             [[256, 512]], half=True)]
    assert vals
    for v in vals:
        for axis in ("m", "k", "n"):
            l0, l1 = v[axis]
            assert l1 % l0 == 0 and l0 % 16 == 0
        assert v["k"][1] <= 512 and v["n"][1] <= 512 and v["m"][1] <= 256


def test_a_config_cube_tile_is_sized_on_the_operands_dtype_not_the_kernels_fp32_output():
    # upstream_ffn's grid best is (m, k, n) = (32, 128, 256) in FP16: kL0 × nL0 × 2 B = 64 KB fits L0B. Sized with
    # the kernel's largest dtype (its FP32 output, 4 B) it was never generated, and the replay never reached 90 %
    from pypto_tune.tools.patching.models import Knob
    from pypto_tune.tools.search.values import values_for

    knob = Knob(id="ffn.py:test.Cfg(cube_tile_shape)", kind="tile_source", name="Cfg(cube_tile_shape)", file="ffn.py",
                line=3, value=[16, 32, 32], context={"consumers": ["cube_tile"]})
    kernel = {"elem_bytes": 4, "cube": {"mkn": (32, 256, 512)}, "tensor_dims": [[32, 256], [256, 512]]}
    values = {tuple(v.value) for v in values_for(knob, kernel=kernel, reduce_axes=set(), has_cube=True,
                                                 has_vector=True)}
    assert (32, 128, 256) not in values  # what ran says nothing of the operands: sized at 4 B, as before
    values = {tuple(v.value) for v in values_for(knob, kernel={**kernel, "operand_bytes": 2}, reduce_axes=set(),
                                                 has_cube=True, has_vector=True)}
    assert (32, 128, 256) in values and (32, 128, 512) not in values  # 128 KB would overflow L0B


def test_a_cube_tile_clipped_to_the_same_work_is_predicted_to_change_nothing():
    from pypto_tune.tools.search.rank import cube_terms

    priors = load_priors()

    def feats(m: list[int], n: list[int]) -> dict:
        # one loop iteration multiplies [8, 64] by [64, 256]: M = 8 rows, whatever the tile asks for
        return {"iterations": 16, "cube": {"tile": {"m": m, "k": [64, 64], "n": n}, "mkn": (8, 64, 256)}}

    def clipped(before: dict, after: dict) -> list:
        return [t for t in cube_terms(before, after, priors, 24) if t.name == "cube-clipped"]

    base = feats([16, 16], [256, 256])
    # m 16 and m 32 both use the 8 rows there are: the same tiles, the same tasks
    same = clipped(base, feats([32, 32], [256, 256]))
    assert len(same) == 1 and same[0].score < 0 and same[0].rule == "cube-tile-clipped-by-axis"
    assert clipped(base, feats([8, 8], [256, 256]))  # 8 is what 16 was clipped to
    # n 128 splits N = 256 in two: other work, no such term
    assert not clipped(base, feats([16, 16], [128, 128]))


def test_components_and_direction():
    assert components({"m": [64, 64], "k": [64, 256], "n": [256, 256]}) == (64, 64, 64, 256, 256, 256)
    assert components({-2: 1, -1: 4}) == (1.0, 4.0)
    assert direction([1, 512], [2, 512]) == (1, 0)
    assert components(True) is None


def test_history_signals_only_use_this_knobs_trials():
    t = TriedChange(knob_id="a", value=8, before_value=4, outcome="regression", before_us=10, after_us=12)
    assert history_signals("b", 4, 16, [t]) == []
    (s,) = [x for x in history_signals("a", 4, 16, [t]) if x.name == "stop"]
    assert s.score < 0 and s.evidence["delta_pct"] == 20.0


def test_priors_are_data_with_their_measurements():
    p = load_priors()
    assert p.vector_cores == 48 and p.cube_cores == 24
    assert p.rules and all(r.evidence and r.claim for r in p.rules.values())
    for r in p.rules.values():
        for e in r.evidence:
            if e.source.startswith(("benchmarks/", "fixtures/")):
                assert (ROOT / e.source).is_file(), e.source
    # holding out an operator drops the rules only it supports, and only those
    held = load_priors(holdout="matmul_act")
    assert "cube-l0c-budget" in p.rules and "cube-l0c-budget" not in held.rules
    assert all(e.operator != "matmul_act" for r in held.rules.values() for e in r.evidence)
    only_matmul_act = {r.id for r in p.rules.values() if {e.operator for e in r.evidence} == {"matmul_act"}}
    assert set(p.rules) - set(held.rules) == only_matmul_act >= {"cube-l0c-budget", "cube-tile-clipped-by-axis"}


def test_priors_cite_grid_numbers_that_are_in_the_grids():
    import json

    grid = json.loads((ROOT / "benchmarks" / "grids" / "rmsnorm_grid.json").read_text())
    times = {round(r["operator_time_us"], 3) for r in grid["configs"] if r["operator_time_us"] is not None}
    p = load_priors()
    for rule in p.rules.values():
        for e in rule.evidence:
            if e.operator == "rmsnorm_grid":
                import re

                for num in re.findall(r"(\d+\.\d{3}) µs|(\d+\.\d{3}),", e.measured):
                    x = float(num[0] or num[1])
                    assert x in times or round(x, 3) in times, (rule.id, x)


def test_semantic_hash_is_the_sessions_definition():
    from pypto_tune.tools.operations.base import code_hash as session_code_hash
    from pypto_tune.tools.operations.base import semantic_hash as session_semantic_hash
    from pypto_tune.tools.search import code_hash

    kept, _ = load_operator("split_harness")
    assert semantic_hash(kept) == session_semantic_hash(kept)
    assert code_hash(kept) == session_code_hash(kept)
    reformatted = {k: v.replace("\n\n\n", "\n\n\n# a comment\n") for k, v in kept.items()}
    assert semantic_hash(reformatted) == semantic_hash(kept)


def test_every_fixture_operator_gets_frontend_values():
    # the generator finds something to try on every fixture operator (no silent empty proposals)
    from pypto_tune.tools.search.propose import _Context, choose_catalog_id
    from pypto_tune.tools.search.values import values_for

    from .conftest import OPERATOR_FILES

    for op in OPERATOR_FILES:
        kept, ctx = load_operator(op)
        c = _Context(kept, ctx, "frontend", None, [], load_priors(), "h")
        n = 0
        for k in extract_knobs(kept, ctx):
            kernel = c.kernel_of(k)
            for v in values_for(k, kernel=kernel, reduce_axes=set(), has_cube=True, has_vector=True):
                if choose_catalog_id(k, "frontend", v.value, kernel, c.facts):
                    n += 1
        assert n > 0, op


def test_kernel_shares_weigh_a_change_by_its_kernels_time():
    from pypto_tune.tools.search.rank import amdahl, kernel_shares

    analysis = {"per_dir": [{"run_dir": "/gone/a", "operator_time_us": 30.0, "kernel": "layer_norm"},
                            {"run_dir": "/gone/b", "operator_time_us": 10.0, "kernel": "rms_norm"}]}
    assert kernel_shares(analysis) == {"layer_norm": 0.75, "rms_norm": 0.25}
    # a folder whose kernel cannot be named (and whose program.json is gone) means no split at all
    assert kernel_shares({"per_dir": [{"run_dir": "/gone/a", "operator_time_us": 1.0}, {"run_dir": "/gone/b",
                                                                                        "operator_time_us": 1.0}]}) == {}
    assert amdahl(1.0, 1.0) == 1.0  # the whole operator twice as fast
    assert abs(amdahl(1.0, 0.25) - (-__import__("math").log2(0.75 + 0.125))) < 1e-12
    assert amdahl(-1.0, 0.5) < 0  # a slowdown stays a slowdown


def test_kernel_names_come_from_the_recorded_runs():
    from pypto_tune.tools.search.rank import kernel_shares

    from .conftest import RUNS

    dirs = sorted((RUNS / "softmax_two_calls" / "output").glob("output_*"))
    analysis = {"per_dir": [{"run_dir": str(d), "operator_time_us": 2.0} for d in dirs]}
    assert kernel_shares(analysis) == {"softmax_kernel": 1.0}


def test_a_cube_tile_or_matmul_not_read_as_numbers_keeps_its_raw_tile_and_no_prediction():
    # PyPTO's FFN example: a cube tile fed by a config's expression reached the picture unevaluated and the whole
    # propose_candidates call failed ("'<' not supported between instances of 'int' and 'dict'")
    from pypto_tune.tools.search.runpicture import _Trial

    tile = {"m": [16, 16], "k": [64, 128], "n": [{"$expr": "cfg.n"}, 256]}
    f = _Trial._cube(tile, (128, 256, 512), None)
    assert f["tile"] == tile and "tasks_per_iter" not in f
    f = _Trial._cube({"m": [16, 16], "k": [64, 64], "n": [256, 256]}, ({"$expr": "M"}, 256, 512), None)
    assert "tasks_per_iter" not in f
    f = _Trial._cube({"m": [16, 16], "k": [64, 64], "n": [256, 256]}, (128, 256, 512), None)
    assert f["tasks_per_iter"] == 8 * 2 and f["l0c_bytes"] == 16 * 256 * 4
