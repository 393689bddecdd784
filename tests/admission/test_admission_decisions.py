"""Decisions of the admission gate (tools/code/admission.py, tools/patching/runcheck.py) that the full mutation run
(benchmarks/mutation.py, issue #16) found untested — library level, no simulator.

Expected values come from the fixture operator's own text (which line holds which statement) and from the rules as
the module docstrings and the README state them; never from the function under test.
"""

from __future__ import annotations

import re

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal, InputError
from tests.report.ledger_rows import SOFTMAX

F = "softmax.py"


def _refused(after_text: str, before_text: str = SOFTMAX) -> GateRefusal:
    with pytest.raises(GateRefusal) as info:
        admit({F: before_text}, {F: after_text})
    return info.value


def _line_of(text: str, stmt: str) -> int:
    """1-based line of the one line of ``text`` that holds ``stmt``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == stmt]
    assert len(hits) == 1, (stmt, hits)
    return hits[0]


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


# ------------------------------------------------------------------------------------------------ what is named


def test_a_refusal_names_each_of_two_separate_edited_lines() -> None:
    after = _edit(_edit(SOFTMAX, "pypto.exp(xv - row_max)", "pypto.exp(xv)"), "torch.manual_seed(0)",
                  "torch.manual_seed(1)")
    r = _refused(after)
    assert r.rule == "one-change"
    for stmt in ("e = pypto.exp(xv)", "torch.manual_seed(1)"):
        assert f"line {_line_of(after, stmt)} changed: {stmt}" in r.message, r.message


def test_a_refusal_names_an_added_statement_inside_the_kernel_loop() -> None:
    after = _edit(SOFTMAX, "        s = pypto.sum(e, -1, keepdim=True)\n",
                  "        s = pypto.sum(e, -1, keepdim=True)\n        s = s * 1.0\n")
    r = _refused(after)
    assert f"line {_line_of(after, 's = s * 1.0')} added: s = s * 1.0" in r.message, r.message
    assert "changed" not in r.message  # the loop around it is the same loop


def test_a_refusal_names_a_removed_statement_and_where_it_was() -> None:
    after = _edit(SOFTMAX, "        torch.manual_seed(0)\n", "")
    r = _refused(after)
    near = _line_of(after, "x = torch.randn(B, N, D, dtype=torch.float32)")  # what now stands in its place
    assert f"1 statement(s) removed near line {near}: 'torch.manual_seed(0)'" in r.message, r.message


def test_a_changed_loop_header_is_named_as_the_loop_line() -> None:
    after = _edit(SOFTMAX, 'name="LOOP_B", idx_name="b"', 'name="LOOP_X", idx_name="b"')
    r = _refused(after)
    head = 'for b in pypto.loop(B // TILE_B, name="LOOP_X", idx_name="b"):'
    assert f"line {_line_of(after, head)} changed: {head}" in r.message, r.message


def test_one_statement_replaced_by_two_names_both() -> None:
    after = _edit(SOFTMAX, "        torch.manual_seed(0)\n", "        torch.manual_seed(1)\n        torch.manual_seed(2)\n")
    r = _refused(after)
    for stmt in ("torch.manual_seed(1)", "torch.manual_seed(2)"):
        assert f"line {_line_of(after, stmt)} changed: {stmt}" in r.message, r.message


def test_a_statement_removed_at_the_end_of_a_block_is_placed_near_the_block_s_new_last_line() -> None:
    after = _edit(SOFTMAX, "        y[b * TILE_B:(b + 1) * TILE_B, :, :] = e / s\n", "")
    r = _refused(after)
    near = _line_of(after, "s = pypto.sum(e, -1, keepdim=True)")  # now the loop's last statement
    assert f"1 statement(s) removed near line {near}: 'y[b * TILE_B:(b + 1) * TILE_B, :, :] = e / s'" in r.message, \
        r.message


def test_among_many_identical_statements_only_the_edited_ones_are_named() -> None:
    """A file of 250 equal statements with two of them edited: the line-finder matches the equal ones between the
    edits too (difflib's "popular element" heuristic, which would leave them unmatched past 200 items and name the
    hundred statements between the edits as changed, is off), so the two edits are the two lines named."""
    before = _edit(SOFTMAX, "\nif __name__", "print(0)\n" * 250 + "\nif __name__")
    lines = before.split("\n")
    at = [i for i, line in enumerate(lines) if line == "print(0)"]
    lines[at[100]], lines[at[200]] = "print(1)", "print(2)"
    r = _refused("\n".join(lines), before)
    named = r.message.removeprefix("the change is not a knob change: ").split("; ")
    assert [re.sub(r" (added|changed):", ":", n) for n in named] == [
        f"{F}: line {at[100] + 1}: print(1)", f"{F}: line {at[200] + 1}: print(2)"], r.message


def test_a_file_changed_only_in_a_comment_is_recorded_as_formatting_beside_the_knob_change() -> None:
    adm = admit({F: SOFTMAX, "helper.py": "X = 1\n"},
                {F: _edit(SOFTMAX, "\nTILE_B = 4\n", "\nTILE_B = 2\n"), "helper.py": "X = 1  # why X is 1\n"})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B"
    assert adm.formatting_files == ["helper.py"]


# ------------------------------------------------------------------------------------------------ a value is data


@pytest.mark.parametrize("value", ["min(4, 8)", "max(2, 8) // 2", "2 * 4", "-(-8)"])
def test_a_tile_value_of_literals_arithmetic_and_min_max_is_data(value: str) -> None:
    after = _edit(SOFTMAX, "set_vec_tile_shapes(1, 4, 256)", f"set_vec_tile_shapes(1, {value}, 256)")
    adm = admit({F: SOFTMAX}, {F: after})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id.endswith("set_vec_tile_shapes#1")


@pytest.mark.parametrize("value", ['len("abcd")', "max(4, 8, key=abs)", "pypto.ceil(8)", "(lambda: 8)()",
                                   "abs(-8)", "8 if B else 4", "(n := 8)", "[4, 8][1]"])
def test_a_tile_value_that_runs_code_is_refused_as_code(value: str) -> None:
    """admission docstring: the new value is data — literals and arithmetic over names, min()/max() of them — never
    a call or anything else that runs code."""
    after = _edit(SOFTMAX, "set_vec_tile_shapes(1, 4, 256)", f"set_vec_tile_shapes(1, {value}, 256)")
    r = _refused(after)
    assert r.rule == "one-change" and "is code, not data" in r.message, r.message


# ------------------------------------------------------------------------------------------------ what runs is what is compared

JIT = '@pypto.frontend.jit(runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128})'
TILE_B_2 = ("\nTILE_B = 4\n", "\nTILE_B = 2\n")  # a legal knob change to go with each case


def _with_knob(text: str) -> str:
    return _edit(text, *TILE_B_2)


def _debug(value: str) -> str:
    return _with_knob(_edit(SOFTMAX, JIT, JIT[:-1] + f", debug_options={value})"))


@pytest.mark.parametrize("value", ['{"runtime_debug_mode": 0}', '{"runtime_debug_mode": 3}',
                                   "dict(runtime_debug_mode=0)", "dict(runtime_debug_mode=3)"])
def test_runtime_debug_mode_zero_to_three_rides_along_as_the_debug_switch(value: str) -> None:
    adm = admit({F: SOFTMAX}, {F: _debug(value)})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B"


@pytest.mark.parametrize("value", ['{"runtime_debug_mode": 4}', '{"runtime_debug_mode": -1}',
                                   '{"runtime_debug_mode": True}', '{"runtime_debug_mode": 1.0}',
                                   "dict(runtime_debug_mode=4)", "dict(runtime_debug_mode=7)",
                                   "dict(runtime_debug_mode=-1)", "dict(runtime_debug_mode=True)"])
def test_runtime_debug_mode_outside_zero_to_three_is_refused_in_either_spelling(value: str) -> None:
    """The debug switch is stripped before comparison, so its value must be a plain integer 0–3 (admission
    ``_check_bytes``). ``dict(runtime_debug_mode=7)`` was admitted (the keyword spelling had no bound): fixed."""
    r = _refused(_debug(value))
    assert r.rule == "one-change" and "runtime_debug_mode" in r.message and "0–3" in r.message, r.message


@pytest.mark.parametrize(("header", "refused"), [
    ("# coding: latin-1\n# plain\n", "latin-1"),
    ("#!/usr/bin/env python\n# -*- coding: unicode_escape -*-\n", "unicode_escape"),
    ("#!/usr/bin/env python\n# plain\n# coding: latin-1\n", None),  # line 3: Python ignores it, so may we
    ("# -*- coding: utf-8 -*-\n# plain\n", None), ("# vim: set fileencoding=utf8 :\n# plain\n", None)])
def test_an_encoding_other_than_utf8_in_the_first_two_lines_is_refused(header: str, refused: str | None) -> None:
    """Python honours a coding declaration in line 1 or 2 only; any but UTF-8 would make it read the file otherwise
    than the UTF-8 text the server compares. The refusal names the encoding declared."""
    before = "#!/usr/bin/env python\n# plain\n" + SOFTMAX
    after = _with_knob(header + SOFTMAX)
    if refused:
        r = _refused(after, before)
        assert r.rule == "one-change" and f"declares the source encoding {refused!r}" in r.message, r.message
    else:
        adm = admit({F: before}, {F: after})
        assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B"


def test_a_dict_key_given_twice_is_refused_unless_the_recorded_code_already_had_it() -> None:
    """The second entry wins at run time while the extractor saw one knob: a NEW duplicate key is refused; one the
    recorded code already had is the operator's own (not this change's) and does not block a knob change."""
    twice = '"stitch_function_max_num": 128, "stitch_function_max_num": 256})'
    dup = _edit(SOFTMAX, '"stitch_function_max_num": 128})', twice)
    r = _refused(_with_knob(dup))
    assert r.rule == "one-change" and "'stitch_function_max_num' twice" in r.message
    jit_line = next(i + 1 for i, line in enumerate(dup.splitlines()) if twice in line)
    assert f"line {jit_line} gives the dict key" in r.message, r.message
    adm = admit({F: dup}, {F: _with_knob(dup)})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B"
    # the keyword spelling parses (only compiling it fails), so it is refused the same way
    kw = _edit(SOFTMAX, 'runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128}',
               "runtime_options=dict(run_mode=RUN_MODE, stitch_function_max_num=128, stitch_function_max_num=256)")
    r = _refused(_with_knob(kw))
    assert r.rule == "one-change" and "'stitch_function_max_num' twice" in r.message, r.message


def test_of_two_keys_given_twice_the_refusal_names_the_first() -> None:
    twice = ('runtime_options={"run_mode": RUN_MODE, "run_mode": RUN_MODE, "stitch_function_max_num": 128, '
             '"stitch_function_max_num": 256}')
    r = _refused(_with_knob(_edit(SOFTMAX, 'runtime_options={"run_mode": RUN_MODE, "stitch_function_max_num": 128}',
                                  twice)))
    assert r.rule == "one-change" and "the dict key 'run_mode' twice" in r.message, r.message


def test_a_recorded_state_that_does_not_parse_is_an_input_error_naming_the_file() -> None:
    """The state a change starts from is the kept code; if it does not parse, that is the caller's input to fix (an
    ``InputError`` the server shows with its hint), not a crash of the gate."""
    with pytest.raises(InputError) as info:
        admit({F: _edit(SOFTMAX, "def main()", "def main(")}, {F: SOFTMAX})
    assert f"{F} is not valid Python" in info.value.message, info.value.message


def test_a_change_that_leaves_the_file_unparsable_is_refused() -> None:
    after = _with_knob(_edit(SOFTMAX, "        s = pypto.sum(e, -1, keepdim=True)\n",
                             "        s = pypto.sum(e, -1, keepdim=True\n"))
    r = _refused(after)
    assert r.rule == "one-change" and "is not valid Python after the change" in r.message, r.message


# ------------------------------------------------------------------------------------------------ R23: algorithm changes

KERNEL_EDIT = ("pypto.exp(xv - row_max)", "pypto.exp(xv)")  # inside softmax_kernel
HARNESS_EDIT = ("torch.manual_seed(0)", "torch.manual_seed(1)")  # the test's inputs


def test_a_declared_algorithm_change_inside_the_kernel_is_admitted_as_one_structural_change() -> None:
    after = _edit(SOFTMAX, *KERNEL_EDIT)
    adm = admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
    assert adm.kind == "structural" and adm.change is None
    assert adm.structural_lines == [f"{F}: line {_line_of(after, 'e = pypto.exp(xv)')} changed: e = pypto.exp(xv)"]
    # with a knob moved along, the knob is named on the admission
    both = admit({F: SOFTMAX}, {F: _with_knob(after)}, algorithm=True, allow_structural=True)
    assert both.kind == "structural" and both.change is not None and both.change.knob_id == "softmax.py:TILE_B"
    # declared, but outside the ALGORITHM stage (allow_structural false): refused like any structural edit
    with pytest.raises(GateRefusal) as refused:
        admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=False)
    assert refused.value.rule == "one-change", refused.value


def test_an_algorithm_change_may_give_the_vector_tile_a_new_rank_a_knob_change_may_not() -> None:
    """effective.check_vec_tile: a reshape needs a new tile (F-4), so a declared algorithm change is not held to the
    old tile's rank; a knob change is (domain C: one int per tensor dim, the same count as now)."""
    retile = ("set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(32, 256)")
    adm = admit({F: SOFTMAX}, {F: _edit(_edit(SOFTMAX, *KERNEL_EDIT), *retile)}, algorithm=True,
                allow_structural=True)
    assert adm.kind == "structural" and adm.change is not None and adm.change.after == [32, 256]
    r = _refused(_edit(SOFTMAX, *retile))
    assert r.rule == "legality" and "vec tile has 3 dims here, got 2" in r.message, r.message


