"""The knob map joins text and run (issue #17): live / dead sites, the values that ran, sharing, and the admission
gate judging tile calls and loop blocks on what ran.

The runs are recorded probe records of real SIM runs of the upstream-style fixtures (``data/probes/``); the expected
values come from the fixtures' own text: which test builds which config, which branch a static test enters, which
kernels call the shared helper, the tensor shapes the test creates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.patching.runmap import knob_map
from tests.conftest import OPERATORS

DATA = Path(__file__).parent / "data" / "probes"


def _fixture(name: str, file: str, test: str) -> tuple[dict[str, str], dict[str, Any]]:
    sources = {file: (OPERATORS / name / file).read_text(encoding="utf-8")}
    return sources, json.loads((DATA / f"{name}__{test}.json").read_text(encoding="utf-8"))


def _change(sources: dict[str, str], old: str, new: str) -> dict[str, str]:
    (file, text), = sources.items()
    assert text.count(old) == 1, old
    return {file: text.replace(old, new)}


def _refusal(before: dict[str, str], after: dict[str, str], run: Any) -> GateRefusal:
    with pytest.raises(GateRefusal) as info:
        admit(before, after, run=run)
    return info.value


@pytest.fixture(scope="module")
def layernorm() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_layernorm", "layernorm_op.py", "test_layer_norm")


@pytest.fixture(scope="module")
def activation() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_activation", "activation_ops.py", "test_swiglu")


@pytest.fixture(scope="module")
def ffn() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_ffn", "ffn_module.py", "test_ffn_static")


def _info(rm: Any, knob_id: str) -> Any:
    site = next(s for s in rm.sites if s.knob.id == knob_id)
    return rm.of(site)


# ------------------------------------------------------------------------------------------------- live / dead

LN = "layernorm_op.py:"
LN_KERNEL = LN + "build_layer_norm.layer_norm_kernel."


def test_a_static_test_leaves_the_dynamic_branch_dead_and_its_own_config_live(layernorm):
    sources, run = layernorm
    rm = knob_map(sources, {}, run)
    # test_layer_norm builds LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128)) and takes the static branch
    static_tile = _info(rm, LN_KERNEL + "set_vec_tile_shapes#2")
    assert static_tile.live is True and static_tile.effective == [[1, 128]]
    assert static_tile.kernels == ["layer_norm_kernel"] and static_tile.tests == ["test_layer_norm"]
    assert [128, 512] in static_tile.shapes and [1, 512] in static_tile.shapes  # x, and one row block of x
    for dead in ("set_vec_tile_shapes#1", "loop[LOOP_DYN_ROWS].unroll_list", "view#1.valid_shape"):
        info = _info(rm, LN_KERNEL + dead)
        assert info.live is False and "never ran" in info.why, dead
    assert _info(rm, LN + "test_layer_norm.LayerNormConfig(block_rows)").effective == [1]
    assert _info(rm, LN + "test_layer_norm.LayerNormConfig(vec_tile_shape)").effective == [[1, 128]]
    other = _info(rm, LN + "test_layer_norm_no_affine.LayerNormConfig(block_rows)")
    assert other.live is False and "test_layer_norm_no_affine" in other.why
    # the kernel is shared by the file's three tests: its sites say so
    assert set(static_tile.shared_with) >= {"test test_layer_norm (ran)", "test test_layer_norm_dynamic_batch "
                                            "(not run by this test)", "test test_layer_norm_no_affine (not run by "
                                            "this test)"}


def test_a_tile_replaced_before_any_operation_used_it_is_dead_and_so_is_what_feeds_only_it(layernorm):
    """A record that counted the operations under each tile (``ops``) and found none under the static branch's tile:
    that call and the config field feeding it are dead, each saying why; a record that did not count says nothing."""
    sources, run = layernorm
    counted = json.loads(json.dumps(run))
    for c in counted["calls"]:
        if c["api"] == "set_vec_tile_shapes":
            c["ops"] = 0
    rm = knob_map(sources, {}, counted)
    tile = _info(rm, LN_KERNEL + "set_vec_tile_shapes#2")
    assert tile.live is False and "no vector operation was built while its tile was in force" in tile.why
    field = _info(rm, LN + "test_layer_norm.LayerNormConfig(vec_tile_shape)")
    assert field.live is False and "ran, but a later tile call replaced it" in field.why, field.why
    assert _info(rm, LN + "test_layer_norm.LayerNormConfig(block_rows)").live is True  # the loop still takes it
    for c in counted["calls"]:
        if c["api"] == "set_vec_tile_shapes":
            c["ops"] = 3
    assert _info(knob_map(sources, {}, counted), LN_KERNEL + "set_vec_tile_shapes#2").live is True
    assert _info(knob_map(sources, {}, run), LN_KERNEL + "set_vec_tile_shapes#2").live is True  # not counted


def test_a_helper_shared_by_four_kernels_names_them_and_the_tests(activation):
    sources, run = activation
    rm = knob_map(sources, {}, run)
    source = _info(rm, "activation_ops.py:configure_tiling.tile_list[*]")
    call = _info(rm, "activation_ops.py:configure_tiling.set_vec_tile_shapes#1")
    assert source.live is True and source.effective == [32]
    assert call.effective == [[32, 32]] and call.kernels == ["swiglu_kernel"]  # a [128, 1024] tensor: rank 2
    for info in (source, call):
        assert "kernel swiglu_kernel (ran)" in info.shared_with
        for other in ("gelu_kernel", "silu_kernel", "relu_kernel"):
            assert f"kernel {other} (not run by this test)" in info.shared_with
        assert "test test_silu_short_batch (not run by this test)" in info.shared_with
    assert _info(rm, "activation_ops.py:build_gelu.gelu_kernel.runtime_options.run_mode").live is False
    assert _info(rm, "activation_ops.py:build_swiglu.swiglu_kernel.runtime_options.run_mode").effective == [1]


def test_without_a_record_nothing_is_called_dead(layernorm):
    sources, _ = layernorm
    for run in (None, {"status": "no-report", "reason": "the run left no probe record"}):
        rm = knob_map(sources, {}, run)
        assert not rm.dead_ids() and len(rm.live_sites()) == len(rm.sites)
        info = _info(rm, LN_KERNEL + "set_vec_tile_shapes#1")
        assert info.live is None and "did not report" in info.why


def test_lines_follow_the_text_when_the_state_differs_from_what_ran(layernorm):
    """The record is of one state; the map may be asked about it with lines shifted (debug options on)."""
    sources, run = layernorm
    (file, text), = sources.items()
    shifted = {file: "# a comment line added above everything\n" + text}
    rm = knob_map(shifted, {}, run)
    assert _info(rm, LN_KERNEL + "set_vec_tile_shapes#2").live is True
    assert _info(rm, LN_KERNEL + "set_vec_tile_shapes#1").live is False


# ------------------------------------------------------------------------------------------------- admission


def test_a_dead_site_is_never_tunable(layernorm):
    sources, run = layernorm
    r = _refusal(sources, _change(sources, "pypto.set_vec_tile_shapes(1, hidden)", "pypto.set_vec_tile_shapes(2, "
                                  "hidden)"), run)
    assert r.rule == "live-site" and "set_vec_tile_shapes#1" in r.message


def test_a_config_field_is_one_knob_checked_on_the_shapes_that_ran(layernorm):
    sources, run = layernorm
    adm = admit(sources, _change(sources, "vec_tile_shape=(1, 128))", "vec_tile_shape=(1, 512))"), run=run)
    assert adm.kind == "knob" and adm.change.knob_id == LN + "test_layer_norm.LayerNormConfig(vec_tile_shape)"
    assert adm.live is True and adm.ran_with == [[1, 128]] and not adm.unchecked
    assert any("[1, 512]" in c and "[128, 512]" in c for c in adm.checked)
    # x is [128, 512]: a tile 1024 wide cannot fit, and the refusal names what ran
    r = _refusal(sources, _change(sources, "vec_tile_shape=(1, 128))", "vec_tile_shape=(1, 1024))"), run)
    assert r.rule == "legality" and "1024" in r.message and "[128, 512]" in r.message


def test_a_block_size_is_checked_on_the_axis_the_run_blocked(layernorm):
    sources, run = layernorm
    adm = admit(sources, _change(sources, "block_rows=1, vec", "block_rows=8, vec"), run=run)
    assert any("axis 128" in c and "16 block(s) of 8" in c for c in adm.checked) and not adm.unchecked
    # 128 rows in blocks of 3 leave 2 rows uncomputed (floor division)
    r = _refusal(sources, _change(sources, "block_rows=1, vec", "block_rows=3, vec"), run)
    assert r.rule == "legality" and "not a multiple of 3" in r.message


def test_a_comprehension_literal_and_the_pinned_call_are_each_one_knob(activation):
    sources, run = activation
    adm = admit(sources, _change(sources, "[32 for _ in", "[64 for _ in"), run=run)
    assert adm.change.knob_id == "activation_ops.py:configure_tiling.tile_list[*]"
    assert any("= [64, 64]" in c for c in adm.checked) and not adm.unchecked
    assert "kernel gelu_kernel (not run by this test)" in adm.shared_with
    pinned = admit(sources, _change(sources, "pypto.set_vec_tile_shapes(*tile_list)",
                                    "pypto.set_vec_tile_shapes(64, 128)"), run=run)
    assert pinned.change.knob_id == "activation_ops.py:configure_tiling.set_vec_tile_shapes#1"
    assert any("= [64, 128]" in c and "[128, 1024]" in c for c in pinned.checked)
    # the swiglu tensors are [128, 1024]: rows beyond 128, or a third dim, are refused with the shapes that ran
    r = _refusal(sources, _change(sources, "[32 for _ in", "[256 for _ in"), run)
    assert r.rule == "legality" and "[128, 1024]" in r.message
    r = _refusal(sources, _change(sources, "pypto.set_vec_tile_shapes(*tile_list)",
                                  "pypto.set_vec_tile_shapes(1, 32, 64)"), run)
    assert r.rule == "legality" and "2 dims" in r.message


def test_a_cube_tile_from_a_config_tuple_is_checked_with_the_dtypes_that_ran(ffn):
    sources, run = ffn
    adm = admit(sources, _change(sources, "cube_tile_shape=(16, 32, 32)", "cube_tile_shape=(32, 32, 32)"), run=run)
    assert any("'m': [32, 32]" in c for c in adm.checked)
    # x and the weights ran as FP16: an L0 of 24 is not a multiple of 16
    r = _refusal(sources, _change(sources, "cube_tile_shape=(16, 32, 32)", "cube_tile_shape=(16, 24, 32)"), run)
    assert r.rule == "legality" and "multiple of 16" in r.message
    # the knob map says so too: the dtypes the kernel ran on, and what its cast produces (list_knobs' ``dtypes``)
    rm = knob_map(sources, {}, run)
    cube = next(s for s in rm.sites if s.knob.kind == "cube_tile" and rm.of(s).live)
    assert rm.of(cube).dtypes == ["DT_FP16", "DT_FP32"]  # each once: the cast's FP16 is also an input's


def test_a_tiling_source_needs_the_record_but_a_pin_does_not(activation):
    sources, _ = activation
    r = _refusal(sources, _change(sources, "[32 for _ in", "[64 for _ in"), None)
    assert r.rule == "legality" and "run-time probe" in r.message
    adm = admit(sources, _change(sources, "pypto.set_vec_tile_shapes(*tile_list)",
                                 "pypto.set_vec_tile_shapes(64, 128)"), run=None)
    assert adm.kind == "knob" and adm.live is None


def test_a_tiling_source_refusal_says_why_there_is_no_record(activation):
    """The refusal names the probe's status, and its reason when the record gives one (runmap: status / reason)."""
    sources, _ = activation
    after = _change(sources, "[32 for _ in", "[64 for _ in")
    r = _refusal(sources, after, None)
    assert "there is none (not-probed)" in r.message, r.message
    r = _refusal(sources, after, {"status": "no-report", "reason": "the run left no probe record"})
    assert "there is none (no-report: the run left no probe record)" in r.message, r.message


