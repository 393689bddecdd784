"""The precision verdict's steps (tools/rules/precision.py), one at a time: each decides its own case and answers None
outside it, and the first step that applies decides. The whole verdict on recorded and written outputs is specified in
tests/running/test_verdict.py; here each step is held to its own part of the decision order. Pure: no process.
"""

from __future__ import annotations

import pytest

from pypto_tune.tools.rules import precision as p
from pypto_tune.tools.running.runner import RunResult
from pypto_tune.tools.running.verdict import compile_verdict_patterns

TRACEBACK = 'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\nRuntimeError: boom\n'
NOISE = ('Traceback (most recent call last):\n  File "/x/pypto/lib/scripts/draw.py", line 1, in <module>\n'
         "ModuleNotFoundError: No module named 'matplotlib'\n")


def reading(output: str, exit_code: int | None = 0, *, sig: int | None = None, timed_out: bool = False,
            pass_pattern: str | None = None, fail_pattern: str | None = None, sim: bool = False) -> p.Reading:
    run = RunResult(argv=["python3", "t.py"], cwd="/ws", exit_code=exit_code, signal=sig, timed_out=timed_out,
                    duration_s=12.0, started_at=0.0, ended_at=12.0, output_head=output, output_truncated=False,
                    output_bytes=len(output.encode()), env_keys=[])
    return p.read_run(run, compile_verdict_patterns(pass_pattern, fail_pattern), sim)


def test_the_steps_run_in_the_documented_order() -> None:
    assert p.STEPS == (p.timed_out, p.crashed, p.reported_error, p.nonzero_exit, p.failure_line, p.pass_line)


@pytest.mark.parametrize("step", p.STEPS)
def test_no_step_decides_a_clean_exit_zero_run_that_printed_nothing_but_step_seven_does(step) -> None:
    r = reading("compiling\nrunning kernel\n")
    assert step(r) is None
    out = p.no_verdict_line(r)
    assert (out.verdict, out.decided_by, out.command_problem) == ("failed", "no-verdict-line", True)
    assert [d.text for d in out.deciding_lines] == ["compiling", "running kernel"]


def test_step_one_a_timeout_outranks_everything_printed() -> None:
    r = reading("PRECISION: error\n", 1, timed_out=True)
    out = p.timed_out(r)
    assert out is not None and (out.verdict, out.decided_by) == ("timeout", "timeout")
    assert "(12 s elapsed)" in out.reason
    assert p.timed_out(reading("PRECISION: error\n", 1)) is None


@pytest.mark.parametrize(("exit_code", "sig", "reason"), [
    (None, 11, "killed by SIGSEGV"),
    (None, None, "ended without an exit status"),
    (139, None, "exit status 139 means a process was killed by SIGSEGV (reported through a shell)"),
    (134, None, "killed by SIGABRT"),
])
def test_step_two_a_crash_is_an_error_whatever_was_printed(exit_code: int | None, sig: int | None,
                                                           reason: str) -> None:
    out = p.crashed(reading("PRECISION: passed\n", exit_code, sig=sig))
    assert out is not None and (out.verdict, out.decided_by) == ("error", "signal")
    assert reason in out.reason


@pytest.mark.parametrize("exit_code", [0, 1, 2, 128])
def test_step_two_an_ordinary_exit_status_is_not_a_crash(exit_code: int) -> None:
    assert p.crashed(reading("PRECISION: passed\n", exit_code)) is None


def test_step_three_a_precision_error_line_outranks_the_exit_status() -> None:
    out = p.reported_error(reading("PRECISION: error golden file missing\n", 1))
    assert out is not None and (out.verdict, out.decided_by) == ("error", "precision-error-line")
    assert "(exit 1)" in out.reason
    assert p.reported_error(reading("PRECISION: failed\n", 1)) is None


def test_step_four_a_nonzero_exit_fails_and_shows_the_pass_lines_it_overruled() -> None:
    out = p.nonzero_exit(reading("✓ Softmax test passed\nFAIL: test_x\n", 1))
    assert out is not None and (out.verdict, out.decided_by) == ("failed", "exit-status")
    assert [(d.text, d.role) for d in out.deciding_lines] == [("FAIL: test_x", "fail"),
                                                              ("✓ Softmax test passed", "ignored-pass")]
    assert "failure line: 'FAIL: test_x'" in out.reason and "non-zero exit status overrides" in out.reason
    assert not out.numerics_checked  # a marker is not a comparison
    assert p.nonzero_exit(reading("FAIL: test_x\n", 0)) is None


