"""Core metrics: the reference figures of analyze_perf.py (domain B.2) and the corrected ones (E.2).

Reference: plain means over every AIC/AIV block of the log, idle cores counted as 0 %; load balance over AIC
blocks only, population σ, unbounded below. Corrected (``active_*``): the same per-core formulas, averaged over
cores that ran ≥ 1 real task; load balance computed per core type over its active cores, clamped to 0..100, and
the worse type reported — a vector-only kernel is no longer "0 % balanced" because 24 idle cube lanes are listed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pypto_tune.tools.analysis.models import Bottleneck, LogCore
from pypto_tune.tools.snapshot import CoreStat

_SELECT = re.compile(r"^(AIC|AIV)_\d+$")  # analyze_perf's block filter: HUB, AI-CPU and Fake Core are ignored

# Named thresholds (domain B.2 / B.8).
UTIL_HIGH_PCT, UTIL_MEDIUM_PCT = 50.0, 70.0
BUBBLE_HIGH_PCT, BUBBLE_MEDIUM_PCT = 20.0, 10.0
BALANCE_HIGH_PCT, BALANCE_MEDIUM_PCT = 60.0, 80.0
AIC_WAIT_PRED_US = 500.0


def core_stats(cores: list[LogCore]) -> list[CoreStat]:
    """Per-core figures for the AIC/AIV blocks, in log order (B.2 formulas).

    AicoreTime = work − TotalWait (= busy time, B.1); utilisation = busy / (busy + TotalWait) = busy / work;
    bubble = WaitSched / (busy + WaitSched); each 0 when its denominator is 0.
    """
    out = []
    for c in cores:
        if not _SELECT.match(c.name):
            continue
        busy = c.work_us - c.wait_total_us
        util_den = busy + c.wait_total_us
        bub_den = busy + c.wait_schedule_us
        out.append(CoreStat(
            name=c.name, core_type=c.core_type, work_us=c.work_us, busy_us=busy, wait_schedule_us=c.wait_schedule_us,
            utilization_pct=busy / util_den * 100.0 if util_den else 0.0,
            bubble_rate_pct=c.wait_schedule_us / bub_den * 100.0 if bub_den else 0.0,
            active=c.n_real > 0,
        ))
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def reference_load_balance(busy_us: list[float]) -> float:
    """analyze_perf: (1 − σ/μ)·100 with population σ; 0 if μ = 0; 100 with fewer than two cores. Unbounded."""
    if len(busy_us) < 2:
        return 100.0
    mu = _mean(busy_us)
    if mu == 0:
        return 0.0
    sigma = math.sqrt(sum((x - mu) ** 2 for x in busy_us) / len(busy_us))
    return (1.0 - sigma / mu) * 100.0


def active_load_balance(stats: list[CoreStat]) -> float:
    """Corrected: per type over active cores, clamped to 0..100; the worse type; 100 if nothing is comparable."""
    values = []
    for t in ("AIC", "AIV"):
        busy = [c.busy_us for c in stats if c.core_type == t and c.active]
        if len(busy) >= 2:
            values.append(min(100.0, max(0.0, reference_load_balance(busy))))
    return min(values) if values else 100.0


@dataclass
class CoreFigures:
    avg_util: float
    avg_bubble: float
    avg_aic_util: float
    avg_aiv_util: float
    avg_aic_bubble: float
    avg_aiv_bubble: float
    load_balance: float
    active_util: float
    active_bubble: float
    active_balance: float
    max_work_us: float
    max_aic_wait_pred_us: float


def core_figures(stats: list[CoreStat], log_cores: list[LogCore]) -> CoreFigures:
    act = [c for c in stats if c.active]
    aic = [c for c in stats if c.core_type == "AIC"]
    aiv = [c for c in stats if c.core_type == "AIV"]
    wait_pred = [c.wait_predecessor_us for c in log_cores if _SELECT.match(c.name) and c.core_type == "AIC"]
    return CoreFigures(
        avg_util=_mean([c.utilization_pct for c in stats]),
        avg_bubble=_mean([c.bubble_rate_pct for c in stats]),
        avg_aic_util=_mean([c.utilization_pct for c in aic]),
        avg_aiv_util=_mean([c.utilization_pct for c in aiv]),
        avg_aic_bubble=_mean([c.bubble_rate_pct for c in aic]),
        avg_aiv_bubble=_mean([c.bubble_rate_pct for c in aiv]),
        load_balance=reference_load_balance([c.busy_us for c in aic]),
        active_util=_mean([c.utilization_pct for c in act]),
        active_bubble=_mean([c.bubble_rate_pct for c in act]),
        active_balance=active_load_balance(stats),
        # max_work_time (B.10): over AIC/AIV blocks only; an all-idle log has no such time
        max_work_us=max((c.work_us for c in stats), default=0.0),
        max_aic_wait_pred_us=max(wait_pred, default=0.0),
    )


# ---------------------------------------------------------------------------------------------- ratings
def _stars_high(v: float) -> int:
    for stars, thr in ((5, 90.0), (4, 80.0), (3, 60.0), (2, 50.0)):
        if v > thr:
            return stars
    return 1


def _stars_low(v: float) -> int:
    for stars, thr in ((5, 2.0), (4, 5.0), (3, 10.0), (2, 20.0)):
        if v < thr:
            return stars
    return 1


def ratings(util_pct: float, bubble_pct: float, balance_pct: float) -> dict[str, int]:
    """analyze_perf's star table (strict inequalities) and overall = rounded mean (≥4.5→5 … ≥1.5→2)."""
    u, b, lb = _stars_high(util_pct), _stars_low(bubble_pct), _stars_high(balance_pct)
    mean = (u + b + lb) / 3.0
    overall = 5 if mean >= 4.5 else 4 if mean >= 3.5 else 3 if mean >= 2.5 else 2 if mean >= 1.5 else 1
    return {"utilization": u, "bubble": b, "load_balance": lb, "overall": overall}


