"""Figures every view shows the same way (board, Markdown, HTML)."""

from __future__ import annotations

import statistics

from pypto_tune.tools.snapshot import Measurement, SessionSnapshot


def achievement_rate(snap: SessionSnapshot) -> float | None:
    """(baseline − best) / (baseline − target) × 100, capped to [0, 100] (domain E.3.18 leaves it undefined).

    The share of the required time reduction that was achieved: 100 % means the target was reached.
    """
    b, best, t = snap.baseline_us, snap.best_us, snap.target_us
    if b is None or best is None or t is None or b <= t:
        return None
    return max(0.0, min(100.0, (b - best) / (b - t) * 100.0))


def speedup(snap: SessionSnapshot) -> float | None:
    if snap.baseline_us and snap.best_us:
        return snap.baseline_us / snap.best_us
    return None


def cumulative_gain_pct(snap: SessionSnapshot) -> float | None:
    if snap.baseline_us and snap.best_us is not None:
        return (snap.baseline_us - snap.best_us) / snap.baseline_us * 100.0
    return None


def baseline_measurement(snap: SessionSnapshot) -> Measurement | None:
    return next((m for m in snap.measurements if m.round == 0), None)


def best_measurement(snap: SessionSnapshot) -> Measurement | None:
    """The latest measurement of the best kept round (the baseline when nothing was kept)."""
    want = snap.best_round if snap.best_round is not None else 0
    ms = [m for m in snap.measurements if m.round == want]
    return ms[-1] if ms else baseline_measurement(snap)


def progress_bar(pct: float | None, width: int = 20) -> str:
    p = 0.0 if pct is None else max(0.0, min(100.0, pct))
    filled = round(p / 100 * width)
    return "█" * filled + "░" * (width - filled) + f" {p:.0f}%"


def fmt_us(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def fmt_pct(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "—"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def stars(n: int | None) -> str:
    return "—" if not n else "★" * int(n) + "☆" * (5 - int(n))


def stars_change(before: dict[str, int], after: dict[str, int], key: str) -> str:
    """``★☆☆☆☆ → ★★★☆☆`` for one rating of two measurements; ``—`` when neither has it."""
    if not before.get(key) and not after.get(key):
        return "—"
    return f"{stars(before.get(key))} → {stars(after.get(key))}"


class Spread:
    """Repeats of one measurement: count, median, range and CV, the coefficient of variation (sample standard
    deviation ÷ mean, in %)."""

    def __init__(self, samples: list[float]) -> None:
        xs = [float(x) for x in samples]
        self.n = len(xs)
        self.median = statistics.median(xs) if xs else None
        self.lo = min(xs) if xs else None
        self.hi = max(xs) if xs else None
        mean = statistics.fmean(xs) if xs else 0.0
        self.cv_pct = statistics.stdev(xs) / mean * 100.0 if self.n >= 2 and mean else None

    def range_text(self) -> str:
        if self.lo is None or self.hi is None:
            return "—"
        return fmt_us(self.lo) if self.n < 2 else f"{fmt_us(self.lo)}–{fmt_us(self.hi)}"

    def cv_text(self) -> str:
        return "—" if self.cv_pct is None else f"{self.cv_pct:.2f}%"


def fmt_chips(ids: list[str]) -> str:
    """Chips in order of first use with their run counts: ``2 ×3`` or ``1, 2 ×2``; ``—`` without any."""
    counts: dict[str, int] = {}
    for d in ids:
        counts[d] = counts.get(d, 0) + 1
    return ", ".join(f"{d} ×{n}" if n > 1 else d for d, n in counts.items()) or "—"


def search_share(snap: SessionSnapshot) -> tuple[float, float, float | None]:
    """(gain of rounds kept from a run_candidates batch, gain of all kept rounds, share in %), gains in µs.

    A round's gain is the kept time it was judged against minus its own time. The kept time is a median of every
    sample of the kept code, so these gains need not add up to baseline − best exactly; the share compares like
    with like. None when nothing was kept.
    """
    search = total = 0.0
    for r in snap.rounds:
        if r.decision != "kept" or r.before_us is None or r.after_us is None:
            continue
        g = r.before_us - r.after_us
        total += g
        if r.batch is not None:
            search += g
    return search, total, (search / total * 100.0 if total > 0 else None)


def measurement_label(m: Measurement, s: dict[str, str]) -> str:
    """What a measurement was taken for, in the report's language."""
    if m.round == 0:
        return s["m_baseline"]
    if m.round == -1:
        return s["m_stage"].format(stage=m.stage or "—")
    if m.round == -2:
        return s["m_ref"].format(n=m.for_round) if m.for_round is not None else s["m_ref_unknown"]
    return s["m_round"].format(n=m.round)
