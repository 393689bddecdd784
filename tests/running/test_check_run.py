"""One function judges a precision run for the ledger, on the manual path and the search's alike
(``tools/operations/runs.check_run``): the test's verdict, amended by what the server saw of the run, and the
result type a failure is recorded as — read from what the run printed, never from the server's own SIM note.

Outputs are real SIM runs recorded in ``tests/running/data`` (the probe operator passing, and failing to compile).
"""

from __future__ import annotations

from pathlib import Path

from pypto_tune.tools.operations.runs import CheckedRun, RunOutcome, check_run
from pypto_tune.tools.running.runner import RunResult

DATA = Path(__file__).resolve().parent / "data"
FOLDER = Path("/ws/output/output_20261205_010203_1_2_x")


def _recorded(name: str) -> tuple[str, int]:
    first, output = (DATA / name).read_text().split("\n", 1)
    return output, int(first.split()[-1])


def _outcome(output: str, exit_code: int, *, dirs: list[Path] | None = None, tampered: list[str] | None = None,
             rejected: dict[str, list[str]] | None = None) -> RunOutcome:
    result = RunResult(argv=["python3", "test_op.py"], cwd="/ws", exit_code=exit_code, signal=None, timed_out=False,
                       duration_s=1.0, started_at=0.0, ended_at=1.0, output_head=output, output_truncated=False,
                       output_bytes=len(output.encode()), env_keys=[])
    return RunOutcome(result=result, run_id=1, dirs=[FOLDER] if dirs is None else dirs, tampered=tampered or [],
                      rejected_outputs=rejected or {})


def _check(out: RunOutcome) -> CheckedRun:
    return check_run(out, "sim")


PASSED, PASSED_EXIT = _recorded("sim_probe_passed.out")
COMPILE_FAILED, COMPILE_EXIT = _recorded("sim_probe_compile_failure.out")


def test_a_pass_with_its_own_folder_is_a_pass() -> None:
    c = _check(_outcome(PASSED, PASSED_EXIT))
    assert (c.verdict, c.result_type, c.command_problem) == ("passed", None, False)


def test_a_pass_whose_every_folder_was_rejected_is_a_runtime_error_naming_the_folder() -> None:
    """It compiled and ran; what it left is not this run's recorded code. Before: "compile-failure", because the
    SIM verdict's note says "compiled and simulated only" — a fact the search then learnt about the candidate."""
    out = _outcome(PASSED, PASSED_EXIT, dirs=[], rejected={
        FOLDER.name: ["program.json names /elsewhere/op.py, which is not a file of this run's recorded copy"]})
    c = _check(out)
    assert c.verdict == "failed" and c.result_type == "runtime-error"
    assert FOLDER.name in c.reason and "/elsewhere/op.py" in c.reason


def test_a_pass_that_left_no_folder_is_a_runtime_error_even_if_its_pass_line_says_compiled() -> None:
    """Our fixtures print "PRECISION: passed (SIM: compiled and simulated …)": the deciding line is not evidence
    of a compile failure, and neither is the server's note."""
    out = "PRECISION: passed (SIM: compiled and simulated; numerics not checked)\n"
    c = _check(_outcome(out, 0, dirs=[]))
    assert c.verdict == "failed" and c.result_type == "runtime-error"
    assert "no output folder" in c.reason


def test_a_compile_error_the_test_caught_and_printed_past_is_still_a_compile_failure() -> None:
    errors = [line for line in COMPILE_FAILED.splitlines() if "Run pass failed" in line or "Errcode" in line]
    assert errors, "the recorded compile failure carries PyPTO's error lines"
    out = "\n".join(errors) + "\nPRECISION: passed (SIM: compiled and simulated; numerics not checked)\n"
    c = _check(_outcome(out, 0, dirs=[]))
    assert c.verdict == "failed" and c.result_type == "compile-failure"


def test_a_real_compile_failure_is_a_compile_failure() -> None:
    c = _check(_outcome(COMPILE_FAILED, COMPILE_EXIT, dirs=[]))
    assert c.verdict == "failed" and c.result_type == "compile-failure"


def test_a_run_that_changed_its_recorded_files_is_discarded_as_a_runtime_error() -> None:
    """A discarded run may not have executed the recorded code, so it says nothing about that code's compiling;
    before, a SIM pass discarded this way was a "compile-failure" through the note. A copy rewritten while the run
    executed is an attack on the run and stays charged to the change; a run discarded for the environment's sake
    (the interpreter's files, the disk, the sandbox) is charged to nothing."""
    c = _check(_outcome(PASSED, PASSED_EXIT, tampered=["op.py"]))
    assert c.verdict == "error" and c.result_type == "runtime-error"
    assert "op.py" in c.reason
    env = _check(_outcome(PASSED, PASSED_EXIT, tampered=["interpreter added: /venv/site-packages/x.pth"]))
    assert env.verdict == "error" and env.result_type == "discarded"


def test_exit_zero_without_a_verdict_line_is_flagged_as_the_commands_problem() -> None:
    output, code = _recorded("sim_probe_no_verdict.out")
    c = _check(_outcome(output, code))
    assert c.verdict == "failed" and c.command_problem
