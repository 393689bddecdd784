"""Diff edits: strict apply, refusals that name the first mismatching hunk, and the knob delta they carry."""

from __future__ import annotations

import pytest
from patching_helpers import crlf, data_source

from pypto_tune.tools.errors import InputError, PatchError
from pypto_tune.tools.patching import apply_diff, knob_delta, plan_diff_edit, plan_knob_edit, unified_diff

AWK = data_source("awkward.py")
F = "awkward.py"


def test_unified_diff_round_trips_through_apply_exactly():
    after = plan_knob_edit(AWK, "BLOCK_M", 64).new_sources
    diff = unified_diff(AWK, after)
    assert apply_diff(AWK, diff) == after
    assert apply_diff(after, unified_diff(after, AWK)) == AWK


def test_crlf_and_missing_final_newline_survive_a_diff_round_trip():
    before = {"x.py": "a = 1\r\nb = 2\r\nc = 3"}
    after = {"x.py": "a = 1\r\nb = 20\r\nc = 3"}
    diff = unified_diff(before, after)
    assert "\\ No newline at end of file" in diff
    assert apply_diff(before, diff) == after


def test_a_hand_written_lf_diff_applies_to_a_crlf_file_and_keeps_crlf():
    src = {F: crlf(AWK[F])}
    diff = f"--- a/{F}\n+++ b/{F}\n@@ -7,2 +7,2 @@\n-BLOCK_M = 128\n+BLOCK_M = 64\n NBLK = M // BLOCK_M\n"
    plan = plan_diff_edit(src, diff)
    assert "\r\nBLOCK_M = 64\r\nNBLK" in plan.new_sources[F]
    assert [c.knob_id for c in plan.changes] == [f"{F}:BLOCK_M"]


def test_wrong_line_numbers_are_tolerated_but_wrong_context_is_not():
    diff = f"--- a/{F}\n+++ b/{F}\n@@ -40,2 +40,2 @@\n-BLOCK_M = 128\n+BLOCK_M = 64\n NBLK = M // BLOCK_M\n"
    assert len(plan_diff_edit(AWK, diff).changes) == 1
    bad = (f"--- a/{F}\n+++ b/{F}\n@@ -7,1 +7,1 @@\n-BLOCK_M = 128\n+BLOCK_M = 64\n"
           f"@@ -13,1 +13,1 @@\n-    \"vec_nbuffer_setting\": {{-2: 1, -1: 8}},\n+    \"vec_nbuffer_setting\": {{-2: 1}},\n")
    with pytest.raises(PatchError, match=r"hunk 2 \(@@ -13,1 \+13,1 @@\) of awkward.py does not match"):
        plan_diff_edit(AWK, bad)


def test_a_diff_touching_a_file_outside_the_operator_files_is_refused():
    for path in ("other.py", "../awkward.py", "/etc/passwd"):
        diff = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n"
        with pytest.raises(PatchError, match="not one of the session's operator files"):
            plan_diff_edit(AWK, diff)
    new_file = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    with pytest.raises(PatchError, match="creates or deletes a file"):
        plan_diff_edit(AWK, new_file)


def test_an_empty_or_headerless_diff_is_refused():
    with pytest.raises(PatchError, match="no hunks"):
        plan_diff_edit(AWK, "please change the tile")
    with pytest.raises(PatchError, match="before any"):
        plan_diff_edit(AWK, "@@ -1 +1 @@\n-x\n+y\n")


def test_a_diff_that_breaks_the_syntax_is_an_input_error():
    diff = f"--- a/{F}\n+++ b/{F}\n@@ -7,1 +7,1 @@\n-BLOCK_M = 128\n+BLOCK_M = (\n"
    with pytest.raises(InputError, match="not valid Python"):
        plan_diff_edit(AWK, diff)


def test_the_delta_of_a_diff_counts_knobs_zero_one_or_many():
    one = plan_knob_edit(AWK, "BLOCK_M", 64).new_sources
    two = plan_knob_edit(one, "device_sched_mode", 2).new_sources
    assert len(plan_diff_edit(AWK, unified_diff(AWK, one)).changes) == 1
    assert len(plan_diff_edit(AWK, unified_diff(AWK, two)).changes) == 2
    comment_only = {F: AWK[F].replace("# shared dict", "# shared by nobody")}
    assert plan_diff_edit(AWK, unified_diff(AWK, comment_only)).changes == []


def test_a_new_call_site_and_a_removed_one_show_as_added_and_removed_knobs():
    src = {"k.py": "import pypto\ndef f():\n    pypto.set_vec_tile_shapes(1, 8)\n"}
    added = {"k.py": src["k.py"] + "    pypto.set_vec_tile_shapes(2, 8)\n"}
    [change] = knob_delta(src, added)
    assert (change.knob_id, change.before, change.after) == ("k.py:f.set_vec_tile_shapes#2", None, [2, 8])
    [change] = knob_delta(added, src)
    assert (change.before, change.after) == ([2, 8], None)


def test_whitespace_inside_an_expression_value_is_not_a_change():
    a = {"k.py": "import pypto\ndef f(n):\n    pypto.set_vec_tile_shapes(1, n*2)\n"}
    b = {"k.py": "import pypto\ndef f(n):\n    pypto.set_vec_tile_shapes(1, n * 2)\n"}
    assert knob_delta(a, b) == []


def test_an_s4_scope_pair_and_several_cache_policies_are_one_knob_each():
    """One catalogue row (domain R9): opening+closing a merge scope, or marking all weights NONE_CACHEABLE."""
    base = ("import pypto\ndef f(w1, w2, x):\n    y = pypto.exp(x)\n    z = pypto.sum(y, -1)\n")
    scoped = ("import pypto\ndef f(w1, w2, x):\n    pypto.set_pass_options(sg_set_scope=1)\n    y = pypto.exp(x)\n"
              "    z = pypto.sum(y, -1)\n    pypto.set_pass_options(sg_set_scope=-1)\n")
    [change] = knob_delta({"k.py": base}, {"k.py": scoped})
    assert (change.knob_id, change.before, change.after) == ("k.py:f.sg_set_scope", None, [1, -1])
    cached = base.replace("    y =", "    w1.set_cache_policy(pypto.CachePolicy.NONE_CACHEABLE, True)\n"
                                    "    w2.set_cache_policy(pypto.CachePolicy.NONE_CACHEABLE, True)\n    y =")
    [change] = knob_delta({"k.py": base}, {"k.py": cached})
    assert (change.knob_id, change.after) == ("k.py:f.set_cache_policy", {"w1": True, "w2": True})
