"""Knob extraction: every knob kind of domain.md C, through aliases, variables, comments, CRLF and tabs."""

from __future__ import annotations

import pytest
from patching_helpers import by_id, crlf, data_source, fixture_sources

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.patching import extract_knobs

PROBE = '''import sys, torch, pypto
B, N, D = 32, 32, 256
TILE_B = 1
@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def k(x: pypto.Tensor([B, N, D], pypto.DT_FP32), y: pypto.Tensor([B, N, D], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 4, 256)
    for b in pypto.loop(B // TILE_B, name="LOOP_B", idx_name="b"):
        xv = pypto.view(x, [TILE_B, N, D], [b * TILE_B, 0, 0])
        y[b*TILE_B:(b+1)*TILE_B, :, :] = pypto.exp(xv)
x = torch.randn(B, N, D)
'''


def test_probe_kernel_lists_tile_loop_constant_and_option_knobs():
    knobs = by_id(extract_knobs({"p.py": PROBE}))
    tile = knobs["p.py:k.set_vec_tile_shapes#1"]
    assert (tile.kind, tile.line, tile.value, tile.catalog_ids[:2]) == ("vec_tile", 6, [1, 4, 256], ["F-10", "S-12"])
    assert tile.context["tensor_shapes"] == [[32, 32, 256], [32, 32, 256]]
    assert tile.target == "p.py:6"
    const = knobs["p.py:TILE_B"]
    assert (const.kind, const.value, const.line) == ("tile_constant", 1, 3)
    assert {"F-11", "F-3", "F-1"} <= set(const.catalog_ids)
    assert const.context["max_value"] == 32  # B // TILE_B: a block may not exceed the axis it blocks
    unroll = knobs["p.py:k.loop[LOOP_B].unroll_list"]
    assert (unroll.present, unroll.value, unroll.context["trip_count"]) == (False, None, 32)
    assert unroll.catalog_ids[0] == "F-8"
    assert knobs["p.py:k.loop[LOOP_B].submit_before_loop"].catalog_ids == ["I-8"]
    # Problem sizes are tracked (a change to them is a change) but are not tuning knobs.
    assert knobs["p.py:B"].kind == "shape_constant" and not knobs["p.py:B"].tunable
    # run_mode is visible but not tunable; the S-5..S-10 option keys are offered as absent knobs.
    assert not knobs["p.py:k.runtime_options.run_mode"].tunable
    assert knobs["p.py:k.runtime_options.run_mode"].value == {"$expr": "pypto.RunMode.SIM"}
    absent = {k.name for k in knobs.values() if not k.present and k.kind == "jit_option"}
    assert absent == {"vec_nbuffer_setting", "cube_l1_reuse_setting", "cube_nbuffer_setting",
                      "stitch_function_max_num", "device_sched_mode"}
    assert knobs["p.py:k.pass_options.vec_nbuffer_setting"].catalog_ids[0] == "S-5"


def test_awkward_source_every_kind_through_aliases_and_variables():
    knobs = by_id(extract_knobs(data_source("awkward.py")))
    f = "awkward.py"
    # Options in a module-level variable: one knob per key, named after the variable.
    assert knobs[f"{f}:PASS_OPTS.vec_nbuffer_setting"].value == {-2: 1, -1: 2}
    assert knobs[f"{f}:PASS_OPTS.cube_l1_reuse_setting"].value == {-1: 2}
    assert knobs[f"{f}:PASS_OPTS.cube_l1_reuse_setting"].catalog_ids[0] == "S-6"
    assert knobs[f"{f}:PASS_OPTS.cube_nbuffer_setting"].present is False
    # dict(...) form.
    assert knobs[f"{f}:mm.runtime_options.device_sched_mode"].value == 1
    assert knobs[f"{f}:mm.runtime_options.device_sched_mode"].catalog_ids == ["S-10"]
    # Cube tiles: multi-line positional call with comments and the 3-element K; keyword form with split-K.
    c1 = knobs[f"{f}:mm.set_cube_tile_shapes#1"]
    assert c1.value == {"m": [128, 128], "k": [64, 256, 256], "n": [256, 256]}
    assert c1.catalog_ids[:3] == ["F-9", "S-2", "S-11"] and c1.line == 27
    assert "DT_FP16" in c1.context["dtypes"]
    c2 = knobs[f"{f}:mm.set_cube_tile_shapes#2"]
    assert c2.value == {"m": [64, 128], "k": [64, 256], "n": [128, 256], "enable_split_k": False}
    # loop_unroll with a trip count through a derived constant (NBLK = M // BLOCK_M = 2).
    unroll = knobs[f"{f}:mm.loop_unroll[LOOP_M].unroll_list"]
    assert unroll.value == [2, 1] and unroll.context["trip_count"] == 2
    # One S-4 knob per function: the scope ids in source order (open 1 … close -1).
    scope = knobs[f"{f}:mm.sg_set_scope"]
    assert (scope.value, scope.line, scope.context["lines"], scope.catalog_ids) == ([1, -1], 33, [33, 37], ["S-4"])
    assert knobs[f"{f}:mm.set_operation_options#1.combine_axis"].catalog_ids == ["F-15"]
    cache = knobs[f"{f}:mm.set_cache_policy"]
    assert (cache.value, cache.catalog_ids, cache.line) == ({"b": True}, ["I-2"], 26)
    vs = knobs[f"{f}:mm.view#1.valid_shape"]
    assert vs.value == [{"$expr": "BLOCK_M"}, {"$expr": "K"}] and vs.catalog_ids == ["I-9", "F-7"]
    # Bare @pt.frontend.jit, tab-indented body, list form of the vector tile, submit_before_loop.
    assert knobs[f"{f}:vec.set_vec_tile_shapes#1"].value == [16, 512]
    assert knobs[f"{f}:vec.loop#1.submit_before_loop"].value is False
    assert knobs[f"{f}:vec.loop#1.unroll_list"].context["trip_count"] == 16
    assert knobs[f"{f}:vec.pass_options.vec_nbuffer_setting"].present is False
    assert knobs[f"{f}:BLOCK_M"].kind == "tile_constant"