def test_an_algorithm_change_never_touches_the_test_around_the_kernel() -> None:
    """R23 / red team: the harness half of a single-file operator (its inputs, tolerance, verdict) is the test; an
    algorithm change that touches it is refused naming the line — also when the kernel changes with it."""
    for after in (_edit(SOFTMAX, *HARNESS_EDIT), _edit(_edit(SOFTMAX, *HARNESS_EDIT), *KERNEL_EDIT)):
        with pytest.raises(GateRefusal) as refused:
            admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
        r = refused.value
        line = _line_of(after, "torch.manual_seed(1)")
        assert r.rule == "algorithm" and f"{F}: line {line} changed: torch.manual_seed(1)" in r.message, r.message
        assert "pypto.exp" not in r.message  # the kernel's own edit is not what is refused


def test_several_knobs_are_one_change_only_when_declared_in_the_algorithm_stage() -> None:
    after = _with_knob(_edit(SOFTMAX, "set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(1, 8, 256)"))
    adm = admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
    assert adm.kind == "structural" and sorted(adm.structural_lines) == [
        "softmax.py:TILE_B: 4 → 2", "softmax.py:softmax_kernel.set_vec_tile_shapes#1: [1, 4, 256] → [1, 8, 256]"]
    r = _refused(after)
    assert r.rule == "one-change" and "touches 2 knobs at once" in r.message
    assert f"softmax.py:TILE_B (line {_line_of(after, 'TILE_B = 2')})" in r.message, r.message
    vec_line = _line_of(after, "pypto.set_vec_tile_shapes(1, 8, 256)")
    assert f"softmax.py:softmax_kernel.set_vec_tile_shapes#1 (line {vec_line})" in r.message, r.message


