"""Turn a finished SIM run folder into the run folder an NPU run writes (test-only; domain A.1, A.5, A.6, A.8, F.6).

What an NPU run with ``runtime_debug_mode`` 1 leaves in ``output/output_<ts>_<usec>_<pid>_<tag>/``, and how each
file is made here from the SIM run of the same kernel:

* ``program.json``, ``dyn_topo.txt`` (and the other compile products): moved over from the SIM folder.
* ``tilefwk_L1_prof_data.json`` — the per-core task record. From ``_simulate.swim.json``: only blocks that ran
  tasks (NPU lists no idle core), the SIM-only ``completeSeq`` key dropped, times re-timed with noise (below) and
  converted from 1800 simulated cycles per µs to the 50 counter ticks per µs of A2/A3 (so times are quantised to
  0.02 µs). The HUB lane becomes the ``AI-CPU`` block the NPU record carries (A.8) — see README for why it is not
  dropped.
* ``bubble_analysis.log`` / ``merged_swimlane.json`` — written by PyPTO's own ``draw_swim_lane.py`` with
  ``--label_type=1 --time_convert_denominator=50``, run in the folder with the ``python3`` on PATH (A.2, A.2b).
* ``machine_trace_perf_data_<round>.json`` / ``machine_runtime_operator_trace_<round>.json`` — a synthesised
  AICPU phase record (A.5) converted by PyPTO's ``machine_perf_trace.py gen_perfetto``, which also prepends the
  AICPU view to ``merged_swimlane.json`` (newer builds with ``DUMP_DEVICE_PERF=true``).
* ``pipe_usage.csv`` — the A.6 layout, from the SIM per-core pipe occupancy (see :func:`pipe_usage_rows`).

The SIM folder is deleted afterwards: an NPU run never writes ``CostModelSimulationOutput``.

Noise model (the README explains the choice): every task's duration is multiplied by
``1 + σ·(√ρ·z_run + √(1−ρ)·z_task)`` (z standard normal, one z_run per run, ρ = ``noise_run_share``), so
each task varies by σ and runs differ as a whole by σ·√ρ. Start times then move with what each task waited for: a
task starts late (or early) by the largest end-time shift among its dyn_topo predecessors and the previous task on
its core, so no dependency or core order is broken. σ = 0 leaves every time as SIM computed it.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SIM_SUBDIR = "CostModelSimulationOutput"
SIM_PER_US = 1800  # simulated cycles per µs (A.2)
NPU_PER_US = 50  # A2/A3 counter ticks per µs (A.2: FREQ_DAV_2201)
CYCLES_PER_TICK = SIM_PER_US // NPU_PER_US
PIPES = ("MTE_IN", "MTE1", "MTE_OUT", "CUBE", "VECTOR_ALU")
SCHED_THREADS = 3  # AICPU scheduler threads in the synthesised record (a guess, README)


class ConversionError(RuntimeError):
    """The SIM folder lacks what an NPU folder needs; the message names the file."""


@dataclass(frozen=True)
class Options:
    noise_pct: float = 0.0
    noise_run_share: float = 0.5
    rng_seed: str = "0"
    slowdown: float = 1.0  # busy chip: every duration × this
    time_scale: float = 1.0  # a "true change" of the whole timeline (option_effects): every time × this
    hub_lane: str = "ai-cpu"
    tick_base: int = 0
    round_id: int = 0
    debug: bool = True  # runtime_debug_mode 1: the swim record and the swimlane files exist
    aicpu_trace: bool = True
    pipe_usage: bool = True
    python3: str = sys.executable
    scripts_dir: Path | None = None
    keep_sim_in: Path | None = None  # tests: move the SIM folder here instead of deleting it


# ------------------------------------------------------------------------------------------------ inputs
def parse_dyn_topo(path: Path) -> dict[tuple[int, int], list[int]]:
    """(seqNo, taskId) → successor taskIds (same seqNo), from the 0.2.0 layout of A.7."""
    succ: dict[tuple[int, int], list[int]] = {}
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if not header or header[:2] != ["seqNo", "taskId"]:
            raise ConversionError(f"{path}: not a dyn_topo.txt (header {header!r})")
        for row in rows:
            if len(row) < 10:
                continue
            succ[(int(row[0]), int(row[1]))] = [int(x) for x in row[10:] if x.strip()]
    return succ


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConversionError(f"cannot read {path}: {exc}") from exc


# ------------------------------------------------------------------------------------------------ re-timing
def duration_factors(n: int, opts: Options) -> list[float]:
    """One multiplicative factor per task, in task order, from the run's seeded generator."""
    rng = random.Random(opts.rng_seed)
    sigma = opts.noise_pct / 100.0
    if sigma == 0:
        return [opts.slowdown] * n
    share = opts.noise_run_share
    z_run = rng.gauss(0.0, 1.0)
    out = []
    for _ in range(n):
        z = math.sqrt(share) * z_run + math.sqrt(1.0 - share) * rng.gauss(0.0, 1.0)
        out.append(max(0.05, 1.0 + sigma * z) * opts.slowdown)  # a task never takes (nearly) no time
    return out


