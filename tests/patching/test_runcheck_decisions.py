"""Decisions of the legality gate's run-value checks (tools/patching/runcheck.py) that the mutation run of issue #16
found untested: the block-size check of a loop whose axis only the run knows, which run values a tile call's check
gets, and how an unchecked note is worded with what ran — library level, no simulator.

The operator is a small one written here: a jit kernel built by a factory, so its row count ``n = x.shape[0]`` is a
run-time value the static check cannot evaluate; the run is a hand-made probe record of the form the probe writes
(tests/patching/data/probes/README.md). Expected values come from the arithmetic the module docstring states (a
floor-division loop that ran S iterations of block b blocks an axis in [S·b, S·b + b − 1], a ceil-division loop one
in [(S − 1)·b + 1, S·b]), never from the function under test.
"""

from __future__ import annotations

from typing import Any

import pytest

from pypto_tune.tools.code.admission import Admission, admit
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.patching import runcheck
from pypto_tune.tools.patching.runmap import knob_map

F = "op.py"
KERNEL = "op.py:10:build.<locals>.kernel"
OPERATOR = '''import pypto
import torch

BLOCK = {block}
TILE = (4, 64)


def build(rows: int, cols: int, dtype):
    @pypto.frontend.jit(runtime_options={{"run_mode": pypto.RunMode.SIM}})
    def kernel(x: pypto.Tensor((rows, cols), dtype), y: pypto.Tensor((rows, cols), dtype)):
        n = x.shape[0]
{body}
    return kernel
'''


def _operator(body: str, block: int = 4) -> str:
    return OPERATOR.format(block=block, body="\n".join("        " + line for line in body.splitlines()))