def test_a_refusal_lists_four_structural_lines_and_counts_the_rest() -> None:
    after = SOFTMAX
    for old, new in (KERNEL_EDIT, HARNESS_EDIT, ("pypto.amax(xv, -1", "pypto.amax(xv, -2"),
                     ('dtype=torch.float32)\n        y =', 'dtype=torch.float16)\n        y =')):
        after = _edit(after, old, new)
    r = _refused(after)  # exactly four: all listed, nothing counted
    assert r.message.count("changed:") == 4 and "more)" not in r.message, r.message
    r = _refused(_edit(after, "torch.allclose(got, expected, rtol=1e-3", "torch.allclose(got, expected, rtol=1e-2"))
    assert r.message.count("changed:") == 4 and "(+1 more)" in r.message, r.message


def test_one_knob_declared_as_an_algorithm_change_is_still_that_knob_change() -> None:
    """R23 lets a declared algorithm change move several knobs together; one knob alone is a knob change whatever
    is declared, so the session's knob rules (R10, R11, R19) still see it."""
    adm = admit({F: SOFTMAX}, {F: _with_knob(SOFTMAX)}, algorithm=True, allow_structural=True)
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == "softmax.py:TILE_B"
    assert adm.knob_kind == "tile_constant"


FIXED = {  # knobs no stage tunes (admit's docstring): a problem size, run_mode, a debug option
    "softmax.py:B": ("B, N, D = 32, 32, 256", "B, N, D = 16, 32, 256"),
    "softmax.py:softmax_kernel.runtime_options.run_mode": ('"run_mode": RUN_MODE', '"run_mode": pypto.RunMode.NPU'),
    "softmax.py:softmax_kernel.debug_options.compile_debug_mode": (JIT, JIT[:-1] + ', debug_options={'
                                                                  '"compile_debug_mode": 1})'),
}