def retime(blocks: list[dict], succ: dict[tuple[int, int], list[int]], opts: Options) -> dict[int, tuple[float, float]]:
    """New (start, end) in SIM cycles for every task, keyed by ``id()`` of its dict (see module docstring)."""
    items = []  # (start, end, block index, task dict)
    for bi, block in enumerate(blocks):
        for task in block["tasks"]:
            items.append((float(task["execStart"]), float(task["execEnd"]), bi, task))
    items.sort(key=lambda x: (x[0], x[1]))
    preds: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (seq, tid), nexts in succ.items():
        for n in nexts:
            preds.setdefault((seq, n), []).append((seq, tid))
    factors = duration_factors(len(items), opts)
    end_shift: dict[tuple[int, int], float] = {}
    last_on_core: dict[int, float] = {}  # block → end shift of its previous task
    new: dict[int, tuple[float, float]] = {}
    for (start, end, bi, task), factor in zip(items, factors):
        key = (int(task.get("seqNo", 0)), int(task["taskId"]))
        shifts = [end_shift[p] for p in preds.get(key, ()) if p in end_shift]
        if bi in last_on_core:
            shifts.append(last_on_core[bi])
        shift = max(shifts) if shifts else 0.0
        ns = start + shift
        ne = ns + (end - start) * factor
        new[id(task)] = (ns, ne)
        end_shift[key] = ne - end
        last_on_core[bi] = ne - end
    return new


def npu_record(sim_blocks: list[dict], succ: dict[tuple[int, int], list[int]],
               opts: Options) -> tuple[list[dict], dict[int, float]]:
    """The ``tilefwk_L1_prof_data.json`` list (cores with tasks only, ticks at 50 per µs, A.8), and per blockIdx
    the re-timed ÷ simulated busy time before quantisation (exactly 1 without noise or slowdown)."""
    kept = [b for b in sim_blocks if b.get("tasks") and (b.get("coreType") != "HUB" or opts.hub_lane == "ai-cpu")]
    times = retime(kept, succ, opts)
    if opts.time_scale != 1.0 and times:
        # the whole timeline stretches around its first start, so max_work_time (from T0) scales exactly
        base = min(v[0] for v in times.values())
        times = {k: (base + (a - base) * opts.time_scale, base + (b - base) * opts.time_scale)
                 for k, (a, b) in times.items()}
    out = []
    ratios: dict[int, float] = {}
    for block in kept:
        core_type = "AI-CPU" if block.get("coreType") == "HUB" else block["coreType"]
        tasks = []
        busy_new = busy_sim = 0.0
        for t in block["tasks"]:
            s, e = times[id(t)]
            busy_new += e - s
            busy_sim += float(t["execEnd"]) - float(t["execStart"])
            tasks.append({"seqNo": int(t.get("seqNo", 0)), "subGraphId": int(t.get("subGraphId", 0)),
                          "taskId": int(t["taskId"]),
                          "execStart": opts.tick_base + round(s / CYCLES_PER_TICK),
                          "execEnd": opts.tick_base + round(e / CYCLES_PER_TICK)})
        ratios[int(block["blockIdx"])] = busy_new / busy_sim if busy_sim else 1.0
        out.append({"blockIdx": int(block["blockIdx"]), "coreType": core_type, "tasks": tasks})
    return out, ratios


# ------------------------------------------------------------------------------------------------ AICPU record
def _phase(base: str, round_id: int, idx: int | None = None) -> str:
    # newer builds: NAME_<round>, and NAME_<round>(<stitch>) for per-device-task phases (A.5)
    return f"{base}_{round_id}" + (f"({idx})" if idx is not None else "")


