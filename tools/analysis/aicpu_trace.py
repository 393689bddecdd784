"""Reader for ``machine_runtime_operator_trace[_<round>].json`` (NPU only, domain A.5) and its raw input.

The file is a Perfetto trace of the AICPU control / scheduler threads and of the per-AI-core runtime phases (not of
tasks). From it this module computes the AICore end-to-end time that the PyPTO docs call the actual AI-core time and
that domain B.10 records beside ``max_work_time``: per round, the sum over stitch ids (device tasks) of the latest
``DEV_TASK_ALL_CALLOP_TASK_EXEC(<stitch>)`` end minus the earliest ``DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK(<stitch>)``
end over the AI-core threads (``SCHED<k>-AIC-<i>`` / ``SCHED<k>-AIV-<i>``), skipping a thread whose pair is not
increasing — the figure ``machine_perf_trace.py analyze`` prints as "End-to-End time".

Accepted forms: the Perfetto object ``{"traceEvents": [...]}`` (phase end = ``ts + dur`` µs, AICPU view on pid 0)
and the raw list ``[{blockIdx, coreType, freq, tasks: [{name, end}]}]`` that ``gen_perfetto`` converts
(``machine_trace_perf_data_<round>.json``, older ``aicpu_dev_pref.json``; end = counter ÷ freq). Phase names may
carry a round (``NAME_<round>``, newer builds) and a stitch (``NAME(<stitch>)``); a per-stitch phase without a stitch
counts as stitch 0 (the reference would drop it and print no time). Unlike the reference's ``analyze`` (which wants
the raw list, stops at the first malformed block and formats "-" for what it cannot compute), malformed input is an
``ArtifactError`` naming the event, and a file without any AI-core phase pair is one too.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from pypto_tune.tools.errors import ArtifactError

TRACE_GLOB = "machine_runtime_operator_trace*.json"
WAIT_FIRST = "DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK"
ALL_EXEC = "DEV_TASK_ALL_CALLOP_TASK_EXEC"
# NAME, optional _<round>, optional (<stitch>) — the split machine_perf_trace.py uses
_PHASE = re.compile(r"^([A-Z0-9_]+?)(?:_(\d+))?(?:\((\d+)\))?$")
_CORE_THREAD = re.compile(r"^SCHED\d*-(AIC|AIV)-\d+$")
_HINT = ("the AICPU trace is written by newer NPU builds with DUMP_DEVICE_PERF=true; re-collect, or ignore the "
         "AICPU-side time for this run")


class AicpuStitch(BaseModel):
    """One stitch (device task) of one round."""

    stitch: int
    e2e_us: float = Field(description="latest ALL_CALLOP_TASK_EXEC end − earliest WAIT_RCV_FIRST_CALLOP_TASK end")
    core_threads: int = Field(description="AI-core threads whose pair entered the figure")


class AicpuRound(BaseModel):
    round: int | None = Field(description="the _<round> of the phase names; None when they carry none")
    e2e_us: float | None = Field(description="Σ over stitches; None when no AI-core thread has a pair this round")
    stitches: list[AicpuStitch] = Field(default_factory=list)
    aicore_total_run_us: float | None = Field(
        None, description="max over AI-core threads of WAIT_EXIT_NOTIFY − BEGIN (the reference's Total run time)")


class AicpuTrace(BaseModel):
    path: str
    form: Literal["perfetto", "raw"]
    threads: int = Field(description="AICPU-view threads (control, schedulers and AI-core threads)")
    aicore_threads: int
    rounds: list[AicpuRound]
    e2e_us: float = Field(description="AICPU-side AICore end-to-end time: Σ over the rounds that have one (µs)")


def find_aicpu_traces(run_dir: Path) -> list[Path]:
    """``machine_runtime_operator_trace*.json`` in a run folder, ordered by round (the bare name first)."""

    def key(p: Path) -> tuple[int, str]:
        tail = p.stem[len("machine_runtime_operator_trace"):].lstrip("_")
        return (int(tail) if tail.isdigit() else -1, p.name)

    return sorted((p for p in Path(run_dir).glob(TRACE_GLOB) if p.is_file()), key=key)


def _finite(value: Any, path: str, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArtifactError(f"{what} is not a finite number: {value!r}", path=path, where=where,
                            expected="a number", hint=_HINT)
    return float(value)


def _threads_from_perfetto(data: dict, path: str) -> dict[str, list[tuple[str, float]]]:
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise ArtifactError("no traceEvents list", path=path, where="top level",
                            expected='{"traceEvents": [...]} (A.5)', hint=_HINT)
    names: dict[Any, str] = {}
    for i, e in enumerate(events):
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == 0:
            args = e.get("args")
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                raise ArtifactError("thread_name event without args.name", path=path, where=f"traceEvents[{i}]",
                                    expected='{"args": {"name": "<coreType>-<blockIdx>"}}', hint=_HINT)
            names[e.get("tid")] = args["name"]
    threads: dict[str, list[tuple[str, float]]] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise ArtifactError("trace event is not an object", path=path, where=f"traceEvents[{i}]",
                                expected="an object", hint=_HINT)
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue  # the Machine View (pid 1) and metadata are not AICPU phases
        where = f"traceEvents[{i}]"
        name = e.get("name")
        if not isinstance(name, str):
            raise ArtifactError("phase event without a name", path=path, where=where, expected="a phase name",
                                hint=_HINT)
        end = _finite(e.get("ts"), path, where, "ts") + _finite(e.get("dur"), path, where, "dur")
        thread = names.get(e.get("tid"))
        if thread is None:
            raise ArtifactError(f"phase {name!r} on tid {e.get('tid')!r}, which has no thread_name", path=path,
                                where=where, expected="a thread_name metadata event for every AICPU tid",
                                hint=_HINT)
        threads.setdefault(thread, []).append((name, end))
    return threads


def _threads_from_raw(data: list, path: str) -> dict[str, list[tuple[str, float]]]:
    threads: dict[str, list[tuple[str, float]]] = {}
    for i, block in enumerate(data):
        where = f"[{i}]"
        if not isinstance(block, dict):
            raise ArtifactError("block is not an object", path=path, where=where,
                                expected="{blockIdx, coreType, freq, tasks}", hint=_HINT)
        core_type, idx, tasks = block.get("coreType"), block.get("blockIdx"), block.get("tasks")
        if not isinstance(core_type, str) or isinstance(idx, bool) or not isinstance(idx, int):
            raise ArtifactError("block without a string coreType and an integer blockIdx", path=path, where=where,
                                expected="{blockIdx: int, coreType: str, ...}", hint=_HINT)
        freq = _finite(block.get("freq"), path, where, "freq")
        if freq <= 0:
            raise ArtifactError(f"freq must be positive, got {freq}", path=path, where=where,
                                expected="counter ticks per µs (50 on A2/A3)", hint=_HINT)
        if not isinstance(tasks, list):
            raise ArtifactError("block without a tasks list", path=path, where=where, expected="tasks: [...]",
                                hint=_HINT)
        phases = []
        for j, t in enumerate(tasks):
            tw = f"{where}.tasks[{j}]"
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise ArtifactError("phase without a name", path=path, where=tw, expected="{name, end}", hint=_HINT)
            phases.append((t["name"], _finite(t.get("end"), path, tw, "end") / freq))
        threads.setdefault(f"{core_type}-{idx}", []).extend(phases)
    return threads


def parse_aicpu_trace(data: Any, path: str = "machine_runtime_operator_trace.json") -> AicpuTrace:
    """Compute the per-round AICore end-to-end times from decoded JSON (either accepted form)."""
    if isinstance(data, dict):
        form: Literal["perfetto", "raw"] = "perfetto"
        threads = _threads_from_perfetto(data, path)
    elif isinstance(data, list):
        form = "raw"
        threads = _threads_from_raw(data, path)
    else:
        raise ArtifactError(f"top level is a {type(data).__name__}", path=path, where="top level",
                            expected='{"traceEvents": [...]} or a list of AICPU blocks (A.5)', hint=_HINT)
    if not threads:
        raise ArtifactError("no AICPU phase events", path=path, where="traceEvents",
                            expected="X events on pid 0 named like DEV_TASK_ALL_CALLOP_TASK_EXEC(0)", hint=_HINT)
    # round → thread → (stitch → end) for both phases, plus BEGIN / WAIT_EXIT_NOTIFY for the run time
    pairs: dict[int | None, dict[str, dict[str, dict[int, float]]]] = {}
    spans: dict[int | None, dict[str, dict[str, float]]] = {}
    core_threads = [t for t in threads if _CORE_THREAD.match(t)]
    for thread in core_threads:
        for name, end in threads[thread]:
            m = _PHASE.match(name)
            if not m:
                continue
            base, rnd = m.group(1), (int(m.group(2)) if m.group(2) is not None else None)
            if base in (WAIT_FIRST, ALL_EXEC):
                stitch = int(m.group(3)) if m.group(3) is not None else 0
                pairs.setdefault(rnd, {}).setdefault(thread, {}).setdefault(base, {})[stitch] = end
            elif base in ("BEGIN", "WAIT_EXIT_NOTIFY"):
                spans.setdefault(rnd, {}).setdefault(thread, {})[base] = end
    rounds: list[AicpuRound] = []
    for rnd in sorted(set(pairs) | set(spans), key=lambda r: -1 if r is None else r):
        per_stitch: dict[int, tuple[float, float, int]] = {}
        for phases in pairs.get(rnd, {}).values():
            waits, execs = phases.get(WAIT_FIRST, {}), phases.get(ALL_EXEC, {})
            for stitch, wait in waits.items():
                done = execs.get(stitch)
                if done is None or done <= wait:
                    continue
                lo, hi, n = per_stitch.get(stitch, (wait, done, 0))
                per_stitch[stitch] = (min(lo, wait), max(hi, done), n + 1)
        stitches = [AicpuStitch(stitch=s, e2e_us=hi - lo, core_threads=n)
                    for s, (lo, hi, n) in sorted(per_stitch.items())]
        runs = [p["WAIT_EXIT_NOTIFY"] - p["BEGIN"] for p in spans.get(rnd, {}).values()
                if "BEGIN" in p and "WAIT_EXIT_NOTIFY" in p and p["WAIT_EXIT_NOTIFY"] > p["BEGIN"]]
        rounds.append(AicpuRound(round=rnd, e2e_us=sum(s.e2e_us for s in stitches) if stitches else None,
                                 stitches=stitches, aicore_total_run_us=max(runs) if runs else None))
    timed = [r.e2e_us for r in rounds if r.e2e_us is not None]
    if not timed:
        raise ArtifactError(f"no AI-core thread has an increasing {WAIT_FIRST} / {ALL_EXEC} pair", path=path,
                            where=f"{len(core_threads)} AI-core thread(s) of {len(threads)}",
                            expected="SCHED<k>-AIC-<i> / SCHED<k>-AIV-<i> threads with both phases per stitch",
                            hint=_HINT)
    return AicpuTrace(path=path, form=form, threads=len(threads), aicore_threads=len(core_threads), rounds=rounds,
                      e2e_us=sum(timed))


def read_aicpu_trace(path: Path) -> AicpuTrace:
    """Read one AICPU trace file (see the module docstring); every problem is an ``ArtifactError``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read the AICPU trace: {exc.strerror or exc}", path=str(p), hint=_HINT) from exc
    if not raw.strip():
        raise ArtifactError("the AICPU trace is empty", path=str(p), where="byte 0", expected="JSON", hint=_HINT)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArtifactError(f"the AICPU trace is not valid JSON (truncated?): {exc}", path=str(p),
                            where=f"byte {getattr(exc, 'pos', '?')} of {len(raw)}", expected="complete JSON",
                            hint=_HINT) from exc
    return parse_aicpu_trace(data, str(p))
