"""judge_precision: R4 restricted to verdict lines (verdict.py's module docstring), over real and hand-made outputs.

Real outputs were recorded from the SIM probe by data/record_outputs.py and from a PyPTO-style example by
data/record_example_outputs.py; hand-made ones imitate what users' tests print. Each case states the verdict and why.
"""

from __future__ import annotations

import re
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pypto_tune.tools.running.runner import RunResult
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.rules.precision import judge_precision
from pypto_tune.tools.running.verdict import KEY_OUTPUT_MAX_CHARS, compile_verdict_patterns
from tests.running.runner_helpers import DATA

MATPLOTLIB_NOISE = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pypto/lib/scripts/draw_pipe_swim_lane.py", line 17, in <module>
    import matplotlib
ModuleNotFoundError: No module named 'matplotlib'
"""


def run(output: str, exit_code: int | None = 0, *, sig: int | None = None, timed_out: bool = False) -> RunResult:
    return RunResult(argv=["python3", "test_op.py"], cwd="/ws", exit_code=exit_code, signal=sig, timed_out=timed_out,
                     duration_s=1.0, started_at=0.0, ended_at=1.0, output_head=output, output_truncated=False,
                     output_bytes=len(output.encode()), env_keys=[])


def recorded(name: str) -> RunResult:
    text = (DATA / name).read_text()
    first, output = text.split("\n", 1)
    return run(output, int(first.split()[-1]))


# ------------------------------------------------------------------------------------------- real SIM outputs
def test_real_sim_run_with_verdict_line_passes_but_numerics_are_not_checked() -> None:
    v = judge_precision(recorded("sim_probe_passed.out"), "sim")
    assert v.verdict == "passed"
    assert v.numerics_checked is False
    assert "PRECISION: passed" in v.key_output
    assert "compiled and simulated" in v.key_output and "does not compute output" in v.key_output
    assert "compiled and simulated" in v.reason
    assert "matplotlib" not in v.key_output  # the helper-script noise is not a key line


def test_real_sim_run_that_prints_no_verdict_fails_with_that_reason() -> None:
    v = judge_precision(recorded("sim_probe_no_verdict.out"), "sim")  # the probe prints only "done"
    assert v.verdict == "failed"
    assert "no verdict line" in v.reason
    assert "done" in v.key_output


def test_real_sim_compile_failure_shows_the_pypto_error_lines() -> None:
    v = judge_precision(recorded("sim_probe_compile_failure.out"), "sim")
    assert v.verdict == "failed"
    assert "exited with status 1" in v.reason and "RenderedParserError" in v.reason
    assert "Run pass failed" in v.key_output
    assert "RenderedParserError: Errcode: FFFFFF!" in v.key_output
    assert "\x1b[" not in v.key_output  # pypto's colour escapes are stripped
    assert "compiled and simulated" not in v.key_output  # it did not compile
    assert v.numerics_checked is False


# ------------------------------------------------------------------------------------------- verdict table
PASSED = [
    ("fixture NPU line", "PRECISION: passed (max abs diff 1.2e-05 <= atol 1e-03)\n"),
    ("matplotlib noise then passed", MATPLOTLIB_NOISE * 2 + "test passed\n"),
    ("bare success", "running\nsuccess\n"),
    ("pytest summary", "tests/test_op.py ...\n===== 3 passed, 1 warning in 0.12s =====\n"),
    ("pytest -q summary", "...\n3 passed in 0.40s\n"),
    ("compare result", "Compare result: success\n"),
    ("metric named error is not a verdict", "max error: 1.5e-04\ntest passed\n"),
    ("zero failures", "10 passed, 0 failed\n"),
    ("[PASS]", "[PASS]\n"),
]


@pytest.mark.parametrize("label,output", PASSED, ids=[p[0] for p in PASSED])
def test_outputs_that_pass_on_npu(label: str, output: str) -> None:
    v = judge_precision(run(output), "npu")
    assert v.verdict == "passed", v.reason
    assert v.numerics_checked is True


FAILED = [
    ("fixture failed line", "PRECISION: failed (max abs diff 0.5 > atol 1e-03)\n", "PRECISION: failed"),
    ("pytest failures", "F..\n==== 1 failed, 2 passed in 0.30s ====\n", "1 failed, 2 passed"),
    ("pytest no tests", "===== no tests ran in 0.01s =====\n", "no tests ran"),
    ("user says failed", "test failed: mismatch at [3, 7]\n", "test failed"),
    ("pass and fail lines", "case 1 passed\ncase 2 failed\n", "case 2 failed"),
    ("result error", "result: error\n", "result: error"),
]


@pytest.mark.parametrize("label,output,key", FAILED, ids=[f[0] for f in FAILED])
def test_outputs_that_fail_with_exit_zero(label: str, output: str, key: str) -> None:
    v = judge_precision(run(output), "npu")
    assert v.verdict == "failed", v.reason
    assert key in v.key_output


def test_precision_lines_win_over_other_verdict_looking_lines() -> None:
    # The fixture's own verdict is authoritative; a chatty log line mentioning "failed" does not override it.
    out = "[INFO] retry of stream 2 failed, retrying\nPRECISION: passed (max abs diff 0)\n"
    assert judge_precision(run(out), "npu").verdict == "passed"


def test_a_traceback_mentioning_failed_is_not_read_as_a_verdict_line() -> None:
    tb = ('Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
          '    check_failed_cases()\nRuntimeError: check failed: output mismatch\n')
    v = judge_precision(run(tb, 1), "npu")
    assert v.verdict == "failed"
    assert "RuntimeError: check failed: output mismatch" in v.key_output
    assert "status 1" in v.reason
    # Exit 0 + the same traceback: still failed, and the reason names the traceback (a real exception that the
    # test swallowed is not a pass), not the words inside it.
    v0 = judge_precision(run(tb), "npu")
    assert v0.verdict == "failed" and v0.decided_by == "traceback" and "traceback" in v0.reason
    assert [(d.line_no, d.role) for d in v0.deciding_lines] == [(4, "exception")]


def test_matplotlib_noise_alone_is_no_verdict() -> None:
    v = judge_precision(run(MATPLOTLIB_NOISE), "sim")
    assert v.verdict == "failed" and "no verdict line" in v.reason


def test_pypto_error_codes_are_key_output() -> None:
    out = ("[ERROR] FC4000: tile shape [1, 4, 300] exceeds UB\nTraceback (most recent call last):\n"
           '  File "op.py", line 9, in <module>\nRuntimeError: F21004 compile failed\n')
    v = judge_precision(run(out, 1), "npu")
    assert v.verdict == "failed"
    assert "FC4000" in v.key_output and "F21004" in v.key_output


def test_timeout_signal_and_error_lines() -> None:
    assert judge_precision(run("PRECISION: passed\n", None, sig=signal.SIGKILL, timed_out=True), "npu").verdict \
        == "timeout"
    crash = judge_precision(run("PRECISION: passed\n", None, sig=signal.SIGSEGV), "npu")
    assert crash.verdict == "error" and "SIGSEGV" in crash.reason
    through_shell = judge_precision(run("Segmentation fault\n", 139), "npu")
    assert through_shell.verdict == "error" and "SIGSEGV" in through_shell.reason
    err = judge_precision(run("PRECISION: error: golden file missing\n", 2), "npu")
    assert err.verdict == "error" and "golden file missing" in err.key_output


def test_nonzero_exit_fails_even_if_a_line_says_passed() -> None:
    v = judge_precision(run("test passed\n", 1), "npu")
    assert v.verdict == "failed"


def test_sim_never_claims_numerics_even_for_an_npu_style_line() -> None:
    v = judge_precision(run("PRECISION: passed (max abs diff 0)\n"), "sim")
    assert v.verdict == "passed" and v.numerics_checked is False
    assert "does not compute output" in v.key_output


def test_npu_run_of_a_fixture_in_sim_mode_is_not_numerics_checked() -> None:
    v = judge_precision(run("PRECISION: passed (SIM: compiled and simulated; numerics not checked)\n"), "npu")
    assert v.verdict == "passed" and v.numerics_checked is False


def test_key_output_is_bounded_and_keeps_the_end() -> None:
    out = "".join(f"[ERROR] line {i} failed\n" for i in range(2000)) + "ValueError: the last one\n"
    v = judge_precision(run(out, 1), "npu")
    assert len(v.key_output) <= KEY_OUTPUT_MAX_CHARS
    assert "line 1999 failed" in v.key_output


def test_truncated_output_is_judged_on_head_and_tail() -> None:
    r = RunResult(argv=["t"], cwd="/", exit_code=0, signal=None, timed_out=False, duration_s=1, started_at=0,
                  ended_at=1, output_head="start\n", output_tail="x\nPRECISION: passed (max abs diff 0)\n",
                  output_truncated=True, output_bytes=10**9, env_keys=[])
    assert judge_precision(r, "npu").verdict == "passed"


def test_runtime_log_records_are_not_verdict_lines_but_are_key_output() -> None:
    log = "[ERROR] RUNTIME(4242,python):2026-12-02-10:58:35.399 [stream.cc:101] check result failed, retry\n"
    assert judge_precision(run(log + "test passed\n"), "npu").verdict == "passed"
    v = judge_precision(run(log, 1), "npu")
    assert v.verdict == "failed" and "RUNTIME(4242" in v.key_output


# =============================================================================================== issue #11
# Every verdict names the rule that decided it and the lines that did, with their line numbers.
def lines_of(v) -> list[tuple[int, str, str]]:
    return [(d.line_no, d.role, d.text) for d in v.deciding_lines]


# ----------------------------------------------------------------- real outputs of a PyPTO-style example (SIM)
# tests/running/data/pypto_style_example.py is shaped like PyPTO's own examples (domain F.3); the .out files are its
# real output under the 0.2.0 simulator (record_example_outputs.py).
def test_pypto_example_one_test_passes_on_its_check_mark_line_but_sim_checks_no_numerics() -> None:
    v = judge_precision(recorded("example_sim_one_passed.out"), "sim")
    assert v.verdict == "passed" and v.decided_by == "generic-line"
    assert lines_of(v) == [(28, "pass", "✓ Softmax test passed")]
    assert v.numerics_checked is False
    # The example printed "Max difference: 0.013" — the simulator left the output at zero — and still says passed:
    # the reason must not let anyone read this as a precision pass.
    assert "numerics were not checked" in v.reason
    assert "matplotlib" not in v.key_output


def test_pypto_example_all_tests_lists_every_check_mark_and_the_summary() -> None:
    v = judge_precision(recorded("example_sim_all_passed.out"), "sim")
    assert v.verdict == "passed"
    assert [n for n, _, _ in lines_of(v)] == [28, 57, 85, 88]
    assert lines_of(v)[-1] == (88, "pass", "All softmax tests passed!")
    assert "'All softmax tests passed!'" in v.reason


def test_same_example_on_npu_counts_as_numerics_checked() -> None:
    v = judge_precision(recorded("example_sim_one_passed.out"), "npu")
    assert v.verdict == "passed" and v.numerics_checked is True
    assert "numerics were not checked" not in v.reason


def test_npu_example_without_a_device_exits_0_with_instructions_and_fails_visibly() -> None:
    # The upstream examples print how to set TILE_FWK_DEVICE_ID and *return*: exit 0, no verdict. The agent must
    # see exactly that, in the result, not only in a ledger.
    v = judge_precision(recorded("example_npu_no_device.out"), "npu")
    assert v.verdict == "failed" and v.decided_by == "no-verdict-line"
    assert "exit 0 but the test printed no verdict line" in v.reason
    assert [r for _, r, _ in lines_of(v)] == ["last-output", "last-output"]
    assert "TILE_FWK_DEVICE_ID" in lines_of(v)[-1][2]


def test_bad_example_id_fails_on_its_error_line() -> None:
    v = judge_precision(recorded("example_bad_id.out"), "sim")
    assert v.verdict == "failed" and v.decided_by == "exit-status"
    assert lines_of(v) == [(1, "fail", "ERROR: Invalid example ID: pypto_style_example::test_softmx")]
    assert "exited with status 1" in v.reason and "Invalid example ID" in v.reason


def test_wrong_flag_spelling_is_reported_as_an_argument_error() -> None:
    v = judge_precision(recorded("example_wrong_flag_spelling.out"), "sim")
    assert v.verdict == "failed"
    assert "rejected its command-line arguments" in v.reason and "--run-mode" in v.reason
    assert lines_of(v) == [(2, "fail", "pypto_style_example.py: error: unrecognized arguments: --run-mode")]


# ------------------------------------------------------------------------------- more shapes of pass lines
UPSTREAM_PASSED = [
    ("check mark, no subject word", "✓ LayerNorm passed\n"),
    ("passed for the test case",
     "Batch=2, Max diff: 0.000012\n✓ Scaled dot-product attention passed for the test case\n"),
    ("completed successfully", "Running Example 1\nAll examples completed successfully\n"),
    ("all tests passed", "=" * 60 + "\nAll softmax tests passed!\n" + "=" * 60 + "\n"),
    ("unittest OK", "..\n" + "-" * 70 + "\nRan 2 tests in 0.004s\n\nOK\n"),
    ("unittest OK with one skip of two", "s.\n" + "-" * 70 + "\nRan 2 tests in 0.004s\n\nOK (skipped=1)\n"),
    ("pytest long run", "==== 4 passed, 2 deselected in 75.12s (0:01:15) ====\n"),
    ("chinese", "精度对比通过\n"),
    ("metric named Error is not a failure marker", "Error: 0.00012\n✓ Softmax test passed\n"),
    ("python logging error record is not the test's verdict", "ERROR:root:retrying the allocation\nAll tests passed\n"),
    ("exception ignored at shutdown", "✓ Softmax test passed\nException ignored in: <function Stream.__del__ at 0x7f>\n"
     "Traceback (most recent call last):\n  File \"npu.py\", line 9, in __del__\nAttributeError: 'NoneType' object "
     "has no attribute 'sync'\n"),
]


@pytest.mark.parametrize("label,output", UPSTREAM_PASSED, ids=[p[0] for p in UPSTREAM_PASSED])
def test_real_world_pass_lines(label: str, output: str) -> None:
    v = judge_precision(run(output), "npu")
    assert v.verdict == "passed", v.reason
    assert v.deciding_lines and all(d.role == "pass" for d in v.deciding_lines)
    assert all(output.splitlines()[d.line_no - 1].strip() == d.text for d in v.deciding_lines)


def test_unittest_pass_names_both_summary_lines() -> None:
    v = judge_precision(run("..\n" + "-" * 70 + "\nRan 2 tests in 0.004s\n\nOK\n"), "npu")
    assert v.decided_by == "unittest-summary"
    assert lines_of(v) == [(3, "pass", "Ran 2 tests in 0.004s"), (5, "pass", "OK")]


NOT_PASS_LINES = [
    ("progress: compiled", "✓ Kernel compiled successfully\n"),
    ("progress: loaded", "Model loaded successfully\n"),
    ("progress: all kernels built", "All kernels built successfully\n"),
    ("a long line that happens to say passed", "x" * 300 + " test passed\n"),
    ("runtime log record", "[INFO] RUNTIME(4242,python):2026-12-02 check passed\n"),
]


@pytest.mark.parametrize("label,output", NOT_PASS_LINES, ids=[p[0] for p in NOT_PASS_LINES])
def test_lines_that_are_not_a_precision_verdict(label: str, output: str) -> None:
    v = judge_precision(run(output), "npu")
    assert v.verdict == "failed" and v.decided_by == "no-verdict-line", v.reason


# ---------------------------------------------------------------------------- more shapes of failure (exit 0)
EXIT0_FAILED = [
    ("unittest failure", "F.\n" + "=" * 70 + "\nFAIL: test_bad (__main__.T.test_bad)\n" + "-" * 70 +
     "\nRan 2 tests in 0.006s\n\nFAILED (failures=1)\n", "unittest-summary"),
    ("unittest ran nothing", "\n" + "-" * 70 + "\nRan 0 tests in 0.000s\n\nOK\n", "unittest-summary"),
    ("unittest all skipped", "s\n" + "-" * 70 + "\nRan 1 test in 0.004s\n\nOK (skipped=1)\n", "unittest-summary"),
    ("pytest all skipped", "==== 3 skipped in 0.10s ====\n", "pytest-summary"),
    ("PyPTO Error line after a caught exception", "✓ Softmax test passed\n\nError: Not equal to tolerance\n",
     "failure-marker"),
    ("cross mark", "✓ 3D Softmax PASSED\n✗ 3D LayerNorm FAILED\n", "failure-marker"),
    ("[FAIL] tag", "[PASS] case 1\n[FAIL] case 2\n", "failure-marker"),
    ("FAILED with a count", "PASSED: 9\nFAILED: 1\n", "failure-marker"),
    ("result mismatch without the word failed", "Result mismatch for batch=2!\n", "generic-line"),
    ("chinese failure", "精度对比失败\n", "generic-line"),
]


@pytest.mark.parametrize("label,output,by", EXIT0_FAILED, ids=[f[0] for f in EXIT0_FAILED])
def test_real_world_failures_with_exit_zero(label: str, output: str, by: str) -> None:
    v = judge_precision(run(output), "npu")
    assert v.verdict == "failed", v.reason
    assert v.decided_by == by
    assert any(d.role in ("fail", "exception") for d in v.deciding_lines)


def test_zero_failures_count_is_not_a_failure_marker() -> None:
    assert judge_precision(run("PASSED: 10\nFAILED: 0\nAll tests passed\n"), "npu").verdict == "passed"


def test_pytest_failure_names_the_summary_and_the_failed_test() -> None:
    out = ("test_a.py F.s\n=========================== short test summary info ============================\n"
           "FAILED test_a.py::T::test_bad - AssertionError: 1 != 2\n"
           "==================== 1 failed, 1 passed, 1 skipped in 1.74s ====================\n")
    v = judge_precision(run(out, 1), "npu")
    assert v.verdict == "failed"
    assert (4, "fail", "==================== 1 failed, 1 passed, 1 skipped in 1.74s ====================") \
        in lines_of(v)


# ------------------------------------------------------------------------- what an agent could print to fake it
def test_crash_after_printing_passed_is_never_a_pass() -> None:
    out = "✓ Softmax test passed\nAll softmax tests passed!\nSegmentation fault (core dumped)\n"
    for r in (run(out, None, sig=signal.SIGSEGV), run(out, 139), run(out, 134)):
        v = judge_precision(r, "npu")
        assert v.verdict == "error" and v.decided_by == "signal", v.reason
        assert "do not count" in v.reason or "killed" in v.reason


@pytest.mark.parametrize("code", [1, 2, 3, 5, 42, 255, -1])
def test_non_zero_exit_never_passes_whatever_was_printed(code: int) -> None:
    out = ("PRECISION: passed (max abs diff 0)\n==== 5 passed in 0.1s ====\nRan 5 tests in 0.1s\n\nOK\n"
           "✓ Softmax test passed\nAll tests passed!\n")
    v = judge_precision(run(out, code), "npu", pass_pattern="passed")
    assert v.verdict == "failed" and v.decided_by == "exit-status"
    assert f"status {code}" in v.reason and "non-zero exit status overrides them" in v.reason
    assert any(d.role == "ignored-pass" for d in v.deciding_lines)
    assert not any(d.role == "pass" for d in v.deciding_lines)


def test_hanging_after_printing_passed_is_a_timeout() -> None:
    v = judge_precision(run("✓ Softmax test passed\n", None, sig=signal.SIGKILL, timed_out=True), "npu")
    assert v.verdict == "timeout" and "not a verdict" in v.reason


def test_a_pass_line_inside_a_traceback_does_not_count() -> None:
    # The exception's own message says "passed": it is the exception speaking, not the test. Exit 0 (caught and
    # printed with traceback.print_exc()) so only the line rules can decide.
    tb = ('Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    check()\n'
          'RuntimeError: ✓ Softmax test passed\nAll tests passed\n')
    v = judge_precision(run(tb), "npu")
    assert v.verdict == "failed"
    assert not any(d.role == "pass" for d in v.deciding_lines)
    # With the traceback heuristic replaced by a session fail_pattern, the multi-line message still hides both.
    v2 = judge_precision(run(tb), "npu", pass_pattern="passed", fail_pattern="MISMATCH")
    assert v2.verdict == "failed" and v2.decided_by == "no-verdict-line"


def test_a_pass_line_after_a_real_traceback_with_exit_zero_fails() -> None:
    out = ('Running Example 1\nTraceback (most recent call last):\n  File "op.py", line 40, in test\n'
           '    torch.testing.assert_close(y, golden)\nAssertionError: Tensor-likes are not close!\n\n'
           '✓ Softmax test passed\n')
    v = judge_precision(run(out), "npu")
    assert v.verdict == "failed" and v.decided_by == "traceback"
    assert (5, "exception", "AssertionError: Tensor-likes are not close!") in lines_of(v)
    assert (7, "ignored-pass", "✓ Softmax test passed") in lines_of(v)
    assert "fail_pattern" in v.reason  # the way out when the traceback is expected


def test_a_fake_helper_script_traceback_cannot_turn_a_failure_into_a_pass() -> None:
    # Noise tracebacks are only ignored; they never add a pass, so dressing a failure up as helper noise buys
    # nothing: the failure line outside still decides.
    out = (MATPLOTLIB_NOISE + 'Traceback (most recent call last):\n'
           '  File "/x/site-packages/pypto/lib/scripts/draw_swim_lane.py", line 9, in <module>\n'
           'RuntimeError: test passed\nResult mismatch at [3, 7]\n')
    v = judge_precision(run(out), "npu")
    assert v.verdict == "failed" and "mismatch" in v.reason


def test_structured_failure_beats_any_number_of_pass_lines() -> None:
    out = "✓ Softmax test passed\n" * 50 + "PRECISION: failed (max abs diff 0.5)\n" + "✓ test passed\n" * 50
    v = judge_precision(run(out), "npu")
    assert v.verdict == "failed" and v.decided_by == "precision-line"
    assert (51, "fail", "PRECISION: failed (max abs diff 0.5)") in lines_of(v)
    assert len(v.deciding_lines) <= 8 + 2


def test_a_pytest_summary_printed_by_the_test_itself_cannot_hide_pytests_own() -> None:
    out = "1 passed in 0.01s\n==== 1 failed, 1 passed in 0.30s ====\n"
    assert judge_precision(run(out), "npu").verdict == "failed"


def test_truncated_output_that_passes_says_the_middle_was_not_read() -> None:
    r = RunResult(argv=["t"], cwd="/", exit_code=0, signal=None, timed_out=False, duration_s=1, started_at=0,
                  ended_at=1, output_head="start\n", output_tail="x\n✓ Softmax test passed\n",
                  output_truncated=True, output_bytes=10**9, env_keys=[])
    v = judge_precision(r, "npu")
    assert v.verdict == "passed" and "middle was not kept" in v.reason
    # The line number counts the omission marker the server shows: head (1 line), marker (2 lines), tail.
    assert lines_of(v) == [(5, "pass", "✓ Softmax test passed")]


# ----------------------------------------------------------------------------------------- session patterns
def test_pass_pattern_accepts_a_line_no_built_in_rule_knows() -> None:
    out = "comparing 1024 values\nverdict=GOOD (1024/1024 within 1e-3)\n"
    assert judge_precision(run(out), "npu").verdict == "failed"
    v = judge_precision(run(out), "npu", pass_pattern=r"^verdict=GOOD \(")
    assert v.verdict == "passed" and v.decided_by == "session-pattern"
    assert lines_of(v) == [(2, "pass", "verdict=GOOD (1024/1024 within 1e-3)")]
    assert v.deciding_lines[0].recogniser == "session-pattern"


def test_pass_pattern_is_the_only_way_to_pass_when_given() -> None:
    v = judge_precision(run("✓ Softmax test passed\n"), "npu", pass_pattern=r"^verdict=GOOD")
    assert v.verdict == "failed" and v.decided_by == "no-verdict-line"
    assert "pass_pattern" in v.reason and "takes precedence" in v.reason and "✓ Softmax test passed" in v.reason


def test_fail_pattern_catches_what_the_built_in_rules_miss() -> None:
    out = "✓ Softmax test passed\nbatch 3: 12 values outside tolerance\n"
    assert judge_precision(run(out), "npu").verdict == "passed"
    v = judge_precision(run(out), "npu", fail_pattern=r"values outside tolerance")
    assert v.verdict == "failed" and v.decided_by == "session-pattern"
    assert (2, "fail", "batch 3: 12 values outside tolerance") in lines_of(v)


def test_fail_pattern_replaces_the_heuristics_but_not_the_structured_summaries() -> None:
    # An expected traceback (e.g. a fallback path the test exercises on purpose) no longer fails the run once the
    # user names the real failure line...
    # (The blank line matters: lines glued to the exception line are read as its message, never as a pass.)
    tb = 'Traceback (most recent call last):\n  File "op.py", line 3, in f\nKeyError: \'fast_path\'\n\n'
    assert judge_precision(run(tb + "✓ Softmax test passed\n"), "npu").verdict == "failed"
    assert judge_precision(run(tb + "✓ Softmax test passed\n"), "npu", fail_pattern="MISMATCH").verdict == "passed"
    # ...but neither pattern can override an explicit structured failure or a non-zero exit.
    out = "PRECISION: failed (max abs diff 0.5)\nverdict=GOOD\n"
    v = judge_precision(run(out), "npu", pass_pattern="verdict=GOOD", fail_pattern="MISMATCH")
    assert v.verdict == "failed" and v.decided_by == "precision-line"


def test_fail_pattern_ignores_the_matplotlib_noise() -> None:
    v = judge_precision(run(MATPLOTLIB_NOISE + "✓ Softmax test passed\n"), "sim", fail_pattern="Error")
    assert v.verdict == "passed"


@pytest.mark.parametrize("bad,why", [
    ("(unclosed", "not a valid regular expression"),
    ("[a-", "not a valid regular expression"),
    (".*", "matches an empty line"),
    ("x?", "matches an empty line"),
    ("", "is empty"),
    ("a" * 600, "characters long"),
])
def test_bad_patterns_are_refused_with_a_clear_input_error(bad: str, why: str) -> None:
    for name in ("pass_pattern", "fail_pattern"):
        with pytest.raises(InputError) as err:
            compile_verdict_patterns(**{name: bad})
        assert name in str(err.value) and why in str(err.value)
        assert err.value.hint
    with pytest.raises(InputError):
        judge_precision(run("x\n"), "npu", pass_pattern="(unclosed")


def test_compiled_patterns_are_accepted() -> None:
    pats = compile_verdict_patterns(re.compile("GOOD"), None)
    assert pats.pass_re is not None and pats.fail_re is None
    assert judge_precision(run("GOOD\n"), "npu", pass_pattern=re.compile("GOOD")).verdict == "passed"


# ------------------------------------------------------------------------------------------------- SIM honesty
@pytest.mark.parametrize("output,code", [
    ("✓ Softmax test passed\n", 0), ("==== 3 passed in 0.1s ====\n", 0), ("verdict=GOOD\n", 0),
    ("PRECISION: failed (max abs diff 0.5)\n", 0), ("boom\n", 1), ("", 0),
])
def test_sim_never_claims_numerics_and_always_says_so(output: str, code: int) -> None:
    v = judge_precision(run(output, code), "SIM", pass_pattern="verdict=GOOD")
    assert v.numerics_checked is False
    assert "numerics" in v.reason and ("not checked" in v.reason or "never checked" in v.reason)


def test_every_verdict_carries_a_reason_and_a_rule() -> None:
    cases = [run("", 0), run("x\n", 1), run("x\n", None, sig=signal.SIGKILL), run("x\n", None, timed_out=True,
             sig=signal.SIGKILL), run("PRECISION: error: no golden\n", 2), run("✓ a passed\n")]
    for r in cases:
        v = judge_precision(r, "npu")
        assert v.reason and v.decided_by
        assert v.deciding_lines or v.decided_by in ("no-verdict-line", "exit-status", "signal", "timeout")


# ------------------------------------------------------------------------------------------------- properties
_LINES = st.sampled_from([
    "✓ Softmax test passed", "All softmax tests passed!", "PRECISION: passed (max abs diff 0)", "3 passed in 0.1s",
    "Ran 2 tests in 0.1s", "OK", "", "Max difference: 0.01", "Error: boom", "Traceback (most recent call last):",
    '  File "op.py", line 3, in f', "RuntimeError: x", "[ERROR] RUNTIME(1,python): y", "verdict=GOOD",
]) | st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINES, max_size=30), code=st.integers().filter(lambda c: c != 0),
       pattern=st.sampled_from([None, "passed", "GOOD"]))
def test_property_a_non_zero_exit_never_passes(lines: list[str], code: int, pattern: str | None) -> None:
    v = judge_precision(run("\n".join(lines) + "\n", code), "npu", pass_pattern=pattern)
    assert v.verdict != "passed"


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINES, max_size=30), code=st.sampled_from([0, 1, None]))
def test_property_sim_never_claims_numerics_and_lines_point_at_the_output(lines: list[str], code: int | None) -> None:
    out = "\n".join(lines) + "\n"
    v = judge_precision(run(out, code, sig=None if code is not None else signal.SIGKILL), "sim")
    assert v.numerics_checked is False and "SIM" in v.reason
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out).splitlines()  # the verdict reads colour-free text
    for d in v.deciding_lines:  # every deciding line is really there, at its number
        assert 1 <= d.line_no <= len(text) and text[d.line_no - 1].strip().startswith(d.text.rstrip("…"))


# ------------------------------------------------------------------------------- issue #17: PyPTO's own lines
@pytest.mark.parametrize("line", [
    "✓ SwiGLU test completed (SIM: simulated only; numerics not checked)",   # fixtures/operators/upstream_activation
    "✓ FFN static test completed",                                          # fixtures/operators/upstream_ffn (npu)
    "✓ LayerNorm passed",
    "RMSNorm test completed",
    "Attention example test completed",
])
def test_upstream_success_lines_are_verdicts(line: str) -> None:
    v = judge_precision(run(f"Running x.py::test_x (run mode sim)\n{MATPLOTLIB_NOISE}{line}\n"), "sim")
    assert v.verdict == "passed", v.reason
    assert v.decided_by == "generic-line" and v.deciding_lines[-1].text == line
    assert v.command_problem is False


@pytest.mark.parametrize("line", ["Compilation completed", "Warm-up completed", "Step 3 completed"])
def test_completed_about_something_else_is_no_verdict(line: str) -> None:
    # getting ready ("compilation", "warm-up") or no subject at all: not a precision verdict
    v = judge_precision(run(f"{line}\n"), "sim")
    assert v.verdict == "failed" and v.decided_by == "no-verdict-line"


def test_a_run_without_any_verdict_line_is_a_command_problem_with_a_pattern_for_its_last_line() -> None:
    out = "Running activation_ops.py::test_swiglu (run mode sim)\nSwiGLU: output written in 2.5 s\n"
    v = judge_precision(run(out), "sim")
    assert v.verdict == "failed" and v.command_problem is True
    assert "problem of the test command" in v.reason and "pass_pattern" in v.reason
    pat = v.suggested_pass_pattern
    assert pat and re.search(pat, "SwiGLU: output written in 2.5 s") and re.search(pat, "SwiGLU: output written in 3 s")
    assert not re.search(pat, "Running activation_ops.py::test_swiglu (run mode sim)")
    # a real failure (non-zero exit, failure line) is never a command problem
    assert judge_precision(run(out, 1), "sim").command_problem is False
    assert judge_precision(run("✗ SwiGLU FAILED\n"), "sim").command_problem is False