def aicpu_phase_record(record: list[dict], round_id: int) -> list[dict]:
    """Synthesise the AICPU phase record (A.5 input list) around the AI-core work of ``record``.

    Core threads (``SCHED<k>-AIC`` / ``SCHED<k>-AIV``, one per core with tasks) carry, per stitch (seqNo),
    ``DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK`` = the core's first task start and ``DEV_TASK_ALL_CALLOP_TASK_EXEC`` = its
    last task end, so the reference's AICore end-to-end time equals the AIC/AIV span of the swim record. The
    control and scheduler phases before and after are placed at fixed, plausible offsets: they are not measured.
    """
    cores = [b for b in record if b["coreType"] in ("AIC", "AIV") and b["tasks"]]
    if not cores:
        return []
    every = [t for b in record for t in b["tasks"]]
    first = min(t["execStart"] for t in every)
    last = max(t["execEnd"] for t in every)
    stitches = sorted({t["seqNo"] for b in cores for t in b["tasks"]})
    stitch_end = {s: max(t["execEnd"] for b in cores for t in b["tasks"] if t["seqNo"] == s) for s in stitches}
    out = [{"blockIdx": 0, "coreType": "AICPU-CTRL", "freq": NPU_PER_US, "tasks": [
        {"name": _phase("BEGIN", round_id), "end": first - 500},
        *[{"name": _phase("DEV_TASK_BUILD", round_id, s), "end": first - 120 + i} for i, s in enumerate(stitches)],
        {"name": _phase("EXIT", round_id), "end": last + 200}]}]
    for k in range(SCHED_THREADS):
        tasks = [{"name": _phase("BEGIN", round_id), "end": first - 490 + k},
                 {"name": _phase("ALLOC_THREAD_ID", round_id), "end": first - 470 + k},
                 {"name": _phase("INIT", round_id), "end": first - 400 + k},
                 {"name": _phase("CORE_HAND_SHAKE", round_id), "end": first - 300 + k}]
        for i, s in enumerate(stitches):
            tasks.append({"name": _phase("DEV_TASK_RCV", round_id, s), "end": first - 100 + 2 * i + k})
            tasks.append({"name": _phase("DEV_TASK_SCHED_EXEC", round_id, s), "end": stitch_end[s] + 5 + k})
        tasks += [{"name": _phase("WAIT_CORE_EXIT", round_id), "end": last + 100 + k},
                  {"name": _phase("EXIT", round_id), "end": last + 150 + k}]
        out.append({"blockIdx": k + 1, "coreType": "AICPU-SCHED", "freq": NPU_PER_US, "tasks": tasks})
    for n, b in enumerate(sorted(cores, key=lambda b: b["blockIdx"])):
        tasks = [{"name": _phase("BEGIN", round_id), "end": first - 250}]
        for s in stitches:
            mine = [t for t in b["tasks"] if t["seqNo"] == s]
            if not mine:
                continue
            tasks.append({"name": _phase("DEV_TASK_WAIT_RCV_FIRST_CALLOP_TASK", round_id, s),
                          "end": min(t["execStart"] for t in mine)})
            tasks.append({"name": _phase("DEV_TASK_ALL_CALLOP_TASK_EXEC", round_id, s),
                          "end": max(t["execEnd"] for t in mine)})
        tasks += [{"name": _phase("WAIT_EXIT_NOTIFY", round_id), "end": last + 50},
                  {"name": _phase("EXIT", round_id), "end": last + 60}]
        out.append({"blockIdx": b["blockIdx"], "coreType": f"SCHED{n % SCHED_THREADS}-{b['coreType']}",
                    "freq": NPU_PER_US, "tasks": tasks})
    return out


