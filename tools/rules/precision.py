"""The precision verdict (R4, domain D.2): seven steps in order, the first that applies decides.

``tools/running/verdict.py`` reads the output (verdict lines, tracebacks, the result model); this module decides,
one function per step, composed by :func:`judge_precision`:

1. :func:`timed_out` — the run timed out → ``timeout``;
2. :func:`crashed` — the process was killed by a signal, ended without a status, or a shell reports 128+N for a
   crash signal → ``error``;
3. :func:`reported_error` — a ``PRECISION: error`` line (our fixtures' protocol) → ``error``;
4. :func:`nonzero_exit` — exit status ≠ 0 → ``failed``. **Nothing printed can outweigh a non-zero exit**; pass lines
   are listed as ignored so the agent sees why they did not count;
5. :func:`failure_line` — exit 0 and a failure line → ``failed``. Failure lines are, in this order of authority
   (:func:`failure_lines`): a structured summary (``PRECISION: failed``, pytest's ``1 failed, 2 passed in 0.3s``,
   unittest's ``Ran 3 tests`` + ``FAILED (…)``, or ``Ran 0 tests`` / every test skipped); then
   (:func:`heuristic_failures`) either the session's ``fail_pattern`` or, without one, the built-in heuristics:
   explicit failure markers (``ERROR: …``, ``Error: …``, ``FAIL: …``, ``FAILED …``, ``✗ …``, ``[FAIL]``), a Python
   traceback that is not known noise, and — only when no structured verdict line and no ``pass_pattern`` line is
   present — chatty lines that pair a subject with a failure word (``Result mismatch``, ``test failed: …``);
6. :func:`pass_line` — exit 0 and a pass line → ``passed``. Pass lines (:func:`pass_lines`) are the session's
   ``pass_pattern`` matches when one is given (then nothing else can pass), else the first kind present of:
   ``PRECISION: passed``, a pytest summary, a unittest summary, generic lines (``✓ LayerNorm passed``, ``✓ … passed
   for the test case``, ``All softmax tests passed!``, ``All examples completed successfully``, ``Compare result:
   success``, ``[PASS]``, and PyPTO's own examples' ``✓ SwiGLU test completed`` / ``FFN test completed``:
   "completed" is a verdict on a line that is check-marked or names a test, never on "Compilation completed");
7. :func:`no_verdict_line` — exit 0 and none of the above → ``failed`` ("exit 0 but no verdict line"), with the last
   output lines shown. This is a **command problem** (``command_problem=True``), not a verdict about the code: the
   test did not say, so the session needs a ``pass_pattern`` for the line it prints on success. A caller never counts
   it as a failure of the operator (not a baseline failure under R5, no chip is blamed).

In SIM the simulator computes no output values (A.8): even a passed verdict has ``numerics_checked=False`` and its
reason says that numerics were not checked. Every step is pure: it reads the :class:`Reading` and returns a verdict
or None (not its case); nothing is recorded here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pypto_tune.tools.running.verdict import (
    PATTERN_LINE_MAX, SHELL_SIGNAL_EXITS, SIM_NOTE, SIM_NOTE_NOT_PASSED, LINE_TEXT_MAX, DecidedBy, Hit, LineRole,
    Scan, Verdict, VerdictLine, VerdictPatterns, VerdictResult, clip_key_output, clip_line, compile_verdict_patterns,
    generic_kind, is_argparse_error, is_failure_marker, key_error_lines, pick_lines, signal_name, strip_ansi,
    structured_lines, suggest_pass_pattern,
)

#: the structured kinds in their order of authority (the first present names the pass lines)
STRUCTURED = ("precision", "pytest", "unittest")
#: the rule of the decision order a structured kind's line decides by
STRUCTURED_BY: dict[str, DecidedBy] = {"precision": "precision-line", "pytest": "pytest-summary",
                                       "unittest": "unittest-summary", "": "generic-line"}
#: a failure decided by one of these reports a comparison, so the numbers were compared (a marker or a traceback
#: says nothing about them)
COMPARED_BY = frozenset({"precision-line", "pytest-summary", "unittest-summary", "generic-line", "session-pattern"})
HEURISTIC_WHAT = {"session-pattern": "a line matches the session's fail_pattern",
                  "failure-marker": "an explicit failure line",
                  "traceback": "a Python traceback (not known noise) was printed, so a pass line cannot be trusted; "
                               "if it is expected, give the session a fail_pattern",
                  "generic-line": "a result line reports failure"}


class FinishedRun(Protocol):
    """What the verdict reads of a run (``tools/running/runner.py::RunResult``)."""

    @property
    def output(self) -> str: ...
    @property
    def output_truncated(self) -> bool: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def signal(self) -> int | None: ...
    @property
    def exit_code(self) -> int | None: ...


@dataclass(frozen=True)
class Reading:
    """One run's output, read once: what every step looks at."""

    run: FinishedRun
    pats: VerdictPatterns
    sim: bool
    scan: Scan
    vis: list[int]  # visible lines: outside tracebacks and their messages
    stripped: dict[int, str]  # visible line index → its text, stripped
    kinds: dict[str, list[Hit]]  # structured verdict lines by kind
    pass_kind: str  # the first structured kind present, "" when none is
    builtin_pass: list[Hit]  # the pass lines the built-in recognisers read
    passes: list[Hit]  # the pass lines that count: the session pattern's when given, else builtin_pass
    errors: list[str]  # key error lines for the agent
    exc: str  # the last real exception line, "" when none

    @property
    def lines(self) -> list[str]:
        return self.scan.lines

    @property
    def truncated_note(self) -> str:
        return ("; note: the output was capped and its middle was not kept, so a verdict line there could not be read"
                if self.run.output_truncated else "")


