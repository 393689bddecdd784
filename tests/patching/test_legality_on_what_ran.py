"""Legality on what ran: a vector tile is sized with the dtype its operations hold after ``pypto.cast``, and "live"
means executed at the test's shapes, not merely traced.

Expected values are read off the operator texts written here and in ``tests/knob_operators.py``: the unified buffer
takes a tile of at most 96 KB (``UB_TILE_MAX_BYTES``); an FP16 [64, 1024] tensor cast to FP32 takes 4 bytes per element
in it, so [32, 1024] is 128 KB (measured in SIM: ``Errcode: FFFFFF``) while [16, 1024] is 64 KB (runs). At 64 rows a
``loop_unroll`` with the list [2, 1] runs its factor-2 variant 32 times and never its factor-1 variant.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.patching import extract_knobs, plan_knob_edit
from pypto_tune.tools.patching.effective import UB_TILE_MAX_BYTES
from pypto_tune.tools.patching.runmap import knob_map
from tests.knob_operators import ROWS_FILE, ROWS_OP, WRITE_OP, line_of, probe_run, write_rows_op

CAST_OP = '''import pypto

ROWS, COLS = 64, 1024
TILE = [16, 1024]


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def cast_kernel(x: pypto.Tensor((ROWS, COLS), pypto.DT_FP16), y: pypto.Tensor((ROWS, COLS), pypto.DT_FP16)):
    pypto.set_vec_tile_shapes(*TILE)
    xf = pypto.cast(x, pypto.DT_FP32)
    y[:] = pypto.cast(pypto.exp(xf) + xf, pypto.DT_FP16)
'''
NO_CAST_OP = CAST_OP.replace("xf = pypto.cast(x, pypto.DT_FP32)", "xf = x").replace(
    "pypto.cast(pypto.exp(xf) + xf, pypto.DT_FP16)", "pypto.exp(xf) + xf")


# PyPTO's attention examples transpose the key under a [b, h, s, d] tile: the transposed tile is held whole, its new
# tail of s elements padded to 64 bytes (measured: [8, 8, 4, 64] allocated 262144 B and did not compile)
TRANSPOSE_OP = '''import pypto

B, H, S, D = 8, 8, 64, 64
TILE = [1, 8, 16, 64]


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def key_kernel(k: pypto.Tensor((B, H, S, D), pypto.DT_FP32), out: pypto.Tensor((B, H, D, S), pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(*TILE)
    out[:] = pypto.transpose(k, 2, 3)
'''


def _admit(text: str, file: str, knob: str, value, run=None):
    kept = {file: text}
    return admit(kept, plan_knob_edit(kept, knob, value).new_sources, run=run)


def test_a_tile_is_sized_with_the_dtype_its_cast_produces():
    assert 32 * 1024 * 4 > UB_TILE_MAX_BYTES >= 16 * 1024 * 4 and 32 * 1024 * 2 <= UB_TILE_MAX_BYTES
    with pytest.raises(GateRefusal) as refused:
        _admit(CAST_OP, "cast_op.py", "cast_op.py:TILE", [32, 1024])
    assert "128 KB" in refused.value.message and "DT_FP32" in refused.value.message
    assert _admit(CAST_OP, "cast_op.py", "cast_op.py:TILE", [32, 512]).kind == "knob"  # 64 KB of FP32
    # stricter only where a cast is: the same kernel on FP16 throughout holds [32, 1024] in 64 KB
    assert _admit(NO_CAST_OP, "cast_op.py", "cast_op.py:TILE", [32, 1024]).kind == "knob"


def test_the_tail_rule_keeps_the_tensors_own_dtype():
    # 8 FP16 elements are 16 bytes: a cast to FP32 downstream does not make the FP16 tensor's tail whole
    for text in (CAST_OP, NO_CAST_OP):
        with pytest.raises(GateRefusal) as refused:
            _admit(text, "cast_op.py", "cast_op.py:TILE", [64, 8])
        assert "tail 8 × 2 B = 16 B" in refused.value.message


@pytest.fixture(scope="module")
def rows_run(tmp_path_factory) -> tuple[str, dict, list[Path], list[Path]]:
    """The rows operator run once with the probe and once without (the same bytes)."""
    probed = write_rows_op(tmp_path_factory.mktemp("probed"))
    plain = write_rows_op(tmp_path_factory.mktemp("plain"))
    record, dirs = probe_run(probed)
    _, plain_dirs = probe_run(plain, probed=False)
    return ROWS_OP, record, dirs, plain_dirs


@pytest.mark.sim
def test_the_probe_records_unroll_variants_and_changes_nothing_the_run_computes(rows_run):
    from pypto_tune.tools.analysis import analyze_runs
    from pypto_tune.tools.running.run_outputs import program_sources

    text, record, dirs, plain_dirs = rows_run
    probed, plain = analyze_runs(dirs, run_mode="sim"), analyze_runs(plain_dirs, run_mode="sim")
    assert probed.operator_time_us == plain.operator_time_us
    assert [d.task_count for d in probed.per_dir] == [d.task_count for d in plain.per_dir]
    assert record["status"] == "reported" and not record["faults"]

    loop_line = line_of(text, "pypto.loop_unroll(")
    variants = {(u["factor"], u["iterations"]) for c in record["calls"] for u in c["unroll"]
                if (u["file"], u["line"]) == (ROWS_FILE, loop_line)}
    assert variants == {(2, 32), (1, 0)}  # 64 rows: 32 blocks of 2, nothing left for the factor 1
    # nor what the compiled program says about its sources: pypto names the frame that calls an op, and a wrapper
    # around one (a cast) had become that frame, leaving a kernel no source of the workspace to be checked against
    for d in dirs:
        named = program_sources(d / "program.json")
        assert any(n.endswith("/" + ROWS_FILE) for n in named) and not any("pypto_tune_probe" in n for n in named)


@pytest.mark.sim
def test_live_means_executed_at_the_tests_shapes(rows_run):
    text, record, _, _ = rows_run
    rm = knob_map({ROWS_FILE: text}, None, record)
    by_id = {s.knob.id: s for s in rm.sites}
    scale = "rows_op.py:build_scale.scale_kernel."
    only_traced = rm.of(by_id[scale + "set_vec_tile_shapes#2"])  # under `if n == 1:`
    assert only_traced.live is False and "never execute" in only_traced.why and "factor 1" in only_traced.why
    assert scale + "set_vec_tile_shapes#2" in rm.dead_ids()
    # the call every variant reaches ran with the values of the variant that executed only
    both = rm.of(by_id[scale + "set_vec_tile_shapes#1"])
    assert both.live is True and both.effective == [[2, 512]]
    loop = rm.of(by_id[scale + "loop_unroll[ROW_BLOCKS].unroll_list"])
    assert loop.live is True and loop.effective == [[2, 1]]
    assert "2 (32 iterations)" in loop.unroll and "1 traced and compiled, never executed" in loop.unroll
    config = rm.of(by_id["rows_op.py:test_rows.RowsConfig(unroll_list)"])
    assert config.live is True and "2 (32 iterations)" in config.unroll
    # legality still judges every variant that compiled
    assert {tuple(e.value) for e in rm.executions(by_id[scale + "set_vec_tile_shapes#1"])} == {(2, 512)}
    assert len(rm.executions(by_id[scale + "set_vec_tile_shapes#1"])) == 2


@pytest.mark.sim
def test_the_admission_judges_the_tile_with_the_dtypes_that_ran(rows_run):
    text, record, _, _ = rows_run
    rm = knob_map({ROWS_FILE: text}, None, record)
    kernel = next(k for k in rm.kernels.values() if k["name"] == "sigmoid_kernel")
    assert rm.cast_dtypes(kernel["key"]) == ["DT_FP16", "DT_FP32"]
    with pytest.raises(GateRefusal) as refused:
        _admit(text, ROWS_FILE, "rows_op.py:TILE", [32, 1024], run=record)
    assert "128 KB" in refused.value.message and "DT_FP32" in refused.value.message
    assert _admit(text, ROWS_FILE, "rows_op.py:TILE", [16, 1024], run=record).kind == "knob"
    # a site only a never-executed variant reaches is dead: a change there would not run
    with pytest.raises(GateRefusal) as dead:
        _admit(text, ROWS_FILE, "rows_op.py:build_scale.scale_kernel.set_vec_tile_shapes#2", [1, 512], run=record)
    assert "live-site" in dead.value.message or "never" in dead.value.message


def test_a_tile_is_sized_as_the_kernel_transposes_it():
    knob = "key_op.py:TILE"
    with pytest.raises(GateRefusal) as refused:
        _admit(TRANSPOSE_OP, "key_op.py", knob, [8, 8, 4, 64])  # 32 KB as read; 8·8·64·16 FP32 = 256 KB transposed
    assert "transposed by pypto.transpose at line 10" in refused.value.message and "256 KB" in refused.value.message
    with pytest.raises(GateRefusal):
        _admit(TRANSPOSE_OP, "key_op.py", knob, [4, 8, 8, 64])  # 128 KB transposed (measured: does not compile)
    assert _admit(TRANSPOSE_OP, "key_op.py", knob, [2, 8, 4, 64]).kind == "knob"  # 64 KB transposed (compiles)
    # a transpose that leaves the tail where it is costs no more than the tile
    heads = TRANSPOSE_OP.replace("pypto.transpose(k, 2, 3)", "pypto.transpose(k, 1, 2)").replace(
        "(B, H, D, S), pypto.DT_FP32)", "(B, S, H, D), pypto.DT_FP32)")
    assert _admit(heads, "key_op.py", knob, [8, 8, 4, 64]).kind == "knob"


# PyPTO's dynamic attention: the heads come from a config object, a run-time value to the server, and the view that
# the batch loop moves is whole along them
CONFIG_HEADS_OP = '''import pypto


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def heads_kernel(x: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32),
                 out: pypto.Tensor([pypto.DYNAMIC, ...], pypto.DT_FP32), cfg):
    pypto.set_vec_tile_shapes(1, 4, 16, 64)
    heads = cfg.num_heads
    tile = 2
    b = x.shape[0]
    for idx in pypto.loop((b + tile - 1) // tile):
        lo = idx * tile
        hi = pypto.min(lo + tile, b)
        part = pypto.view(x, [tile, heads, 16, 64], [lo, 0, 0, 0], valid_shape=[hi - lo, heads, 16, 64])
        pypto.assemble(part + 1.0, [lo, 0, 0, 0], out)
'''


def test_the_valid_part_of_a_view_no_loop_moves_is_the_whole_view_even_when_its_extent_is_a_run_time_value():
    knob = "heads_op.py:heads_kernel.view#1.valid_shape"
    lo = {"$expr": "hi - lo"}
    with pytest.raises(GateRefusal) as refused:
        _admit(CONFIG_HEADS_OP, "heads_op.py", knob, [lo, 2, 16, 64])
    assert "its valid_shape there (2) is no longer its extent (heads)" in refused.value.message
    with pytest.raises(GateRefusal) as refused:
        _admit(CONFIG_HEADS_OP, "heads_op.py", knob, [lo, {"$expr": "heads"}, 16, 32])  # half of each row
    assert "its valid_shape there (32) is no longer its extent (64)" in refused.value.message
    # along the axis the loop moves, the valid part is the tail block's business (here the block itself)
    assert _admit(CONFIG_HEADS_OP, "heads_op.py", knob, [2, {"$expr": "heads"}, 16, 64]).kind == "knob"


# the same view with its fixed offset spelled through a name: the knob list says so (a name passed as written into
# a view's or assemble's offsets is no tile), and the admission, which evaluates the offset, refuses it as well
NAMED_ORIGIN_OP = '''import pypto

ORIGIN = 0


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def heads_kernel(x: pypto.Tensor((4, 8, 16, 64), pypto.DT_FP32), out: pypto.Tensor((4, 8, 16, 64), pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 4, 16, 64)
    heads = 8
    for idx in pypto.loop(4):
        part = pypto.view(x, [1, heads, 16, 64], [idx, ORIGIN, 0, 0])
        pypto.assemble(part + 1.0, [idx, 0, 0, 0], out)
'''


def test_a_view_no_loop_moves_keeps_its_offset_and_extent():
    with pytest.raises(GateRefusal) as refused:
        _admit(NAMED_ORIGIN_OP, "heads_op.py", "heads_op.py:heads_kernel.heads", 2)
    assert "spans axis 1 from a fixed offset (extent heads 8 → 2)" in refused.value.message, refused.value.message
    origin = next(k for k in extract_knobs({"heads_op.py": NAMED_ORIGIN_OP}) if k.id == "heads_op.py:ORIGIN")
    assert not origin.tunable and any("a fixed offset of pypto.view" in u for u in origin.context["problem_uses"])
    with pytest.raises(GateRefusal) as refused:  # written by hand, as a diff would
        admit({"heads_op.py": NAMED_ORIGIN_OP},
              {"heads_op.py": NAMED_ORIGIN_OP.replace("ORIGIN = 0\n", "ORIGIN = 4\n")})
    assert refused.value.rule in ("one-change", "legality"), refused.value


def test_an_assemble_offset_no_loop_moves_stays_where_it_writes():
    knob = next(k for k in extract_knobs({"write_op.py": WRITE_OP}) if k.id == "write_op.py:COLS")
    assert knob.tunable  # it sets the tile: a knob, computed into the offset
    with pytest.raises(GateRefusal) as refused:
        _admit(WRITE_OP, "write_op.py", "write_op.py:COLS", 32)
    assert "writes axis 1 at a fixed offset (COLS * 1: 64 → 32)" in refused.value.message, refused.value.message
    # the loop's own offset moves with its index: a block, not a fixed write
    assert _admit(WRITE_OP.replace("COLS * 1]", "0]"), "write_op.py", "write_op.py:COLS", 32).kind == "knob"
