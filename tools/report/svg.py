"""Inline SVG charts drawn server-side (no network, no script): time per round, per-core bars, swim lanes."""

from __future__ import annotations

import gzip
import json
from html import escape
from pathlib import Path

from pypto_tune.tools.snapshot import Measurement, SessionSnapshot

W = 1180
COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
          "#bab0ac"]
MAX_RECTS_PER_LANE = 400  # down-sampling bound: beyond it adjacent tasks are merged into one bar per pixel column


def _svg(title: str, desc: str, h: int, body: str, cls: str) -> str:
    return (f'<svg class="{cls}" role="img" aria-labelledby="{cls}-t {cls}-d" viewBox="0 0 {W} {h}" '
            f'width="100%" xmlns="http://www.w3.org/2000/svg"><title id="{cls}-t">{escape(title)}</title>'
            f'<desc id="{cls}-d">{escape(desc)}</desc>{body}</svg>')


def time_chart(snap: SessionSnapshot, s: dict[str, str]) -> str:
    pts: list[tuple[str, float | None, str]] = [("0", snap.baseline_us, "baseline")]
    for r in snap.rounds:
        pts.append((str(r.number), r.after_us, r.decision or "open"))
    vals = [v for _, v, _ in pts if v is not None] + ([snap.target_us] if snap.target_us else [])
    top = max(vals) * 1.1 if vals else 1.0
    h, left, bottom, plot_h = 320, 70, 40, 250
    step = (W - left - 30) / max(1, len(pts) - 1 if len(pts) > 1 else 1)
    parts = [f'<line x1="{left}" y1="{20 + plot_h}" x2="{W - 20}" y2="{20 + plot_h}" stroke="#333"/>',
             f'<line x1="{left}" y1="20" x2="{left}" y2="{20 + plot_h}" stroke="#333"/>']
    parts.append(f'<text x="{left - 6}" y="12" font-size="11" text-anchor="end">µs</text>')
    for i in range(5):
        v = top * i / 4
        y = 20 + plot_h - plot_h * i / 4
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{v:.1f}</text>')
    if snap.target_us:
        y = 20 + plot_h - plot_h * snap.target_us / top
        parts.append(f'<line class="target" x1="{left}" y1="{y:.1f}" x2="{W - 20}" y2="{y:.1f}" stroke="#2a9d8f" '
                     f'stroke-dasharray="6 4"/><text x="{W - 22}" y="{y - 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#2a9d8f">{escape(s["target_line"])} {snap.target_us:.3f} µs</text>')
    best_line = []
    best = snap.baseline_us
    for i, (label, v, kind) in enumerate(pts):
        x = left + (step * i if len(pts) > 1 else 0)
        parts.append(f'<text x="{x:.1f}" y="{h - 12}" font-size="11" text-anchor="middle">{escape(label)}</text>')
        if kind == "kept" and v is not None:
            best = v
        if best is not None:
            best_line.append(f"{x:.1f},{20 + plot_h - plot_h * best / top:.1f}")
        yv = 20 + plot_h - plot_h * (v if v is not None else top * 0.98) / top
        tip = f"{s['round']} {label}: {s[kind]}" + (f", {v:.3f} µs" if v is not None else f" ({s['no_time']})")
        if kind in ("kept", "baseline"):
            mark = f'<circle class="marker kept" cx="{x:.1f}" cy="{yv:.1f}" r="7" fill="#59a14f"/>'
        elif kind == "reverted":
            mark = (f'<rect class="marker reverted" x="{x - 6:.1f}" y="{yv - 6:.1f}" width="12" height="12" '
                    f'fill="#f28e2b"/>')
        elif kind == "failed":
            mark = (f'<path class="marker failed" d="M{x - 7:.1f},{yv - 7:.1f} L{x + 7:.1f},{yv + 7:.1f} '
                    f'M{x + 7:.1f},{yv - 7:.1f} L{x - 7:.1f},{yv + 7:.1f}" stroke="#e15759" stroke-width="3"/>')
        else:
            mark = f'<circle class="marker open" cx="{x:.1f}" cy="{yv:.1f}" r="6" fill="none" stroke="#555"/>'
        parts.append(f"<g><title>{escape(tip)}</title>{mark}</g>")
    if len(best_line) > 1:
        parts.insert(2, f'<polyline points="{" ".join(best_line)}" fill="none" stroke="#59a14f" stroke-width="2"/>')
    # The legend repeats each marker's shape, not only its colour, so it still reads in grey print.
    lx = [left + 10 + i * 120 for i in range(3)]
    parts.append(f'<circle cx="{lx[0] + 5}" cy="7" r="5" fill="#59a14f"/>'
                 f'<rect x="{lx[1]}" y="2" width="10" height="10" fill="#f28e2b"/>'
                 f'<path d="M{lx[2]},2 L{lx[2] + 10},12 M{lx[2] + 10},2 L{lx[2]},12" stroke="#e15759" stroke-width="2.5"/>')
    for x0, k in zip(lx, ("kept", "reverted", "failed")):
        parts.append(f'<text x="{x0 + 14}" y="11" font-size="11">{escape(s[k])}</text>')
    desc = "; ".join(f"{label}: {s[kind]} {v:.3f} µs" if v is not None else f"{label}: {s[kind]}"
                     for label, v, kind in pts)
    return _svg(s["chart_time"], desc, h, "".join(parts), "chart-time")