def test_step_four_names_an_argparse_refusal_and_the_last_exception() -> None:
    out = p.nonzero_exit(reading("t.py: error: unrecognized arguments: --fast\n" + TRACEBACK, 2))
    assert out is not None
    assert "rejected its command-line arguments" in out.reason and "last exception: RuntimeError: boom" in out.reason
    assert [d.role for d in out.deciding_lines] == ["fail", "exception"]


def test_step_four_with_nothing_recognised_shows_the_last_output_lines() -> None:
    out = p.nonzero_exit(reading("a\nb\nc\nd\n", 3))
    assert out is not None and [d.role for d in out.deciding_lines] == ["last-output"] * 3


def test_step_four_points_at_the_last_exception_and_shows_only_the_last_two_overruled_pass_lines() -> None:
    out = p.nonzero_exit(reading(TRACEBACK.replace("boom", "first try") + "retrying\n" + TRACEBACK, 1))
    assert out is not None
    assert [(d.line_no, d.text, d.role) for d in out.deciding_lines] == [(7, "RuntimeError: boom", "exception")]
    out = p.nonzero_exit(reading("✓ A test passed\n✓ B test passed\n✓ C test passed\nFAIL: x\n", 1))
    assert out is not None
    assert [(d.line_no, d.role) for d in out.deciding_lines] == [(4, "fail"), (2, "ignored-pass"), (3, "ignored-pass")]
    assert "3 pass line(s) were printed but a non-zero exit status overrides them (last: '✓ C test passed')" \
        in out.reason


def test_step_five_a_structured_summary_outranks_every_heuristic() -> None:
    r = reading("ERROR: something\n1 failed, 2 passed in 0.3s\n")
    assert p.failure_lines(r) == ([p.Hit(1, "fail", "pytest")], "pytest-summary",
                                  "a pytest verdict line reports failure")
    out = p.failure_line(r)
    assert out is not None and out.decided_by == "pytest-summary" and out.numerics_checked


def test_step_five_the_first_structured_kind_in_order_of_authority_names_the_rule() -> None:
    r = reading("1 failed, 2 passed in 0.3s\nPRECISION: failed max diff 3\n")
    hits, by, what = p.failure_lines(r)
    assert [h.recogniser for h in hits] == ["precision", "pytest"]
    assert (by, what) == ("precision-line", "a precision verdict line reports failure")


def test_step_five_shows_the_last_two_pass_lines_it_overruled_and_counts_them_all() -> None:
    out = p.failure_line(reading("✓ A test passed\n✓ B test passed\n✓ C test passed\nFAIL: x\n"))
    assert out is not None
    assert [(d.line_no, d.role) for d in out.deciding_lines] == [(4, "fail"), (2, "ignored-pass"), (3, "ignored-pass")]
    assert out.reason == "exit 0 but an explicit failure line: 'FAIL: x' (3 pass line(s) were printed too)"
    alone = p.failure_line(reading("FAIL: x\n"))
    assert alone is not None and alone.reason == "exit 0 but an explicit failure line: 'FAIL: x'"


def test_step_five_heuristics_in_order_marker_then_traceback_then_chatty_lines() -> None:
    assert p.heuristic_failures(reading("FAIL: a\n" + TRACEBACK))[1] == "failure-marker"
    assert p.heuristic_failures(reading("Result mismatch\n" + TRACEBACK))[1] == "traceback"
    hits, by = p.heuristic_failures(reading("Result mismatch\n"))
    assert (by, [h.idx for h in hits]) == ("generic-line", [0])


def test_step_five_chatty_lines_do_not_count_beside_a_verdict_line_of_the_test() -> None:
    assert p.heuristic_failures(reading("Result mismatch\nPRECISION: passed\n"))[0] == []
    assert p.heuristic_failures(reading("Result mismatch\nRESULT: OK\n", pass_pattern="RESULT: OK"))[0] == []
    assert p.failure_line(reading("Result mismatch\nPRECISION: passed\n")) is None