@pytest.mark.parametrize("knob", sorted(FIXED))
@pytest.mark.parametrize("beside", ["a kernel edit", "another knob"])
def test_an_algorithm_change_never_moves_a_problem_size_run_mode_or_a_debug_option(knob: str, beside: str) -> None:
    """Product bug (issue #16, found from the survivors of the complete run): only a change of one knob was checked
    for being a tuning knob, so a declared algorithm change — a kernel edit, or several knobs — carried a new problem
    size (the test's inputs), run_mode or debug option through. Refused now as when that knob changes alone."""
    after = _edit(_edit(SOFTMAX, *FIXED[knob]), *(KERNEL_EDIT if beside == "a kernel edit" else TILE_B_2))
    with pytest.raises(GateRefusal) as refused:
        admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
    r = refused.value
    assert r.rule == "one-change" and f"{knob} is not a tuning knob" in r.message, r.message


@pytest.mark.parametrize(("moved", "refusal"), [
    (('"stitch_function_max_num": 128', '"stitch_function_max_num": 0'),
     ("legality", "stitch_function_max_num = 0 is not legal")),
    (("set_vec_tile_shapes(1, 4, 256)", "set_vec_tile_shapes(32, 256)"),
     ("legality", "vec tile has 3 dims here, got 2")),
    (("set_vec_tile_shapes(1, 4, 256)", 'set_vec_tile_shapes(1, len("abcd"), 256)'),
     ("one-change", "is code, not data")),
])
def test_several_knobs_declared_together_are_each_held_to_what_a_change_of_it_alone_is(
        moved: tuple[str, str], refusal: tuple[str, str]) -> None:
    """Product bug (issue #16): a declared change of several knobs and nothing else skipped each knob's own domain and
    the data check (a stitch count of 0, a vector tile of another rank, a value that is code were admitted beside a
    legal TILE_B). Nothing but knobs changed — no reshape — so each is held to its own rule."""
    after = _with_knob(_edit(SOFTMAX, *moved))
    with pytest.raises(GateRefusal) as refused:
        admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
    r = refused.value
    assert (r.rule, refusal[1] in r.message) == (refusal[0], True), r.message
    alone = _refused(_edit(SOFTMAX, *moved))  # the same value alone: the same rule
    assert alone.rule == refusal[0] and refusal[1] in alone.message, alone.message
    # admitted, each knob's own check is on the record
    ok = admit({F: SOFTMAX}, {F: _with_knob(_edit(SOFTMAX, '"stitch_function_max_num": 128',
                                                  '"stitch_function_max_num": 256'))},
               algorithm=True, allow_structural=True)
    assert ok.kind == "structural"
    assert [c.split(" within its domain")[0] for c in ok.checked if "within its domain" in c] == [
        "softmax.py:TILE_B = 2", "softmax.py:softmax_kernel.runtime_options.stitch_function_max_num = 256"]