# ------------------------------------------------------------------------------------- smuggling through a source

SMUGGLE = '''
import dataclasses
from dataclasses import dataclass

import pypto
import torch


@dataclass
class Cfg:
    rows: int = 64
    tile: tuple = (8, 64)
    scale: int = 2
    dtype_bits: int = 32


def build(cfg):
    @pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
    def kernel(x: pypto.Tensor((64, 64), pypto.DT_FP32), y: pypto.Tensor((64, 64), pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(*cfg.tile)
        pypto.set_vec_tile_shapes(cfg.scale, 64)
        lanes = [16 for _ in range(2)]
        pypto.set_vec_tile_shapes(*lanes)
        y[:, :] = x * cfg.scale
        if cfg.dtype_bits == 16:
            pypto.set_vec_tile_shapes(cfg.dtype_bits, 64)
    return kernel


def test_it():
    cfg = Cfg(rows=64, tile=(8, 64), scale=2, dtype_bits=32)
    x = torch.randn(cfg.rows, 64)
    build(cfg)(x, torch.zeros(64, 64))
    width = [4 for _ in range(3)]
    print(torch.zeros(width))
'''


@pytest.mark.parametrize("old,new,why", [
    ("rows=64, tile", "rows=32, tile", "a field that sizes the test's input tensor"),
    ("scale=2,", "scale=4,", "a field that is both a tile and a factor of the computed value"),
    ("dtype_bits=32", "dtype_bits=16", "a field that decides a branch (a dtype choice)"),
])
def test_a_field_that_reaches_anything_but_tiling_is_not_a_knob(old, new, why):
    sources = {"op.py": SMUGGLE}
    r = _refusal(sources, _change(sources, old, new), None)
    assert r.rule == "one-change", why
    assert "not a tuning knob" in r.message or "not a knob change" in r.message, why


