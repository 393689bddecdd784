"""Symptoms → ranked catalogue ids, each with the numbers that triggered it.

Symptoms (catalog.json "symptoms"): A bubble > 10 %, B utilisation < 50 %, C imbalance (S-3 gap > 20 % or
active-core balance < 80 %), D in-core (active util > 80 % and bubble < 10 %), plus two B.8 thresholds:
short_tasks (> 50 % of compute tasks under 10 µs) and core_fill (a leaf NOT FULL). Symptoms are decided on the
corrected active-core figures — the reference figures would flag every vector-only SIM kernel for utilisation
and load balance (E.2) — and the reference figures are put in the evidence beside them.

Preconditions from the catalogue are applied mechanically: cube items need a cube leaf, vector items an AIV leaf; cube merges (S-6/7/8) need
all AIC leaves FULL (R17); S-2 needs a NOT FULL leaf; S-4 needs an sg_set_scope candidate chain (B.7).
Ranking: stage order (frontend, swimlane, incore — the order the workflow visits them), then the stars of the
triggering symptom's table where they differ (E.3.15), then P-level, then catalogue order.
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.analysis.catalog import load_catalog
from pypto_tune.tools.analysis.models import RunAnalysis, Suggestion

BUBBLE_PCT = 10.0
UTIL_PCT = 50.0
BALANCE_PCT = 80.0
INCORE_UTIL_PCT, INCORE_BUBBLE_PCT = 80.0, 10.0
SHORT_FRACTION = 0.5
_STAGE_ORDER = {"frontend": 0, "swimlane": 1, "incore": 2}
_CUBE_ONLY = {"F-1", "F-9", "F-12", "F-13", "S-6", "S-7", "S-8", "S-11", "S-13", "I-1"}
_CUBE_MERGE = {"S-6", "S-7", "S-8"}
_VECTOR_ONLY = {"F-10", "S-4", "S-5", "S-12"}


def symptoms(a: RunAnalysis) -> dict[str, dict[str, Any]]:
    """Which symptoms hold, each with its evidence numbers."""
    out: dict[str, dict[str, Any]] = {}
    if a.active_bubble_rate_pct > BUBBLE_PCT or a.avg_bubble_rate_pct > BUBBLE_PCT:
        out["A"] = {"active_bubble_rate_pct": round(a.active_bubble_rate_pct, 3),
                    "avg_bubble_rate_pct": round(a.avg_bubble_rate_pct, 3), "threshold_pct": BUBBLE_PCT}
    if a.active_core_utilization_pct < UTIL_PCT:
        out["B"] = {"active_core_utilization_pct": round(a.active_core_utilization_pct, 3),
                    "avg_core_utilization_pct": round(a.avg_core_utilization_pct, 3), "threshold_pct": UTIL_PCT}
    if a.load_gap.severe or a.active_load_balance_pct < BALANCE_PCT:
        out["C"] = {"leaf_gap_pct": None if a.load_gap.gap_pct is None else round(a.load_gap.gap_pct, 3),
                    "active_load_balance_pct": round(a.active_load_balance_pct, 3),
                    "load_balance_pct": round(a.load_balance_pct, 3), "threshold_pct": BALANCE_PCT}
    if a.active_core_utilization_pct > INCORE_UTIL_PCT and a.active_bubble_rate_pct < INCORE_BUBBLE_PCT:
        longest = max(a.leaves, key=lambda r: r.max_us, default=None)
        out["D"] = {"active_core_utilization_pct": round(a.active_core_utilization_pct, 3),
                    "active_bubble_rate_pct": round(a.active_bubble_rate_pct, 3),
                    "longest_leaf": longest.leaf_hash if longest else None,
                    "longest_task_us": round(longest.max_us, 3) if longest else None}
    if a.short_task_fraction > SHORT_FRACTION:
        short = [r for r in a.leaves if r.short_task]
        out["short_tasks"] = {"short_task_fraction": round(a.short_task_fraction, 4),
                              "short_leaves": [r.leaf_hash for r in short][:5],
                              "min_avg_task_us": round(min((r.avg_us for r in short), default=0.0), 4),
                              "threshold_us": 10.0}
    nf = [r for r in a.core_usage.rows if not r.full]
    if nf:
        out["core_fill"] = {"not_full": [f"{r.leaf_hash} {r.core_type} {r.used_cores}/{r.theoretical_cores}"
                                         for r in nf][:5]}
    return out


_REASONS = {
    "A": "bubble rate above 10 % (scheduling waits)",
    "B": "utilisation below 50 % on the cores that ran tasks (not enough parallel work)",
    "C": "work is unevenly spread (S-3 gap > 20 % or active-core balance < 80 %)",
    "D": "cores are busy and bubbles are low: what is left is inside the tasks",
    "short_tasks": "most compute tasks are shorter than 10 µs (launch overhead dominates)",
    "core_fill": "some leaves run on fewer cores than the platform has (NOT FULL)",
}
# The zh report's wording of the same symptoms; every key of _REASONS needs one (a test checks).
_REASONS_ZH = {
    "A": "气泡率超过 10 %（调度等待）",
    "B": "执行过任务的核利用率低于 50 %（可并行的工作量不足）",
    "C": "负载分布不均（S-3 差距 > 20 % 或活跃核负载均衡度 < 80 %）",
    "D": "核已基本跑满且气泡很少：剩余的优化空间在任务内部",
    "short_tasks": "大部分计算任务短于 10 µs（任务下发开销占主导）",
    "core_fill": "部分子图使用的核数少于平台核数（NOT FULL）",
}


def suggest(a: RunAnalysis) -> list[Suggestion]:
    """Ranked suggestions for ``a`` (see the module docstring for the rules)."""
    cat = load_catalog()
    found = symptoms(a)
    has_cube = any(r.core_type == "AIC" or r.is_cube for r in a.leaves)
    has_vector = any(r.core_type == "AIV" for r in a.leaves)
    aic_full = a.core_usage.aic_full is True
    picked: list[tuple[tuple, Suggestion]] = []
    for order, item in enumerate(cat.items):
        hit = [s for s in item.symptoms if s in found]
        if not hit:
            continue
        if item.id in _CUBE_ONLY and not has_cube:
            continue
        if item.id in _VECTOR_ONLY and not has_vector:
            continue
        if item.id in _CUBE_MERGE and not aic_full:
            continue
        if item.id == "S-2" and "core_fill" not in found:
            continue
        if item.id == "S-4" and not a.aiv_chains.scope_candidates:
            continue
        if item.id == "S-3" and not a.load_gap.severe:
            continue
        stars = max(item.symptom_stars.get(s, item.stars) for s in hit)
        evidence: dict[str, Any] = {"symptoms": hit}
        for s in hit:
            evidence.update(found[s])
        if item.id == "S-4":
            evidence["scope_candidates"] = [c.model_dump() for c in a.aiv_chains.scope_candidates[:3]]
        if item.id == "S-3":
            evidence.update(first_leaf=a.load_gap.first_leaf, second_leaf=a.load_gap.second_leaf)
        reason = "; ".join(_REASONS[s] for s in hit)
        reason_zh = "；".join(_REASONS_ZH[s] for s in hit)
        if item.sim_check:
            # the catalogue's note was measured on the catalogue's reference kernels, never on the operator analysed
            # here: saying "measured in SIM" beside this operator's figures read as this operator's result (issue #17)
            reason += f" — catalogue note, another operator measured in SIM (not this one): {item.sim_check}"
            # an untranslated SIM note is still worth showing, even in English
            reason_zh += f"——目录参考，另一算子的 SIM 实测（非本算子）：{item.sim_check_zh or item.sim_check}"
        key = (_STAGE_ORDER[item.stage], -stars, item.p_level, order)
        picked.append((key, Suggestion(catalog_id=item.id, stage=item.stage, priority=0, stars=stars,
                                       p_level=item.p_level, title=item.title_en, reason=reason, reason_zh=reason_zh,
                                       symptom=",".join(hit), evidence=evidence, knobs=list(item.knobs))))
    picked.sort(key=lambda kv: kv[0])
    out = []
    for rank, (_, s) in enumerate(picked, start=1):
        s.priority = rank
        out.append(s)
    return out
