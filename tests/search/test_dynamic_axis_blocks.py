"""What the search must know before it proposes: a block over a dynamic axis, in the form PyPTO's own examples write it (``b = x.shape[0]``, ``b_loop = b //
tile_b``, ``pypto.loop(b_loop)``, ``x[b_offset:b_offset_end, ...]``) on a tensor with a singleton axis.

The run records the loop's trip count as a symbol and the view as ``[1, 32, 1, 256]``: the block of 1 and the
tensor's axis of 1 look alike. What the search must still know: the axis the loop blocks is the input's first
dimension at the shape the test passed (32), so a block of 64 is never proposed (it ran zero iterations and failed
in the benchmark on PyPTO's ``loop.py``); and a trial block widens the view's first axis only, so no linked pair
asks for a tile wider than the tensor's axis of 1 (admission refused two such pairs there).

The operator is one written here (tests/knob_operators.py, DYN_AXIS_OP: the stdio attack test runs it); the record
is hand-made in the form the probe writes (tests/patching/data/probes/README.md), with the values a SIM run of that
form recorded.
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.search import search
from pypto_tune.tools.search.hashing import code_hash
from pypto_tune.tools.search.priors import load_priors
from pypto_tune.tools.search.propose import _Context

from tests.knob_operators import DYN_AXIS_FILE, DYN_AXIS_OP, line_of

from .conftest import probed_call

F = DYN_AXIS_FILE
OPERATOR = DYN_AXIS_OP
KERNEL = f"{F}:{line_of(OPERATOR, 'def add_kernel')}:add_kernel"
BLOCK = f"{F}:add_kernel.tile_b"
TILE = f"{F}:add_kernel.set_vec_tile_shapes#1"


def _call(api: str, marker: str, args: list[Any], **extra: Any) -> dict[str, Any]:
    return probed_call(OPERATOR, F, KERNEL, api, marker, args, **extra)


def _record() -> dict[str, Any]:
    tensor = {"$tensor": [32, 32, 1, 256], "dtype": "torch.float32"}
    calls = [_call("set_vec_tile_shapes", "set_vec_tile_shapes", [1, 4, 1, 64], ops=5),
             _call("loop", "pypto.loop", [{"$sym": "(RUNTIME_GetInputShapeDim(ARG_x,0)/1)"}]),
             _call("view", "part = x[", [{"$tensor": [{"$sym": "RUNTIME_GetInputShapeDim(ARG_x,0)"}, 32, 1, 256]},
                                         [1, 32, 1, 256], [{"$sym": "(loop_idx_1*1)"}, 0, 0, 0]],
                   origin="pypto", result_shape=[1, 32, 1, 256])]
    kernel = {"key": KERNEL, "file": F, "qualname": "add_kernel", "name": "add_kernel", "line": line_of(OPERATOR, "def add_kernel"), "ran": True,
              "compiled": True, "inputs": [[tensor, dict(tensor)]], "called_from": []}
    return {"status": "reported", "kernels": [kernel], "calls": calls,
            "traced": {F: sorted({c["line"] for c in calls})}}


def test_no_block_is_proposed_that_the_dynamic_axis_cannot_take():
    kept = {F: OPERATOR}
    found = search(kept, stage="frontend", limit=None, knob=BLOCK, run=_record(), budget_s=0.0)
    values = [c.value for c in found.candidates if c.knob == BLOCK and c.kind != "pair"]
    assert values, found.why_none
    assert all(isinstance(v, int) and 1 <= v <= 32 and 32 % v == 0 for v in values), values


def test_a_trial_block_widens_the_axis_it_slices_not_a_singleton_axis_of_the_tensor():
    kept = {F: OPERATOR}
    ctx = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept), _record())
    block = next(k for k in ctx.knobs if k.id == BLOCK)
    (after,) = ctx.picture.features([(block, 8)])
    (vec,) = after["vec"]
    assert vec["block"] == [8, 32, 1, 256]
    found = search(kept, stage="frontend", limit=None, run=_record(), budget_s=0.0)
    for c in found.candidates:
        tile = c.value if c.knob == TILE else (c.pair_with or {}).get("value") if c.kind == "pair" else None
        if isinstance(tile, list):
            assert tile[2] == 1, c  # the tensor's axis of 1


def test_a_cube_tile_is_prescreened_on_the_operand_dtypes_that_ran():
    # past the answer budget a candidate goes out with the fast checks only: PyPTO's FFN example got m = [8, 8] on
    # BF16 operands proposed (and refused when run) three times in one search
    import json
    from pathlib import Path

    from pypto_tune.tools.search.propose import _prescreen

    from .conftest import OPS

    kept = {"ffn_module.py": (OPS / "upstream_ffn" / "ffn_module.py").read_text()}
    probes = Path(__file__).resolve().parents[1] / "patching" / "data" / "probes"
    rec = json.loads((probes / "upstream_ffn__test_ffn_static.json").read_text())
    ctx = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept), rec)
    assert [f["operand_bytes"] for f in ctx.picture.features()] == [2]  # FP16 inputs, an FP32 output
    cube = next(k for k in ctx.knobs if k.kind == "cube_tile" and k.tunable)
    # as in PyPTO's example, where the dtypes are run-time values: only the run tells them
    cube = cube.model_copy(update={"context": {"tensor_shapes": cube.context.get("tensor_shapes", [])}})
    _, why = _prescreen(ctx, cube, {"m": [8, 8], "k": [64, 128], "n": [256, 256]})
    assert "not a multiple of 16" in why and "FP16" in why, why
    assert _prescreen(ctx, cube, {"m": [16, 16], "k": [64, 128], "n": [256, 256]})[1] == ""


def test_a_ceil_division_loop_over_the_dynamic_axis_takes_no_block_past_it():
    """PyPTO's GLM gate loops ``(bs + B - 1) // B`` times over a dynamic batch of 64 (``view_shape = (32, h)``): the
    axis is the input's first dimension, so no block past it is proposed (512 was, and ran into the 300 s timeout)."""
    ceil = OPERATOR.replace("b // tile_b", "(b + tile_b - 1) // tile_b")
    assert ceil != OPERATOR
    rec = _record()
    rec["calls"][1]["args"] = [{"$sym": "(((RUNTIME_GetInputShapeDim(ARG_x,0)+1)-1)/1)"}]
    found = search({F: ceil}, stage="frontend", limit=None, knob=BLOCK, run=rec, budget_s=0.0)
    values = [c.value for c in found.candidates if c.knob == BLOCK and c.kind != "pair"]
    assert values and all(isinstance(v, int) and 1 <= v <= 32 for v in values), values