def bottlenecks(fig: CoreFigures) -> list[Bottleneck]:
    """analyze_perf's flags on the reference figures, each marked a false alarm when the active-core figure is fine."""
    out: list[Bottleneck] = []

    def flag(kind, value, high, medium, lower_is_bad, metric, active_value, text, text_zh):
        bad_high = value < high if lower_is_bad else value > high
        bad_med = value < medium if lower_is_bad else value > medium
        if not (bad_high or bad_med):
            return
        thr = high if bad_high else medium
        ok_active = (active_value >= medium) if lower_is_bad else (active_value <= medium)
        # A load balance is (1 − CV)·100: below 0 the CV exceeds 1 (the reference is unbounded below), and the
        # active-core figure is clamped at 0 — say so instead of printing a bare "0.00 %" or "−18.30 %".
        why = why_zh = ""
        if kind == "load_balance" and value < 0:
            why, why_zh = "; below 0: busy-time CV > 1", "；低于 0：忙碌时间变异系数 > 1"
        floor = kind == "load_balance" and active_value <= 0.0
        act = f"{active_value:.2f} %" + (" (the floor: CV ≥ 1 on some core type)" if floor else "")
        act_zh = f"{active_value:.2f} %" + ("（下限：某类核的变异系数 ≥ 1）" if floor else "")
        out.append(Bottleneck(
            kind=kind, severity="high" if bad_high else "medium", metric=metric, value=value, threshold=thr,
            source="reference", false_alarm=ok_active,
            message=text.format(v=value, t=thr) + why + (f" (active cores only: {act}, not a problem)"
                                                         if ok_active else f" (active cores only: {act})"),
            message_zh=text_zh.format(v=value, t=thr) + why_zh + (f"（仅统计活跃核：{act_zh}，不构成问题）"
                                                                  if ok_active else f"（仅统计活跃核：{act_zh}）"),
        ))

    flag("utilization", fig.avg_util, UTIL_HIGH_PCT, UTIL_MEDIUM_PCT, True, "avg_core_utilization_pct",
         fig.active_util, "core utilisation {v:.2f} % < {t:g} %", "核利用率 {v:.2f} % < {t:g} %")
    flag("bubble", fig.avg_bubble, BUBBLE_HIGH_PCT, BUBBLE_MEDIUM_PCT, False, "avg_bubble_rate_pct",
         fig.active_bubble, "bubble rate {v:.2f} % > {t:g} %", "气泡率 {v:.2f} % > {t:g} %")
    flag("load_balance", fig.load_balance, BALANCE_HIGH_PCT, BALANCE_MEDIUM_PCT, True, "load_balance_pct",
         fig.active_balance, "AIC load balance {v:.2f} % < {t:g} %", "AIC 负载均衡度 {v:.2f} % < {t:g} %")
    if fig.max_aic_wait_pred_us > AIC_WAIT_PRED_US:
        out.append(Bottleneck(kind="dependency", severity="medium", metric="max_aic_wait_predecessor_us",
                              value=fig.max_aic_wait_pred_us, threshold=AIC_WAIT_PRED_US, source="reference",
                              message=f"an AIC core waits {fig.max_aic_wait_pred_us:.2f} µs for predecessors "
                              f"(> {AIC_WAIT_PRED_US:g} µs)",
                              message_zh=f"有 AIC 核等待前驱任务 {fig.max_aic_wait_pred_us:.2f} µs"
                              f"（> {AIC_WAIT_PRED_US:g} µs）"))
    return out


def directions(fig: CoreFigures) -> list[str]:
    """analyze_perf's direction section: which stages the reference would point at (reference figures)."""
    out = []
    if fig.avg_util < UTIL_HIGH_PCT or fig.avg_bubble > BUBBLE_HIGH_PCT:
        out.append("frontend")
    if fig.avg_bubble > BUBBLE_MEDIUM_PCT or fig.load_balance < BALANCE_MEDIUM_PCT:
        out.append("swimlane")
    if fig.avg_util >= UTIL_MEDIUM_PCT and fig.avg_bubble < BUBBLE_MEDIUM_PCT:
        out.append("incore")
    return out