def pass_lines(scan: Scan, vis: list[int], stripped: dict[int, str], kinds: dict[str, list[Hit]],
               pats: VerdictPatterns) -> tuple[str, list[Hit], list[Hit]]:
    """(pass_kind, builtin_pass, passes): the session pattern alone when given, else the first structured kind
    present, else generic lines."""
    pass_kind = next((k for k in STRUCTURED if kinds[k]), "")
    if pass_kind:
        builtin_pass = [h for h in kinds[pass_kind] if h.polarity == "pass"]
    else:
        builtin_pass = [Hit(i, "pass", "generic") for i in vis if generic_kind(stripped[i]) == "pass"]
    if pats.pass_re is None:
        return pass_kind, builtin_pass, builtin_pass
    rx = pats.pass_re
    return pass_kind, builtin_pass, [Hit(i, "pass", "session-pattern") for i in vis
                                     if rx.search(scan.lines[i][:PATTERN_LINE_MAX])]


def read_run(run: FinishedRun, pats: VerdictPatterns, sim: bool) -> Reading:
    """Read ``run``'s output once for every step."""
    scan = Scan(strip_ansi(run.output))
    vis = scan.visible()
    stripped = {i: scan.lines[i].strip() for i in vis}
    kinds = structured_lines(scan, vis)
    pass_kind, builtin_pass, passes = pass_lines(scan, vis, stripped, kinds, pats)
    exc = scan.lines[scan.real_exc[-1]].strip()[:LINE_TEXT_MAX] if scan.real_exc else ""
    return Reading(run=run, pats=pats, sim=sim, scan=scan, vis=vis, stripped=stripped, kinds=kinds,
                   pass_kind=pass_kind, builtin_pass=builtin_pass, passes=passes, errors=key_error_lines(scan),
                   exc=exc)


# ----------------------------------------------------------------------------------- what a verdict shows
def deciding(r: Reading, h: Hit, role: LineRole | None = None) -> VerdictLine:
    """``h`` as a deciding line (in its own role unless ``role`` says otherwise)."""
    return VerdictLine(line_no=h.idx + 1, text=clip_line(r.lines[h.idx]), role=role or h.polarity,
                       recogniser=h.recogniser)


def last_output(r: Reading, k: int = 3) -> list[VerdictLine]:
    """The last ``k`` non-blank lines outside known noise: what a run that decided nothing shows."""
    idx = [i for i in range(len(r.lines)) if r.lines[i].strip() and not r.scan.noise[i]][-k:]
    return [VerdictLine(line_no=i + 1, text=clip_line(r.lines[i]), role="last-output", recogniser="output")
            for i in idx]


def verdict_of(r: Reading, verdict: Verdict, decided_by: DecidedBy, reason: str, lines: list[VerdictLine],
               checked: bool = False) -> VerdictResult:
    """The result: the deciding lines, then the key error lines not already shown; in SIM the note that numerics
    were not checked, in the key output and the reason."""
    shown = {d.text for d in lines}
    key = [f"L{d.line_no}: {d.text}" for d in lines] + [e for e in r.errors if clip_line(e) not in shown]
    if r.sim:
        note = SIM_NOTE if verdict == "passed" else SIM_NOTE_NOT_PASSED
        key = [*key, note]
        reason = f"{reason}; {note}"
    return VerdictResult(verdict=verdict, numerics_checked=checked and not r.sim, key_output=clip_key_output(key),
                         reason=reason, decided_by=decided_by, deciding_lines=lines)


