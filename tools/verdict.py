"""Judge a run of the test command: the precision gate R4 (domain D.2).

R4 says: passed iff exit status 0, no timeout or signal, the output says "passed"/"success" and says none of
"failed"/"error"/"timeout". Applied to the whole output that rule is wrong in this environment: every SIM run
prints ``ModuleNotFoundError: No module named 'matplotlib'`` tracebacks from pypto's drawing helpers (A.2b). So the
keywords are looked for only in **verdict lines**, chosen in this order (the first kind present wins):

1. ``PRECISION: passed|failed|error ...`` — the line our fixture operators print.
2. pytest's summary line (``==== 3 passed, 1 warning in 0.12s ====`` or ``-q``'s ``3 passed in 0.12s``).
3. generic short lines that pair a subject (test, check, precision, result, compare...) with a verdict word
   (``test passed``, ``Compare result: success``), or are only a verdict word (``success``, ``[PASS]``).

Lines inside a Python traceback are never verdict lines. In SIM the simulator does not compute outputs (A.8), so
even a passed verdict has ``numerics_checked=False`` and says so.
"""

from __future__ import annotations

import re
import signal as _signal
from typing import Literal

from pydantic import BaseModel, Field

from pypto_tune.tools.runner import RunResult

KEY_OUTPUT_MAX_CHARS = 2000

SIM_NOTE = ("SIM: compiled and simulated only; the simulator does not compute output tensors, so numerics were not "
            "checked (domain A.8)")
# For runs that did not pass, "compiled and simulated" may be false: say only what is always true in SIM.
SIM_NOTE_NOT_PASSED = "SIM: the simulator does not compute output tensors; numerics are never checked in SIM (A.8)"


class VerdictResult(BaseModel):
    verdict: Literal["passed", "failed", "timeout", "error"]
    numerics_checked: bool = Field(description="the output values were compared; always False in SIM")
    key_output: str = Field(description="the verdict line(s) and/or the key error lines, at most ~2000 chars")
    reason: str = Field(description="one sentence: why this verdict")


_PRECISION_RE = re.compile(r"^\s*PRECISION:\s*(passed|failed|error|timeout)\b", re.IGNORECASE)
# pytest's final summary: counts joined by commas, then "in 1.23s" (optionally " (0:00:01)"), maybe in "=" rules.
_PYTEST_RE = re.compile(
    r"^[=\s]*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun)(?:, )?)+)"
    r" in [\d.]+s\b.*?[=\s]*$")
_PYTEST_NONE_RE = re.compile(r"^=+ (no tests ran|.*\bno tests ran\b).*=+$")
_POS_RE = re.compile(r"\b(passed|pass|success|successful|successfully|succeeded|succeed)\b", re.IGNORECASE)
_NEG_RE = re.compile(r"\b(failed|fail|failure|failures|error|errors|timeout|timed out)\b", re.IGNORECASE)
# Not a verdict: "max error: 1e-3", "rel_error = 0.01", "0 failed", "0 errors" (metrics and zero counts).
_NEG_EXEMPT_RE = re.compile(
    r"\b(?:error|errors)\s*[:=]?\s*[-+]?(?:\d|\.\d)|\b0\s+(?:failed|failures?|errors?)\b|"
    r"\bno\s+(?:errors?|failures?)\b",
    re.IGNORECASE)
_SUBJECT_RE = re.compile(
    r"\b(tests?|checks?|precision|accuracy|compare|comparison|results?|verif\w*|cases?|golden|outputs?|allclose|"
    r"all|correctness|numerics?|assert\w*|validation|status)\b", re.IGNORECASE)
# "10 passed, 0 failed": a count of cases is a subject too.
_COUNT_RE = re.compile(r"\b\d+\s+(?:passed|failed|errors?|failures?)\b", re.IGNORECASE)
_ONLY_WORD_RE = re.compile(r"^[\W_]*(passed|pass|success|successful|ok|failed|fail|failure|error)[\W_]*$",
                           re.IGNORECASE)