def test_reflection_makes_every_field_a_problem():
    sources = {"op.py": SMUGGLE + "\nprint(dataclasses.asdict(Cfg()))\n"}
    r = _refusal(sources, _change(sources, "tile=(8, 64), scale", "tile=(16, 64), scale"), None)
    assert r.rule == "one-change" and "reflection" in r.message


def test_a_comprehension_literal_that_also_sizes_data_is_not_a_knob():
    sources = {"op.py": SMUGGLE}
    r = _refusal(sources, _change(sources, "[4 for _ in range(3)]", "[2 for _ in range(3)]"), None)
    assert r.rule == "one-change"
    # the control case: the one that only tiles is a knob — refused here only because no run recorded what it feeds
    r = _refusal(sources, _change(sources, "[16 for _ in range(2)]", "[32 for _ in range(2)]"), None)
    assert r.rule == "legality" and "op.py:build.kernel.lanes[*]" in r.message and "run-time probe" in r.message


def test_knobs_moved_together_are_each_checked_against_the_run(layernorm):
    """Issue #16 (left open by the admission fix): a declared algorithm change of several knobs skipped the run-time
    probe's part of the gate, so a dead site rode along with a live knob. Each knob is now checked as alone."""
    sources, run = layernorm
    stitch = ('"stitch_function_max_num": 128', '"stitch_function_max_num": 256')
    dead = _change(_change(sources, "pypto.set_vec_tile_shapes(1, hidden)", "pypto.set_vec_tile_shapes(2, hidden)"),
                   *stitch)
    with pytest.raises(GateRefusal) as info:
        admit(sources, dead, run=run, algorithm=True, allow_structural=True)
    assert info.value.rule == "live-site" and "set_vec_tile_shapes#1" in info.value.message, info.value.message
    live = _change(_change(sources, "vec_tile_shape=(1, 128))", "vec_tile_shape=(1, 512))"), *stitch)
    adm = admit(sources, live, run=run, algorithm=True, allow_structural=True)
    assert adm.kind == "structural" and len(adm.structural_lines) == 2, adm