def cores_chart(before: Measurement | None, after: Measurement | None, s: dict[str, str]) -> str:
    if before is None or after is None:
        return ""
    names = [c.name for c in before.cores if c.active] or [c.name for c in before.cores]
    names = list(dict.fromkeys(names + [c.name for c in after.cores if c.active]))[:96]
    b = {c.name: c for c in before.cores}
    a = {c.name: c for c in after.cores}
    h, left, plot_h = 300, 50, 220
    bw = (W - left - 20) / max(1, len(names))
    parts = [f'<line x1="{left}" y1="{20 + plot_h}" x2="{W - 20}" y2="{20 + plot_h}" stroke="#333"/>']
    for i in range(5):
        y = 20 + plot_h - plot_h * i / 4
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{25 * i}%</text>')
    for i, n in enumerate(names):
        x = left + i * bw
        for j, (src, col) in enumerate(((b, "#bab0ac"), (a, "#4e79a7"))):
            c = src.get(n)
            if c is None or not c.active:  # an idle core has no bubble to show; a 0-height bar would read as data
                continue
            hh = plot_h * max(0.0, min(100.0, c.utilization_pct)) / 100
            parts.append(f'<rect class="core-bar" x="{x + j * bw / 2:.1f}" y="{20 + plot_h - hh:.1f}" '
                         f'width="{max(bw / 2 - 1, 0.5):.1f}" height="{hh:.1f}" fill="{col}"><title>{escape(n)} '
                         f'{escape(s["before"] if j == 0 else s["after"])}: {escape(s["utilization"])} '
                         f'{c.utilization_pct:.1f}%, {escape(s["bubble"])} {c.bubble_rate_pct:.1f}%</title></rect>')
            # Bubble shares the 0..100 % axis: a dark tick on the same bar keeps before/after side by side.
            yb = 20 + plot_h - plot_h * max(0.0, min(100.0, c.bubble_rate_pct)) / 100
            parts.append(f'<line class="bubble-tick" x1="{x + j * bw / 2:.1f}" x2="{x + j * bw / 2 + max(bw / 2 - 1, 0.5):.1f}" '
                         f'y1="{yb:.1f}" y2="{yb:.1f}" stroke="#b22" stroke-width="2"/>')
    parts.append(f'<rect x="{left}" y="2" width="10" height="10" fill="#bab0ac"/><text x="{left + 14}" y="11" '
                 f'font-size="11">{escape(s["before"])}</text><rect x="{left + 90}" y="2" width="10" height="10" '
                 f'fill="#4e79a7"/><text x="{left + 104}" y="11" font-size="11">{escape(s["after"])}</text>'
                 f'<line x1="{left + 180}" x2="{left + 194}" y1="7" y2="7" stroke="#b22" stroke-width="2"/>'
                 f'<text x="{left + 198}" y="11" font-size="11">{escape(s["bubble"])}</text>')
    desc = (f"{len(names)} AIC/AIV; {s['utilization']} {s['before']} {before.active_core_utilization_pct:.1f}% → "
            f"{s['after']} {after.active_core_utilization_pct:.1f}%; {s['bubble']} {s['before']} "
            f"{before.active_bubble_rate_pct:.1f}% → {s['after']} {after.active_bubble_rate_pct:.1f}%")
    return _svg(s["chart_cores"], desc, h, "".join(parts), "chart-cores")