def test_crlf_file_gives_the_same_knobs_and_lines():
    src = data_source("awkward.py")
    lf = extract_knobs(src)
    cr = extract_knobs({"awkward.py": crlf(src["awkward.py"])})
    assert [(k.id, k.line, k.value) for k in lf] == [(k.id, k.line, k.value) for k in cr]


@pytest.mark.parametrize("header,jit,tile", [
    ("import pypto", "@pypto.frontend.jit()", "pypto.set_vec_tile_shapes"),
    ("import pypto as pt", "@pt.frontend.jit()", "pt.set_vec_tile_shapes"),
    ("from pypto import frontend\nimport pypto", "@frontend.jit()", "pypto.set_vec_tile_shapes"),
    ("from pypto.frontend import jit\nfrom pypto import set_vec_tile_shapes as svt", "@jit()", "svt"),
    ("import pypto.frontend as fe\nimport pypto", "@fe.jit()", "pypto.set_vec_tile_shapes"),
])
def test_aliases_resolve_to_the_same_knobs(header, jit, tile):
    src = f"{header}\n{jit}\ndef f(x):\n    {tile}(8, 8)\n"
    knobs = by_id(extract_knobs({"f.py": src}))
    assert knobs["f.py:f.set_vec_tile_shapes#1"].value == [8, 8]
    assert "f.py:f.pass_options.vec_nbuffer_setting" in knobs  # the jit was recognised


def test_lookalikes_from_other_modules_are_not_knobs():
    src = (
        "import torch\nimport mylib\nfrom mylib import loop\n"
        "def f(x):\n    mylib.set_vec_tile_shapes(1, 2)\n    for i in loop(4, unroll_list=[2]):\n        pass\n"
        "    x.view(4, 4)\n"
    )
    assert extract_knobs({"f.py": src}) == []


def test_star_list_and_tuple_forms_of_the_vector_tile():
    src = "import pypto\ndef f():\n    pypto.set_vec_tile_shapes(*[1, 8])\n    pypto.set_vec_tile_shapes((2, 4))\n"
    knobs = by_id(extract_knobs({"f.py": src}))
    assert knobs["f.py:f.set_vec_tile_shapes#1"].value == [1, 8]
    assert knobs["f.py:f.set_vec_tile_shapes#2"].value == [2, 4]


def test_ids_do_not_move_when_lines_are_inserted_above():
    knobs = extract_knobs({"p.py": PROBE})
    shifted = extract_knobs({"p.py": "# a new comment\n\n" + PROBE})
    assert [k.id for k in knobs] == [k.id for k in shifted]
    assert [k.line + 2 for k in knobs] == [k.line for k in shifted]


def test_a_file_that_does_not_parse_is_an_input_error_naming_it():
    with pytest.raises(InputError, match="bad.py is not valid Python"):
        extract_knobs({"bad.py": "def f(:\n"})


@pytest.mark.parametrize("name", sorted(fixture_sources()))
def test_fixture_operators_list_their_knobs_with_locations(name):
    sources = fixture_sources()[name]
    knobs = extract_knobs(sources)
    tunable_present = [k for k in knobs if k.present and k.tunable]
    assert tunable_present, f"{name}: no tunable knob found"
    for k in knobs:
        assert k.file in sources and k.line >= 1 and k.target == f"{k.file}:{k.line}"
        lines = sources[k.file].split("\n")
        assert k.line <= len(lines)
    kinds = {k.kind for k in tunable_present}
    assert kinds & {"vec_tile", "cube_tile", "tile_constant", "jit_option"}