# ------------------------------------------------------------------------------------ a tiling dict, entry by entry
# upstream_rope keeps its tiling in a module-level dict the kernel body reads entry by entry:
#     ROPE_TILING = {"block_tokens": 2, "vec_tile": (2, 64)}
#     block = ROPE_TILING["block_tokens"]  ...  pypto.set_vec_tile_shapes(*ROPE_TILING["vec_tile"])
# over x [128, 256] (test_rope). The whole dict used to be one named constant with a dict value, for which the search
# had no values: nothing it proposed could move the block.
ROPE = "rope_op.py:"
BLOCK_ENTRY = ROPE + 'ROPE_TILING["block_tokens"]'
TILE_ENTRY = ROPE + 'ROPE_TILING["vec_tile"]'


@pytest.fixture(scope="module")
def rope() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_rope", "rope_op.py", "test_rope")


def test_a_tiling_dict_read_entry_by_entry_is_one_knob_per_entry(rope):
    sources, run = rope
    rm = knob_map(sources, {}, run)
    ids = {s.knob.id: s.knob for s in rm.sites}
    assert ROPE + "ROPE_TILING" not in ids  # the whole dict: each entry's change would move two knobs
    assert ids[BLOCK_ENTRY].tunable and set(ids[BLOCK_ENTRY].context["consumers"]) >= {"loop"}
    assert ids[TILE_ENTRY].tunable and ids[TILE_ENTRY].context["consumers"] == ["vec_tile"]
    assert _info(rm, BLOCK_ENTRY).effective == [2] and _info(rm, TILE_ENTRY).effective == [[2, 64]]
    adm = admit(sources, _change(sources, '"block_tokens": 2,', '"block_tokens": 4,'), run=run)
    assert adm.kind == "knob" and adm.change.knob_id == BLOCK_ENTRY and not adm.unchecked
    assert any("axis 128" in c and "32 block(s) of 4" in c for c in adm.checked), adm.checked
    adm = admit(sources, _change(sources, '"vec_tile": (2, 64)}', '"vec_tile": (2, 256)}'), run=run)
    assert adm.change.knob_id == TILE_ENTRY and any("= [2, 256]" in c for c in adm.checked), adm.checked
    # x is [128, 256]: 128 tokens in blocks of 3 leave 2 uncomputed; a tile 512 wide cannot fit
    r = _refusal(sources, _change(sources, '"block_tokens": 2,', '"block_tokens": 3,'), run)
    assert r.rule == "legality" and "not a multiple of 3" in r.message
    r = _refusal(sources, _change(sources, '"vec_tile": (2, 64)}', '"vec_tile": (2, 512)}'), run)
    assert r.rule == "legality" and "512" in r.message
    # both entries at once are two knobs: one change only as the pair the run links (rule linked-pair), the
    # block's tokens and the tile's rows it caps; a wider tile beside a larger block is two changes
    both = _change(_change(sources, '"block_tokens": 2,', '"block_tokens": 4,'), '"vec_tile": (2, 64)}',
                   '"vec_tile": (2, 128)}')
    r = _refusal(sources, both, run)
    assert r.rule == "one-change" and BLOCK_ENTRY in r.message and TILE_ENTRY in r.message, r.message
    linked = _change(_change(sources, '"block_tokens": 2,', '"block_tokens": 4,'), '"vec_tile": (2, 64)}',
                     '"vec_tile": (4, 64)}')
    adm = admit(sources, linked, run=run)
    assert adm.kind == "pair" and [c.knob_id for c in adm.changes] == [BLOCK_ENTRY, TILE_ENTRY]