_GENERIC_MAX_LEN = 200
# CANN / pypto runtime log records ("[ERROR] RUNTIME(1234,python):2026-...", "[INFO] TILE_FWK(...)") talk about
# the runtime, not the test's verdict: never generic verdict lines (they still show up as key error lines).
_RUNTIME_LOG_RE = re.compile(r"^\[(?:ERROR|WARNING|WARN|INFO|DEBUG|EVENT|TRACE)\]\s*[A-Z][\w-]*\(\d+")

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TB_START = "Traceback (most recent call last):"
# Traceback blocks that are known noise: pypto's PNG helpers without matplotlib/pandas (A.2b).
_NOISE_EXC_RE = re.compile(r"ModuleNotFoundError: No module named '(matplotlib|pandas)(\.[\w.]+)?'")
# Error lines worth showing an agent: pypto/CANN error codes (FC4000, F21004, EZ9999...), "Run pass failed",
# log lines at ERROR level, assertion and exception lines.
_KEY_ERROR_RE = re.compile(
    r"\b(?:F[A-Z]?\d{4,6}|E[A-Z]\d{4,6})\b|Run pass failed|Errcode|\[ERROR\]|\bERROR\b|\bAssertionError\b|"
    r"\bfailed\b|\berror\b", re.IGNORECASE)


def _split_tracebacks(lines: list[str]) -> tuple[list[int], list[list[int]]]:
    """Indices of lines outside tracebacks, and the index lists of each traceback block (start..exception line).

    Chained tracebacks ("During handling of the above exception...") come out as several blocks; the chain
    sentence between them is outside but contains no verdict word."""
    outside: list[int] = []
    blocks: list[list[int]] = []
    i, n = 0, len(lines)
    while i < n:
        if lines[i].strip() == _TB_START:
            block = [i]
            i += 1
            # Frames are indented; the block ends at the first non-indented line: the exception line (or, for an
            # unusual format, whatever the process printed next — better to drop one line than read frames).
            while i < n:
                block.append(i)
                s = lines[i]
                i += 1
                if s.strip() and not s.startswith((" ", "\t")):
                    break
            blocks.append(block)
        else:
            outside.append(i)
            i += 1
    return outside, blocks


def _is_noise_block(lines: list[str], block: list[int]) -> bool:
    return any(_NOISE_EXC_RE.search(lines[j]) for j in block[-2:])


def _generic_kind(text: str) -> str | None:
    """'pos' / 'neg' / None for a line that is not a precision or pytest verdict line."""
    s = text.strip()
    if not s or len(s) > _GENERIC_MAX_LEN or _RUNTIME_LOG_RE.match(s):
        return None
    if _ONLY_WORD_RE.match(s):
        word = _ONLY_WORD_RE.match(s).group(1).lower()  # type: ignore[union-attr]
        return "pos" if word in ("passed", "pass", "success", "successful", "ok") else "neg"
    if not _SUBJECT_RE.search(s) and not _COUNT_RE.search(s):
        return None
    neg = _NEG_RE.search(_NEG_EXEMPT_RE.sub(" ", s))
    if neg:
        return "neg"
    if _POS_RE.search(s):
        return "pos"
    return None


def _find_verdict_lines(lines: list[str], outside: list[int]) -> tuple[str, list[tuple[int, str]]]:
    """(source, [(index, 'pos'|'neg')]) for the first kind of verdict line present (see module docstring)."""
    prec = []
    for i in outside:
        m = _PRECISION_RE.match(lines[i])
        if m:
            prec.append((i, "pos" if m.group(1).lower() == "passed" else "neg"))
    if prec:
        return "precision", prec
    py = []
    for i in outside:
        s = lines[i].strip()
        m = _PYTEST_RE.match(s)
        if m:
            counts = m.group(1)
            bad = re.search(r"\b[1-9]\d* (failed|errors?)\b", counts)
            good = re.search(r"\b[1-9]\d* passed\b", counts)
            py.append((i, "neg" if bad or not good else "pos"))
        elif _PYTEST_NONE_RE.match(s):
            py.append((i, "neg"))
    if py:
        return "pytest", py
    gen = [(i, k) for i in outside if (k := _generic_kind(lines[i])) is not None]
    return "generic", gen


def _key_error_lines(lines: list[str], outside: list[int], blocks: list[list[int]]) -> list[str]:
    """The lines an agent needs to see for a failure: the last real traceback's tail and error-looking lines."""
    out: list[str] = []
    real_blocks = [b for b in blocks if not _is_noise_block(lines, b)]
    errs = [lines[i].rstrip() for i in outside if _KEY_ERROR_RE.search(lines[i])
            and not _NOISE_EXC_RE.search(lines[i])]
    out.extend(errs[-12:])
    if real_blocks:
        last = real_blocks[-1]
        out.append("...")
        out.extend(lines[j].rstrip() for j in last[-8:])
    return out