# ------------------------------------------------------------------------------------------------ pipe usage
def sim_pipe_cycles(trace_path: Path) -> dict[int, dict[str, float]]:
    """blockIdx → pipe → busy cycles, from SIM's per-core pipe lanes in ``_simulate.pefetto.trace.json``.

    Processes named ``AIC_<blockIdx>`` / ``AIV_<blockIdx>`` hold one thread per pipe; the 1-cycle ``Pipe Init``
    events are skipped, which makes the averages equal those of ``_simulate.stat.report.txt`` (checked in the tests).
    """
    data = _load_json(trace_path)
    events = data["traceEvents"] if isinstance(data, dict) else data
    proc: dict[int, int] = {}
    threads: dict[tuple[int, int], str] = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        name = (e.get("args") or {}).get("name", "")
        if e.get("name") == "process_name" and name[:4] in ("AIC_", "AIV_") and name[4:].isdigit():
            proc[e["pid"]] = int(name[4:])
        elif e.get("name") == "thread_name" and name in PIPES:
            threads[(e["pid"], e["tid"])] = name
    out: dict[int, dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("name") == "Pipe Init":
            continue
        pipe = threads.get((e.get("pid"), e.get("tid")))
        if pipe is None or e.get("pid") not in proc:
            continue
        row = out.setdefault(proc[e["pid"]], dict.fromkeys(PIPES, 0.0))
        row[pipe] += float(e.get("dur", 0))
    return out


def _pct(x: float) -> str:
    return f"{x:.4}%"  # 4 significant digits, as A.6's writer formats usage


def pipe_usage_rows(record: list[dict], ratios: dict[int, float], cycles: dict[int, dict[str, float]]) -> str:
    """``pipe_usage.csv`` text in the A.6 layout.

    Per core: SIM pipe busy cycles ÷ 1800 (A.6's writer also converts with 1800), scaled by the core's re-timed /
    simulated busy-time ratio (``ratios``) so noise reaches the pipes too (1 with no noise). MTE is not rescaled by
    a leaf's static estimate as A.6's writer does: SIM measured the pipes of these very tasks. Averages as A.6: CUBE
    and MTE1 over the AIC cores with tasks, VECTOR_ALU over the AIV cores, MTE_IN / MTE_OUT over both;
    TotalExecuteTime is the span of all tasks (AI-CPU lane included). A zero core count gives 0 (A.6's writer
    divides by zero there).
    """
    every = [t for b in record for t in b["tasks"]]
    span = (max(t["execEnd"] for t in every) - min(t["execStart"] for t in every)) / NPU_PER_US
    cores = sorted((b for b in record if b["coreType"] in ("AIC", "AIV") and b["tasks"]),
                   key=lambda b: b["blockIdx"])
    per_core = []
    for b in cores:
        ratio = ratios.get(b["blockIdx"], 1.0)
        own_span = (max(t["execEnd"] for t in b["tasks"]) - min(t["execStart"] for t in b["tasks"])) / NPU_PER_US
        pipes = {p: cycles.get(b["blockIdx"], {}).get(p, 0.0) / SIM_PER_US * ratio for p in PIPES}
        per_core.append((f"{b['coreType']}_{b['blockIdx'] + 1}", b["coreType"], own_span, pipes))
    n_aic = sum(1 for c in per_core if c[1] == "AIC")
    n_aiv = sum(1 for c in per_core if c[1] == "AIV")

    def avg(pipe: str, n: int) -> float:
        return sum(c[3][pipe] for c in per_core) / n if n else 0.0

    lines = [f"Total Core Num:{n_aic + n_aiv}", f"AIC: {n_aic}", f"AIV: {n_aiv}", "Total Pipe Usage",
             "Pipe, AverageTime, TotalExecuteTime, AverageUsage"]
    for pipe, n in (("CUBE", n_aic), ("VECTOR_ALU", n_aiv), ("MTE_IN", n_aic + n_aiv), ("MTE1", n_aic),
                    ("MTE_OUT", n_aic + n_aiv)):
        a = avg(pipe, n)
        lines.append(f"{pipe}, {a}, {span}, {_pct(a / span * 100 if span else 0.0)}")
    lines += ["", "", "AICore Pipe Usage",
              "Core, TotalTime, " + ", ".join(f"{p}_Time, {p}_Usage" for p in PIPES)]
    for name, _t, own_span, pipes in per_core:
        cells = [f"{pipes[p]}, {_pct(pipes[p] / own_span * 100 if own_span else 0.0)}" for p in PIPES]
        lines.append(f"{name}, {span}, " + ", ".join(cells))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ the folder
def npu_folder_name(sim_name: str, now: float | None = None) -> str:
    """``output_<YYYYMMDD_HHMMSS>_<usec>_<pid>_<tag>`` of this moment, keeping the SIM folder's tag."""
    parts = sim_name.split("_")
    tag = "_".join(parts[5:]) if len(parts) > 5 else ""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now))
    usec = round((now % 1) * 1e6) % 1000000
    return f"output_{stamp}_{usec:06d}_{os.getpid()}" + (f"_{tag}" if tag else "")


def _script(opts: Options, name: str) -> Path:
    if opts.scripts_dir is not None:
        return opts.scripts_dir / name
    # the installed writer scripts (pypto/lib/scripts); find_spec locates pypto without importing it (~3 s)
    spec = importlib.util.find_spec("pypto")
    if spec is None or spec.origin is None:
        raise ConversionError("pypto is not installed: its writer scripts are needed to build the NPU folder")
    return Path(spec.origin).parent / "lib" / "scripts" / name