def test_a_knob_outside_its_own_domain_is_refused_where_no_tiling_site_reads_it() -> None:
    """An option no tile call or loop reads (stitch_function_max_num, domain S-9: 1–1024) is judged by its own rule
    only: that rule alone refuses 0 and 1025."""
    for value in (0, 1025):
        r = _refused(_edit(SOFTMAX, '"stitch_function_max_num": 128', f'"stitch_function_max_num": {value}'))
        assert r.rule == "legality" and f"stitch_function_max_num = {value} is not legal" in r.message, r.message


def test_a_debug_option_other_than_the_runtime_switch_is_a_knob_of_its_own() -> None:
    """Only runtime_debug_mode is the debug switch stripped before comparison; any other debug option is a knob
    (not a tuning one): alone it is refused as such, beside a knob change it is a second knob, never a rider."""
    debug = _edit(SOFTMAX, JIT, JIT[:-1] + ', debug_options={"compile_debug_mode": 1})')
    knob = "softmax.py:softmax_kernel.debug_options.compile_debug_mode"
    r = _refused(debug)
    assert r.rule == "one-change" and f"{knob} is not a tuning knob" in r.message, r.message
    r = _refused(_with_knob(debug))
    assert r.rule == "one-change" and "touches 2 knobs at once" in r.message and knob in r.message, r.message