@pytest.mark.parametrize("extra,why", [
    ("\nTUNED = dict(**ROPE_TILING)\n", "the dict unpacked into another"),
    ("\nfor _key in ROPE_TILING:\n    print(_key)\n", "the dict iterated"),
    ('\nROPE_TILING["block_tokens"] = 8\n', "an entry written after it was bound"),
    ('\nprint(ROPE_TILING.get("block_tokens"))\n', "the dict read another way"),
    ('\nSIZES = torch.zeros(ROPE_TILING["block_tokens"])\n', "the entry also sizes data"),
])
def test_a_dict_read_any_other_way_is_not_a_set_of_knobs(rope, extra, why):
    sources, _ = rope
    (file, text), = sources.items()
    tainted = {file: text + extra}
    r = _refusal(tainted, _change(tainted, '"block_tokens": 2,', '"block_tokens": 4,'), None)
    assert r.rule == "one-change" and "not a tuning knob" in r.message, (why, r.rule, r.message)


def test_a_dict_printed_whole_is_still_a_set_of_knobs(rope):
    """The control of the attacks above: printed, the dict feeds nothing else — its entries stay knobs, refused here
    only for want of a record of what they gave at the tile calls."""
    sources, _ = rope
    (file, text), = sources.items()
    control = {file: text + "\nprint(ROPE_TILING)\n"}
    r = _refusal(control, _change(control, '"block_tokens": 2,', '"block_tokens": 4,'), None)
    assert r.rule == "legality" and "run-time probe" in r.message, r.message