def test_step_five_a_fail_pattern_replaces_the_heuristics_and_skips_known_noise() -> None:
    r = reading(NOISE + "FAIL: a\nDIFF too large\n", fail_pattern="DIFF|matplotlib")
    hits, by = p.heuristic_failures(r)
    assert (by, [r.lines[h.idx] for h in hits]) == ("session-pattern", ["DIFF too large"])


def test_step_six_passes_on_the_first_structured_kind_present_and_reads_the_numerics_note() -> None:
    r = reading("3 passed in 0.1s\nPRECISION: passed (numerics not checked)\n")
    assert r.pass_kind == "precision" and [h.idx for h in r.passes] == [1]
    out = p.pass_line(r)
    assert out is not None and (out.verdict, out.decided_by) == ("passed", "precision-line")
    assert not out.numerics_checked
    assert p.pass_line(reading("nothing to see\n")) is None


def test_step_six_with_a_pass_pattern_only_its_lines_pass() -> None:
    r = reading("PRECISION: passed\nRESULT: OK\n", pass_pattern="RESULT: OK")
    assert [h.idx for h in r.builtin_pass] == [0] and [(h.idx, h.recogniser) for h in r.passes] == [
        (1, "session-pattern")]
    out = p.pass_line(r)
    assert out is not None and out.decided_by == "session-pattern"


@pytest.mark.parametrize(("output", "pass_pattern", "said"), [
    ("PRECISION: passed\n", None, "the precision verdict line says passed: 'PRECISION: passed'"),
    ("All softmax tests passed!\n", None, "the generic verdict line says passed: 'All softmax tests passed!'"),
    ("RESULT: OK\n", "RESULT: OK", "the session's pass_pattern matches: 'RESULT: OK'"),
])
def test_step_six_says_which_line_passed_the_run(output: str, pass_pattern: str | None, said: str) -> None:
    out = p.pass_line(reading(output, pass_pattern=pass_pattern))
    assert out is not None and out.reason == f"exit 0 and {said}"


def test_step_seven_shows_the_last_three_nonblank_lines_outside_known_noise() -> None:
    out = p.no_verdict_line(reading("a\nb\n\nc\n\n" + NOISE))
    assert [(d.line_no, d.text, d.role) for d in out.deciding_lines] == [
        (1, "a", "last-output"), (2, "b", "last-output"), (4, "c", "last-output")]


def test_step_seven_names_the_pass_pattern_that_matched_nothing_and_suggests_one() -> None:
    out = p.no_verdict_line(reading("✓ Softmax test passed\nmax diff 0.001 ok\n", pass_pattern="RESULT: OK"))
    assert "pass_pattern 'RESULT: OK' matched no line" in out.reason
    assert "a built-in recogniser read '✓ Softmax test passed'" in out.reason
    assert out.suggested_pass_pattern == r"max diff [-+.0-9eE]+ ok"


def test_in_sim_every_step_says_numerics_were_not_checked() -> None:
    passed = p.pass_line(reading("PRECISION: passed\n", sim=True))
    failed = p.nonzero_exit(reading("FAIL: x\n", 1, sim=True))
    assert passed is not None and failed is not None
    assert passed.reason.endswith(p.SIM_NOTE) and not passed.numerics_checked
    assert failed.reason.endswith(p.SIM_NOTE_NOT_PASSED)


@pytest.mark.parametrize(("output", "exit_code", "sig", "timed_out"), [
    ("PRECISION: passed\n", None, 9, True),  # step 1
    ("PRECISION: passed\n", None, 11, False),  # step 2
    ("PRECISION: error golden file missing\n", 1, None, False),  # step 3
    ("compiling\n", 0, None, False),  # step 7
])
def test_a_run_that_compared_nothing_never_claims_its_numerics_were_checked(output: str, exit_code: int | None,
                                                                             sig: int | None, timed_out: bool) -> None:
    out = p.judge_precision(reading(output, exit_code, sig=sig, timed_out=timed_out).run, "npu")
    assert out.verdict != "passed" and not out.numerics_checked
