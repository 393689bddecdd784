"""Read a run of the test command for the precision gate R4 (domain D.2): its verdict lines, tracebacks and result.

R4 says: passed iff exit status 0, no timeout or signal, the output says "passed"/"success" and says none of
"failed"/"error"/"timeout". Applied to the whole output that rule is wrong here: every SIM run prints
``ModuleNotFoundError: No module named 'matplotlib'`` tracebacks from pypto's drawing helpers (A.2b), and real tests
print metrics such as ``max error: 1e-5``. So the keywords are looked for only in **verdict lines**, and every
result names the lines that decided it (:attr:`VerdictResult.deciding_lines`).

This module reads: it splits the output into lines, locates tracebacks (:class:`Scan`), recognises structured
summaries (:func:`structured_lines`), failure markers (:func:`is_failure_marker`) and chatty result lines
(:func:`generic_kind`), and holds the result model. Which reading decides, in which order, is the rule's:
``tools/rules/precision.py`` (``judge_precision``), whose docstring states the decision order.

Never a pass line: a line inside a Python traceback (or inside the message lines right after its exception line),
a CANN/pypto runtime log record (``[ERROR] RUNTIME(…)``), a Python ``logging`` record (``ERROR:root:…``), a line
longer than 200 characters (generic recogniser), or a line about compiling, loading, building… ("Kernel compiled
successfully" is not a precision verdict).
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from pypto_tune.tools.errors import InputError

KEY_OUTPUT_MAX_CHARS = 2000
#: At most this many lines are reported as deciding lines (the last ones of each side: the end of a run is what
#: an agent needs; the first pass/fail line is also kept, see pick_lines).
DECIDING_LINES_MAX = 8
#: A deciding line's text is clipped to this many characters.
LINE_TEXT_MAX = 300
#: Session patterns are matched against the first this-many characters of a line: a verdict line is short, and a
#: megabyte-long line (a dumped tensor) must not make a user's regex slow.
PATTERN_LINE_MAX = 4096
#: A session pattern longer than this is refused: it is meant to name one verdict line, not to parse the output.
PATTERN_MAX_CHARS = 500

#: The result type of a run whose output carries no verdict at all (``VerdictResult.command_problem``): the command
#: must be fixed (a ``pass_pattern``), the operator is not at fault, no chip is blamed, no baseline failure counted.
COMMAND_PROBLEM = "command-problem"

SIM_NOTE = ("SIM: compiled and simulated only; the simulator does not compute output tensors, so numerics were not "
            "checked (domain A.8)")
# For runs that did not pass, "compiled and simulated" may be false: say only what is always true in SIM.
SIM_NOTE_NOT_PASSED = "SIM: the simulator does not compute output tensors; numerics are never checked in SIM (A.8)"

Verdict = Literal["passed", "failed", "timeout", "error"]
DecidedBy = Literal[
    "timeout", "signal", "exit-status", "precision-error-line", "precision-line", "pytest-summary",
    "unittest-summary", "session-pattern", "failure-marker", "traceback", "generic-line", "no-verdict-line",
]
LineRole = Literal["pass", "fail", "error", "exception", "ignored-pass", "last-output"]


class VerdictLine(BaseModel):
    """One output line that decided (or, for ``ignored-pass``, did not get to decide) the verdict."""

    line_no: int = Field(description="1-based line number in the output as the server kept it (head, the "
                                     "'[... N bytes of output omitted ...]' marker when the output was capped, tail)")
    text: str = Field(description="the line, ANSI colours removed, clipped to 300 characters")
    role: LineRole = Field(description="pass / fail / error: a verdict line; exception: the exception line of a "
                                       "traceback; ignored-pass: a pass line that a non-zero exit or a failure "
                                       "line overruled; last-output: the end of the output when no line decided")
    recogniser: str = Field(description="which rule read the line: precision, pytest, unittest, session-pattern, "
                                        "marker, traceback, argparse, generic, output")


class VerdictResult(BaseModel):
    verdict: Verdict
    numerics_checked: bool = Field(description="the output values were compared; always False in SIM")
    key_output: str = Field(description="the deciding lines and the key error lines, at most ~2000 chars")
    reason: str = Field(description="one sentence: why this verdict, naming the deciding line; in SIM it says that "
                                    "numerics were not checked")
    decided_by: DecidedBy = Field("no-verdict-line", description="the rule of the decision order that decided")
    deciding_lines: list[VerdictLine] = Field(
        default_factory=list, description="the output lines that decided, with line numbers; for 'exit 0 but no "
                                          "verdict line' the last output lines, so the gap is visible")
    command_problem: bool = Field(False, description="True when the test exited 0 without any verdict line: the "
                                  "command's output cannot be judged, which says nothing about the operator (not a "
                                  "baseline failure, no device blamed); the fix is a pass_pattern")
    suggested_pass_pattern: str | None = Field(None, description="for a command problem: a pattern that matches the "
                                               "last line the test printed, to use only if that line is its success "
                                               "line")


# --------------------------------------------------------------------------------------------- session patterns
@dataclass(frozen=True)
class VerdictPatterns:
    """Validated session-level patterns (see :func:`compile_verdict_patterns`)."""

    pass_re: re.Pattern[str] | None = None
    fail_re: re.Pattern[str] | None = None


def _compile_one(name: str, pattern: str | re.Pattern[str] | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    if isinstance(pattern, re.Pattern):
        rx = pattern
        source = str(pattern.pattern)
    elif isinstance(pattern, str):
        source = pattern
        if not source.strip():
            raise InputError(f"{name} is empty", hint=f"omit {name}, or give a regular expression that matches the "
                             "test's own verdict line, e.g. '✓ .* passed'")
        if len(source) > PATTERN_MAX_CHARS:
            raise InputError(f"{name} is {len(source)} characters long (at most {PATTERN_MAX_CHARS})",
                             hint="match one distinctive verdict line, not the whole output")
        try:
            rx = re.compile(source)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise InputError(f"{name} is not a valid regular expression: {exc.msg}{where} in {source!r}",
                             hint=f"call start_session again with {name} fixed (Python `re` syntax; escape "
                             r"literal brackets and dots, e.g. '\[PASS\]' or 'max diff [0-9.e-]+ ok'), or without "
                             f"{name}") from None
    else:
        raise InputError(f"{name} must be a string, got {type(pattern).__name__}")
    # A pattern that matches an empty line matches every line: as pass_pattern it would pass any run that
    # printed anything, as fail_pattern it would fail every run.
    if rx.search("") is not None:
        raise InputError(f"{name} {source!r} matches an empty line, so it would match every line of every run",
                         hint="make it require the verdict text itself, e.g. 'Softmax test passed' instead of '.*'")
    return rx


def compile_verdict_patterns(pass_pattern: str | re.Pattern[str] | None = None,
                             fail_pattern: str | re.Pattern[str] | None = None) -> VerdictPatterns:
    """Validate the session's optional verdict patterns; raise :class:`InputError` naming the bad one.

    Both are Python regular expressions searched in each output line (``^``/``$`` anchor the line). When given,
    ``pass_pattern`` is the only way a run can pass; ``fail_pattern`` replaces the heuristic failure recognisers
    (markers, tracebacks, chatty lines) but not the structured summaries (``PRECISION: failed``, pytest, unittest)
    nor the exit status, which always count. Call this at session start so a typo is refused before any run.
    """
    return VerdictPatterns(_compile_one("pass_pattern", pass_pattern), _compile_one("fail_pattern", fail_pattern))


# ---------------------------------------------------------------------------------------------------- patterns
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TB_START_RE = re.compile(r"^\s*(?:\+\s*)?(?:Exception Group )?Traceback \(most recent call last\):\s*$")
# Tracebacks that are known noise: pypto's PNG helpers without matplotlib/pandas (A.2b), or any crash of the
# helper scripts pypto runs as separate processes after a SIM kernel — they cannot touch the test's exit status
# or its numbers.
_NOISE_EXC_RE = re.compile(r"ModuleNotFoundError: No module named '(matplotlib|pandas)(\.[\w.]+)?'")
# The last line of a traceback: "RuntimeError: msg", "pkg.mod.RenderedParserError: Errcode…", "KeyboardInterrupt".
_EXC_LINE_RE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?::\s.*|:$|(?<=Error)$|(?<=Exception)$|(?<=Interrupt)$|"
                          r"(?<=Exit)$|(?<=Iteration)$|(?<=Warning)$)")
_HELPER_FRAME_RE = re.compile(r'^\s*File "[^"]*/pypto/lib/scripts/[^"/]+\.py", line \d+')

_NOISE_IMPORT_RE = re.compile(r"^\s*(?:import|from) (?:matplotlib|pandas)\b")


def is_noise_line(line: str) -> bool:
    """A line of the known-noise tracebacks (pypto's drawing helpers without matplotlib or pandas, A.2b): it says
    nothing about the run, so a progress message must not show it as what is happening."""
    return bool(_NOISE_EXC_RE.search(line) or _HELPER_FRAME_RE.match(line) or _NOISE_IMPORT_RE.match(line))


_PRECISION_RE = re.compile(r"^\s*PRECISION:\s*(passed|failed|error|timeout)\b", re.IGNORECASE)
# pytest's final summary: counts joined by commas, then "in 1.23s" (optionally " (0:00:01)"), maybe in "=" rules.
_PYTEST_RE = re.compile(
    r"^[=\s]*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)(?:, )?)+)"
    r" in [\d.]+s\b.*?[=\s]*$")
_PYTEST_NONE_RE = re.compile(r"^=+ (no tests ran|.*\bno tests ran\b).*=+$")
_UNITTEST_RAN_RE = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_STATUS_RE = re.compile(r"^(OK|FAILED|NO TESTS RAN)\b(?:\s*\((.*)\))?\s*$")

# Log records are the runtime's or a library's words, never the test's verdict: CANN / pypto records
# ("[ERROR] RUNTIME(1234,python):…", "[INFO] TILE_FWK(…)") and Python logging's default format ("ERROR:root:…";
# pypto calls logging.basicConfig(level=DEBUG), so any library's records reach the output).
_RUNTIME_LOG_RE = re.compile(r"^\[(?:ERROR|WARNING|WARN|INFO|DEBUG|EVENT|TRACE)\]\s*[A-Z][\w-]*\(\d+")
_PY_LOG_RE = re.compile(r"^(?:CRITICAL|ERROR|WARNING|INFO|DEBUG):[\w.<>-]*:")

# Explicit failure markers at the start of a line: unittest "FAIL: test_x (…)" / "ERROR: test_x", pytest
# "FAILED t.py::test - …" / "ERROR t.py", PyPTO examples "ERROR: Invalid example ID" and "Error: <exception>",
# "✗ 3D LayerNorm FAILED", "[FAIL]". Not a marker: a metric ("Error: 0.0012") or a zero count ("FAILED: 0").
_MARKER_RE = re.compile(
    r"^(?:[✗✘❌]|\[\s*(?:FAIL|FAILED|FAILURE|ERROR)\s*\]|(?:FAIL|FAILED|FAILURE|ERROR)(?=[\s:(]|$)|"
    r"(?:Error|Failed|Failure|Fail):)")
_MARKER_EXEMPT_RE = re.compile(
    r"^(?:(?:ERROR|Error)S?\s*[:=]?\s*[-+]?(?:\d|\.\d)|(?:FAIL|Fail)\w*\s*[:=]?\s*0+\b(?!\.\d))")

_CHECK_MARK_RE = re.compile(r"^[✓✔☑✅]")
_POS_RE = re.compile(r"\b(passed|pass|success|successful|successfully|succeeded|succeed|completed|complete)\b|通过|成功|"
                     r"完成", re.IGNORECASE)
_OK_RE = re.compile(r"\bOK\b")  # upper case only: "ok" in prose is not a verdict
_NEG_RE = re.compile(r"\b(failed|fail|failure|failures|error|errors|timeout|timed out|mismatch(?:ed|es)?|incorrect|"
                     r"not (?:equal|close|match(?:ed)?))\b|失败|错误|不通过|未通过", re.IGNORECASE)
# Not a verdict: "max error: 1e-3", "rel_error = 0.01", "0 failed", "0 errors", "no errors" (metrics, zero counts).
_NEG_EXEMPT_RE = re.compile(
    r"\b(?:error|errors)\s*[:=]?\s*[-+]?(?:\d|\.\d)|\b0\s+(?:failed|failures?|errors?|mismatch\w*)\b|"
    r"\bno\s+(?:errors?|failures?|mismatch\w*)\b",
    re.IGNORECASE)
_SUBJECT_RE = re.compile(
    r"\b(tests?|checks?|precision|accuracy|compare|comparison|results?|verif\w*|cases?|golden|outputs?|allclose|"
    r"correctness|numerics?|assert\w*|validation|examples?|status)\b|精度|测试|用例|结果|对比|比对|校验",
    re.IGNORECASE)
_ALL_OK_RE = re.compile(r"^[\W_]*all\s+(?:passed|pass|ok|good|succeeded)\b", re.IGNORECASE)
# A line about getting something ready is progress, not a precision verdict: "Kernel compiled successfully",
# "Model loaded successfully". Only positives are vetoed; a failure to compile is still a failure line.
_NOT_A_VERDICT_RE = re.compile(
    r"\b(compil\w*|build|built|load\w*|import\w*|install\w*|sav(?:e|ed|ing)|writ\w*|wrote|generat\w*|download\w*|"
    r"connect\w*|initiali[sz]\w*|creat\w*|launch\w*|export\w*|dump\w*|warm\w*|setup|set up|registered)\b|编译",
    re.IGNORECASE)
# "10 passed, 0 failed": a count of cases is a subject too.
_COUNT_RE = re.compile(r"\b\d+\s+(?:passed|failed|errors?|failures?)\b", re.IGNORECASE)
_ONLY_WORD_RE = re.compile(r"^[\W_]*(passed|pass|success|successful|ok|failed|fail|failure|error)[\W_]*$",
                           re.IGNORECASE)
_GENERIC_MAX_LEN = 200
_ARGPARSE_ERROR_RE = re.compile(r"^[\w.-]+: error: ")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI colour escapes: pypto colours its diagnostics (ESC[1m...), patterns and agents read
    plain text."""
    return _ANSI_RE.sub("", text)


def is_argparse_error(s: str) -> bool:
    """A stripped line in which a script's argparse rejected its command line (``prog: error: …``)."""
    return bool(_ARGPARSE_ERROR_RE.match(s))

# Error lines worth showing an agent: pypto/CANN error codes (FC4000, F21004, EZ9999...), "Run pass failed",
# log lines at ERROR level, assertion and exception lines.
_KEY_ERROR_RE = re.compile(
    r"\b(?:F[A-Z]?\d{4,6}|E[A-Z]\d{4,6})\b|Run pass failed|Errcode|\[ERROR\]|\bERROR\b|\bAssertionError\b|"
    r"\bfailed\b|\berror\b", re.IGNORECASE)


# ------------------------------------------------------------------------------------------------- the scan
@dataclass
class Hit:
    """A recognised verdict line: where, which way it points, and which recogniser read it."""

    idx: int  # 0-based line index
    polarity: Literal["pass", "fail", "error"]
    recogniser: str


class Scan:
    """The output split into lines, with traceback blocks located once."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        n = len(self.lines)
        self.hidden = [False] * n  # inside a traceback or its message: never a pass line
        self.in_block = [False] * n  # a traceback's header or frames (its message lines are not)
        self.noise = [False] * n  # inside a known-noise traceback: never anything
        self.real_exc: list[int] = []  # exception line of each traceback that is not noise
        i = 0
        while i < n:
            if not _TB_START_RE.match(self.lines[i]):
                i += 1
                continue
            start = i
            i += 1
            # Frames are indented; the block ends at the first non-indented line, which is its exception line
            # when it looks like one. Another traceback header or an ordinary line there means the block was cut
            # (two processes writing at once): the block then has no exception line, and the line stays visible.
            exc_line: int | None = None
            while i < n:
                s = self.lines[i]
                if s.strip() and not s.startswith((" ", "\t")):
                    if not _TB_START_RE.match(s) and _EXC_LINE_RE.match(s):
                        exc_line = i
                        i += 1
                    break
                i += 1
            end = i  # exclusive
            block = range(start, end)
            helper = any(_HELPER_FRAME_RE.match(self.lines[j]) for j in range(start + 1, min(start + 3, end)))
            # "Exception ignored in: <function X.__del__>" is Python reporting an error it swallowed during
            # clean-up (typically at interpreter exit); it says so itself and the exit status stays the test's.
            ignored = start > 0 and self.lines[start - 1].startswith("Exception ignored in")
            noise = exc_line is not None and bool(_NOISE_EXC_RE.search(self.lines[exc_line]))
            for j in block:
                self.hidden[j] = self.in_block[j] = True
                self.noise[j] = helper or ignored or noise
            if exc_line is None or helper or ignored or noise:
                continue
            self.real_exc.append(exc_line)
            # A multi-line exception message ("RuntimeError: Errcode…\nRun pass failed…") continues up to the
            # next blank line: it is the exception's text, so a "passed" in it is not the test speaking.
            while i < n and self.lines[i].strip() and not _TB_START_RE.match(self.lines[i]):
                self.hidden[i] = True
                i += 1

    def visible(self) -> list[int]:
        return [i for i, h in enumerate(self.hidden) if not h]


def structured_lines(scan: Scan, vis: list[int]) -> dict[str, list[Hit]]:
    """Structured verdict lines by kind: precision, pytest, unittest."""
    lines = scan.lines
    out: dict[str, list[Hit]] = {"precision": [], "pytest": [], "unittest": []}
    for i in vis:
        s = lines[i].strip()
        if not s:
            continue
        m = _PRECISION_RE.match(s)
        if m:
            word = m.group(1).lower()
            out["precision"].append(Hit(i, "pass" if word == "passed" else "error" if word == "error" else "fail",
                                         "precision"))
            continue
        m = _PYTEST_RE.match(s)
        if m:
            counts = m.group(1)
            bad = re.search(r"\b[1-9]\d* (failed|errors?)\b", counts)
            good = re.search(r"\b[1-9]\d* passed\b", counts)
            out["pytest"].append(Hit(i, "fail" if bad or not good else "pass", "pytest"))
            continue
        if _PYTEST_NONE_RE.match(s):
            out["pytest"].append(Hit(i, "fail", "pytest"))
            continue
        m = _UNITTEST_RAN_RE.match(s)
        if m:
            ran = int(m.group(1))
            status = next((j for j in vis if j > i and lines[j].strip()), None)
            sm = _UNITTEST_STATUS_RE.match(lines[status].strip()) if status is not None else None
            if sm is None:
                continue  # "Ran N tests" without unittest's status line: some other tool's words
            skipped = re.search(r"skipped=(\d+)", sm.group(2) or "")
            ok = sm.group(1) == "OK" and ran > 0 and not (skipped and int(skipped.group(1)) >= ran)
            out["unittest"].append(Hit(i, "pass" if ok else "fail", "unittest"))
            out["unittest"].append(Hit(status, "pass" if ok else "fail", "unittest"))
    return out


def _is_log_record(s: str) -> bool:
    return bool(_RUNTIME_LOG_RE.match(s) or _PY_LOG_RE.match(s))


def is_failure_marker(s: str) -> bool:
    """An explicit failure marker at the start of a stripped line (``FAIL: …``, ``✗ …``, ``[FAIL]``), not a metric,
    a zero count or a log record."""
    return bool(_MARKER_RE.match(s)) and not _MARKER_EXEMPT_RE.match(s) and not _is_log_record(s)


def generic_kind(s: str) -> Literal["pass", "fail"] | None:
    """'pass' / 'fail' / None for a stripped line that is not a structured verdict line."""
    if not s or len(s) > _GENERIC_MAX_LEN or _is_log_record(s):
        return None
    m = _ONLY_WORD_RE.match(s)
    if m:
        return "pass" if m.group(1).lower() in ("passed", "pass", "success", "successful", "ok") else "fail"
    neg = _NEG_RE.search(_NEG_EXEMPT_RE.sub(" ", s))
    checked = bool(_CHECK_MARK_RE.match(s))
    if not checked and not _SUBJECT_RE.search(s) and not _COUNT_RE.search(s) and not _ALL_OK_RE.match(s):
        return None
    if neg:
        return "fail"
    if _NOT_A_VERDICT_RE.search(s):
        return None
    if _POS_RE.search(s) or _ALL_OK_RE.match(s) or (_OK_RE.search(s) and _SUBJECT_RE.search(s)):
        return "pass"
    return None


def clip_line(s: str) -> str:
    """A line as a deciding line shows it: stripped, at most LINE_TEXT_MAX characters."""
    s = s.strip()
    return s if len(s) <= LINE_TEXT_MAX else s[:LINE_TEXT_MAX - 1] + "…"


def pick_lines(hits: list[Hit]) -> list[Hit]:
    """The first hit and the last ones, at most DECIDING_LINES_MAX: the first pass/fail line is often the one a
    reader looks for, the last ones are where a run ends."""
    if len(hits) <= DECIDING_LINES_MAX:
        return hits
    return [hits[0], *hits[-(DECIDING_LINES_MAX - 1):]]


def signal_name(sig: int) -> str:
    """``SIGSEGV`` for 11; ``signal N`` for a number the platform does not name."""
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# Exit statuses a shell reports for a child killed by a signal (128 + N): a crash, not a test verdict.
SHELL_SIGNAL_EXITS = {128 + s: s for s in (_signal.SIGILL, _signal.SIGABRT, _signal.SIGBUS, _signal.SIGFPE,
                                            _signal.SIGKILL, _signal.SIGSEGV)}


def suggest_pass_pattern(line: str) -> str | None:
    """A pass_pattern for ``line``: its text escaped, with every number left free (timings and diffs change from
    run to run). None for a line that reads as a failure, or is too short to name anything."""
    s = line.strip()
    if len(s) < 4 or _NEG_RE.search(_NEG_EXEMPT_RE.sub(" ", s)) or is_failure_marker(s):
        return None
    parts = re.split(r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", s[:120])
    return "".join("[-+.0-9eE]+" if i % 2 else re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", p)
                   for i, p in enumerate(parts))


def key_error_lines(scan: Scan) -> list[str]:
    """The lines an agent needs to see for a failure: error-looking lines and the last real traceback's tail."""
    lines = scan.lines
    errs: list[str] = []
    for i in range(len(lines) - 1, -1, -1):  # from the end: only the last 12 are kept, and the regex is not cheap
        if not scan.in_block[i] and _KEY_ERROR_RE.search(lines[i]) and not _NOISE_EXC_RE.search(lines[i]):
            errs.append(lines[i].rstrip())
            if len(errs) == 12:
                break
    out = errs[::-1]
    if scan.real_exc:
        last = scan.real_exc[-1]
        out.append("...")
        out.extend(lines[j].rstrip() for j in range(max(0, last - 7), last + 1) if not scan.noise[j])
    return out


def clip_key_output(parts: list[str]) -> str:
    """The key-output text: ``parts`` once each, at most KEY_OUTPUT_MAX_CHARS, the end kept when clipped."""
    seen: set[str] = set()
    kept = []
    for p in parts:  # a verdict line is often also an error line: show it once
        if p == "..." or p not in seen:
            kept.append(p)
            seen.add(p)
    text = "\n".join(kept).strip("\n")
    if len(text) <= KEY_OUTPUT_MAX_CHARS:
        return text
    return "...\n" + text[-(KEY_OUTPUT_MAX_CHARS - 4):]  # the end holds the exception line: keep it