# ------------------------------------------------------------------------------------------------ what is left unchecked

FACTORY = '''import pypto
{module}

def build(rows):
{local}
    @pypto.frontend.jit()
    def kernel(x: pypto.Tensor([rows, 512], pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(1, 512)
        for i in pypto.loop(rows // TILE):
            pypto.view(x, [TILE, 512], [i * TILE, 0])
    return kernel
'''


@pytest.mark.parametrize(("where", "knob"), [("module", "op.py:TILE"), ("local", "op.py:build.TILE")])
def test_a_block_size_whose_axis_only_the_run_knows_is_recorded_as_unchecked_when_it_changes(where: str,
                                                                                            knob: str) -> None:
    """effective.check_after: a floor division by a name the change gave a new value, whose axis length is a
    run-time value (a factory parameter), is listed as unchecked — not passed silently; a change of another knob
    leaves that division out of the record. Both a module constant and a local of the factory."""
    before = FACTORY.format(module="TILE = 8\n" if where == "module" else "",
                            local="    TILE = 8\n" if where == "local" else "")
    loop = _line_of(before, "for i in pypto.loop(rows // TILE):")
    adm = admit({"op.py": before}, {"op.py": before.replace("TILE = 8", "TILE = 4")})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id == knob
    assert [u for u in adm.unchecked if "rows // TILE" in u] == [
        f"op.py:{loop} rows // TILE: the axis length is a run-time value here, so whether TILE divides it (and leaves "
        "no row uncomputed) was not checked"], adm.unchecked
    other = admit({"op.py": before}, {"op.py": before.replace("set_vec_tile_shapes(1, 512)",
                                                              "set_vec_tile_shapes(2, 512)")})
    assert not [u for u in other.unchecked if "rows // TILE" in u], other.unchecked