INIT_CONFIG = '''import pypto


class Tiling:
    def __init__(self):
        self.unroll_list = [1, 2, 4]
        self.h_tile = 4096
        self.name = "lstm"


def compute(x, y, tiling):
    for off, n in pypto.loop_unroll(0, 32, 1, name="L", idx_name="i", unroll_list=tiling.unroll_list):
        pypto.set_vec_tile_shapes(1, tiling.h_tile)
        y[:] = x


@pypto.frontend.jit()
def kernel(x: pypto.Tensor((32, 4096), pypto.DT_FP32), y: pypto.Tensor((32, 4096), pypto.DT_FP32)):
    compute(x, y, Tiling())
'''


def test_a_literal_an_init_stores_on_the_instance_is_a_knob_named_by_class_and_attribute():
    knobs = by_id(extract_knobs({"lstm.py": INIT_CONFIG}))
    unroll, tile = knobs["lstm.py:Tiling.unroll_list"], knobs["lstm.py:Tiling.h_tile"]
    assert (unroll.kind, unroll.value, unroll.tunable) == ("tile_source", [1, 2, 4], True)
    assert (tile.value, tile.tunable, tile.context["consumers"]) == (4096, True, ["vec_tile"])
    assert not any(k.endswith("Tiling.name") for k in knobs)  # a string is no tile
    from pypto_tune.tools.patching import plan_knob_edit

    plan = plan_knob_edit({"lstm.py": INIT_CONFIG}, "lstm.py:Tiling.h_tile", 2048)
    assert "        self.h_tile = 2048\n" in plan.new_sources["lstm.py"]


def test_an_init_literal_stored_again_elsewhere_is_not_tunable():
    src = INIT_CONFIG + "\n\ndef test_other():\n    t = Tiling()\n    t.h_tile = 8\n"  # this store wins at run time
    tile = by_id(extract_knobs({"lstm.py": src}))["lstm.py:Tiling.h_tile"]
    assert not tile.tunable and any("h_tile is assigned as an attribute" in u for u in tile.context["problem_uses"])


def test_an_init_literal_under_a_branch_is_not_a_source():
    src = INIT_CONFIG.replace("        self.h_tile = 4096\n", "        if True:\n            self.h_tile = 4096\n")
    assert "lstm.py:Tiling.h_tile" not in by_id(extract_knobs({"lstm.py": src}))


ROW_BLOCK = '''import pypto


@pypto.frontend.jit()
def gate_kernel(x: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32), w: pypto.Tensor([], pypto.DT_FP32),
                y: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32)):
    bs = x.shape[0]
    h = x.shape[1]
    view_shape = (32, h)
    for i in pypto.loop((bs + view_shape[0] - 1) // view_shape[0], name="ROWS", idx_name="i"):
        part = pypto.view(x, view_shape, [i * view_shape[0], 0],
                          valid_shape=[(bs - i * view_shape[0]).min(view_shape[0]), h])
        y[i * view_shape[0]:, 0:] = pypto.matmul(part, w, part.dtype, b_trans=True)
'''


def test_an_int_beside_run_time_values_in_a_shape_tuple_is_a_knob_of_its_own():
    """PyPTO's GLM gate model blocks its rows as ``view_shape = (32, h_num)``: read by index for the loop, the offsets
    and the tail's rows (``(bs - i * B).min(B)``, the method form of pypto.min), and passed whole as the view's
    shape. The 32 is one knob; the run-time ``h`` is none."""
    block = by_id(extract_knobs({"gate.py": ROW_BLOCK}))["gate.py:gate_kernel.view_shape[0]"]
    assert (block.kind, block.value, block.tunable) == ("tile_source", 32, True), block.context
    assert {"loop", "view", "slice"} <= set(block.context["consumers"])
    from pypto_tune.tools.patching import plan_knob_edit

    plan = plan_knob_edit({"gate.py": ROW_BLOCK}, block.id, 16)
    assert "    view_shape = (16, h)\n" in plan.new_sources["gate.py"]


def test_a_value_clamped_by_a_method_on_one_side_only_is_not_followed():
    """``x.max(B)`` with B on one side only could be a tensor's reduction over axis B: the problem's, not a tile."""
    src = ROW_BLOCK.replace("(bs - i * view_shape[0]).min(view_shape[0])", "part0.max(view_shape[0])")
    src = src.replace("    for i in", "    part0 = x\n    for i in")
    block = by_id(extract_knobs({"gate.py": src}))["gate.py:gate_kernel.view_shape[0]"]
    assert not block.tunable and block.context["problem_uses"], block.context
