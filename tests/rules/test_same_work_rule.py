"""Rule same-work: a run is compared with the kept state only if it called the same kernels, as often.

The session metric sums the work time of a run's output folders, one per kernel call; a change after which the test
calls fewer kernels is "faster" with no kernel faster. Over MCP stdio: tests/admission/test_same_work_over_stdio.py.
"""

from __future__ import annotations

from pypto_tune.tools.rules.tuning_loop import RULES_BY_ID, work_changed


def test_the_same_calls_in_any_order_are_the_same_work() -> None:
    assert work_changed(["pool#1", "pool#2", "norm"], 3, ["norm", "pool#1", "pool#2"], 3) is None
    assert work_changed(["softmax_kernel"], 1, ["softmax_kernel"], 1) is None


def test_a_skipped_second_call_is_other_work_and_says_how_often_each_kernel_ran() -> None:
    why = work_changed(["pool#1", "pool#2"], 2, ["pool"], 1)
    assert why is not None and "pool 1 time(s) now, 2 in the kept state's runs" in why and "same-work" in why


def test_another_kernel_in_place_of_one_is_other_work_even_with_as_many_folders() -> None:
    why = work_changed(["attn", "norm"], 2, ["attn", "norm_fast"], 2)
    assert why is not None and "norm 0 time(s) now, 1" in why and "norm_fast 1 time(s) now, 0" in why


def test_a_name_ending_in_digits_is_not_mistaken_for_a_call_number() -> None:
    # only "#<n>" numbers a call: scale_by_2 is a kernel's own name
    assert work_changed(["scale_by_2"], 1, ["scale_by_2"], 1) is None
    assert work_changed(["scale_by_2"], 1, ["scale_by_4"], 1) is not None
    assert work_changed(["pool#"], 1, ["pool"], 1) is not None  # "#" without a number is part of the name


def test_without_names_the_folder_count_decides_and_without_a_kept_run_nothing_does() -> None:
    assert work_changed(None, 2, None, 1) is not None
    assert work_changed(["pool#1", "pool#2"], 2, None, 2) is None
    assert work_changed(None, None, ["pool"], 1) is None  # the baseline itself


def test_the_rule_is_listed_with_the_others() -> None:
    assert "same-work" in RULES_BY_ID and RULES_BY_ID["same-work"].text_zh