def test_a_value_naming_what_only_the_run_knows_is_admitted_with_its_domain_recorded_unchecked() -> None:
    """Domain C: a value that names something the server cannot evaluate (here a factory parameter) passes as
    unchecked, recorded with the value it names and the domain it was not checked against — in place of the
    generic note of the site it feeds."""
    before = FACTORY.format(module="TILE = 8\n", local="")
    adm = admit({"op.py": before}, {"op.py": before.replace("set_vec_tile_shapes(1, 512)",
                                                             "set_vec_tile_shapes(rows // 64, 512)")})
    assert adm.kind == "knob" and adm.change is not None
    assert adm.change.after == [{"$expr": "rows // 64"}, 512]
    assert not [c for c in adm.checked if "within its domain" in c], adm.checked
    assert len(adm.unchecked) == 1, adm.unchecked
    assert adm.unchecked[0].startswith("op.py:build.kernel.set_vec_tile_shapes#1 = [{'$expr': 'rows // 64'}, 512]: "
                                       "names something the server cannot evaluate; its domain (one int ≥ 1 per "
                                       "tensor dim"), adm.unchecked
    assert adm.unchecked[0].endswith(") was not checked"), adm.unchecked


def test_a_tiling_site_the_change_makes_illegal_is_refused_with_the_sites_own_hint() -> None:
    """TILE_B = 3 is a legal block on its own but leaves 2 of B's 32 rows uncomputed (C/F-3): the refusal is the
    site's, and its hint says where the legal range is shown."""
    r = _refused(_edit(SOFTMAX, "\nTILE_B = 4\n", "\nTILE_B = 3\n"))
    assert r.rule == "legality" and "only 30 of 32 would be computed" in r.message, r.message
    assert r.hint == "choose a value inside the legal range (list_knobs shows it for this operator)", r.hint


def test_a_knobs_own_domain_check_is_on_the_record_of_its_admission() -> None:
    """The knob's own rule was checked (type, range): recorded like every site check, with the domain it held to, and
    first — the report shows the first entries of the record."""
    adm = admit({F: SOFTMAX}, {F: _with_knob(SOFTMAX)})
    assert len(adm.checked) > 2 and adm.checked[0].startswith("softmax.py:TILE_B = 2 within its domain"), adm.checked
    adm = admit({F: SOFTMAX}, {F: _edit(SOFTMAX, '"stitch_function_max_num": 128', '"stitch_function_max_num": 256')})
    assert len(adm.checked) == 1 and adm.checked[0].startswith(
        "softmax.py:softmax_kernel.runtime_options.stitch_function_max_num = 256 within its domain (integer 1–1024"), \
        adm.checked


def test_an_algorithm_change_may_drop_a_tile_call_the_knob_is_found_in_the_recorded_state() -> None:
    """A rewrite that removes a tuning knob's site (here the kernel's vector tile call) moves that knob to nothing:
    it is judged as the knob the recorded state had — a tuning knob — and admitted."""
    after = _edit(SOFTMAX, "    pypto.set_vec_tile_shapes(1, 4, 256)\n", "")
    adm = admit({F: SOFTMAX}, {F: after}, algorithm=True, allow_structural=True)
    assert adm.kind == "structural" and adm.change is not None
    assert (adm.change.knob_id, adm.change.before, adm.change.after) == (
        "softmax.py:softmax_kernel.set_vec_tile_shapes#1", [1, 4, 256], None)