def _load_trace(path: str) -> dict | None:
    p = Path(path)
    if not p.is_file():
        return None
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        return json.load(fh)


def lanes_chart(trace_path: str | None, label: str, s: dict[str, str]) -> str:
    """AIC/AIV lanes (pid 1; AICPU view filtered), tasks coloured by leafHash, down-sampled per lane."""
    data = _load_trace(trace_path) if trace_path else None
    if not data:
        return ""
    names: dict[int, str] = {}
    tasks: dict[int, list[tuple[float, float, str]]] = {}
    for ev in data.get("traceEvents", []):
        if ev.get("pid") != 1:
            continue
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[ev["tid"]] = ev.get("args", {}).get("name", "")
        elif ev.get("ph") == "X":
            hint = (ev.get("args") or {}).get("event-hint", "")
            leaf = hint.split("leafHash:")[-1].split(",")[0].strip() if "leafHash:" in hint else "0"
            tasks.setdefault(ev["tid"], []).append((float(ev["ts"]), float(ev["dur"]), leaf))
    lanes = [t for t in sorted(tasks) if ("AIC" in names.get(t, "") or "AIV" in names.get(t, ""))
             and "Fake" not in names.get(t, "")]
    if not lanes:
        return ""
    t0 = min(ts for t in lanes for ts, _, _ in tasks[t])
    t1 = max(ts + d for t in lanes for ts, d, _ in tasks[t])
    span = max(t1 - t0, 1e-9)
    leaves = sorted({lf for t in lanes for _, _, lf in tasks[t]})
    color = {lf: COLORS[i % len(COLORS)] for i, lf in enumerate(leaves)}
    lane_h, left = 6, 80
    h = 30 + lane_h * len(lanes) + 20
    scale = (W - left - 20) / span
    parts = []
    for i, t in enumerate(lanes):
        y = 20 + i * lane_h
        if i % 8 == 0:
            parts.append(f'<text x="{left - 4}" y="{y + 6}" font-size="9" text-anchor="end">'
                         f'{escape(names.get(t, str(t)))}</text>')
        evs = sorted(tasks[t])
        merged: list[list] = []
        min_w = span / MAX_RECTS_PER_LANE if len(evs) > MAX_RECTS_PER_LANE else 0.0
        for ts, d, lf in evs:
            if merged and min_w and ts - (merged[-1][0] + merged[-1][1]) < min_w:
                merged[-1][1] = ts + d - merged[-1][0]
            else:
                merged.append([ts, d, lf])
        for ts, d, lf in merged:
            parts.append(f'<rect class="task" x="{left + (ts - t0) * scale:.2f}" y="{y}" '
                         f'width="{max(d * scale, 0.6):.2f}" height="{lane_h - 1}" fill="{color[lf]}"/>')
    # A visible caption: the <title> alone is only a tooltip, and the two lane charts look alike at a glance.
    parts.append(f'<text x="{left}" y="12" font-size="12" font-weight="bold">{escape(label)} — '
                 f'{sum(len(tasks[t]) for t in lanes)} {escape(s["tasks"])}, {span:.2f} µs</text>')
    parts.append(f'<text x="{left}" y="{h - 4}" font-size="10">0 µs</text><text x="{W - 20}" y="{h - 4}" '
                 f'font-size="10" text-anchor="end">{span:.2f} µs</text>')
    n = sum(len(tasks[t]) for t in lanes)
    desc = f"{label}: {n} {s['tasks']}, {len(lanes)} AIC/AIV, {span:.2f} µs, leafHash × {len(leaves)}"
    return _svg(f"{s['chart_lanes']} — {label}", desc, h, "".join(parts), "chart-lanes")