# ------------------------------------------------------------------------ a kernel built inside a builder (closure)

LB = "linear_bias_op.py:"
VEC_ROWS = LB + "test_linear_bias.LinearTiling(vec_rows)"
CUBE_K = LB + "test_linear_bias.LinearTiling(cube_k)"
LB_CONFIG = "tiling = LinearTiling(m_block=16, cube_m=16, cube_k=32, cube_n=32, vec_rows=4)"


@pytest.fixture(scope="module")
def linear_bias() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_linear_bias", "linear_bias_op.py", "test_linear_bias")


def test_a_field_beside_a_builders_local_is_derived_through_the_closure(linear_bias):
    """upstream_linear_bias's kernel, defined inside ``build_linear_bias``, calls
    ``set_vec_tile_shapes(t.vec_rows, out_dim)``; ``out_dim`` is the builder's (``in_dim, out_dim = IN_DIM, OUT_DIM``),
    which the kernel reads as a closure. The record says the call ran with [4, 256]. Before 2026-12-05 the deriver
    looked for ``out_dim`` in the kernel's own bindings only, so every change of ``vec_rows`` was refused ("the server
    cannot tell what … gives there (out_dim)"), and the search had to pin the call instead."""
    sources, run = linear_bias
    adm = admit(sources, _change(sources, LB_CONFIG, LB_CONFIG.replace("vec_rows=4", "vec_rows=16")), run=run)
    assert adm.kind == "knob" and adm.change.knob_id == VEC_ROWS and not adm.unchecked
    assert any("= [16, 256]" in c for c in adm.checked), adm.checked
    # the cube tile's fields, in the same call style, still derive the whole (m, k, n) tile
    adm = admit(sources, _change(sources, LB_CONFIG, LB_CONFIG.replace("cube_k=32", "cube_k=128")), run=run)
    assert adm.kind == "knob" and adm.change.knob_id == CUBE_K
    assert any("[128, 128]" in c for c in adm.checked), adm.checked
    # and the budget still holds on what it derives: 128 rows of 256 FP32 are 128 KB, over the 96 KB a tile may take
    r = _refusal(sources, _change(sources, LB_CONFIG, LB_CONFIG.replace("vec_rows=4", "vec_rows=128")), run)
    assert r.rule == "legality" and "128 KB" in r.message, r.message