def _line(text: str, marker: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def _record(text: str, calls: list[tuple[str, str, list[Any]]], inputs: list[Any] | None = None,
            dtype: str = "torch.float32", kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A probe record of one run of ``text``: each (api, a text marking its line, args) ran once in the kernel, whose
    one call got ``inputs`` (by default x and y of [96, 64]); ``kwargs``: what every recorded call got by keyword."""
    ran = [{"api": api, "args": args, "kwargs": dict(kwargs or {}), "file": F, "line": _line(text, marker),
            "kernel": KERNEL, "in_workspace": True, "stack": [], "count": 1} for api, marker, args in calls]
    if inputs is None:
        inputs = [{"$tensor": [96, 64], "dtype": dtype}, {"$tensor": [96, 64], "dtype": dtype}]
    kernel = {"key": KERNEL, "file": F, "qualname": "build.<locals>.kernel", "name": "kernel", "line": 10,
              "inputs": [inputs], "called_from": []}
    return {"status": "reported", "kernels": [kernel], "calls": ran, "traced": {F: [c["line"] for c in ran]}}


def _tensors(*shapes: list[int]) -> list[Any]:
    return [{"$tensor": list(s), "dtype": "torch.float32"} for s in shapes]


def _admit(body: str, old: int, new: int, run: dict[str, Any]) -> Admission:
    return admit({F: _operator(body, old)}, {F: _operator(body, new)}, run=run)


def _refusal(body: str, old: int, new: int, run: dict[str, Any]) -> GateRefusal:
    with pytest.raises(GateRefusal) as info:
        _admit(body, old, new, run)
    return info.value


def _loop_checks(adm: Admission) -> list[str]:
    return [c for c in adm.checked if c.startswith("the loop at ")]


def _loop(stop_args: str) -> str:
    return f'for i in pypto.loop({stop_args}, name="ROWS", idx_name="i"):\n    y[:, :] = x * 2'


# ------------------------------------------------------------------------------------ which argument is the stop


@pytest.mark.parametrize("args, ran", [
    ("n // BLOCK", [24]),  # loop(stop)
    ("0, n // BLOCK", [0, 24]),  # loop(start, stop)
    ("0, n // BLOCK, 1", [0, 24, 1]),  # loop(start, stop, step)
])
def test_the_stop_is_a_loops_only_argument_or_its_second(args: str, ran: list[int]) -> None:
    body = _loop(args)
    run = _record(_operator(body), [("loop", "pypto.loop", ran)])
    # 24 iterations of 4: the axis is in [96, 99], and x is [96, 64]
    adm = _admit(body, 4, 8, run)
    assert _loop_checks(adm) == [f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} (n // BLOCK): axis 96 "
                                 "(from the run) in 12 block(s) of 8"]
    assert not adm.unchecked  # the static note on `n // BLOCK` is the one the run check covered
    r = _refusal(body, 4, 5, run)
    assert r.rule == "legality" and "96 is not a multiple of 5: the last 1 rows would never be computed" in r.message
    assert "the run blocked an axis of 96 (24 × 4, kernel kernel)" in r.message


def test_a_trip_count_bound_to_a_name_first_is_the_same_division() -> None:
    # PyPTO's own examples write ``b_loop = b // tile_b`` and then ``pypto.loop(b_loop)``: a block larger than the
    # axis ran zero iterations and failed instead of being refused
    body = 'steps = n // BLOCK\nfor i in pypto.loop(steps, name="ROWS", idx_name="i"):\n    y[:, :] = x * 2'
    run = _record(_operator(body), [("loop", "pypto.loop", [24])])
    adm = _admit(body, 4, 8, run)
    assert _loop_checks(adm) == [f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} (steps = n // BLOCK): "
                                 "axis 96 (from the run) in 12 block(s) of 8"]
    assert "block 128 exceeds the axis length 96" in _refusal(body, 4, 128, run).message


def test_a_loop_written_with_keywords_only_keeps_its_static_note() -> None:
    body = _loop("start=0, stop=n // BLOCK, step=1")
    adm = _admit(body, 4, 8, _record(_operator(body), [("loop", "pypto.loop", [])]))
    assert not _loop_checks(adm)
    assert adm.unchecked == [f"{F}:{_line(_operator(body), 'pypto.loop')} n // BLOCK: the axis length is a run-time "
                             "value here, so whether BLOCK divides it (and leaves no row uncomputed) was not checked"]


def test_a_block_that_is_the_loops_step_not_a_divisor_of_its_stop_is_left_to_the_static_check() -> None:
    body = _loop("0, n, BLOCK")
    adm = _admit(body, 4, 8, _record(_operator(body), [("loop", "pypto.loop", [0, 96, 4])]))
    assert adm.kind == "knob" and not _loop_checks(adm) and not adm.unchecked


def test_a_trip_count_the_run_saw_only_as_a_symbol_is_read_from_the_input_the_axis_comes_from() -> None:
    # a dynamic axis: the loop ran (n/4) iterations, and n = x.shape[0] of an x the test passed as [96, 64]
    body = _loop("0, n // BLOCK, 1")
    sym = [("loop", "pypto.loop", [0, {"$sym": "(n/4)"}, 1])]
    adm = _admit(body, 4, 8, _record(_operator(body), sym))
    assert _loop_checks(adm) == [f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} (n // BLOCK): axis 96 "
                                 "(from the run) in 12 block(s) of 8"]
    assert "block 128 exceeds the axis length 96" in _refusal(body, 4, 128, _record(_operator(body), sym)).message
    # two calls at two row counts (PyPTO's dynamic.py::test_dynamic_partial runs batches of 8 and 32): the block
    # must hold at both — 8 divides 96 and 64, 32 divides 96 but not 64 (a block of 16 there ran zero iterations at
    # the batch of 8, and failed)
    two = _record(_operator(body), sym, inputs=_tensors([96, 64], [96, 64]))
    two["kernels"][0]["inputs"].append(_tensors([64, 64], [64, 64]))
    where = f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} (n // BLOCK)"
    assert _loop_checks(_admit(body, 4, 8, two)) == [f"{where}: axis 64 (from the run) in 8 block(s) of 8",
                                                     f"{where}: axis 96 (from the run) in 12 block(s) of 8"]
    msg = _refusal(body, 4, 48, two).message
    assert "64 is not a multiple of 48" in msg and "axis lengths [64, 96]" in msg, msg
    assert "block 128 exceeds the axis length 64" in _refusal(body, 4, 128, two).message


def test_a_divisor_the_server_cannot_evaluate_leaves_the_loop_listed_unchecked_never_passed_in_silence() -> None:
    # product fix (issue #16): `n // max(BLOCK, 1)` with BLOCK = 5 drops a row of 96, and was admitted with the loop
    # neither checked nor listed as unchecked
    body = _loop("0, n // max(BLOCK, 1), 1")
    adm = _admit(body, 4, 5, _record(_operator(body), [("loop", "pypto.loop", [0, 24, 1]),
                                                        ("loop", "pypto.loop", [0, 32, 1])]))  # two row counts ran
    assert not _loop_checks(adm)
    assert adm.unchecked == [f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} (n // max(BLOCK, 1)) ran {trips} "
                             "iteration(s); the server cannot evaluate its block (call of max()), so whether the new "
                             "block divides the axis it blocks was not checked" for trips in (24, 32)]


def test_every_record_of_a_loop_is_judged_on_its_own() -> None:
    body = _loop("0, n // BLOCK, 1")
    text = _operator(body)
    where = f"the loop at {F}:{_line(text, 'pypto.loop')} (n // BLOCK)"
    # pypto's own loop_unroll recorded at the same line (no such call in the text), a run that saw the trip count
    # only as a symbol, and one whose trip count fits no dimension of the kernel (25 × 4: [100, 103]) come first:
    # none of them stops the record after it
    for first in (("loop_unroll", "pypto.loop", [0, 24, 1]), ("loop", "pypto.loop", [0, {"$sym": "(n/4)"}, 1]),
                  ("loop", "pypto.loop", [0, 25, 1])):
        adm = _admit(body, 4, 8, _record(text, [first, ("loop", "pypto.loop", [0, 24, 1])]))
        judged = 2 if "$sym" in str(first) else 1  # the symbol's axis is read from the input (the test above)
        assert _loop_checks(adm) == [f"{where}: axis 96 (from the run) in 12 block(s) of 8"] * judged, first
    adm = _admit(body, 4, 8, _record(text, [("loop", "pypto.loop", [0, 25, 1]), ("loop", "pypto.loop", [0, 24, 1])]))
    assert adm.unchecked == [f"{where} ran 25 iteration(s) of 4; the server cannot tell which axis it blocks, so "
                             "whether the new block divides it was not checked"]


# ------------------------------------------------------------------------- the range a blocked axis must lie in


# (loop stop, old block, iterations the run recorded, the axis, the tensors' other dims, new block, its block count)
RANGES = [
    # floor division, S = 24, b = 4: the axis is in [96, 99] (99 rows leave 3 the old block drops; the range is
    # what the trip count allows); 95 and 100 lie just outside
    ("n // BLOCK", 4, 24, 96, [95, 100], 8, 12),
    ("n // BLOCK", 4, 24, 99, [95, 100], 9, 11),
    # ceil division, S = 13, b = 8: the axis is in [97, 104]; 96 and 105 lie just outside
    ("(n + BLOCK - 1) // BLOCK", 8, 13, 97, [96, 105], 7, 14),
    ("(n + BLOCK - 1) // BLOCK", 8, 13, 104, [96, 105], 7, 15),
]


@pytest.mark.parametrize("stop, old, trips, axis, others, new, blocks", RANGES)
def test_the_blocked_axis_is_the_one_dimension_in_the_range_the_trip_count_allows(
        stop: str, old: int, trips: int, axis: int, others: list[int], new: int, blocks: int) -> None:
    body = _loop(f"0, {stop}, 1")
    run = _record(_operator(body, old), [("loop", "pypto.loop", [0, trips, 1])],
                  inputs=_tensors([axis, 64], [others[0], others[1]]) + [2])  # and a scalar argument
    adm = _admit(body, old, new, run)
    assert _loop_checks(adm) == [f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} ({stop}): axis {axis} "
                                 f"(from the run) in {blocks} block(s) of {new}"]


def test_a_kernel_run_on_two_shapes_the_same_trip_count_allows_leaves_the_block_unchecked() -> None:
    # product fix (issue #16): the test calls the kernel on 104 rows, then on 100; 13 blocks of 8 cover both (ceil
    # division). Only the first call's tensors were read: a block of 102 was admitted on the 104-row axis although it
    # exceeds the 100-row one.
    body = _loop("0, (n + BLOCK - 1) // BLOCK, 1")
    run = _record(_operator(body, 8), [("loop", "pypto.loop", [0, 13, 1])], inputs=_tensors([104, 64]))
    run["kernels"][0]["inputs"].append(_tensors([100, 64]))
    adm = _admit(body, 8, 102, run)
    assert not _loop_checks(adm)
    where = f"the loop at {F}:{_line(_operator(body), 'pypto.loop')} ((n + BLOCK - 1) // BLOCK)"
    assert f"{where} ran 13 iteration(s) of 8; the server cannot tell which axis it blocks, so whether the new block " \
           "divides it was not checked" in adm.unchecked


def test_two_dimensions_in_the_range_leave_the_block_unchecked_naming_the_loop() -> None:
    body = _loop("0, n // BLOCK, 1")
    run = _record(_operator(body), [("loop", "pypto.loop", [0, 24, 1])], inputs=_tensors([96, 64], [97, 64]))
    adm = _admit(body, 4, 8, run)
    line = _line(_operator(body), "pypto.loop")
    assert not _loop_checks(adm)
    assert f"the loop at {F}:{line} (n // BLOCK) ran 24 iteration(s) of 4; the server cannot tell which axis it " \
           "blocks, so whether the new block divides it was not checked" in adm.unchecked


# ------------------------------------------------------------------------------------ the block the axis takes


def test_a_ceil_division_loop_takes_any_block_up_to_the_axis_even_one_that_does_not_divide_it() -> None:
    ceil = _loop("0, (n + BLOCK - 1) // BLOCK, 1")
    run = _record(_operator(ceil, 8), [("loop", "pypto.loop", [0, 13, 1])], inputs=_tensors([100, 64]))
    # 100 rows in blocks of 7: 15 blocks, the last one short (ceil division keeps it)
    assert [c.rsplit(": ", 1)[1] for c in _loop_checks(_admit(ceil, 8, 7, run))] == [
        "axis 100 (from the run) in 15 block(s) of 7"]
    assert [c.rsplit(": ", 1)[1] for c in _loop_checks(_admit(ceil, 8, 100, run))] == [
        "axis 100 (from the run) in 1 block(s) of 100"]
    r = _refusal(ceil, 8, 101, run)
    assert "block 101 exceeds the axis length 100" in r.message


@pytest.mark.parametrize("new, blocks", [(1, 96), (96, 1)])
def test_a_floor_division_block_of_one_or_of_the_whole_axis_is_legal(new: int, blocks: int) -> None:
    body = _loop("0, n // BLOCK, 1")
    adm = _admit(body, 4, new, _record(_operator(body), [("loop", "pypto.loop", [0, 24, 1])]))
    assert [c.rsplit(": ", 1)[1] for c in _loop_checks(adm)] == [f"axis 96 (from the run) in {blocks} block(s) of "
                                                                 f"{new}"]


def test_a_block_derived_below_one_is_refused() -> None:
    body = _loop("0, n // (BLOCK - 2), 1")  # BLOCK = 2 is inside its own domain, the block it gives is 0
    r = _refusal(body, 4, 2, _record(_operator(body), [("loop", "pypto.loop", [0, 48, 1])]))
    assert r.rule == "legality" and "block 0: a block must be ≥ 1" in r.message


def test_a_change_that_leaves_a_loops_block_as_it_was_adds_no_loop_check() -> None:
    body = "pypto.set_vec_tile_shapes(*TILE)\n" + _loop("0, n // TILE[0], 1")
    text = _operator(body)
    run = _record(text, [("set_vec_tile_shapes", "set_vec", [4, 64]), ("loop", "pypto.loop", [0, 24, 1])])
    narrower = admit({F: text}, {F: text.replace("TILE = (4, 64)", "TILE = (4, 32)")}, run=run)
    assert not _loop_checks(narrower)
    taller = admit({F: text}, {F: text.replace("TILE = (4, 64)", "TILE = (8, 64)")}, run=run)
    assert [c.rsplit(": ", 1)[1] for c in _loop_checks(taller)] == ["axis 96 (from the run) in 12 block(s) of 8"]


def test_a_loop_is_checked_when_the_block_also_feeds_a_cube_tile() -> None:
    body = "pypto.set_cube_tile_shapes([BLOCK, BLOCK], [32, 32], [32, 32])\n" + _loop("0, n // BLOCK, 1")
    text = _operator(body, 16)
    run = _record(text, [("set_cube_tile_shapes", "set_cube", [[16, 16], [32, 32], [32, 32]]),
                         ("loop", "pypto.loop", [0, 6, 1])], dtype="torch.float16")
    adm = _admit(body, 16, 32, run)
    assert [c.rsplit(": ", 1)[1] for c in _loop_checks(adm)] == ["axis 96 (from the run) in 3 block(s) of 32"]


# ------------------------------------------------------------------------------- the run values a tile call gets


def test_a_tile_call_is_judged_once_per_kernel_run_with_the_dtype_that_kernel_ran() -> None:
    body = "pypto.set_vec_tile_shapes(4, 64)\ny[:, :] = x * 2"
    text = _operator(body)
    run = _record(text, [("set_vec_tile_shapes", "set_vec", [4, 64])])
    adm = admit({F: text}, {F: text.replace("shapes(4, 64)", "shapes(4, 32)")}, run=run)
    assert f"{F}:build.kernel.set_vec_tile_shapes#1@kernel#1 = [4, 32] (kernel kernel ran it with [4, 64] on " \
           "[96, 64] (DT_FP32))" in adm.checked
    # the kernel's dtype is a factory parameter: only the run says fp32, and 4 × 4 B is no whole 32-byte block
    with pytest.raises(GateRefusal) as info:
        admit({F: text}, {F: text.replace("shapes(4, 64)", "shapes(4, 4)")}, run=run)
    assert "vec tile tail 4 × 4 B = 16 B is not a multiple of 32 B" in info.value.message


def test_a_source_whose_value_at_a_tile_call_that_ran_cannot_be_derived_is_refused() -> None:
    body = "pypto.set_vec_tile_shapes(min(TILE[0], rows), TILE[1])\ny[:, :] = x * 2"
    text = _operator(body)
    run = _record(text, [("set_vec_tile_shapes", "set_vec", [4, 64])])
    with pytest.raises(GateRefusal) as info:
        admit({F: text}, {F: text.replace("TILE = (4, 64)", "TILE = (8, 64)")}, run=run)
    assert info.value.rule == "legality"
    assert f"{F}:build.kernel.set_vec_tile_shapes#1 ran with [4, 64] (kernel kernel); the server cannot tell what " \
           f"{F}:TILE = [8, 64] gives there" in info.value.message


def test_a_tile_call_the_changed_knob_does_not_feed_keeps_what_it_ran_even_when_its_text_cannot_be_read() -> None:
    # the tile call's rows depend on a factory parameter: only the run knows them; BLOCK feeds the loop, not the call
    body = "pypto.set_vec_tile_shapes(min(4, rows), 64)\n" + _loop("0, n // BLOCK, 1")
    run = _record(_operator(body), [("set_vec_tile_shapes", "set_vec", [4, 64]), ("loop", "pypto.loop", [0, 24, 1])])
    adm = _admit(body, 4, 8, run)
    assert adm.kind == "knob" and not adm.unchecked
    assert not any("set_vec_tile_shapes" in c for c in adm.checked)  # unchanged: nothing to judge


def test_only_tile_calls_are_judged_per_kernel_run_a_loop_option_under_its_own_id() -> None:
    body = _loop('0, n // 4, 1, unroll_list=[4]')
    text = _operator(body)
    run = _record(text, [("loop", "pypto.loop", [0, 24, 1])], kwargs={"unroll_list": [4]})
    adm = admit({F: text}, {F: text.replace("unroll_list=[4]", "unroll_list=[8]")}, run=run)
    option = f"{F}:build.kernel.loop[ROWS].unroll_list"
    assert adm.change.knob_id == option
    assert not any("@kernel#" in c for c in adm.checked) and f"{option} = [8]" in adm.checked


# ------------------------------------------------------------------------------------------- the unchecked notes


def _run_map(body: str, ran_markers: list[str], reported: bool = True) -> tuple[Any, str]:
    text = _operator(body)
    run = _record(text, [("loop", m, [0, 24, 1]) for m in ran_markers]) if reported else None
    return knob_map({F: text}, {}, run), text


TWO_LOOPS = _loop("0, n // BLOCK, 1") + "\nif n > 4096:\n" + "\n".join(
    "    " + line for line in _loop('0, n // BLOCK, 2').splitlines())


def test_an_unchecked_note_on_a_line_that_never_ran_says_so_and_one_the_run_check_covered_is_dropped() -> None:
    rm, text = _run_map(TWO_LOOPS, ["pypto.loop(0, n // BLOCK, 1"])
    ran, never = _line(text, "pypto.loop(0, n // BLOCK, 1"), _line(text, "pypto.loop(0, n // BLOCK, 2")
    covered = f"{F}:{ran} n // BLOCK: the axis length is a run-time value here"
    other = f"{F}:{never} n // BLOCK: the axis length is a run-time value here"
    named = f"{F}:BLOCK = RUN.value: names something the server cannot evaluate"
    checked = [f"the loop at {F}:{ran} (n // BLOCK): axis 96 (from the run) in 12 block(s) of 8"]
    assert runcheck.annotate_unchecked(rm, [covered, other, named], checked) == [
        other + " (this line never ran in this test)", named]
    # a note on a line that ran is kept as it is when no run check covered it
    assert runcheck.annotate_unchecked(rm, [covered], []) == [covered]


def test_without_a_reported_run_the_unchecked_notes_are_kept_as_they_are() -> None:
    rm, text = _run_map(TWO_LOOPS, [], reported=False)
    notes = [f"{F}:{_line(text, 'pypto.loop(0, n // BLOCK, 2')} n // BLOCK: the axis length is a run-time value"]
    assert runcheck.annotate_unchecked(rm, notes, []) == notes


# ------------------------------------------------------------------------------- the valid part of a view (I-9)

# The block is a run-time value (a 24th of the rows) of a ceil-division loop; the view's valid part is written on
# its second line, the tail as an expression of the loop index (PyPTO's dynamic_mul). The run recorded the view at
# its first line, [4, 64].
VALID_BODY = '''blk = n // 24
for i in pypto.loop((n + blk - 1) // blk, name="ROWS", idx_name="i"):
    lo = i * blk
    hi = pypto.min(lo + blk, n)
    part = pypto.view(x, [blk, 64], [lo, 0],
                      valid_shape=[hi - lo, 64])
    pypto.assemble(part * 2, [lo, 0], y)'''


def _view_change(body: str, old: str, new: str, valid_ran: list[Any], recorded: list[Any] | None = None
                 ) -> Admission:
    """``old`` → ``new`` in the kernel ``body``, judged on a run whose view ran ``recorded`` (default [4, 64]) long
    with the valid part ``valid_ran``."""
    before = _operator(body)
    after = before.replace(old, new)
    assert after != before
    view = [{"$tensor": [96, 64], "dtype": "torch.float32"}, recorded or [4, 64], [{"$sym": "(i*4)"}, 0]]
    run = _record(before, [("view", "part = pypto.view", view)], kwargs={"valid_shape": valid_ran})
    return admit({F: before}, {F: after}, run=run)


def _valid_change(new: str, recorded: list[Any] | None = None) -> Admission:
    return _view_change(VALID_BODY, "valid_shape=[hi - lo, 64]", f"valid_shape={new}",
                        [{"$sym": "(RUNTIME_Min(((i*4)+4), 96)-(i*4))"}, 64], recorded)


@pytest.mark.parametrize("new, why", [
    ("[1, 64]", "a constant valid extent of 1 along axis 0 computes 1 of its 4 on every block"),
    ("[8, 64]", "a constant valid extent of 8 along axis 0 claims 8 valid of a view of 4"),
    # along the axis no loop moves the static rule answers first, on the code
    ("[hi - lo, 32]", "its valid_shape there (32) is no longer its extent (64)"),
])
def test_a_constant_valid_extent_other_than_the_views_as_it_ran_is_refused(new: str, why: str) -> None:
    with pytest.raises(GateRefusal) as info:
        _valid_change(new)
    assert info.value.rule == "legality" and why in info.value.message, info.value.message
    assert "ran with shape [4, 64]" in info.value.message or "no loop moves" in info.value.message


@pytest.mark.parametrize("new", ["[hi - lo - 1, 64]", "[pypto.min(1, hi - lo), 64]", "[lo + 1 - lo, 64]"])
def test_a_new_valid_expression_is_refused_it_cannot_be_evaluated_before_the_run(new: str) -> None:
    with pytest.raises(GateRefusal) as info:
        _valid_change(new)
    # a call in the value is code, not data (the one-change gate); arithmetic is data the legality gate judges
    assert ("an expression the server cannot evaluate before the run" in info.value.message
            or "is code, not data" in info.value.message), info.value.message


def test_the_views_own_extent_is_admitted_as_a_constant_or_as_its_code() -> None:
    as_ran = _valid_change("[4, 64]")
    assert f"{F}:{_line(_operator(VALID_BODY), 'part = pypto.view')} valid extent 4 is the view's along axis 0 " \
           "(kernel kernel, from the run)" in as_ran.checked, as_ran.checked
    as_code = _valid_change("[blk, 64]")
    assert any("valid extent along axis 0 is the view's own (blk)" in c for c in as_code.checked), as_code.checked


def test_a_view_whose_extent_ran_as_a_symbol_leaves_a_constant_valid_extent_unchecked_and_says_so() -> None:
    adm = _valid_change("[4, 64]", recorded=[{"$sym": "RUNTIME_GetInputShapeDim(ARG_x,0)"}, 64])
    assert any("a run-time value, so whether 4 is that extent was not checked" in u for u in adm.unchecked), \
        adm.unchecked


# A local list the view's valid part is read from: the same part, spelled through a name (a local's change, not a
# valid_shape's, so only what the name feeds can judge it)
NAMED_VALID_BODY = '''blk = n // 24
for i in pypto.loop((n + blk - 1) // blk, name="ROWS", idx_name="i"):
    vs = [4, 64]
    part = pypto.view(x, [blk, 64], [i * blk, 0], valid_shape=vs)
    pypto.assemble(part * 2, [i * blk, 0], y)'''


def _named_valid_change(new: str) -> Admission:
    return _view_change(NAMED_VALID_BODY, "vs = [4, 64]", f"vs = {new}", [4, 64])


@pytest.mark.parametrize("new, why", [
    ("[1, 64]", "along axis 0: it computes 1 of its 4 on every block, the rest would never be computed"),
    ("[4, 32]", "along axis 1: it computes 32 of its 64 on every block, the rest would never be computed"),
    ("[8, 64]", "along axis 0: it claims 8 valid of a view of 4: past the view"),
])
def test_a_name_the_valid_part_is_read_from_is_judged_as_that_valid_part(new: str, why: str) -> None:
    with pytest.raises(GateRefusal) as info:
        _named_valid_change(new)
    assert info.value.rule == "legality" and "is the valid part of the view at" in info.value.message
    assert why in info.value.message, info.value.message


def test_a_loop_over_a_run_time_bound_is_counted_on_the_shapes_each_call_passed():
    """pypto gives the probe a dynamic loop's bound as its symbolic expression over the kernel's inputs; PyPTO's
    ``kernel_input.py`` loops ``(bs + tile - 1) // tile`` times over a batch of 8 in blocks of 8 — once — and a test
    that calls the kernel at two batches runs the loop at each."""
    from types import SimpleNamespace

    from pypto_tune.tools.patching.runcheck import trips_as_ran

    src = "import pypto\n\n\n@pypto.frontend.jit()\ndef attn(q, k, out, tile: int):\n    pass\n"
    q = lambda b: {"$tensor": [b, 8, 64, 64], "dtype": "torch.float32"}  # noqa: E731
    kernel = {"key": "a.py:4:attn", "file": "a.py", "line": 4, "name": "attn",
              "inputs": [[q(8), q(8), q(8), 8], [q(20), q(20), q(20), 8]]}
    run = SimpleNamespace(files={"a.py": src}, kernels={kernel["key"]: kernel})
    bound = {"$sym": "(((RUNTIME_GetInputShapeDim(ARG_q,0)+8)-1)/8)"}
    assert trips_as_ran(run, {"api": "loop", "args": [bound], "kernel": kernel["key"]}) == [1, 3]
    assert trips_as_ran(run, {"api": "loop", "args": [0, bound, 1], "kernel": kernel["key"]}) == [1, 3]
    assert trips_as_ran(run, {"api": "loop", "args": [4], "kernel": kernel["key"]}) is None  # the record says it
    unknown = {"$sym": "RUNTIME_GetTensorData(ARG_k,0)"}  # a value of the data: nothing to evaluate before the run
    assert trips_as_ran(run, {"api": "loop", "args": [unknown], "kernel": kernel["key"]}) is None
    # the record is an output of the run: a bound that is no plain arithmetic costs the server nothing
    for forged in ("9**9**9**9", "(" * 300 + "1" + ")" * 300, "__import__('os')"):
        assert trips_as_ran(run, {"api": "loop", "args": [{"$sym": forged}], "kernel": kernel["key"]}) is None


@pytest.mark.parametrize(("bounds", "trips"), [
    ([8], 8), ([0], 0), ([2, 10], 8), ([0, 10, 3], 4), ([10, 2], 0),  # a loop that never runs has no iteration
    ([0, 10, 0], None), ([0, 10, -1], None),  # a step that never gets there is no count
    ([{"$sym": "N"}], None), ([True], None), ([], None), ([1, 2, 3, 4], None), ("8", None),
])
def test_one_reading_of_a_loops_trip_count_from_its_bounds(bounds: Any, trips: int | None) -> None:
    from pypto_tune.tools.patching.legality import loop_trips

    assert loop_trips(bounds) == trips
