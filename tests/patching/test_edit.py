"""Structured knob edits: legal values only, the minimal edit, formatting and comments kept, nothing written."""

from __future__ import annotations

import pytest
from patching_helpers import by_id, crlf, data_source

from pypto_tune.tools.errors import InputError, KnobValueError
from pypto_tune.tools.patching import extract_knobs, knob_delta, plan_knob_edit

AWK = data_source("awkward.py")
F = "awkward.py"


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.split("\n"), after.split("\n")
    assert len(a) == len(b), "a value edit must not add or remove lines"
    return [(x, y) for x, y in zip(a, b) if x != y]


def test_editing_one_cube_tile_element_changes_only_that_token_and_keeps_comments():
    plan = plan_knob_edit(AWK, f"{F}:mm.set_cube_tile_shapes#1", {"k": [64, 512, 256]})
    assert changed_lines(AWK[F], plan.new_sources[F]) == [
        ("        [64, 256, 256],  # k: 3-element form", "        [64, 512, 256],  # k: 3-element form"),
    ]
    [change] = plan.changes
    assert change.knob_id == f"{F}:mm.set_cube_tile_shapes#1" and change.line == 27
    assert change.before["k"] == [64, 256, 256] and change.after["k"] == [64, 512, 256]
    assert plan.diff.startswith(f"--- a/{F}\n+++ b/{F}\n")
    assert plan.changed_files == [F]


def test_turning_on_split_k_adds_the_keyword_where_it_was_absent():
    plan = plan_knob_edit(AWK, f"{F}:mm.set_cube_tile_shapes#1", {"enable_split_k": True})
    assert "        [256, 256],\n        enable_split_k=True,\n    )" in plan.new_sources[F]
    assert len(plan.changes) == 1


def test_shared_option_variable_is_edited_in_place_with_its_comment():
    plan = plan_knob_edit(AWK, "vec_nbuffer_setting", {"-2": 1, "-1": 4}, target=F + ":12")
    assert changed_lines(AWK[F], plan.new_sources[F]) == [
        ('    "vec_nbuffer_setting": {-2: 1, -1: 2},', '    "vec_nbuffer_setting": {-2: 1, -1: 4},'),
    ]
    assert plan.changes[0].after == {-2: 1, -1: 4}  # JSON string keys were turned back into ints


def test_an_absent_option_is_added_to_the_shared_dict_on_its_own_line():
    plan = plan_knob_edit(AWK, f"{F}:PASS_OPTS.cube_nbuffer_setting", {-1: 2})
    assert ('    "vec_nbuffer_setting": {-2: 1, -1: 2},\n    "cube_nbuffer_setting": {-1: 2},\n}'
            in plan.new_sources[F])
    [change] = plan.changes
    assert (change.before, change.after) == (None, {-1: 2})


def test_an_absent_option_group_is_added_to_a_bare_decorator():
    plan = plan_knob_edit(AWK, f"{F}:vec.runtime_options.stitch_function_max_num", 256)
    assert '@pt.frontend.jit(runtime_options={"stitch_function_max_num": 256})\ndef vec(' in plan.new_sources[F]


def test_dict_call_entries_are_edited_as_keywords():
    plan = plan_knob_edit(AWK, "device_sched_mode", 2)
    assert "runtime_options=dict(run_mode=pt.RunMode.SIM, device_sched_mode=2)," in plan.new_sources[F]
    plan = plan_knob_edit(AWK, f"{F}:mm.runtime_options.stitch_function_max_num", 64)
    assert "dict(run_mode=pt.RunMode.SIM, device_sched_mode=1, stitch_function_max_num=64)" in plan.new_sources[F]


def test_tab_indented_list_form_vector_tile():
    plan = plan_knob_edit(AWK, f"{F}:vec.set_vec_tile_shapes#1", [32, 512])
    assert changed_lines(AWK[F], plan.new_sources[F]) == [
        ("\tpt.set_vec_tile_shapes([16, 512])  # tab-indented body, list form",
         "\tpt.set_vec_tile_shapes([32, 512])  # tab-indented body, list form"),
    ]


def test_crlf_file_stays_crlf_after_an_edit():
    src = {F: crlf(AWK[F])}
    plan = plan_knob_edit(src, "BLOCK_M", 64)
    new = plan.new_sources[F]
    assert "BLOCK_M = 64\r\n" in new and new.count("\r\n") == new.count("\n")
    assert len(plan.changes) == 1