def test_a_parameter_hides_the_enclosing_functions_binding():
    """Python's closure rule, as the deriver reads it: a name the inner function binds, or takes as a parameter, is
    its own; only the others come from the enclosing function. A function nested deeper keeps its bindings."""
    import ast

    from pypto_tune.tools.patching.derive import _PARAM, _visible_assignments

    tree = ast.parse(
        "def build(cfg):\n"
        "    width = 256\n"
        "    rows = 8\n"
        "    depth = 4\n"
        "    def kernel(x, rows):\n"
        "        width2 = width\n"
        "        def helper():\n"
        "            depth = 99\n"
        "        return rows\n")
    build = tree.body[0]
    kernel = build.body[3]
    seen = _visible_assignments([kernel, build])
    assert seen["rows"] == [_PARAM] and seen["x"] == [_PARAM]  # the kernel's parameter, not the builder's 8
    assert isinstance(seen["width"][0], ast.Constant) and seen["width"][0].value == 256  # the closure
    assert isinstance(seen["depth"][0], ast.Constant) and seen["depth"][0].value == 4  # not the helper's 99
    assert seen["cfg"] == [_PARAM]


# ------------------------------------------------- a tiling dict the test builds and hands to a builder and a helper

MP = "mean_pool_op.py:"
MP_TILING = 'tiling = {"rows_per_block": 1, "seq_chunk": 8, "hidden_chunk": 64, "vec_nbuffer": 1}'
SEQ = MP + 'test_mean_pool.tiling["seq_chunk"]'
ROWS = MP + 'test_mean_pool.tiling["rows_per_block"]'
NBUF = MP + 'test_mean_pool.tiling["vec_nbuffer"]'


@pytest.fixture(scope="module")
def mean_pool() -> tuple[dict[str, str], dict[str, Any]]:
    return _fixture("upstream_mean_pool", "mean_pool_op.py", "test_mean_pool")


def _entry(sources: dict[str, str], key: str, value: int) -> dict[str, str]:
    old = next(part for part in MP_TILING.split("{")[1].rstrip("}").split(", ") if part.startswith(f'"{key}"'))
    return _change(sources, MP_TILING, MP_TILING.replace(old, f'"{key}": {value}'))


def test_a_dict_passed_to_the_builder_and_a_helper_is_one_knob_per_entry(mean_pool):
    """upstream_mean_pool (held out) builds ``tiling = {…}`` in the test and hands it to ``build_mean_pool``, which
    reads ``tiling["rows_per_block"]`` for its loop, hands it on to ``pool_vec_tile``, whose return value the kernel
    sets as its tile (``set_vec_tile_shapes(*tile)``), and puts ``tiling["vec_nbuffer"]`` into the jit's
    ``pass_options``; it also guards ``if batch % rows: raise ValueError(…)``. Before 2026-12-05 none of it was a
    knob (a dict passed on, a value returned, a guard: each a problem), and the search had nothing in the author's
    form to move. x is [32, 64, 256] and the reduction runs over the 64 tokens (the record)."""
    sources, run = mean_pool
    rm = knob_map(sources, {}, run)
    ids = {s.knob.id: s.knob for s in rm.sites}
    for k in (SEQ, ROWS, NBUF):
        assert ids[k].tunable, (k, ids[k].legal)
    assert set(ids[ROWS].context["consumers"]) >= {"loop", "vec_tile"} and ids[NBUF].context["consumers"] == [
        "jit_options"]
    adm = admit(sources, _entry(sources, "seq_chunk", 64), run=run)
    assert adm.kind == "knob" and adm.change.knob_id == SEQ
    assert any("= [1, 64, 64]" in c and "ran it with [1, 8, 64]" in c for c in adm.checked), adm.checked
    adm = admit(sources, _entry(sources, "rows_per_block", 2), run=run)
    assert adm.change.knob_id == ROWS and any("= [2, 8, 64]" in c for c in adm.checked), adm.checked
    assert any("axis 32" in c and "16 block(s) of 2" in c for c in adm.checked), adm.checked
    # what the run says still bounds it: 3 does not divide 32 rows; the tile cannot pass the 64 tokens
    r = _refusal(sources, _entry(sources, "rows_per_block", 3), run)
    assert r.rule == "legality" and "not a multiple of 3" in r.message, r.message
    r = _refusal(sources, _entry(sources, "seq_chunk", 128), run)
    assert r.rule == "legality" and "exceeds the tensor dim 64" in r.message, r.message


