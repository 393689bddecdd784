"""Decisions of the admission gate (tools/code/admission.py, tools/patching/runcheck.py) that the full mutation run
(benchmarks/mutation.py, issue #16) found untested — library level, no simulator.

Expected values come from the fixture operator's own text (which line holds which statement) and from the rules as
the module docstrings and the README state them; never from the function under test.
"""

from __future__ import annotations

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal
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


# ------------------------------------------------------------------------------------------------ a value is data


@pytest.mark.parametrize("value", ["min(4, 8)", "max(2, 8) // 2", "2 * 4", "-(-8)"])
def test_a_tile_value_of_literals_arithmetic_and_min_max_is_data(value: str) -> None:
    after = _edit(SOFTMAX, "set_vec_tile_shapes(1, 4, 256)", f"set_vec_tile_shapes(1, {value}, 256)")
    adm = admit({F: SOFTMAX}, {F: after})
    assert adm.kind == "knob" and adm.change is not None and adm.change.knob_id.endswith("set_vec_tile_shapes#1")


@pytest.mark.parametrize("value", ['len("abcd")', "max(4, 8, key=abs)", "pypto.ceil(8)", "(lambda: 8)()",
                                   "abs(-8)"])
def test_a_tile_value_that_runs_code_is_refused_as_code(value: str) -> None:
    """admission docstring: the new value is data — literals and arithmetic over names, min()/max() of them — never
    a call or anything else that runs code."""
    after = _edit(SOFTMAX, "set_vec_tile_shapes(1, 4, 256)", f"set_vec_tile_shapes(1, {value}, 256)")
    r = _refused(after)
    assert r.rule == "one-change" and "is code, not data" in r.message, r.message
