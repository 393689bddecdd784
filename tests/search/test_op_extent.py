"""A vector tile is clamped to the largest tensor its operations worked on, as the run recorded it.

PyPTO's FFN example (``ffn_static_relu``) tiles its activation with ``set_vec_tile_shapes(*x.shape[:2])`` over a
[16, 1024] matmul output, in a kernel without loops whose inputs are [16, 128] activations and [128, 1024] /
[1024, 128] weights. Bounded by the inputs, a tile of 32 rows looked like a change and was run: exactly the shipped
time (PyPTO clamps the 32 to the 16 rows there are). The probe now records, per vector tile call, the largest extent
of the tensors the operations under it took (``extent``), and the search counts a tile by what it covers of that.

The operator is a small one written here in that form; the record is hand-made in the form the probe writes
(tests/patching/data/probes/README.md).
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.running.probe.reader import _extent
from pypto_tune.tools.search import search
from pypto_tune.tools.search.hashing import code_hash
from pypto_tune.tools.search.priors import load_priors
from pypto_tune.tools.search.propose import _Context

from .conftest import probed_call

F = "relu_ffn.py"
OPERATOR = '''import pypto


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def relu_ffn(x: pypto.Tensor([16, 128], pypto.DT_FP16), w1: pypto.Tensor([128, 1024], pypto.DT_FP16),
             w2: pypto.Tensor([1024, 128], pypto.DT_FP16), y: pypto.Tensor([16, 128], pypto.DT_FP16)):
    pypto.set_cube_tile_shapes([16, 16], [64, 64], [64, 64])
    h = pypto.matmul(x, w1, pypto.DT_FP16)
    pypto.set_vec_tile_shapes(16, 256)
    a = pypto.maximum(h, pypto.full(h.shape, 0, h.dtype))
    pypto.assemble(pypto.matmul(a, w2, pypto.DT_FP16), [0, 0], y)
'''
KERNEL = f"{F}:5:relu_ffn"
TILE = f"{F}:relu_ffn.set_vec_tile_shapes#1"


def _call(api: str, marker: str, args: list[Any], **extra: Any) -> dict[str, Any]:
    return probed_call(OPERATOR, F, KERNEL, api, marker, args, **extra)


def _record(extent: dict[str, Any] | None) -> dict[str, Any]:
    def t(*dims: int) -> dict[str, Any]:
        return {"$tensor": list(dims), "dtype": "torch.float16"}

    vec = {"extent": extent} if extent is not None else {}
    calls = [_call("set_cube_tile_shapes", "set_cube_tile_shapes", [[16, 16], [64, 64], [64, 64]], ops=2),
             _call("set_vec_tile_shapes", "set_vec_tile_shapes", [16, 256], ops=3, **vec)]
    kernel = {"key": KERNEL, "file": F, "qualname": "relu_ffn", "name": "relu_ffn", "line": 5, "ran": True,
              "compiled": True, "inputs": [[t(16, 128), t(128, 1024), t(1024, 128), t(16, 128)]], "called_from": []}
    return {"status": "reported", "kernels": [kernel], "calls": calls,
            "traced": {F: sorted({c["line"] for c in calls})}}


def _tile_values(rec: dict[str, Any]) -> list[Any]:
    found = search({F: OPERATOR}, stage="frontend", limit=None, knob=TILE, run=rec, budget_s=0.0)
    return [c.value for c in found.candidates if c.knob == TILE]


def test_a_tile_is_bounded_by_the_tensors_its_operations_took_not_the_kernels_inputs():
    kept = {F: OPERATOR}
    ctx = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept), _record({"2": [16, 1024]}))
    (vec,) = ctx.picture.features()[0]["vec"]
    assert vec["block"] == [16, 1024] and vec["eff_tile"] == [16, 256]
    values = _tile_values(_record({"2": [16, 1024]}))
    assert values and all(v[0] <= 16 for v in values), values  # more rows than the 16 there are run as 16
    # without the extent the kernel's inputs bound it ([1024, 1024]): a tile of more rows looks like a change
    assert any(v[0] > 16 for v in _tile_values(_record(None)))


def test_an_extent_of_another_rank_or_a_run_time_dimension_bounds_nothing_it_cannot():
    kept = {F: OPERATOR}
    # operations of two ranks under one tile: how PyPTO applies it to the other rank is not read, so no bound
    mixed = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept),
                     _record({"2": [16, 1024], "1": [1024]}))
    assert mixed.picture.features()[0]["vec"][0]["block"] == [1024, 1024]
    dynamic = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept),
                       _record({"2": [None, 1024]}))
    assert dynamic.picture.features()[0]["vec"][0]["eff_tile"] == [16, 256]


def test_the_reader_keeps_only_an_extent_in_the_form_the_hook_writes():
    assert _extent({"2": [16, 1024]}) == {"2": [16, 1024]}
    assert _extent({"2": [None, 4]}) == {"2": [None, 4]}
    for bad in ({"2": [16]}, {"x": [1]}, {"1": [-3]}, {"1": [True]}, {"1": "16"}, [16], {}, None):
        assert _extent(bad) is None, bad


LOOPED = '''import pypto

ROWS = 4


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def gates(x: pypto.Tensor([32, 512], pypto.DT_FP32), y: pypto.Tensor([32, 128], pypto.DT_FP32)):
    for i in pypto.loop(32 // ROWS):
        block = pypto.view(x, [ROWS, 512], [i * ROWS, 0])
        gate = pypto.view(block, [ROWS, 128], [0, 0])
        pypto.set_vec_tile_shapes(1, 128)
        pypto.assemble(pypto.sigmoid(gate), [i * ROWS, 0], y)
'''
LOOPED_KERNEL = f"{F}:6:gates"


def _looped_record() -> dict[str, Any]:
    def call(api: str, marker: str, args: list[Any], **extra: Any) -> dict[str, Any]:
        return probed_call(LOOPED, F, LOOPED_KERNEL, api, marker, args, **extra)

    calls = [call("loop", "pypto.loop(", [8]),
             call("view", "block = pypto.view", [{"$tensor": [32, 512]}, [4, 512], [0, 0]], result_shape=[4, 512]),
             call("view", "gate = pypto.view", [{"$tensor": [4, 512]}, [4, 128], [0, 0]], result_shape=[4, 128]),
             call("set_vec_tile_shapes", "set_vec_tile_shapes", [1, 128], ops=2, extent={"2": [4, 128]})]
    t = {"$tensor": [32, 512], "dtype": "torch.float32"}
    kernel = {"key": LOOPED_KERNEL, "file": F, "qualname": "gates", "name": "gates", "line": 6, "ran": True,
              "compiled": True, "inputs": [[t, {"$tensor": [32, 128], "dtype": "torch.float32"}]], "called_from": []}
    return {"status": "reported", "kernels": [kernel], "calls": calls, "traced": {F: sorted({c["line"] for c in calls})}}


def test_in_a_loop_the_tiles_own_operations_narrow_the_block_while_no_block_moves():
    """The arctic LSTM's gate tile works on [*, 4096] slices of a [*, 16384] row block: a tile of 16384 columns runs
    as one of 4096 (29.558 µs both). The recorded extent narrows the block while the trial keeps the views as
    recorded; a trial that moves a block cannot rely on it."""
    kept = {F: LOOPED}
    ctx = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept), _looped_record())
    (vec,) = ctx.picture.features()[0]["vec"]
    assert vec["block"] == [4, 128], vec
    tile = next(k for k in ctx.knobs if k.kind == "vec_tile")
    (wide,) = ctx.picture.features([(tile, [1, 512])])[0]["vec"]
    assert wide["eff_tile"] == [1, 128]  # the same run as the kept tile
    rows = next(k for k in ctx.knobs if k.id.endswith(":ROWS"))
    moved = ctx.picture.features([(rows, 8), (tile, [1, 512])])
    assert moved is None or moved[0]["vec"][0]["block"] != [4, 128]  # the recorded extent is not used there