@pytest.mark.parametrize("knob,value,target,after", [
    ("unroll_list", [1], None, "unroll_list=[1]"),
    ("submit_before_loop", True, "vec", "pt.loop(M // 16, submit_before_loop=True)"),
    ("sg_set_scope", [7, -1], f"{F}:33", "pt.set_pass_options(sg_set_scope=7)"),
    ("combine_axis", False, None, "ex.set_operation_options(combine_axis=False)"),
    ("set_cache_policy", False, None, "b.set_cache_policy(pt.CachePolicy.NONE_CACHEABLE, False)"),
    ("valid_shape", [{"$expr": "min(BLOCK_M, M - i * BLOCK_M)"}, {"$expr": "K"}], None,
     "valid_shape=[min(BLOCK_M, M - i * BLOCK_M), K]"),
    ("set_cube_tile_shapes#2", {"n": [64, 256]}, None, "n=[64, 256], enable_split_k=False"),
])
def test_each_call_site_kind_is_editable(knob, value, target, after):
    plan = plan_knob_edit(AWK, knob, value, target=target)
    assert after in plan.new_sources[F]
    assert len(plan.changes) == 1


def test_absent_loop_option_is_added_as_a_keyword():
    plan = plan_knob_edit(AWK, f"{F}:vec.loop#1.unroll_list", [4, 2, 1])
    assert "pt.loop(M // 16, submit_before_loop=False, unroll_list=[4, 2, 1])" in plan.new_sources[F]


# ------------------------------------------------------------------------------------------------ legality


@pytest.mark.parametrize("knob,value,rule,fragment", [
    ("device_sched_mode", 4, "C/S-10", "0–3"),
    ("device_sched_mode", True, "C/S-10", "0–3"),
    (f"{F}:mm.runtime_options.stitch_function_max_num", 0, "C/S-9", "1–1024"),
    (f"{F}:mm.runtime_options.stitch_function_max_num", 1025, "C/S-9", "1–1024"),
    ("vec_nbuffer_setting", {-1: 2}, "C/S-5", "-2: 1"),
    ("vec_nbuffer_setting", {-2: 1}, "C/S-5", "-2: 1"),
    ("vec_nbuffer_setting", {"DEFAULT": 1, "func5_4": 2}, "C/S-5", "int keys"),
    (f"{F}:PASS_OPTS.cube_nbuffer_setting", {}, "C/S-7", "never {}"),
    (f"{F}:PASS_OPTS.cube_nbuffer_setting", {-1: 0}, "C/S-7", "≥ 1"),
    ("set_cube_tile_shapes#1", {"n": [256, 128]}, "C/F-9", "L0 ≤ L1"),
    ("set_cube_tile_shapes#1", {"n": [96, 256]}, "C/F-9", "L1 % L0"),
    ("set_cube_tile_shapes#1", {"m": [8, 128]}, "C/F-9", "multiples of 16"),  # FP16 operands
    ("set_cube_tile_shapes#1", {"m": [16, 32, 64]}, "C/F-9", "m=[mL0, mL1]"),
    ("set_cube_tile_shapes#1", {"k": [64, 256, 256, 512]}, "C/F-9", "k=[kL0, kL1]"),
    ("set_cube_tile_shapes#1", {"k": [64, 256, 96]}, "C/F-9", "L1 % L0"),
    ("unroll_list", [4, 2, 1], "C/F-8", "trip count"),  # LOOP_M runs 2 times
    ("unroll_list", [], "C/F-8", "non-empty"),
    (f"{F}:vec.set_vec_tile_shapes#1", [16, 4096], "C/F-10", "≤ the tensor dim"),
    (f"{F}:vec.set_vec_tile_shapes#1", [0, 512], "C/F-10", "≥ 1"),
    (f"{F}:vec.set_vec_tile_shapes#1", [1, 16, 512], "C/F-10", "same count"),
    ("BLOCK_M", 512, "C/F-1", "≤ the axis"),
    ("sg_set_scope", [0, -1], "C/S-4", "−1"),
    ("sg_set_scope", [1, -1, 2], "C/S-4", "same count"),
    ("set_cache_policy", {"a": True}, "C/I-2", "same tensors"),
    ("set_cache_policy", {"b": 1}, "C/I-2", "True/False"),
    ("combine_axis", 1, "C/F-15", "True / False"),
])
def test_illegal_values_are_refused_with_rule_and_range_and_nothing_changes(knob, value, rule, fragment):
    before = dict(AWK)
    target = f"{F}:33" if knob == "sg_set_scope" else None
    with pytest.raises(KnobValueError) as err:
        plan_knob_edit(AWK, knob, value, target=target)
    assert err.value.rule == rule
    assert fragment in err.value.legal
    assert f"rule {rule}" in str(err.value)
    assert AWK == before


