"""``performance_analysis_report.md`` (zh / en): the tables of analyze_perf's report, plus the corrected
figures, per-leaf statistics, core usage, cross-check and ranked catalogue suggestions."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

from pypto_tune.tools.analysis.models import RunAnalysis
from pypto_tune.tools.errors import InputError

_T = {
    "title": ("PyPTO 算子性能分析报告", "PyPTO operator performance analysis report"),
    "generated": ("生成时间", "Generated"),
    "runs": ("分析的输出目录", "Output folders analysed"),
    "summary": ("总体指标", "Summary"),
    "metric": ("指标", "Metric"),
    "ref": ("参考公式（analyze_perf）", "Reference formula (analyze_perf)"),
    "active": ("修正值（仅活跃核）", "Corrected (active cores only)"),
    "rating": ("评级", "Rating"),
    "op_time": ("算子实际执行时间 max_work_time (µs)", "Operator time max_work_time (µs)"),
    "e2e": ("AICore 端到端时间 (µs)", "AICore end-to-end time (µs)"),
    "span": ("整条泳道跨度（含 HUB）(µs)", "Whole-trace span incl. HUB (µs)"),
    "util": ("平均核利用率 (%)", "Average core utilisation (%)"),
    "bubble": ("平均气泡率 (%)", "Average bubble rate (%)"),
    "lb": ("负载均衡度 (%)", "Load balance (%)"),
    "overall": ("综合评级", "Overall rating"),
    "tasks": ("任务数（不含 fake）", "Tasks (fake excluded)"),
    "cores": ("各核详情", "Per-core detail"),
    "core": ("核", "Core"),
    "work": ("总工作时间 (µs)", "Work (µs)"),
    "busy": ("AicoreTime (µs)", "AicoreTime (µs)"),
    "wsched": ("等待调度 (µs)", "Wait schedule (µs)"),
    "ucol": ("利用率 (%)", "Utilisation (%)"),
    "bcol": ("气泡率 (%)", "Bubble (%)"),
    "idle": ("个核空闲（未列出，参考公式按 0 % 计入平均）", "idle cores not listed (the reference averages count them as 0 %)"),
    "bottlenecks": ("瓶颈", "Bottlenecks"),
    "none": ("无", "none"),
    "false_alarm": ("（参考公式误报）", " (false alarm of the reference formula)"),
    "leaves": ("各子图（leafHash）统计", "Per-leaf (leafHash) statistics"),
    "leaf": ("leafHash", "leafHash"),
    "type": ("类型", "Type"),
    "count": ("次数", "Count"),
    "avg": ("平均 (µs)", "Avg (µs)"),
    "max": ("最大 (µs)", "Max (µs)"),
    "min": ("最小 (µs)", "Min (µs)"),
    "total": ("总计 (µs)", "Total (µs)"),
    "tpi": ("t/iter", "t/iter"),
    "src": ("源码", "Source"),
    "usage": ("核使用情况", "Core usage"),
    "used": ("使用核数", "Used"),
    "theo": ("理论核数", "Theoretical"),
    "status": ("状态", "Status"),
    "gap": ("S-3 负载差距", "S-3 leaf gap"),
    "chains": ("AIV 依赖链", "AIV dependency chains"),
    "cross": ("交叉校验（仅由泳道图重算）", "Cross-check (recomputed from the trace alone)"),
    "agrees": ("一致", "agrees"),
    "disagrees": ("不一致", "DISAGREES"),
    "invalid": ("⚠ 本次运行数据无效", "⚠ This run's data is INVALID"),
    "warnings": ("提示", "Warnings"),
    "suggest": ("优化建议（按优先级）", "Suggestions (ranked)"),
    "prio": ("优先级", "Rank"),
    "id": ("编号", "Id"),
    "stage": ("阶段", "Stage"),
    "reason": ("原因", "Reason"),
    "directions": ("参考脚本建议的方向", "Directions the reference script points to"),
    "per_dir": ("各输出目录", "Per output folder"),
    "short": ("短任务占比（< 10 µs）", "Short-task fraction (< 10 µs)"),
    "notes": ("口径说明", "Definitions"),
    "note_text": (
        "参考公式与 analyze_perf.py 相同：平均值包含空闲核（按 0 % 计），负载均衡只看 AIC 且可为负。"
        "修正值只统计至少执行过一个真实任务的核；负载均衡按核类型分别计算并截断到 0–100，取较差者。"
        "算子时间取 max_work_time（从全局首个任务开始计时，SIM 中可能由 HUB 任务决定）。",
        "Reference figures use analyze_perf.py's formulas: averages include idle cores at 0 %, load balance is "
        "AIC-only and can go negative. Corrected figures count only cores that ran at least one real task; load "
        "balance is computed per core type, clamped to 0–100, and the worse type is shown. Operator time is "
        "max_work_time (measured from the global first task, which a HUB task may set in SIM)."),
}
_STAGE = {"frontend": ("开箱调优", "frontend"), "swimlane": ("深度调优（泳道）", "swimlane"),
          "incore": ("核内调优", "in-core")}


def _stars(n: int) -> str:
    return "★" * n + "☆" * (5 - n)


def _f(v: float | None, nd: int = 2) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def render_report(a: RunAnalysis, lang: str = "zh") -> str:
    """The report text; ``lang`` is 'zh' or 'en'."""
    if lang not in ("zh", "en"):
        raise InputError(f"lang must be 'zh' or 'en', got {lang!r}")
    k = 0 if lang == "zh" else 1

    def t(key: str) -> str:
        return _T[key][k]

    def local(en: str, zh: str) -> str:
        # analyses saved before the zh fields existed carry only the English text
        return zh if k == 0 and zh else en

    out: list[str] = [f"# {t('title')}", "", f"- {t('generated')}: {datetime.now().astimezone().isoformat(timespec='seconds')}"]
    out.append(f"- {t('runs')}: " + ", ".join(f"`{d}`" for d in a.run_dirs))
    if a.invalid_reasons:
        out += ["", f"> **{t('invalid')}**", ">"] + [f"> - {r}" for r in a.invalid_reasons]
    r, ra = a.ratings, a.active_ratings
    out += ["", f"## {t('summary')}", "", f"| {t('metric')} | {t('ref')} | {t('rating')} | {t('active')} | {t('rating')} |",
            "|---|---:|---|---:|---|",
            f"| {t('util')} | {_f(a.avg_core_utilization_pct)} | {_stars(r.get('utilization', 1))} | "
            f"{_f(a.active_core_utilization_pct)} | {_stars(ra.get('utilization', 1))} |",
            f"| {t('bubble')} | {_f(a.avg_bubble_rate_pct)} | {_stars(r.get('bubble', 1))} | "
            f"{_f(a.active_bubble_rate_pct)} | {_stars(ra.get('bubble', 1))} |",
            f"| {t('lb')} | {_f(a.load_balance_pct)} | {_stars(r.get('load_balance', 1))} | "
            f"{_f(a.active_load_balance_pct)} | {_stars(ra.get('load_balance', 1))} |",
            f"| {t('overall')} | | {_stars(r.get('overall', 1))} | | {_stars(ra.get('overall', 1))} |",
            "", f"| {t('metric')} | µs |", "|---|---:|",
            f"| {t('op_time')} | {_f(a.operator_time_us, 3)} |", f"| {t('e2e')} | {_f(a.e2e_us, 3)} |",
            f"| {t('span')} | {_f(a.trace_span_us, 3)} |", f"| {t('tasks')} | {a.task_count} |",
            f"| {t('short')} | {a.short_task_fraction * 100:.1f} % |", "", f"_{t('note_text')}_"]
    if len(a.per_dir) > 1:
        out += ["", f"### {t('per_dir')}", "", f"| # | {t('op_time')} | {t('e2e')} | {t('util')} | {t('bubble')} | {t('tasks')} |",
                "|---|---:|---:|---:|---:|---:|"]
        for i, p in enumerate(a.per_dir, 1):
            out.append(f"| {i} `{Path(p.run_dir).name}` | {_f(p.operator_time_us, 3)} | {_f(p.e2e_us, 3)} | "
                       f"{_f(p.avg_core_utilization_pct)} | {_f(p.avg_bubble_rate_pct)} | {p.task_count} |")
    out += ["", f"## {t('bottlenecks')}", ""]
    if a.bottlenecks:
        for b in a.bottlenecks:
            out.append(f"- **{b.severity}** [{b.source}] {local(b.message, b.message_zh)}"
                       + (t("false_alarm") if b.false_alarm else ""))
    else:
        out.append(f"- {t('none')}")
    if a.directions:
        out += ["", f"{t('directions')}: " + ", ".join(_STAGE[d][k] for d in a.directions)]
    out += ["", f"## {t('suggest')}", "", f"| {t('prio')} | {t('id')} | {t('stage')} | ★ | {t('reason')} |",
            "|---:|---|---|---|---|"]
    from pypto_tune.tools.analysis.catalog import load_catalog

    cat = load_catalog()
    for s in a.suggestions:
        item = cat.get(s.catalog_id)
        title = (item.title_zh if k == 0 else item.title_en) if item else s.title
        out.append(f"| {s.priority} | {s.catalog_id} {title} | {_STAGE[s.stage][k]} | {'★' * s.stars} {s.p_level} | "
                   f"{local(s.reason, s.reason_zh).replace('|', '/')} |")
    out += ["", f"## {t('cores')}", "", f"| {t('core')} | {t('work')} | {t('busy')} | {t('wsched')} | {t('ucol')} | "
            f"{t('bcol')} |", "|---|---:|---:|---:|---:|---:|"]
    idle = 0
    for c in a.cores:
        if not c.active:
            idle += 1
            continue
        out.append(f"| {c.name} | {_f(c.work_us, 3)} | {_f(c.busy_us, 3)} | {_f(c.wait_schedule_us, 3)} | "
                   f"{_f(c.utilization_pct)} | {_f(c.bubble_rate_pct)} |")
    if idle:
        out += ["", f"{idle} {t('idle')}"]
    out += ["", f"## {t('leaves')}", "", f"| {t('leaf')} | {t('type')} | {t('count')} | {t('avg')} | {t('max')} | "
            f"{t('min')} | {t('total')} | {t('tpi')} | {t('src')} |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for lf in a.leaves[:50]:
        tpi = "?" if lf.tasks_per_iter is None else f"{lf.tasks_per_iter:.1f}"
        out.append(f"| {lf.leaf_hash} | {lf.core_type} | {lf.count} | {_f(lf.avg_us, 3)} | {_f(lf.max_us, 3)} | "
                   f"{_f(lf.min_us, 3)} | {_f(lf.total_us, 3)} | {tpi} | {lf.source or '—'} |")
    g = a.load_gap
    out += ["", f"{t('gap')}: " + ("—" if g.gap_pct is None else f"{g.gap_pct:.2f} %" + (" (> 20 %)" if g.severe else ""))]
    out += ["", f"## {t('usage')}", "", f"| {t('leaf')} | {t('type')} | {t('used')} | {t('theo')} | % | {t('status')} |",
            "|---|---|---:|---:|---:|---|"]
    for u in a.core_usage.rows:
        out.append(f"| {u.leaf_hash} | {u.core_type} | {u.used_cores} | {u.theoretical_cores} ({u.theoretical_source}) "
                   f"| {u.usage_pct:.0f} | {'FULL' if u.full else 'NOT FULL'} |")
    ch = a.aiv_chains
    out += ["", f"## {t('chains')}", "",
            f"AIV tasks {ch.aiv_tasks} / {ch.total_tasks} (reference script would keep {ch.reference_task_count} rows); "
            f"groups {len(ch.groups)}; sg_set_scope candidates {len(ch.scope_candidates)}"]
    for grp in ch.groups[:10]:
        out.append(f"- {grp.label}: ×{grp.count}, {len(grp.levels)} level(s), {grp.distinct_leaves} leaf(s), "
                   f"{grp.distinct_psg} psgId(s)")
    c = a.crosscheck
    out += ["", f"## {t('cross')}", "", f"**{t('agrees') if c.agrees else t('disagrees')}** — max |Δ| work "
            f"{c.max_delta_work_us:.3g} µs, wait {c.max_delta_wait_us:.3g} µs, schedule {c.max_delta_schedule_us:.3g} µs, "
            f"predecessor {c.max_delta_predecessor_us:.3g} µs; task counts equal: {c.task_counts_equal}; Top-10 equal: "
            f"{c.top10_equal}"]
    out += [f"- {d}" for d in c.disagreements]
    if a.warnings:
        out += ["", f"## {t('warnings')}", ""] + [f"- {w}" for w in a.warnings]
    return "\n".join(out) + "\n"


def write_report(analysis: RunAnalysis, path: Path, lang: str = "zh") -> Path:
    """Write ``performance_analysis_report.md`` atomically (temp file + rename) and return its path."""
    text = render_report(analysis, lang)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