HELPER = 'def pool_vec_tile(tiling: dict) -> tuple:'


@pytest.mark.parametrize("patch,why", [
    (("    return (tiling[\"rows_per_block\"], tiling[\"seq_chunk\"], tiling[\"hidden_chunk\"])",
      "    tiling[\"seq_chunk\"] = 16\n    return (tiling[\"rows_per_block\"], tiling[\"seq_chunk\"], "
      "tiling[\"hidden_chunk\"])"), "the helper writes an entry"),
    (("    return (tiling[\"rows_per_block\"], tiling[\"seq_chunk\"], tiling[\"hidden_chunk\"])",
      "    print(sorted(tiling.items()))\n    return (tiling[\"rows_per_block\"], tiling[\"seq_chunk\"], "
      "tiling[\"hidden_chunk\"])"), "the helper reads it another way"),
    (("    return (tiling[\"rows_per_block\"], tiling[\"seq_chunk\"], tiling[\"hidden_chunk\"])",
      "    return tuple(tiling.values())[:3]"), "the helper reads it whole"),
    (("    kernel = build_mean_pool((BATCH, SEQ, HIDDEN), tiling, run_mode)",
      "    kernel = build_mean_pool((BATCH, SEQ, HIDDEN), dict(tiling), run_mode)"), "a copy is passed on"),
    (("    kernel = build_mean_pool((BATCH, SEQ, HIDDEN), tiling, run_mode)",
      "    kernel = build_mean_pool((BATCH, SEQ, HIDDEN), tiling, run_mode)\n    json.dumps(tiling)"),
     "handed to code outside the workspace"),
])
def test_a_passed_dict_read_any_other_way_on_its_path_is_no_set_of_knobs(mean_pool, patch, why):
    """The attacks on the path the dict takes: wherever it goes, one use of it whole (written, iterated, copied,
    handed to code the server cannot read) makes every entry a problem — the gate refuses a change of one."""
    sources, _ = mean_pool
    (file, text), = sources.items()
    old, new = patch
    assert text.count(old) == 1, old
    tainted = {file: text.replace(old, new)}
    r = _refusal(tainted, _entry(tainted, "seq_chunk", 64), None)
    # refused as a knob with a problem use, or — when no read of the entry is left that the server can follow —
    # as no knob at all; either way the file is not changed and nothing runs
    assert r.rule == "one-change" and ("not a tuning knob" in r.message or "not a knob change" in r.message), (
        why, r.rule, r.message)


def test_a_guard_on_a_tiling_value_is_no_use_of_it_but_a_branch_is():
    """``if batch % rows: raise …`` and ``assert …`` only stop a run; ``if rows > 4: <other code>`` chooses what
    runs. The first two leave ``ROWS`` a knob; the branch does not."""
    from pypto_tune.tools.patching import extract_knobs

    base = (OPERATORS / "upstream_mean_pool" / "mean_pool_op.py").read_text()

    def rows_knob(text: str) -> Any:
        return next(k for k in extract_knobs({"mean_pool_op.py": text}) if k.id == ROWS)

    assert "    if batch % rows:\n        raise ValueError" in base
    assert rows_knob(base).tunable
    asserted = base.replace("    if batch % rows:\n        raise ValueError", "    assert batch % rows == 0\n"
                            "    if False:\n        raise ValueError")
    assert rows_knob(asserted).tunable
    branch = base.replace("    if batch % rows:\n        raise ValueError(f\"rows_per_block {rows} does not divide "
                          "the batch {batch}\")", "    if rows > 4:\n        print(\"large blocks\")")
    assert branch != base and not rows_knob(branch).tunable
