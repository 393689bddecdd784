"""Property tests over generated operators (layouts × knob values), domain R9 and the revert guarantee.

1. extract ∘ edit: setting one knob to a legal value changes exactly that knob, every other knob keeps its value.
2. apply then revert is the identity on bytes (the reverse diff of a plan restores the original text).
3. runtime debug on then off (with the pre-toggle baseline) is the identity, and never a knob change.
4. a diff that changes two different knobs always has a delta of 2 or more.
"""

from __future__ import annotations

import os
import pytest

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pypto_tune.tools.errors import KnobValueError
from pypto_tune.tools.patching import (
    apply_diff, extract_knobs, knob_delta, plan_diff_edit, plan_knob_edit, set_runtime_debug, unified_diff,
)
from pypto_tune.tools.patching._cst import same

# Per-test settings (not a global profile, which would leak into other packages' tests). ~0.15 s per example on
# the 2-core CI machine; PATCHING_EXAMPLES=1000 for a deeper local run.
PROPERTY = settings(max_examples=int(os.environ.get("PATCHING_EXAMPLES", "100")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

IMPORTS = [
    ("import pypto\n", "pypto", "pypto.frontend.jit"),
    ("import pypto as pt\n", "pt", "pt.frontend.jit"),
    ("import pypto\nfrom pypto import frontend\n", "pypto", "frontend.jit"),
    ("import pypto as P\nfrom pypto.frontend import jit\n", "P", "jit"),
]
POW2 = [1, 2, 4, 8, 16, 32]


@st.composite
def operators(draw):
    """A softmax-like + matmul-like operator written in one of many layouts."""
    imp, p, jit = draw(st.sampled_from(IMPORTS))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    ind = draw(st.sampled_from(["    ", "\t", "  "]))
    tile_b = draw(st.sampled_from(POW2))
    vec = [1, draw(st.sampled_from([1, 2, 4, 8, 32])), draw(st.sampled_from([64, 128, 256]))]
    stitch = draw(st.integers(1, 1024))
    nbuf = draw(st.sampled_from([None, 2, 4, 8]))
    rt = f'{{"run_mode": {p}.RunMode.SIM, "stitch_function_max_num": {stitch}}}'
    pass_opts = f'{{"vec_nbuffer_setting": {{-2: 1, -1: {nbuf}}}}}' if nbuf else None
    opts_in_var = draw(st.booleans())
    head = [imp, "B, N, D = 32, 32, 256\n", f"TILE_B = {tile_b}  # rows per iteration\n"]
    kwargs = [f"runtime_options={'RT' if opts_in_var else rt}"]
    if opts_in_var:
        style = draw(st.sampled_from(["inline", "lines-comma", "lines-nocomma"]))
        entries = [f'"run_mode": {p}.RunMode.SIM', f'"stitch_function_max_num": {stitch}']
        if style == "inline":
            head.append(f"RT = {rt}\n")
        elif style == "lines-comma":
            head.append("RT = {\n" + "".join(f"{ind}{e},  # c{i}\n" for i, e in enumerate(entries)) + "}\n")
        else:
            head.append("RT = {\n" + f",  # c\n".join(ind + e for e in entries) + "  # last\n}\n")
    if pass_opts:
        kwargs.append(f"pass_options={pass_opts}")
    layout = draw(st.sampled_from(["one-line", "multi-comma", "multi-nocomma", "comments"]))
    if layout == "one-line":
        deco = f"@{jit}({', '.join(kwargs)})\n"
    elif layout == "multi-comma":
        deco = f"@{jit}(\n" + "".join(f"{ind}{k},\n" for k in kwargs) + ")\n"
    elif layout == "multi-nocomma":
        deco = f"@{jit}(\n{ind}" + f",\n{ind}".join(kwargs) + "\n)\n"
    else:
        deco = f"@{jit}(  # options\n" + "".join(f"{ind}{k},  # opt {i}\n" for i, k in enumerate(kwargs)) + ")\n"
    unroll = draw(st.sampled_from([None, [2, 1], [4, 2, 1]]))
    loop_kw = f', name="LOOP_B"' + (f", unroll_list={unroll}" if unroll else "")
    m_l0 = draw(st.sampled_from([16, 32, 64]))
    body = (
        f"def kernel(x: {p}.Tensor([B, N, D], {p}.DT_FP32), w: {p}.Tensor([D, D], {p}.DT_FP16)):\n"
        f"{ind}{p}.set_vec_tile_shapes({', '.join(map(str, vec))})  # tile\n"
        f"{ind}{p}.set_cube_tile_shapes(\n{ind}{ind}[{m_l0}, {m_l0 * 2}],  # m\n{ind}{ind}[64, 256],\n"
        f"{ind}{ind}[64, 128],\n{ind})\n"
        f"{ind}for b in {p}.loop(B // TILE_B{loop_kw}):\n"
        f"{ind}{ind}xv = {p}.view(x, [TILE_B, N, D], [b * TILE_B, 0, 0])\n"
    )
    text = "".join(head) + "\n" + deco + body
    return {"op.py": text.replace("\n", eol)}


GENERATED = {"unroll_list", "submit_before_loop", "vec_nbuffer_setting", "cube_l1_reuse_setting",
             "cube_nbuffer_setting", "stitch_function_max_num", "device_sched_mode"}


def editable(knob) -> bool:
    return knob.tunable and (knob.kind in ("vec_tile", "cube_tile", "tile_constant") or knob.name in GENERATED)


def legal_values(knob, draw):
    """A strategy-drawn legal value for ``knob`` (different from the current one is checked by the caller)."""
    name, ctx = knob.name, knob.context
    if knob.kind == "vec_tile":
        return [draw(st.sampled_from([1, 2, 4, 8, 16, 32])) for _ in knob.value]
    if knob.kind == "cube_tile":
        def pair():
            l0 = draw(st.sampled_from([16, 32, 64, 128]))
            return [l0, l0 * draw(st.sampled_from([1, 2, 4]))]
        k = pair()
        if draw(st.booleans()):
            k = k + [k[0] * draw(st.sampled_from([1, 2, 4]))]
        return {"m": pair(), "k": k, "n": pair()}
    if knob.kind == "tile_constant":
        return draw(st.integers(1, ctx.get("max_value", 128)))
    if name == "unroll_list":
        top = ctx.get("trip_count", 8)
        return sorted({draw(st.integers(1, max(1, top))) for _ in range(draw(st.integers(1, 3)))}, reverse=True)
    if name == "submit_before_loop":
        return draw(st.booleans())
    if name == "vec_nbuffer_setting":
        return {"-2": 1, "-1": draw(st.sampled_from([1, 2, 4, 8, 16]))}  # JSON-style string keys, as an agent sends
    if name == "cube_l1_reuse_setting":
        return {-1: draw(st.integers(0, 8))}
    if name == "cube_nbuffer_setting":
        return {-1: draw(st.integers(1, 8))}
    if name == "stitch_function_max_num":
        return draw(st.integers(1, 1024))
    if name == "device_sched_mode":
        return draw(st.integers(0, 3))
    return None


def normalise(value):
    if isinstance(value, dict):
        return {int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k: normalise(v) for k, v in value.items()}
    return value


@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
@PROPERTY
@given(src=operators(), data=st.data())
def test_editing_one_knob_changes_exactly_that_knob_and_reverts_to_the_same_bytes(src, data):
    knobs = [k for k in extract_knobs(src) if editable(k)]
    knob = data.draw(st.sampled_from(knobs))
    value = legal_values(knob, data.draw)
    current = knob.value
    if knob.kind == "cube_tile":
        assume(not same(current, value))
    else:
        assume(not same(current, normalise(value)))
    try:
        plan = plan_knob_edit(src, knob.id, value)
    except KnobValueError as exc:  # only legal when the value broke a *dependent* knob (TILE_B vs unroll_list)
        assert exc.rule == "C/dependent", str(exc)
        assume(False)
        raise
    assert [c.knob_id for c in plan.changes] == [knob.id]
    before = {k.id: k.value for k in extract_knobs(src)}
    after = {k.id: k.value for k in extract_knobs(plan.new_sources)}
    assert before.keys() == after.keys()
    assert [kid for kid in before if not same(before[kid], after[kid])] == [knob.id]
    # Only lines that hold the knob changed, line endings kept.
    new = plan.new_sources["op.py"]
    assert ("\r\n" in new) == ("\r\n" in src["op.py"]) and new.count("\r\n") in (0, new.count("\n"))
    # Apply then revert: the reverse diff restores the original bytes.
    assert apply_diff(plan.new_sources, unified_diff(plan.new_sources, src)) == src
    assert apply_diff(src, plan.diff) == plan.new_sources


@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
@PROPERTY
@given(src=operators())
def test_runtime_debug_round_trip_is_the_identity_and_no_knob_change(src):
    on = set_runtime_debug(src, True)
    assert on != src
    assert knob_delta(src, on) == []
    assert set_runtime_debug(on, False, baseline=src) == src
    assert set_runtime_debug(on, False) == src


@pytest.mark.slow  # long for the unit tier (scripts/test.sh --fast); the full suite runs it
@PROPERTY
@given(src=operators(), data=st.data())
def test_a_diff_changing_two_knobs_always_has_a_delta_of_two_or_more(src, data):
    knobs = [k for k in extract_knobs(src) if editable(k)]
    first, second = data.draw(st.lists(st.sampled_from(knobs), min_size=2, max_size=2, unique_by=lambda k: k.id))
    cur = src
    for knob in (first, second):
        live = {k.id: k for k in extract_knobs(cur)}[knob.id]  # context after the first edit (trip counts move)
        value = legal_values(live, data.draw)
        assume(not same(live.value, normalise(value)) if knob.kind != "cube_tile" else True)
        try:
            cur = plan_knob_edit(cur, knob.id, value).new_sources
        except KnobValueError as exc:  # a TILE_B change making an unroll factor exceed the trip count
            assert exc.rule == "C/dependent", str(exc)
            assume(False)
            raise
    plan = plan_diff_edit(src, unified_diff(src, cur))
    assert len(plan.changes) >= 2
    assert {first.id, second.id} <= {c.knob_id for c in plan.changes}
