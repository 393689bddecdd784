"""The final report (R21) in Markdown and self-contained HTML, zh or en, filled only from the SessionSnapshot."""

from __future__ import annotations

import difflib
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined

from pypto_tune.tools.report import svg
from pypto_tune.tools.report.board import round_table
from pypto_tune.tools.report.i18n import strings, term
from pypto_tune.tools.report.metrics import (
    achievement_rate, baseline_measurement, best_measurement, cumulative_gain_pct, fmt_pct, fmt_us, speedup, stars,
)
from pypto_tune.tools.snapshot import SessionSnapshot


class _Fmt:
    us = staticmethod(fmt_us)
    pct = staticmethod(fmt_pct)

    @staticmethod
    def spct(v: float | None) -> str:
        return fmt_pct(v, signed=True)


def _env(autoescape: bool) -> Environment:
    return Environment(autoescape=autoescape, undefined=StrictUndefined, keep_trailing_newline=True,
                       trim_blocks=False, lstrip_blocks=False)


def _template(name: str, autoescape: bool):
    text = resources.files("pypto_tune.prompts").joinpath("templates", name).read_text(encoding="utf-8")
    return _env(autoescape).from_string(text)


def _duration(snap: SessionSnapshot) -> str:
    try:
        start = datetime.fromisoformat(snap.started_at)
        end = datetime.fromisoformat(snap.finished_at) if snap.finished_at else datetime.now().astimezone()
        minutes = (end - start).total_seconds() / 60
        return f"{minutes:.1f} min"
    except ValueError:
        return "—"


def _compare(snap: SessionSnapshot, s: dict[str, str]) -> list[tuple[str, str, str, str]]:
    b, a = baseline_measurement(snap), best_measurement(snap)
    if b is None or a is None:
        return []
    rows = [
        (s["op_time"], fmt_us(b.operator_time_us), fmt_us(a.operator_time_us), ""),
        (s["e2e"], fmt_us(b.e2e_us), fmt_us(a.e2e_us), ""),
        (s["util_ref"], fmt_pct(b.avg_core_utilization_pct), fmt_pct(a.avg_core_utilization_pct),
         f"{stars(b.ratings.get('utilization'))} → {stars(a.ratings.get('utilization'))}"),
        (s["util_act"], fmt_pct(b.active_core_utilization_pct), fmt_pct(a.active_core_utilization_pct), ""),
        (s["bubble_ref"], fmt_pct(b.avg_bubble_rate_pct), fmt_pct(a.avg_bubble_rate_pct),
         f"{stars(b.ratings.get('bubble'))} → {stars(a.ratings.get('bubble'))}"),
        (s["bubble_act"], fmt_pct(b.active_bubble_rate_pct), fmt_pct(a.active_bubble_rate_pct), ""),
        (s["lb_ref"], fmt_pct(b.load_balance_pct), fmt_pct(a.load_balance_pct),
         f"{stars(b.ratings.get('load_balance'))} → {stars(a.ratings.get('load_balance'))}"),
        (s["lb_act"], fmt_pct(b.active_load_balance_pct), fmt_pct(a.active_load_balance_pct), ""),
    ]
    return rows


def _best_diff(snap: SessionSnapshot) -> str:
    out = []
    for path in sorted(set(snap.original_sources) | set(snap.best_sources)):
        before = snap.original_sources.get(path, "").splitlines(True)
        after = snap.best_sources.get(path, "").splitlines(True)
        out.extend(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))
    return "".join(out).rstrip("\n")


def _context(snap: SessionSnapshot, lang: str) -> dict[str, Any]:
    s = strings(lang)
    sp = speedup(snap)
    rate = achievement_rate(snap)
    goal = (f"{snap.goal_value:g}×" if snap.goal_kind == "speedup" else f"≤ {snap.goal_value:g} µs")
    return {
        "snap": snap, "s": s, "term": term, "f": _Fmt, "lang": lang, "goal": goal, "speed": f"{sp:.2f}×" if sp else "—",
        "gain": cumulative_gain_pct(snap), "rate": rate,
        "reached": bool(snap.best_us is not None and snap.target_us is not None and snap.best_us <= snap.target_us),
        "duration": _duration(snap), "compare": _compare(snap, s),
        "kept": [r for r in snap.rounds if r.decision == "kept"],
        "rolled": [r for r in snap.rounds if r.decision in ("reverted", "failed")],
        "knobs": snap.final_knobs, "best_diff": _best_diff(snap),
        "round_table": "\n".join(round_table(snap, lang)),
        "generated": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def render_report(snap: SessionSnapshot, fmt: str, lang: str = "zh", out_dir: Path | None = None) -> Path:
    """Write ``{operator}_tuning_report[_en].{md|html}`` into ``out_dir`` and return its path."""
    if fmt not in ("md", "html"):
        raise ValueError(f"fmt must be md or html, got {fmt!r}")
    ctx = _context(snap, lang)
    if fmt == "md":
        text = _template("report.md.j2", autoescape=False).render(**ctx)
    else:
        b, a = baseline_measurement(snap), best_measurement(snap)
        ctx["time_svg"] = svg.time_chart(snap, ctx["s"])
        ctx["cores_svg"] = svg.cores_chart(b, a, ctx["s"])
        lanes = []
        for label, m in ((ctx["s"]["baseline"], b), (ctx["s"]["best"], a)):
            if m is not None and m.trace_paths:
                lanes.append(svg.lanes_chart(m.trace_paths[0], label, ctx["s"]))
        ctx["lane_svgs"] = [x for x in lanes if x]
        text = _template("report.html.j2", autoescape=True).render(**ctx)
    target_dir = out_dir or Path(snap.workspace)
    target_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if lang == "zh" else f"_{lang}"
    path = target_dir / f"{snap.operator}_tuning_report{suffix}.{fmt}"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