def test_non_tuning_knobs_are_refused():
    with pytest.raises(InputError, match="run_mode"):
        plan_knob_edit(AWK, f"{F}:mm.runtime_options.run_mode", {"$expr": "pt.RunMode.NPU"})
    with pytest.raises(InputError, match="problem size"):
        plan_knob_edit(AWK, f"{F}:M", 512)


def test_ambiguous_names_ask_for_a_target_and_unknown_names_list_the_known_ones():
    with pytest.raises(InputError, match=r"matches 2 knobs.*awkward.py:27.*awkward.py:35"):
        plan_knob_edit(AWK, "set_cube_tile_shapes", {"n": [128, 256]})
    with pytest.raises(InputError) as err:
        plan_knob_edit(AWK, "no_such_knob", 3)
    assert "set_vec_tile_shapes" in err.value.hint


def test_setting_the_current_value_is_refused_as_no_change():
    with pytest.raises(InputError, match="already is"):
        plan_knob_edit(AWK, "device_sched_mode", 1)


def test_after_an_edit_every_other_knob_is_unchanged():
    plan = plan_knob_edit(AWK, "BLOCK_M", 64)
    before, after = by_id(extract_knobs(AWK)), by_id(extract_knobs(plan.new_sources))
    assert before.keys() == after.keys()
    differing = [k for k in before if before[k].value != after[k].value]
    assert differing == [f"{F}:BLOCK_M"]
    assert knob_delta(AWK, plan.new_sources) == plan.changes


def test_a_knob_name_never_matches_a_longer_name_by_suffix():
    src = {"k.py": "import pypto\nN = 64\nTILE_N = 16\ndef f():\n    for i in pypto.loop(N // TILE_N):\n        pass\n"}
    plan = plan_knob_edit(src, "TILE_N", 32)
    assert [c.knob_id for c in plan.changes] == ["k.py:TILE_N"]
    plan = plan_knob_edit(src, "N", 32)  # only used inside the kernel here, so a tiling constant
    assert [c.knob_id for c in plan.changes] == ["k.py:N"]
    plan = plan_knob_edit(src, "loop#1.unroll_list", [2, 1])  # id suffix at a segment boundary
    assert "pypto.loop(N // TILE_N, unroll_list=[2, 1])" in plan.new_sources["k.py"]


def test_a_constant_edit_that_makes_a_dependent_knob_illegal_is_refused():
    # LOOP_M runs M // BLOCK_M = 2 times with unroll_list [2, 1]; BLOCK_M = 256 leaves one iteration.
    with pytest.raises(KnobValueError, match=r"makes awkward.py:mm.loop_unroll\[LOOP_M\].unroll_list illegal") as err:
        plan_knob_edit(AWK, "BLOCK_M", 256)
    assert err.value.rule == "C/dependent"


def test_a_diff_edit_reports_new_violations_as_warnings():
    from pypto_tune.tools.patching import plan_diff_edit, unified_diff

    after = {F: AWK[F].replace("BLOCK_M = 128", "BLOCK_M = 256")}
    plan = plan_diff_edit(AWK, unified_diff(AWK, after))
    assert [w.split(":")[1] for w in plan.warnings] == ["mm.loop_unroll[LOOP_M].unroll_list"]
    assert plan_diff_edit(AWK, unified_diff(AWK, plan_knob_edit(AWK, "BLOCK_M", 64).new_sources)).warnings == []


ODD_BASE = "import pypto\nTILE = 4\n@pypto.frontend.jit\ndef k(x):\n    for i in pypto.loop(64 // TILE):\n        pass"


@pytest.mark.parametrize("name,text", [
    ("byte-order mark", "\ufeff" + ODD_BASE + "\n"),
    ("form feed", ODD_BASE.replace("TILE = 4\n", "TILE = 4\n\x0c\n") + "\n"),
    ("no final newline", ODD_BASE),
    ("mixed line endings", ODD_BASE.replace("\n", "\r\n", 2) + "\n"),
    ("trailing spaces", ODD_BASE.replace("TILE = 4", "TILE = 4   ") + "\n"),
])
def test_odd_files_keep_every_other_byte(name, text):
    from pypto_tune.tools.patching import apply_diff, set_runtime_debug, unified_diff

    src = {"k.py": text}
    plan = plan_knob_edit(src, "TILE", 8)
    assert plan.new_sources["k.py"] == text.replace("TILE = 4", "TILE = 8")
    assert apply_diff(plan.new_sources, unified_diff(plan.new_sources, src)) == src
    on = set_runtime_debug(src, True)
    assert set_runtime_debug(on, False, baseline=src) == src
