"""``analyze_runs`` / ``validate_run``: one analysis of one test invocation, from its output folders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from pypto_tune.tools.analysis import chains as chains_mod
from pypto_tune.tools.analysis import leaves as leaves_mod
from pypto_tune.tools.analysis import metrics, npu_extras
from pypto_tune.tools.analysis.bubble_log import read_bubble_log
from pypto_tune.tools.analysis.crosscheck import compare, recompute_log
from pypto_tune.tools.analysis.layout import RunFiles, locate
from pypto_tune.tools.analysis.models import BubbleLog, Bottleneck, CrossCheck, DirAnalysis, LogCore, RunAnalysis
from pypto_tune.tools.analysis.suggest import suggest
from pypto_tune.tools.analysis.topo import Program, read_program
from pypto_tune.tools.analysis.topo_worker import TopoJob
from pypto_tune.tools.analysis.trace import Trace, detect_label_layout, ordered_sum, read_trace
from pypto_tune.tools.errors import ArtifactError, InputError
from pypto_tune.tools.snapshot import CoreStat

SIM_DENOMINATOR = 1800  # cycles per µs in the simulator (A.2)
NEGATIVE_WAIT_TOLERANCE_US = 1e-9  # float noise guard; the corrupt runs of B.9.3 go down to −140 µs


def _mode(run_mode: str | None) -> str | None:
    if run_mode is None:
        return None
    m = str(run_mode).strip().lower()
    if m not in ("sim", "npu"):
        raise InputError(f"run_mode must be 'sim' or 'npu', got {run_mode!r}")
    return m


def log_reasons(log: BubbleLog, run_mode: str) -> list[str]:
    """B.9.3 corruption signs in a parsed log (SIM only)."""
    if run_mode != "sim":
        return []
    out = []
    fake = sum(c.n_fake for c in log.cores)
    if fake:
        out.append(f"bubble_analysis.log reports Fake Task: {fake} — the run was split into several device tasks "
                   "and SIM's HUB records collide (B.9.3); raise stitch_function_max_num to at least the number of "
                   "loop iterations")
    neg = [c for c in log.cores if c.wait_schedule_us < -NEGATIVE_WAIT_TOLERANCE_US]
    if neg:
        worst = min(neg, key=lambda c: c.wait_schedule_us)
        out.append(f"{len(neg)} core(s) have a negative Wait Schedule Time (worst [{worst.name}] "
                   f"{worst.wait_schedule_us:.3f} µs) — predecessor times are wrong (B.9.3)")
    return out


def validate_run(run_dir: Path, run_mode: str) -> list[str]:
    """Reasons why a run folder cannot be trusted; ``[]`` = valid.

    Both modes: bubble_analysis.log, merged_swimlane.json, dyn_topo.txt and program.json must exist (a SIM run
    with stitch_function_max_num = 1 writes neither swimlane file, B.9.3). SIM also: no ``Fake Task`` and no
    negative Wait Schedule Time in the log. A log that cannot be parsed is a reason, not an exception.
    """
    mode = _mode(run_mode) or "sim"
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [f"run folder does not exist: {run_dir}"]
    f = locate(run_dir)
    reasons = []
    too_long = sim_swimlane_skipped(f) if mode == "sim" and f.log is None and f.trace is None else None
    if too_long:
        reasons.append(too_long)
    for label, p in (("bubble_analysis.log", f.log), ("merged_swimlane.json", f.trace), ("dyn_topo.txt", f.topo),
                     ("program.json", f.program)):
        if too_long and label in ("bubble_analysis.log", "merged_swimlane.json"):
            continue
        if p is None:
            where = f.swim_dir if label in ("bubble_analysis.log", "merged_swimlane.json") else f.run_dir
            reasons.append(f"{label} is missing in {where}")
    if f.log is not None:
        try:
            log = read_bubble_log(f.log)
        except ArtifactError as exc:
            reasons.append(str(exc.message))
        else:
            reasons.extend(log_reasons(log, mode))
    return reasons


SIM_LIMIT_NAME = "drawPngThresholdCycle"
_THRESHOLD_RE = re.compile(rf"^\s*{SIM_LIMIT_NAME}\s*=\s*(\d+)", re.M)


def sim_swimlane_skipped(f: RunFiles) -> str | None:
    """Why a SIM run left no swimlane files, when the simulator says so itself: its cost model writes
    ``_simulate.swim.json`` always, but runs the script that turns it into ``merged_swimlane.json`` and
    ``bubble_analysis.log`` only while the simulated time stays within ``drawPngThresholdCycle`` (500 000 cycles
    in pypto 0.2.0, written to the run's own ``_simulate.config.ini``). A run above it passes and looks like a
    collection that went wrong; the user needs the limit named, not "file missing". None when that is not the
    cause (or the run's own files cannot tell)."""
    config = f.swim_dir / "_simulate.config.ini"
    _, total_us = _sim_stat(f.sim_stat)
    try:
        m = _THRESHOLD_RE.search(config.read_text(errors="replace"))
    except OSError:
        return None
    if m is None or total_us is None:
        return None
    limit = int(m.group(1))
    cycles = round(total_us * SIM_DENOMINATOR)
    if cycles <= limit:
        return None
    return (f"the simulated run took {cycles} cycles ({total_us:.1f} µs), above the simulator's swimlane limit "
            f"{SIM_LIMIT_NAME} = {limit} ({limit / SIM_DENOMINATOR:.1f} µs, {config.name}): above it PyPTO's SIM "
            "writes _simulate.swim.json but neither merged_swimlane.json nor bubble_analysis.log, so there is "
            "nothing to measure. Tune a smaller case of the operator in SIM (fewer loop iterations or smaller "
            "shapes in the test, the same tiling), or measure it on an NPU")


_STAT_RE = {"AIC": re.compile(r"\|--Cube Count\.*:\s*(\d+)"), "AIV": re.compile(r"\|--Vector Count\.*:\s*(\d+)"),
            "total_cycles": re.compile(r"^Total Cycles\.*:\s*(\d+)", re.M)}


def _sim_stat(path: Path | None) -> tuple[dict[str, int], float | None]:
    if path is None:
        return {}, None
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}, None
    counts = {}
    for t in ("AIC", "AIV"):
        m = _STAT_RE[t].search(text)
        if m:
            counts[t] = int(m.group(1))
    m = _STAT_RE["total_cycles"].search(text)
    return counts, (int(m.group(1)) / SIM_DENOMINATOR if m else None)


class _Dir:
    """Everything read from one output folder."""

    def __init__(self, files: RunFiles, mode: str | None, warnings: list[str]) -> None:
        self.files = files
        self.mode = mode or files.layout
        if files.trace is None:
            too_long = sim_swimlane_skipped(files) if files.log is None else None
            if too_long:
                raise ArtifactError(too_long, path=str(files.swim_dir / "merged_swimlane.json"),
                                    expected="a simulated run within the simulator's swimlane limit")
            raise ArtifactError("merged_swimlane.json is missing", path=str(files.swim_dir / "merged_swimlane.json"),
                                expected="the swimlane trace written with runtime_debug_mode 1",
                                hint="collect again with runtime_debug_mode 1 (in SIM keep stitch_function_max_num "
                                "≥ the number of loop iterations, B.9.3)")
        # the task graph is read on the other core meanwhile (topo_worker): it shares nothing with the trace
        topo_job = TopoJob(files.topo) if files.topo else None
        try:
            self.trace: Trace = read_trace(files.trace)
            self.recomputed, _ = recompute_log(self.trace)
            if files.log is not None:
                self.log: BubbleLog = read_bubble_log(files.log)
                self.crosscheck = compare(self.log, self.recomputed)
            else:
                warnings.append(f"{files.run_dir.name}: bubble_analysis.log is missing; figures recomputed from "
                                "merged_swimlane.json alone (B.9, exact for single-device-task runs)")
                self.log = self.recomputed
                self.crosscheck = None
            self.program: Program | None = read_program(files.program) if files.program else None
            self.topo: dict | None = topo_job.result() if topo_job else None
        finally:
            if topo_job:
                topo_job.cancel()
        if self.topo is None:
            warnings.append(f"{files.run_dir.name}: dyn_topo.txt is missing — no psgIds or dependency chains")
        if self.program is None:
            warnings.append(f"{files.run_dir.name}: program.json is missing — no source mapping or root names")
        self.platform, self.sim_total_us = _sim_stat(files.sim_stat)


def _aicore_e2e(tr: Trace) -> tuple[float, float, float]:
    """(writer E2E over AIC/AIV lanes, writer utilisation Σdur/(L·E2E), whole-trace span from T0) — B.3, B.10."""
    names = tr.lane_names
    lanes = sorted(t for t, n in names.items() if ("AIC" in n or "AIV" in n) and "AICPU" not in n)
    core_lanes = {(t - 1000) // 2 for t in lanes}
    a = tr.arrays()
    in_core = np.isin(a.tid, np.asarray(lanes, dtype=np.int64))
    real = a.tid >= 1002  # not a fake placeholder
    if in_core.any():
        lo, hi = float(a.start[in_core].min()), float(a.end[in_core].max())
        busy = ordered_sum(a.dur[in_core])
    else:
        lo = hi = busy = 0.0
    e2e = hi - lo
    util = busy / (len(core_lanes) * e2e) * 100.0 if e2e > 0 and core_lanes else 0.0
    span = float(a.end[real].max() - a.start[real].min()) if real.any() else 0.0
    return e2e, util, span


def _merge_cores(per_dir_cores: list[list[LogCore]]) -> list[LogCore]:
    """Several output folders = one invocation: sum each core's times so util/bubble become time-weighted."""
    if len(per_dir_cores) == 1:
        return per_dir_cores[0]
    merged: dict[str, LogCore] = {}
    for cores in per_dir_cores:
        for c in cores:
            m = merged.get(c.name)
            if m is None:
                merged[c.name] = c.model_copy(update={"top3": list(c.top3)})
                continue
            m.n_real += c.n_real
            m.n_fake += c.n_fake
            m.work_us += c.work_us
            m.wait_total_us += c.wait_total_us
            m.wait_schedule_us += c.wait_schedule_us
            m.wait_predecessor_us += c.wait_predecessor_us
    return sorted(merged.values(), key=lambda c: c.index)


def _theoretical(dirs: list[_Dir], mode: str | None, core_counts: dict[str, int] | None,
                 warnings: list[str]) -> tuple[dict[str, int], str]:
    if core_counts:
        return dict(core_counts), "given"
    for d in dirs:
        if d.platform:
            return d.platform, "platform"
    if (mode or dirs[0].files.layout) == "sim":
        # SIM lists every core of the platform in the log, idle ones included (A.3)
        counts: dict[str, int] = {}
        for c in dirs[0].log.cores:
            if c.core_type in ("AIC", "AIV"):
                counts[c.core_type] = counts.get(c.core_type, 0) + 1
        return counts, "platform"
    counts = {}
    for d in dirs:
        seen: dict[str, set[str]] = {}
        for n in d.trace.lane_names.values():
            t = n.split("_")[0]
            if t in ("AIC", "AIV"):
                seen.setdefault(t, set()).add(n)
        for t, s in seen.items():
            counts[t] = max(counts.get(t, 0), len(s))
    warnings.append("NPU: theoretical core counts taken from the lanes in the trace (idle cores have no lane on "
                    "NPU, so FULL may be overstated); pass core_counts={'AIC': n, 'AIV': m} from the device")
    return counts, "lanes"


def analyze_runs(run_dirs: list[Path], *, run_mode: str | None = None, outer_loops: int | None = None,
                 source_root: Path | None = None, core_counts: dict[str, int] | None = None) -> RunAnalysis:
    """Analyse the output folders of ONE test invocation (oldest → newest).

    ``operator_time_us`` = Σ over folders of max_work_time (B.10), ``e2e_us`` the same sum of the writer's AICore
    end-to-end time. Reference figures (analyze_perf) and corrected ``active_*`` figures are both returned;
    ``per_dir`` has each folder's own numbers. ``outer_loops`` (for t/iter) is taken as given, else inferred from
    the ``pypto.loop`` nesting of the sources under ``source_root``, else 1 with a warning.
    Raises ``ArtifactError`` for a missing trace or any malformed file; ``InputError`` for bad arguments.
    """
    if not run_dirs:
        raise InputError("no run folders given", hint="find_run_dirs(workspace) lists them")
    mode = _mode(run_mode)
    if outer_loops is not None and (not isinstance(outer_loops, int) or outer_loops < 1):
        raise InputError(f"outer_loops must be a positive integer, got {outer_loops!r}",
                         hint="the product of the trip counts of all non-innermost pypto.loops")
    warnings: list[str] = []
    dirs: list[_Dir] = []
    for rd in run_dirs:
        rd = Path(rd)
        if not rd.is_dir():
            raise ArtifactError("run folder does not exist", path=str(rd), hint="find_run_dirs lists existing runs")
        dirs.append(_Dir(locate(rd), mode, warnings))
    mode_eff = mode or dirs[0].files.layout

    # ---- outer loops for t/iter (B.4)
    ol_source = "given"
    if outer_loops is None:
        inferred = chains_mod.infer_outer_loops(source_root) if source_root else None
        if inferred:
            outer_loops, ol_source = inferred, "inferred"
        else:
            outer_loops, ol_source = 1, "default"
    per_dir: list[DirAnalysis] = []
    invalid: list[str] = []
    for d in dirs:
        stats = metrics.core_stats(d.log.cores)
        fig = metrics.core_figures(stats, d.log.cores)
        e2e, wutil, span = _aicore_e2e(d.trace)
        reasons = [f"{d.files.run_dir.name}: {r}" for r in log_reasons(d.log, mode_eff)]
        if d.crosscheck is not None and not d.crosscheck.agrees:
            # The log's figures are recomputed from the trace (B.9): a disagreement means the run was split into
            # device tasks whose records collide, or one of the two files was rewritten after the run. Either
            # way its operator time is not a number to judge a round by.
            reasons.append(f"{d.files.run_dir.name}: bubble_analysis.log and merged_swimlane.json disagree "
                           f"(max Δ work {d.crosscheck.max_delta_work_us:.6g} µs, schedule "
                           f"{d.crosscheck.max_delta_schedule_us:.6g} µs): " + "; ".join(d.crosscheck.disagreements[:3]))
        invalid.extend(reasons)
        n_fake = int(np.count_nonzero(d.trace.arrays().tid < 1002))
        per_dir.append(DirAnalysis(
            run_dir=str(d.files.run_dir), layout=d.files.layout, log_path=str(d.files.log or ""),
            trace_path=str(d.files.trace), operator_time_us=fig.max_work_us, e2e_us=e2e,
            writer_utilization_pct=wutil, trace_span_us=span, sim_total_us=d.sim_total_us,
            avg_core_utilization_pct=fig.avg_util, avg_bubble_rate_pct=fig.avg_bubble,
            load_balance_pct=fig.load_balance, active_core_utilization_pct=fig.active_util,
            active_bubble_rate_pct=fig.active_bubble, active_load_balance_pct=fig.active_balance,
            task_count=len(d.trace) - n_fake, fake_task_count=n_fake, crosscheck=d.crosscheck,
            invalid_reasons=[r.split(": ", 1)[1] for r in reasons], label_layout=detect_label_layout(d.trace),
        ))
        npu_extras.attach(per_dir[-1], d.files, warnings)

    merged = _merge_cores([d.log.cores for d in dirs])
    stats: list[CoreStat] = metrics.core_stats(merged)
    fig = metrics.core_figures(stats, merged)
    # ---- leaves, core usage, chains
    acc: dict = {}
    for d in dirs:
        leaves_mod.accumulate(d.trace, acc)
    psg: dict[int, set[int]] = {}
    for d in dirs:
        for h, s in (d.topo or {}).get("psg", {}).items():
            psg.setdefault(h, set()).update(s)
    program = next((d.program for d in dirs if d.program is not None), None)
    leaves = leaves_mod.leaf_stats(acc, program=program, topo_rows_psg=psg, outer_loops=outer_loops)
    if source_root is not None:
        _relocate_sources(leaves, Path(source_root))
    theo, theo_src = _theoretical(dirs, mode_eff, core_counts, warnings)
    usage = leaves_mod.core_usage(leaves, theo, theo_src)
    gap = leaves_mod.load_gap(leaves)
    topo = next((d.topo for d in dirs if d.topo is not None), None)
    aiv = topo["chains"] if topo is not None else chains_mod.empty()
    short = leaves_mod.short_task_fraction([d.trace for d in dirs])

    cc = [d.crosscheck for d in dirs if d.crosscheck is not None]
    crosscheck = CrossCheck(
        max_delta_work_us=max((c.max_delta_work_us for c in cc), default=0.0),
        max_delta_wait_us=max((c.max_delta_wait_us for c in cc), default=0.0),
        max_delta_schedule_us=max((c.max_delta_schedule_us for c in cc), default=0.0),
        max_delta_predecessor_us=max((c.max_delta_predecessor_us for c in cc), default=0.0),
        task_counts_equal=all(c.task_counts_equal for c in cc), top10_equal=all(c.top10_equal for c in cc),
        agrees=all(c.agrees for c in cc) and len(cc) == len(dirs),
        disagreements=[x for c in cc for x in c.disagreements][:10]
        + ([] if len(cc) == len(dirs) else ["no bubble_analysis.log to compare with in some folders"]),
    )
    bns: list[Bottleneck] = metrics.bottlenecks(fig)
    if ol_source == "default" and any(r.subgraph_count is not None for r in leaves):
        warnings.append("outer_loops unknown: t/iter assumes 1 — pass outer_loops (product of the trip counts of "
                        "all non-innermost pypto.loops)")
    a = RunAnalysis(
        run_dirs=[str(d.files.run_dir) for d in dirs], run_mode=mode_eff,
        operator_time_us=sum(p.operator_time_us for p in per_dir), e2e_us=sum(p.e2e_us for p in per_dir),
        trace_span_us=sum(p.trace_span_us for p in per_dir),
        writer_utilization_pct=(sum(p.writer_utilization_pct * p.e2e_us for p in per_dir)
                                / sum(p.e2e_us for p in per_dir)) if sum(p.e2e_us for p in per_dir) else 0.0,
        avg_core_utilization_pct=fig.avg_util, avg_bubble_rate_pct=fig.avg_bubble, load_balance_pct=fig.load_balance,
        avg_aic_utilization_pct=fig.avg_aic_util, avg_aiv_utilization_pct=fig.avg_aiv_util,
        avg_aic_bubble_rate_pct=fig.avg_aic_bubble, avg_aiv_bubble_rate_pct=fig.avg_aiv_bubble,
        active_core_utilization_pct=fig.active_util, active_bubble_rate_pct=fig.active_bubble,
        active_load_balance_pct=fig.active_balance, max_aic_wait_predecessor_us=fig.max_aic_wait_pred_us,
        ratings=metrics.ratings(fig.avg_util, fig.avg_bubble, fig.load_balance),
        active_ratings=metrics.ratings(fig.active_util, fig.active_bubble, fig.active_balance),
        cores=stats, bottlenecks=bns, directions=metrics.directions(fig), leaves=leaves, core_usage=usage,
        load_gap=gap, aiv_chains=aiv, short_task_fraction=short, crosscheck=crosscheck, invalid_reasons=invalid,
        warnings=warnings, trace_paths=[str(d.files.trace) for d in dirs],
        log_paths=[str(d.files.log) for d in dirs if d.files.log], task_count=sum(p.task_count for p in per_dir),
        fake_task_count=sum(p.fake_task_count for p in per_dir), outer_loops=outer_loops,
        outer_loops_source=ol_source, per_dir=per_dir,
    )
    a.aicpu_e2e_us = npu_extras.total_aicpu_e2e(per_dir)
    a.pipe_usage = [p.pipe_usage for p in per_dir if p.pipe_usage is not None]
    a.bottlenecks.extend(_extra_bottlenecks(a))
    a.suggestions = suggest(a)
    return a


def _extra_bottlenecks(a: RunAnalysis) -> list[Bottleneck]:
    """Flags the reference has no script for: short tasks, S-3 gap, NOT FULL leaves (corrected source)."""
    out = []
    if a.short_task_fraction > 0.5:
        out.append(Bottleneck(kind="short_tasks", severity="medium", metric="short_task_fraction",
                              value=a.short_task_fraction * 100, threshold=50.0, source="corrected",
                              message=f"{a.short_task_fraction * 100:.1f} % of compute tasks are shorter than "
                              f"{leaves_mod.SHORT_TASK_US:g} µs (launch overhead dominates, B.8)",
                              message_zh=f"{a.short_task_fraction * 100:.1f} % 的计算任务短于 "
                              f"{leaves_mod.SHORT_TASK_US:g} µs（任务下发开销占主导，B.8）"))
    if a.load_gap.severe and a.load_gap.gap_pct is not None:
        out.append(Bottleneck(kind="leaf_imbalance", severity="high", metric="load_gap.gap_pct",
                              value=a.load_gap.gap_pct, threshold=leaves_mod.LEAF_GAP_SEVERE_PCT, source="corrected",
                              # gap_pct is (total₁ − total₂) / total₁ (B.6): a share of the first leaf's total
                              message=f"leaf {a.load_gap.first_leaf}'s total time is {a.load_gap.gap_pct:.1f} % ahead "
                              f"of the next leaf's, as a share of its own (S-3 gap > "
                              f"{leaves_mod.LEAF_GAP_SEVERE_PCT:g} %)",
                              message_zh=f"子图 {a.load_gap.first_leaf} 与总耗时第二的子图差距 "
                              f"{a.load_gap.gap_pct:.1f} %（S-3 差距 > {leaves_mod.LEAF_GAP_SEVERE_PCT:g} %）"))
    nf = [r for r in a.core_usage.rows if not r.full]
    if nf:
        worst = min(nf, key=lambda r: r.usage_pct)
        out.append(Bottleneck(kind="core_fill", severity="medium", metric="core_usage.usage_pct",
                              value=worst.usage_pct, threshold=100.0, source="corrected",
                              message=f"{len(nf)} leaf(s) NOT FULL; worst {worst.leaf_hash} on {worst.used_cores}/"
                              f"{worst.theoretical_cores} {worst.core_type} cores",
                              message_zh=f"{len(nf)} 个子图 NOT FULL；最差的 {worst.leaf_hash} 只用了 "
                              f"{worst.used_cores}/{worst.theoretical_cores} 个 {worst.core_type} 核"))
    return out


def _relocate_sources(leaves: list[Any], root: Path) -> None:
    """Name each leaf's source as the file in ``root`` (the workspace), not where the run executed it.

    Runs execute from a private copy (``.pypto-tune/exec/...``, or a Ray worker's staging folder) that is deleted
    afterwards, so ``program.json``'s paths point nowhere a reader can open; the workspace file with the longest
    matching path suffix is the one the run's bytes came from."""
    root = root if root.is_dir() else root.parent
    memo: dict[str, str] = {}

    def relocate(path: str) -> str:
        if path not in memo:
            parts = Path(path).parts
            memo[path] = path
            if not Path(path).is_relative_to(root) or ".pypto-tune" in parts:
                for k in range(1, len(parts)):
                    tail = Path(*parts[k:])
                    if ".pypto-tune" not in tail.parts and (root / tail).is_file():
                        memo[path] = str(root / tail)
                        break
        return memo[path]

    for leaf in leaves:
        src = getattr(leaf, "source", "")
        if not src or src.startswith("("):
            continue
        pieces = []
        for piece in src.split("; "):
            file, sep, lines = piece.rpartition(":")
            pieces.append(f"{relocate(file)}{sep}{lines}" if sep and file else piece)
        leaf.source = "; ".join(pieces)