def _run_script(opts: Options, args: list[str], cwd: Path, expect: str) -> None:
    res = subprocess.run([opts.python3, *args], check=False, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace")
    # The writer's own progress lines go where the runtime's go: into the test's output.
    sys.stdout.write(res.stdout)
    sys.stdout.flush()
    if res.returncode != 0 or expect not in res.stdout:
        raise ConversionError(f"{Path(args[0]).name} failed in {cwd} (exit {res.returncode}): "
                              + " | ".join(res.stdout.strip().splitlines()[-3:]))


def convert_run(sim_dir: Path, opts: Options) -> dict:
    """Write the NPU folder beside ``sim_dir`` and delete ``sim_dir``; returns a summary for the run log."""
    sim_dir = Path(sim_dir)
    swim_dir = sim_dir / SIM_SUBDIR
    npu_dir = sim_dir.parent / npu_folder_name(sim_dir.name)
    while npu_dir.exists() or npu_dir.name == sim_dir.name:
        time.sleep(1e-6)
        npu_dir = sim_dir.parent / npu_folder_name(sim_dir.name)
    npu_dir.mkdir()
    summary: dict = {"sim_dir": sim_dir.name, "npu_dir": npu_dir.name, "files": []}
    for entry in sim_dir.iterdir():
        if entry.name == SIM_SUBDIR:
            continue
        if opts.keep_sim_in is None:
            shutil.move(str(entry), str(npu_dir / entry.name))
        elif entry.is_dir():  # the kept SIM copy stays a complete SIM folder
            shutil.copytree(entry, npu_dir / entry.name)
        else:
            shutil.copy2(entry, npu_dir / entry.name)
    swim_path = swim_dir / "_simulate.swim.json"
    if opts.debug and swim_path.is_file() and (npu_dir / "dyn_topo.txt").is_file():
        sim_blocks = _load_json(swim_path)
        succ = parse_dyn_topo(npu_dir / "dyn_topo.txt")
        record, ratios = npu_record(sim_blocks, succ, opts)
        (npu_dir / "tilefwk_L1_prof_data.json").write_text(json.dumps(record, indent=1))
        if (npu_dir / "program.json").is_file():
            _run_script(opts, [str(_script(opts, "draw_swim_lane.py")), "tilefwk_L1_prof_data.json", "dyn_topo.txt",
                               "program.json", "--label_type=1", f"--time_convert_denominator={NPU_PER_US}"],
                        npu_dir, expect="Convert To perfetto trace End")
        pipe_trace = swim_dir / "_simulate.pefetto.trace.json"
        if opts.pipe_usage and pipe_trace.is_file():  # recorded SIM runs in fixtures/runs do not keep it
            cycles = sim_pipe_cycles(pipe_trace)
            (npu_dir / "pipe_usage.csv").write_text(pipe_usage_rows(record, ratios, cycles))
        if opts.aicpu_trace:
            phases = aicpu_phase_record(record, opts.round_id)
            raw = f"machine_trace_perf_data_{opts.round_id}.json"
            trace = f"machine_runtime_operator_trace_{opts.round_id}.json"
            (npu_dir / raw).write_text(json.dumps(phases, indent=2))
            args = [str(_script(opts, "machine_perf_trace.py")), "gen_perfetto", raw, trace]
            if (npu_dir / "merged_swimlane.json").is_file():
                args.append("merged_swimlane.json")
            _run_script(opts, args, npu_dir, expect="Success to generate perfetto file")
        summary["tasks"] = sum(len(b["tasks"]) for b in record)
        summary["aic_aiv_span_us"] = _core_span_us(record)
    if opts.keep_sim_in is not None:
        opts.keep_sim_in.mkdir(parents=True, exist_ok=True)
        shutil.move(str(sim_dir), str(opts.keep_sim_in / sim_dir.name))
        summary["sim_copy"] = str(opts.keep_sim_in / sim_dir.name)
    else:
        shutil.rmtree(sim_dir)
    summary["files"] = sorted(p.name for p in npu_dir.iterdir())
    return summary


def _core_span_us(record: list[dict]) -> float:
    ts = [t for b in record if b["coreType"] in ("AIC", "AIV") for t in b["tasks"]]
    if not ts:
        return 0.0
    return (max(t["execEnd"] for t in ts) - min(t["execStart"] for t in ts)) / NPU_PER_US