def test_removing_an_option_entry_is_a_change_of_that_knob_back_to_its_default() -> None:
    """An absent entry and a present one mask alike (admission docstring), so dropping one is a knob change to no
    value: admitted, with no value to hold to the knob's domain."""
    adm = admit({F: SOFTMAX}, {F: _edit(SOFTMAX, ', "stitch_function_max_num": 128', "")})
    assert adm.kind == "knob" and adm.change is not None
    assert (adm.change.knob_id, adm.change.before, adm.change.after) == (
        "softmax.py:softmax_kernel.runtime_options.stitch_function_max_num", 128, None)
    assert not adm.checked and not adm.unchecked


@pytest.mark.parametrize(("value", "refusal"), [
    ("0", ("legality", "stitch_function_max_num = 0 is not legal")),
    ("2048", ("legality", "stitch_function_max_num = 2048 is not legal")),
    ('len("abcd")', ("one-change", "is code, not data")),
])
def test_beside_a_kernel_rewrite_an_option_is_still_held_to_its_own_domain(value: str,
                                                                           refusal: tuple[str, str]) -> None:
    """Issue #16 (left open by the admission fix): a kernel rewrite moved an option outside its declared domain
    (domain C, S-9: stitch_function_max_num 1–1024) through, because beside structural lines only "is it a tuning
    knob" was asked. An option's domain does not depend on what the kernel computes, so the rewrite changes nothing
    about it; a tile may take a new rank beside a reshape (the test above), an option may not leave its range."""
    stitch = ('"stitch_function_max_num": 128', f'"stitch_function_max_num": {value}')
    with pytest.raises(GateRefusal) as refused:
        admit({F: SOFTMAX}, {F: _edit(_edit(SOFTMAX, *KERNEL_EDIT), *stitch)}, algorithm=True, allow_structural=True)
    r = refused.value
    assert (r.rule, refusal[1] in r.message) == (refusal[0], True), r.message
    ok = admit({F: SOFTMAX}, {F: _edit(_edit(SOFTMAX, *KERNEL_EDIT), '"stitch_function_max_num": 128',
                                       '"stitch_function_max_num": 256')}, algorithm=True, allow_structural=True)
    assert ok.kind == "structural" and any(
        c.startswith("softmax.py:softmax_kernel.runtime_options.stitch_function_max_num = 256 within its domain")
        for c in ok.checked), ok.checked


# PyPTO's kernel_input attention feeds its cube tile call from a kernel local; the server pins the call to literals
PINNED_OP = '''import pypto


@pypto.frontend.jit(runtime_options={"run_mode": pypto.RunMode.SIM})
def mm_kernel(a: pypto.Tensor((64, 64), pypto.DT_FP32), b: pypto.Tensor((64, 64), pypto.DT_FP32),
              out: pypto.Tensor((64, 64), pypto.DT_FP32)):
    cube_tiling = 64
    pypto.set_cube_tile_shapes([cube_tiling, cube_tiling], [cube_tiling, cube_tiling], [cube_tiling, cube_tiling])
    out[:] = pypto.matmul(a, b, pypto.DT_FP32)
'''


def test_pinning_a_call_fed_by_a_local_is_one_change_though_the_local_stops_being_a_knob() -> None:
    fed = "[cube_tiling, cube_tiling], [cube_tiling, cube_tiling], [cube_tiling, cube_tiling]"
    pinned = _edit(PINNED_OP, f"pypto.set_cube_tile_shapes({fed})", "pypto.set_cube_tile_shapes([64, 64], [64, 64], [32, 64])")
    adm = admit({"op.py": PINNED_OP}, {"op.py": pinned})
    assert adm.kind == "knob" and adm.change.knob_id == "op.py:mm_kernel.set_cube_tile_shapes#1"
    # ... and the local's own line still counts when it changes too
    with pytest.raises(GateRefusal, match="cube_tiling = 32"):
        admit({"op.py": PINNED_OP}, {"op.py": _edit(pinned, "cube_tiling = 64", "cube_tiling = 32")})