def _clip(parts: list[str]) -> str:
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


def _signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# Exit statuses a shell reports for a child killed by a signal (128 + N): a crash, not a test verdict.
_SHELL_SIGNAL_EXITS = {128 + s: s for s in (_signal.SIGILL, _signal.SIGABRT, _signal.SIGBUS, _signal.SIGFPE,
                                            _signal.SIGKILL, _signal.SIGSEGV)}


def judge_precision(result: RunResult, run_mode: str) -> VerdictResult:
    """Apply R4 to one run. Pure: reads only ``result``.

    * timeout → ``timeout``; killed by a signal (or a shell's 128+N crash status) → ``error``;
    * ``PRECISION: error`` → ``error``; non-zero exit → ``failed`` with the key error lines;
    * exit 0: any negative verdict line → ``failed``; a positive one → ``passed``; none → ``failed``
      ("no verdict line").
    * SIM: ``numerics_checked`` is always False and the key output / reason say why (A.8).
    """
    sim = run_mode.lower() == "sim"
    # pypto colours its diagnostics (ESC[1m...): strip the escapes so patterns and the agent see plain text.
    lines = _ANSI_RE.sub("", result.output).splitlines()
    outside, blocks = _split_tracebacks(lines)
    source, found = _find_verdict_lines(lines, outside)
    vlines = [lines[i].strip() for i, _ in found][-6:]
    errors = _key_error_lines(lines, outside, blocks)
    exc = _last_exception_line(lines, blocks)

    def make(verdict: str, reason: str, key: list[str], checked: bool = False) -> VerdictResult:
        if sim:
            note = SIM_NOTE if verdict == "passed" else SIM_NOTE_NOT_PASSED
            key = [*key, note]
            reason = f"{reason}; {note}"
        return VerdictResult(verdict=verdict, numerics_checked=checked and not sim, key_output=_clip(key),
                             reason=reason)

    if result.timed_out:
        return make("timeout", f"the test command did not finish within its time limit ({result.duration_s:.0f} s "
                    "elapsed) and was killed", [*vlines, *errors, "last output: " + _last_nonblank(lines)])
    if result.signal is not None:
        return make("error", f"the test process was killed by {_signal_name(result.signal)} (a crash, not a "
                    "precision verdict)", [*errors, "last output: " + _last_nonblank(lines)])
    if result.exit_code is None:
        return make("error", "the test process ended without an exit status", errors)
    if result.exit_code in _SHELL_SIGNAL_EXITS:
        sig = _SHELL_SIGNAL_EXITS[result.exit_code]
        return make("error", f"exit status {result.exit_code} means a process was killed by {_signal_name(sig)} "
                    "(reported through a shell)", [*errors, "last output: " + _last_nonblank(lines)])
    prec_error = [lines[i].strip() for i in outside if re.match(r"^\s*PRECISION:\s*error\b", lines[i], re.I)]
    if prec_error:
        return make("error", f"the test reported an error instead of a verdict (exit {result.exit_code})",
                    [*prec_error[-3:], *errors])
    neg = [lines[i].strip() for i, k in found if k == "neg"]
    pos = [lines[i].strip() for i, k in found if k == "pos"]
    if result.exit_code != 0:
        return make("failed", f"the test command exited with status {result.exit_code}"
                    + (f"; verdict line: {neg[-1]!r}" if neg else "")
                    + (f"; last exception: {exc}" if exc else ""), [*vlines, *errors],
                    checked=bool(found))
    if neg:
        return make("failed", f"a {source} verdict line reports failure: {neg[-1]!r}", [*vlines, *errors],
                    checked=True)
    if pos:
        checked = not any("numerics not checked" in v.lower() for v in pos)
        return make("passed", f"exit 0 and the {source} verdict line says passed: {pos[-1]!r}", vlines,
                    checked=checked)
    return make("failed", "exit 0 but the test printed no verdict line (none of 'PRECISION: passed', a pytest "
                "summary, or a 'test passed'/'success' line); make the test print its verdict",
                ["last output: " + _last_nonblank(lines), *errors])


def _last_exception_line(lines: list[str], blocks: list[list[int]]) -> str:
    real = [b for b in blocks if not _is_noise_block(lines, b)]
    return lines[real[-1][-1]].strip()[:300] if real else ""


def _last_nonblank(lines: list[str]) -> str:
    for s in reversed(lines):
        if s.strip():
            return s.strip()[-300:]
    return "(no output)"