# --------------------------------------------------------------------------------------------- the steps
def timed_out(r: Reading) -> VerdictResult | None:
    """1. The run timed out: whatever it printed is not a verdict."""
    if not r.run.timed_out:
        return None
    return verdict_of(r, "timeout", "timeout", f"the test command did not finish within its time limit "
                      f"({r.run.duration_s:.0f} s elapsed) and was killed; whatever it printed is not a verdict",
                      last_output(r))


def crashed(r: Reading) -> VerdictResult | None:
    """2. The process did not end on its own terms (a signal, no status, a shell's 128+N): nothing printed counts."""
    run = r.run
    if run.signal is not None:
        return verdict_of(r, "error", "signal", f"the test process was killed by {signal_name(run.signal)} (a crash, "
                          "not a precision verdict; lines it printed before do not count)", last_output(r))
    if run.exit_code is None:
        return verdict_of(r, "error", "signal", "the test process ended without an exit status", last_output(r))
    if run.exit_code in SHELL_SIGNAL_EXITS:
        return verdict_of(r, "error", "signal", f"exit status {run.exit_code} means a process was killed by "
                          f"{signal_name(SHELL_SIGNAL_EXITS[run.exit_code])} (reported through a shell)",
                          last_output(r))
    return None


def reported_error(r: Reading) -> VerdictResult | None:
    """3. ``PRECISION: error``: our fixtures' protocol for "could not judge" (a missing golden file, an exception
    the test caught)."""
    errors = [h for h in r.kinds["precision"] if h.polarity == "error"]
    if not errors:
        return None
    return verdict_of(r, "error", "precision-error-line", f"the test reported an error instead of a verdict (exit "
                      f"{r.run.exit_code}): {r.stripped[errors[-1].idx]!r}",
                      [deciding(r, h) for h in pick_lines(errors)])


def nonzero_exit(r: Reading) -> VerdictResult | None:
    """4. A non-zero exit fails the run whatever was printed; the pass lines are shown as ignored."""
    if r.run.exit_code == 0:
        return None
    fails = [h for k in STRUCTURED for h in r.kinds[k] if h.polarity == "fail"]
    markers = [Hit(i, "fail", "marker") for i in r.vis if is_failure_marker(r.stripped[i])]
    argparse_errors = [Hit(i, "fail", "argparse") for i in r.vis if is_argparse_error(r.stripped[i])]
    lines = [deciding(r, h) for h in pick_lines(fails or markers or argparse_errors)]
    if r.scan.real_exc:
        lines.append(VerdictLine(line_no=r.scan.real_exc[-1] + 1, text=clip_line(r.exc), role="exception",
                                 recogniser="traceback"))
    lines += [deciding(r, h, "ignored-pass") for h in r.passes[-2:]]
    what = ""
    if argparse_errors:
        what = (f"; the script rejected its command-line arguments: {r.stripped[argparse_errors[-1].idx]!r} (check "
                "the test command's flags against the script's --help)")
    elif fails or markers:
        what = f"; failure line: {r.stripped[(fails or markers)[-1].idx]!r}"
    if r.exc:
        what += f"; last exception: {r.exc}"
    if r.passes:
        what += (f"; {len(r.passes)} pass line(s) were printed but a non-zero exit status overrides them "
                 f"(last: {r.stripped[r.passes[-1].idx]!r})")
    return verdict_of(r, "failed", "exit-status", f"the test command exited with status {r.run.exit_code}{what}",
                      lines or last_output(r), checked=bool(fails))


def heuristic_failures(r: Reading) -> tuple[list[Hit], DecidedBy]:
    """Failure lines below the structured summaries: the session's fail_pattern when given (it replaces the rest),
    else markers, else a real traceback, else — only when the test printed no verdict line of its own — chatty
    lines."""
    if r.pats.fail_re is not None:
        rx = r.pats.fail_re
        return [Hit(i, "fail", "session-pattern") for i in range(len(r.lines))
                if not r.scan.noise[i] and rx.search(r.lines[i][:PATTERN_LINE_MAX])], "session-pattern"
    markers = [Hit(i, "fail", "marker") for i in r.vis if is_failure_marker(r.stripped[i])]
    if markers:
        return markers, "failure-marker"
    if r.scan.real_exc:
        return [Hit(i, "fail", "traceback") for i in r.scan.real_exc], "traceback"
    # A structured line or the session's pass line is authoritative over "[INFO] retry of stream 2 failed,
    # retrying": chatty lines count only without one.
    if r.pass_kind or (r.pats.pass_re is not None and r.passes):
        return [], "failure-marker"
    return [Hit(i, "fail", "generic") for i in r.vis if generic_kind(r.stripped[i]) == "fail"], "generic-line"


