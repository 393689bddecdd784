"""Reader for ``pipe_usage.csv`` (domain A.6): pipe occupancy per AI core and averaged over the cores.

Layout (written next to the swim record; times in µs, usages in % with 4 significant digits, e.g. ``21.13%`` or
``1.235e+04%``)::

    Total Core Num:<AIC+AIV cores with tasks>
    AIC: <n>
    AIV: <n>
    Total Pipe Usage
    Pipe, AverageTime, TotalExecuteTime, AverageUsage
    <pipe>, <avg µs>, <global span µs>, <pct>%          (one row per pipe: CUBE, VECTOR_ALU, MTE_IN, MTE1, MTE_OUT)
    <empty line><empty line>
    AICore Pipe Usage
    Core, TotalTime, <P>_Time, <P>_Usage, ...           (the pipes in the order of this header)
    <core>, <global span µs>, <t>, <pct>%, ...

PyPTO 0.2.0's writer crashes before it finishes this file (A.6, E.4.29: ``entry.func_name()`` on a string; it would
also divide by zero for a kernel without AIC cores and fail with KeyError on an AI-CPU row), so the reader is
strict about what it can check — columns follow the header, counts add up, every number is finite and not negative
— and says exactly which line breaks the layout instead of guessing. Pipe names are taken as written.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from pydantic import BaseModel, Field

from pypto_tune.tools.errors import ArtifactError

PIPE_USAGE_NAME = "pipe_usage.csv"
_TOTALS_HEADER = ["Pipe", "AverageTime", "TotalExecuteTime", "AverageUsage"]
_HINT = "pipe_usage.csv comes from draw_swim_lane.py -g; regenerate it or analyse the run without it"


class PipeTotal(BaseModel):
    """One row of the "Total Pipe Usage" table."""

    pipe: str
    avg_time_us: float = Field(description="pipe busy time averaged over the cores the writer divides by")
    total_execute_time_us: float = Field(description="span of all tasks (first start to last end)")
    avg_usage_pct: float


class CorePipeUsage(BaseModel):
    """One row of the "AICore Pipe Usage" table."""

    core: str  # writer lane name, e.g. "AIV_25"
    core_type: str  # "AIC" / "AIV" (from the name) or the raw prefix
    total_time_us: float = Field(description="the column the writer fills with the global span, not the core's own")
    time_us: dict[str, float] = Field(description="pipe → busy time")
    usage_pct: dict[str, float] = Field(description="pipe → busy time ÷ this core's own first-start-to-last-end "
                                        "span")


class PipeUsage(BaseModel):
    path: str
    total_cores: int
    aic_cores: int
    aiv_cores: int
    pipes: list[str] = Field(description="pipes of the per-core table, in header order")
    totals: list[PipeTotal]
    cores: list[CorePipeUsage]

    def total(self, pipe: str) -> PipeTotal | None:
        return next((t for t in self.totals if t.pipe == pipe), None)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


class _Reader:
    def __init__(self, text: str, path: str) -> None:
        self.lines = text.split("\n")[:-1]
        self.path = path
        self.i = 0

    def fail(self, msg: str, expected: str, lineno: int | None = None) -> ArtifactError:
        n = self.i + 1 if lineno is None else lineno
        return ArtifactError(msg, path=self.path, where=f"line {n}", expected=expected, hint=_HINT)

    def next(self, expected: str) -> str:
        if self.i >= len(self.lines):
            raise self.fail("the file ends early", expected, lineno=len(self.lines) + 1)
        line = self.lines[self.i].rstrip("\r")
        self.i += 1
        return line

    def count(self, prefix: str) -> int:
        line = self.next(f"'{prefix}<n>'")
        m = re.fullmatch(re.escape(prefix) + r"\s*(\d+)\s*", line)
        if not m:
            raise self.fail(f"expected {prefix!r} and a count, got {line[:80]!r}", f"'{prefix}<n>'", self.i)
        return int(m.group(1))

    def number(self, text: str, what: str, percent: bool = False) -> float:
        raw = text
        if percent:
            if not text.endswith("%"):
                raise self.fail(f"{what} {raw!r} lacks its % sign", "a percentage such as 21.13%", self.i)
            text = text[:-1]
        try:
            value = float(text)
        except ValueError:
            raise self.fail(f"{what} is not a number: {raw!r}", "a decimal number", self.i) from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(f"{what} must be finite and not negative, got {raw!r}", "a number ≥ 0", self.i)
        return value


def parse_pipe_usage_text(text: str, path: str = PIPE_USAGE_NAME) -> PipeUsage:
    """Parse the text of a pipe_usage.csv; see the module docstring for the layout."""
    if not text.strip():
        raise ArtifactError("pipe_usage.csv is empty", path=path, where="byte 0",
                            expected="'Total Core Num:<n>' first", hint=_HINT)
    if not text.endswith("\n"):
        raise ArtifactError("pipe_usage.csv is truncated (its last line has no newline)", path=path,
                            where=f"line {text.count(chr(10)) + 1}", expected="a complete last line", hint=_HINT)
    r = _Reader(text, path)
    total = r.count("Total Core Num:")
    aic = r.count("AIC:")
    aiv = r.count("AIV:")
    if total != aic + aiv:
        raise r.fail(f"Total Core Num {total} ≠ AIC {aic} + AIV {aiv}", "the AIC and AIV counts to add up", 1)
    if r.next("'Total Pipe Usage'").strip() != "Total Pipe Usage":
        raise r.fail("expected the 'Total Pipe Usage' title", "'Total Pipe Usage'", r.i)
    if _cells(r.next("the totals header")) != _TOTALS_HEADER:
        raise r.fail("unexpected totals header", ", ".join(_TOTALS_HEADER), r.i)
    totals: list[PipeTotal] = []
    while True:
        line = r.next("a pipe row or an empty line")
        if not line.strip():
            break
        c = _cells(line)
        if len(c) != 4 or not c[0]:
            raise r.fail(f"a totals row needs 4 cells, got {len(c)}", "<pipe>, <avg>, <span>, <pct>%", r.i)
        if any(t.pipe == c[0] for t in totals):
            raise r.fail(f"pipe {c[0]} appears twice in the totals", "one row per pipe", r.i)
        totals.append(PipeTotal(pipe=c[0], avg_time_us=r.number(c[1], f"{c[0]} AverageTime"),
                                total_execute_time_us=r.number(c[2], f"{c[0]} TotalExecuteTime"),
                                avg_usage_pct=r.number(c[3], f"{c[0]} AverageUsage", percent=True)))
    if not totals:
        raise r.fail("the totals table has no rows", "one row per pipe", r.i)
    line = r.next("'AICore Pipe Usage'")
    while not line.strip():
        line = r.next("'AICore Pipe Usage'")
    if line.strip() != "AICore Pipe Usage":
        raise r.fail(f"expected the 'AICore Pipe Usage' title, got {line[:80]!r}", "'AICore Pipe Usage'", r.i)
    header = _cells(r.next("the per-core header"))
    pipes = [h[:-len("_Time")] for h in header[2::2]]
    ok = (header[:2] == ["Core", "TotalTime"] and len(header) % 2 == 0 and len(header) > 2
          and all(t == f"{p}_Time" and u == f"{p}_Usage" for p, t, u in zip(pipes, header[2::2], header[3::2])))
    if not ok:
        raise r.fail("unexpected per-core header", "Core, TotalTime, <P>_Time, <P>_Usage, ...", r.i)
    cores: list[CorePipeUsage] = []
    while r.i < len(r.lines):
        line = r.next("a core row")
        if not line.strip():
            continue
        c = _cells(line)
        if len(c) != len(header):
            raise r.fail(f"a core row needs {len(header)} cells like its header, got {len(c)}",
                         ", ".join(header), r.i)
        if any(x.core == c[0] for x in cores):
            raise r.fail(f"core {c[0]} appears twice", "one row per core", r.i)
        prefix = c[0].rsplit("_", 1)[0]
        cores.append(CorePipeUsage(
            core=c[0], core_type="AIC" if prefix == "AIC" else "AIV" if prefix == "AIV" else prefix,
            total_time_us=r.number(c[1], f"{c[0]} TotalTime"),
            time_us={p: r.number(c[2 + 2 * k], f"{c[0]} {p}_Time") for k, p in enumerate(pipes)},
            usage_pct={p: r.number(c[3 + 2 * k], f"{c[0]} {p}_Usage", percent=True) for k, p in enumerate(pipes)}))
    if len(cores) != total:
        raise ArtifactError(f"{len(cores)} core rows but Total Core Num is {total}", path=path,
                            where="AICore Pipe Usage", expected="one row per AIC/AIV core with tasks", hint=_HINT)
    return PipeUsage(path=path, total_cores=total, aic_cores=aic, aiv_cores=aiv, pipes=pipes, totals=totals,
                     cores=cores)


def read_pipe_usage(path: Path) -> PipeUsage:
    """Read one pipe_usage.csv; every problem is an ``ArtifactError`` naming the line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ArtifactError(f"cannot read pipe_usage.csv: {exc.strerror or exc}", path=str(p), hint=_HINT) from exc
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"pipe_usage.csv is not UTF-8 text: {exc}", path=str(p), hint=_HINT) from exc
    return parse_pipe_usage_text(text, str(p))
