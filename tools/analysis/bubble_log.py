"""Reader for ``bubble_analysis.log`` (grammar in domain A.3).

Accepts every line form the 0.2.0 writer emits: the optional (possibly short) Top-10, the two blank lines, core
blocks with or without ``, Fake Task: n``, idle cores without a Top-3 header, a Top-3 header with no lines, and the
odd space runs after ``wait:``. Anything else is an ``ArtifactError`` naming the line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from pypto_tune.tools.analysis.models import BubbleLog, LogCore, LogTask
from pypto_tune.tools.errors import ArtifactError

_TOP10 = "Top 10 tasks in waiting schedule"
_TOP3 = "    Top 3 tasks in waiting schedule time"
# label is greedy so a colour containing ", wait:" still splits at the last one
_TASK = re.compile(r"^    Task:(\d+), label:(.*), wait:\s+(\S+)$")
_HEADER = re.compile(r"^\[(.+)\] Execute task num:(\d+)(?:, Fake Task: (\d+))?$")
_FIELDS = (
    ("work_us", "    Core Total Work Time: "),
    ("wait_total_us", "    Total Wait Time: "),
    ("wait_schedule_us", "    Wait Schedule Time: "),
    ("wait_predecessor_us", "    Wait Predecessor Time: "),
)
_HINT = "re-run the operator with runtime_debug_mode 1; the writer may have been interrupted"


def core_type_of(name: str) -> str:
    """The writer's naming rule (A.3): contains AIC → AIC, AIV → AIV, else the raw type (HUB, AI-CPU, Fake Core).

    AI-CPU is tested first because "AICPU" would otherwise match nothing and "AI-CPU" contains neither.
    """
    base = name.rsplit("_", 1)[0] if "_" in name else name
    if "AICPU" in base or "AI-CPU" in base:
        return "AI-CPU"
    if "AIC" in base:
        return "AIC"
    if "AIV" in base:
        return "AIV"
    return base


def _index_of(name: str) -> int:
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _number(text: str, path: str, lineno: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ArtifactError(f"bad number {text!r} in {what}", path=path, where=f"line {lineno}",
                            expected="a decimal number", hint=_HINT) from None
    if math.isnan(value):
        raise ArtifactError(f"NaN in {what}", path=path, where=f"line {lineno}", expected="a finite number",
                            hint=_HINT)
    return value


def parse_bubble_log_text(text: str, path: str = "bubble_analysis.log") -> BubbleLog:
    """Parse the text of a bubble_analysis.log; see the module docstring for what is accepted."""
    if not text.strip():
        raise ArtifactError("bubble_analysis.log is empty", path=path, where="byte 0",
                            expected="'Top 10 tasks in waiting schedule' or a '[<core>] Execute task num:' block",
                            hint=_HINT)
    if not text.endswith("\n"):
        last = text.count("\n") + 1
        raise ArtifactError("bubble_analysis.log is truncated (the writer always ends it with a newline)",
                            path=path, where=f"line {last} (byte {len(text.encode())})",
                            expected="a complete last line ending in a newline", hint=_HINT)
    lines = text.split("\n")[:-1]
    n = len(lines)
    i = 0
    top10: list[LogTask] = []

    def task_line(k: int) -> LogTask:
        m = _TASK.match(lines[k])
        assert m is not None
        return LogTask(key=int(m.group(1)), label=m.group(2), wait_us=_number(m.group(3), path, k + 1, "wait"))

    if i < n and lines[i] == _TOP10:
        i += 1
        while i < n and _TASK.match(lines[i]):
            if len(top10) == 10:
                raise ArtifactError("more than 10 lines in the Top-10 list", path=path, where=f"line {i + 1}",
                                    expected="at most 10 task lines", hint=_HINT)
            top10.append(task_line(i))
            i += 1
    while i < n and lines[i] == "":
        i += 1

    cores: list[LogCore] = []
    while i < n:
        line = lines[i]
        if line == "":
            i += 1
            continue
        m = _HEADER.match(line)
        if not m:
            raise ArtifactError(f"unexpected line {line[:80]!r}", path=path, where=f"line {i + 1}",
                                expected="'[<core>] Execute task num:<n>[, Fake Task: <m>]'", hint=_HINT)
        header_line = i + 1
        name = m.group(1)
        values: dict[str, float] = {}
        for key, prefix in _FIELDS:
            i += 1
            if i >= n:
                raise ArtifactError(f"core block [{name}] ends early", path=path, where=f"line {i + 1} (end of file)",
                                    expected=repr(prefix.strip() + " <µs>"), hint=_HINT)
            if not lines[i].startswith(prefix):
                raise ArtifactError(f"core block [{name}] is missing {prefix.strip()!r}", path=path,
                                    where=f"line {i + 1}", expected=repr(prefix.strip() + " <µs>"), hint=_HINT)
            values[key] = _number(lines[i][len(prefix):], path, i + 1, prefix.strip())
        i += 1
        top3: list[LogTask] = []
        if i < n and lines[i] == _TOP3:
            i += 1
            while i < n and _TASK.match(lines[i]):
                if len(top3) == 3:
                    raise ArtifactError(f"more than 3 lines in the Top-3 list of [{name}]", path=path,
                                        where=f"line {i + 1}", expected="at most 3 task lines", hint=_HINT)
                top3.append(task_line(i))
                i += 1
        cores.append(LogCore(
            name=name, core_type=core_type_of(name), index=_index_of(name), n_real=int(m.group(2)),
            n_fake=int(m.group(3) or 0), top3=top3, line=header_line, **values,
        ))
    if not cores:
        raise ArtifactError("bubble_analysis.log has no core blocks", path=path, where=f"line {n}",
                            expected="at least one '[<core>] Execute task num:' block", hint=_HINT)
    return BubbleLog(path=path, top10=top10, cores=cores)


def read_bubble_log(path: Path) -> BubbleLog:
    """Read and parse one bubble_analysis.log file."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ArtifactError("bubble_analysis.log is missing", path=str(path), expected="the file the swimlane "
                            "writer creates", hint="collect with runtime_debug_mode 1 (in SIM keep "
                            "stitch_function_max_num ≥ the loop iterations, B.9.3)") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError("bubble_analysis.log is not UTF-8 text", path=str(path), where=f"byte {exc.start}",
                            expected="UTF-8 text", hint=_HINT) from None
    return parse_bubble_log_text(text, str(path))