def failure_lines(r: Reading) -> tuple[list[Hit], DecidedBy, str] | None:
    """(the failure lines, the rule they decide by, what they are) for an exit-0 run, or None when there is none.
    A structured summary outranks every heuristic."""
    structured = [(k, h) for k in STRUCTURED for h in r.kinds[k] if h.polarity == "fail"]
    if structured:
        kind = structured[0][0]
        return [h for _, h in structured], STRUCTURED_BY[kind], f"a {kind} verdict line reports failure"
    hits, by = heuristic_failures(r)
    return (hits, by, HEURISTIC_WHAT[by]) if hits else None


def failure_line(r: Reading) -> VerdictResult | None:
    """5. Exit 0 and a failure line: the run failed; the pass lines printed too are shown as ignored."""
    found = failure_lines(r)
    if found is None:
        return None
    hits, by, what = found
    lines = [deciding(r, h, "exception" if by == "traceback" else None) for h in pick_lines(hits)]
    lines += [deciding(r, h, "ignored-pass") for h in r.passes[-2:]]
    tail = f" ({len(r.passes)} pass line(s) were printed too)" if r.passes else ""
    return verdict_of(r, "failed", by, f"exit 0 but {what}: {r.lines[hits[-1].idx].strip()!r}{tail}", lines,
                      checked=by in COMPARED_BY)


def pass_line(r: Reading) -> VerdictResult | None:
    """6. Exit 0, no failure line, and a pass line: passed (numerics checked unless the line says they were not)."""
    if not r.passes:
        return None
    session = r.pats.pass_re is not None
    by: DecidedBy = "session-pattern" if session else STRUCTURED_BY[r.pass_kind]
    what = ("the session's pass_pattern matches" if session else
            f"the {r.pass_kind or 'generic'} verdict line says passed")
    checked = not any("numerics not checked" in r.stripped[h.idx].lower() for h in r.passes)
    return verdict_of(r, "passed", by, f"exit 0 and {what}: {r.stripped[r.passes[-1].idx]!r}{r.truncated_note}",
                      [deciding(r, h) for h in pick_lines(r.passes)], checked=checked)


def no_verdict_line(r: Reading) -> VerdictResult:
    """7. Exit 0 and nothing decided: a problem of the test command, not a verdict on the operator."""
    extra = ""
    if r.pats.pass_re is not None and r.builtin_pass:
        extra = (f"; the session's pass_pattern {r.pats.pass_re.pattern!r} matched no line (a built-in recogniser "
                 f"read {r.stripped[r.builtin_pass[-1].idx]!r}, but the session pattern takes precedence)")
    elif r.pats.pass_re is not None:
        extra = f"; the session's pass_pattern {r.pats.pass_re.pattern!r} matched no line"
    tail = last_output(r)
    suggestion = suggest_pass_pattern(tail[-1].text) if tail else None
    hint = (f" (if {tail[-1].text!r} is its success line: pass_pattern={suggestion!r})" if suggestion else "")
    out = verdict_of(r, "failed", "no-verdict-line", "exit 0 but the test printed no verdict line (none of "
                     "'PRECISION: passed', a pytest or unittest summary, '✓ … passed', '✓ … completed', '… test "
                     f"completed', 'All … tests passed', 'completed successfully'){extra}{r.truncated_note}. This is "
                     "a problem of the test command, not a verdict on the operator: make the test print its verdict, "
                     f"or start the session again with a pass_pattern that matches the line it prints on success{hint}",
                     tail)
    return out.model_copy(update={"command_problem": True, "suggested_pass_pattern": suggestion})


#: steps 1–6 in their order; step 7 decides when none of them does
STEPS: tuple[Callable[[Reading], VerdictResult | None], ...] = (
    timed_out, crashed, reported_error, nonzero_exit, failure_line, pass_line,
)


def judge_precision(result: FinishedRun, run_mode: str, *, pass_pattern: str | re.Pattern[str] | None = None,
                    fail_pattern: str | re.Pattern[str] | None = None) -> VerdictResult:
    """Apply R4 to one run, in the decision order of the module docstring. Pure: reads only its arguments.

    ``pass_pattern`` / ``fail_pattern`` are the session's optional verdict patterns (validated with
    :func:`compile_verdict_patterns`; a bad one raises :class:`InputError`). The result carries the rule that
    decided (``decided_by``) and the lines that decided with their line numbers (``deciding_lines``). In SIM,
    ``numerics_checked`` is always False and the reason says that numerics were not checked (A.8).
    """
    r = read_run(result, compile_verdict_patterns(pass_pattern, fail_pattern), run_mode.lower() == "sim")
    for step in STEPS:
        verdict = step(r)
        if verdict is not None:
            return verdict
    return no_verdict_line(r)
