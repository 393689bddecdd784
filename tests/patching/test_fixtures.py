"""The fixture operators under fixtures/operators/: knobs found, current values legal, toggles and edits exact."""

from __future__ import annotations

import pytest
from patching_helpers import by_id, fixture_sources

from pypto_tune.tools.patching import (
    apply_diff, extract_knobs, functional_sources, hash_sources, knob_delta, plan_knob_edit, set_runtime_debug,
    unified_diff,
)
from pypto_tune.tools.patching._cst import is_expr
from pypto_tune.tools.patching.legality import validate
from tests.conftest import require_real

OPERATORS = fixture_sources()


@pytest.fixture(autouse=True)
def _fixture_operators_present() -> None:
    # fixtures/operators is committed: without it every test here would skip, and CI would pass without them
    require_real(bool(OPERATORS), "no fixture operators under fixtures/operators")


def _has_expr(value) -> bool:
    if is_expr(value):
        return True
    if isinstance(value, list):
        return any(_has_expr(v) for v in value)
    if isinstance(value, dict):
        return any(_has_expr(v) for v in value.values())
    return False


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_current_values_of_fixture_knobs_pass_their_own_legality_rules(name):
    for k in extract_knobs(OPERATORS[name]):
        if k.present and k.tunable and not _has_expr(k.value):
            validate(k.kind, k.name, None, k.value, dict(k.context, current=k.value))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_runtime_debug_toggle_on_fixture_is_exact_and_not_a_knob_change(name):
    src = OPERATORS[name]
    on = set_runtime_debug(src, True)
    assert on != src and knob_delta(src, on) == []
    assert set_runtime_debug(on, False, baseline=src) == src
    assert hash_sources(functional_sources(on)) == hash_sources(functional_sources(src))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_present_literal_knob_of_a_fixture_can_be_set_and_reverted(name):
    """Set each knob to its own current value's neighbour where we know one; the delta names just that knob."""
    src = OPERATORS[name]
    tried = 0
    for k in extract_knobs(src):
        if not (k.present and k.tunable) or _has_expr(k.value):
            continue
        new = _neighbour(k)
        if new is None:
            continue
        try:
            plan = plan_knob_edit(src, k.id, new)
        except Exception as exc:  # a neighbour can be illegal (e.g. alignment); that must be a KnobValueError
            assert type(exc).__name__ == "KnobValueError", f"{k.id}: {exc!r}"
            continue
        tried += 1
        assert [c.knob_id for c in plan.changes] == [k.id]
        assert apply_diff(plan.new_sources, unified_diff(plan.new_sources, src)) == src
    assert tried >= 1


def _neighbour(k):
    v = k.value
    if k.kind in ("tile_constant",) and isinstance(v, int):
        return v * 2 if v * 2 <= k.context.get("max_value", v * 2) else max(1, v // 2)
    if k.kind == "vec_tile" and isinstance(v, list) and all(isinstance(x, int) for x in v):
        return [max(1, x // 2) if i == len(v) - 1 else x for i, x in enumerate(v)]
    if k.kind == "cube_tile" and isinstance(v, dict) and isinstance(v.get("n"), list):
        n0, n1 = v["n"]
        return {"n": [n0, n1 * 2]}
    if isinstance(v, bool):
        return not v
    if k.name == "stitch_function_max_num" and isinstance(v, int):
        return 256 if v != 256 else 128
    if k.name == "unroll_list" and isinstance(v, list):
        return [1]  if v != [1] else None
    return None


def test_softmax_fixture_knobs_named_in_the_brief():
    require_real("softmax" in OPERATORS, "softmax fixture absent")
    knobs = by_id(extract_knobs(OPERATORS["softmax"]))
    tile = knobs["softmax.py:softmax_kernel.set_vec_tile_shapes#1"]
    assert tile.value == [1, 4, 256] and {"F-10", "S-12"} <= set(tile.catalog_ids)
    assert knobs["softmax.py:TILE_B"].kind == "tile_constant" and isinstance(knobs["softmax.py:TILE_B"].value, int)
    assert knobs["softmax.py:softmax_kernel.runtime_options.stitch_function_max_num"].value == 128
    plan = plan_knob_edit(OPERATORS["softmax"], "vec_nbuffer_setting", {"-2": 1, "-1": 2})
    assert [c.knob_id for c in plan.changes] == ["softmax.py:softmax_kernel.pass_options.vec_nbuffer_setting"]
