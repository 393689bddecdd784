"""Figures every view shows the same way (board, Markdown, HTML)."""

from __future__ import annotations

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
