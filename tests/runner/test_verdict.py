"""judge_precision: R4 restricted to verdict lines (verdict.py's module docstring), over real and hand-made outputs.

Real outputs were recorded from the SIM probe by data/record_outputs.py; hand-made ones imitate what users'
tests print. Each case states the verdict and why.
"""

from __future__ import annotations

import signal

import pytest

from pypto_tune.tools.runner import RunResult
from pypto_tune.tools.verdict import KEY_OUTPUT_MAX_CHARS, judge_precision
from runner_helpers import DATA

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
    # Exit 0 + the same traceback + no verdict line: still failed, because nothing said passed.
    v0 = judge_precision(run(tb), "npu")
    assert v0.verdict == "failed" and "no verdict line" in v0.reason


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
