"""Charts drawn server-side as inline SVG (no network, no script): time per round, per-core bars, swim lanes.

Every chart has titled axes, tick labels and a legend (an HTML list beside the SVG, so it wraps with the page), and a
colour means the same thing in every panel of a report. The SVG's coordinate width is ``W``; the page scales it to
its own width, so font sizes here are chosen to stay readable at A4 print width (about 0.73 of ``W``).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from pypto_tune.tools.report.metrics import fmt_us
from pypto_tune.tools.snapshot import Measurement, SessionSnapshot

W = 960
FONT = 12  # tick labels and legends; ≥ 8.7 px on an A4 page
TITLE_FONT = 13
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f", "#e15759",
           "#17becf"]
HUB_COLOUR = "#9e9e9e"
KEPT, REVERTED, FAILED, TARGET, BUBBLE = "#2e7d32", "#e07b00", "#c62828", "#00897b", "#b22222"
BEFORE, AFTER = "#b0a8a0", "#4e79a7"
MAX_RECTS_PER_LANE = 400  # down-sampling bound: beyond it adjacent tasks are merged into one bar per pixel column


@dataclass
class LegendItem:
    swatch: str  # a small inline SVG of the mark
    label: str


@dataclass
class Chart:
    """One figure: the SVG, its legend and caption (plain text; the template escapes it)."""

    kind: str  # time / cores / lanes
    svg: str
    legend: list[LegendItem] = field(default_factory=list)
    caption: str = ""


def _swatch(body: str) -> str:
    return f'<svg class="swatch" width="22" height="14" viewBox="0 0 22 14" aria-hidden="true">{body}</svg>'


def swatch_box(colour: str) -> str:
    return _swatch(f'<rect x="3" y="2" width="16" height="10" fill="{colour}"/>')


def _frame(kind: str, title: str, desc: str, h: float, body: str, ident: str = "") -> str:
    ident = ident or kind
    return (f'<svg class="chart-svg chart-{kind}" role="img" aria-labelledby="{ident}-t {ident}-d" '
            f'viewBox="0 0 {W} {h:.0f}" width="100%" xmlns="http://www.w3.org/2000/svg" '
            f'font-family="inherit" font-size="{FONT}"><title id="{ident}-t">{escape(title)}</title>'
            f'<desc id="{ident}-d">{escape(desc)}</desc>{body}</svg>')


def nice_ticks(top: float, n: int = 5) -> list[float]:
    """0 … a round number ≥ ``top`` in 1/2/2.5/5 × 10^k steps: tick labels a reader can add up."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def _tick_text(v: float, ticks: list[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else (1 if step % 1 else 0)
    return f"{v:.{decimals}f}"


def _axes(x0: float, y0: float, x1: float, y1: float, x_title: str, y_title: str, h: float) -> str:
    """Axis lines and titles: x along the bottom of the plot (y1), y along its left edge (x0)."""
    return (f'<line class="axis-line" x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#333"/>'
            f'<line class="axis-line" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>'
            f'<text class="axis-title x" x="{(x0 + x1) / 2:.1f}" y="{h - 6:.1f}" text-anchor="middle" '
            f'font-size="{TITLE_FONT}">{escape(x_title)}</text>'
            f'<text class="axis-title y" transform="translate(20 {(y0 + y1) / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle" font-size="{TITLE_FONT}">{escape(y_title)}</text>')


def _y_ticks(ticks: list[float], x0: float, x1: float, y_of, suffix: str = "") -> str:
    out = []
    for v in ticks:
        y = y_of(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                   f'<text class="tick y" x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{_tick_text(v, ticks)}{suffix}</text>')
    return "".join(out)


# ---------------------------------------------------------------------------------------------- time per round
def time_chart(snap: SessionSnapshot, s: dict[str, str]) -> Chart:
    pts: list[tuple[str, float | None, str]] = [("0", snap.baseline_us, "baseline")]
    pts += [(str(r.number), r.after_us, r.decision or "open") for r in snap.rounds]
    vals = [v for _, v, _ in pts if v is not None] + ([snap.target_us] if snap.target_us else [])
    ticks = nice_ticks(max(vals) if vals else 1.0)
    top = ticks[-1]
    h, x0, x1, y0, y1 = 330.0, 78.0, W - 24.0, 14.0, 264.0
    y_of = lambda v: y1 - (y1 - y0) * v / top  # noqa: E731
    step = (x1 - x0 - 20) / max(1, len(pts) - 1)
    x_of = lambda i: x0 + 10 + step * i  # noqa: E731
    every = max(1, math.ceil(len(pts) / 30))  # at most 30 round labels: they stay apart at A4 width
    parts = [_y_ticks(ticks, x0, x1, y_of), _axes(x0, y0, x1, y1, s["axis_round"], s["axis_time_us"], h)]
    if snap.target_us:
        y = y_of(snap.target_us)
        parts.append(f'<line class="target" x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="{TARGET}" '
                     f'stroke-dasharray="6 4" stroke-width="1.5"/>')
    best_line, best = [], snap.baseline_us
    for i, (label, v, kind) in enumerate(pts):
        x = x_of(i)
        if i % every == 0 or i == len(pts) - 1:
            parts.append(f'<text class="tick x" x="{x:.1f}" y="{y1 + 18}" text-anchor="middle">{escape(label)}</text>')
        if kind == "kept" and v is not None:
            best = v
        if best is not None:
            best_line.append(f"{x:.1f},{y_of(best):.1f}")
        yv = y_of(v) if v is not None else y0 + 8
        tip = f"{s['round']} {label}: {s[kind]}" + (f", {fmt_us(v)} µs" if v is not None else f" ({s['no_time']})")
        parts.append(f"<g><title>{escape(tip)}</title>{_marker(kind, x, yv)}</g>")
    if len(best_line) > 1:
        parts.insert(2, f'<polyline class="best-line" points="{" ".join(best_line)}" fill="none" stroke="{KEPT}" '
                        f'stroke-width="2"/>')
    kinds = {k for _, _, k in pts}
    legend = [LegendItem(_swatch(_marker("baseline", 11, 7, 5, mark=False)), s["lg_baseline"])]
    legend += [LegendItem(_swatch(_marker(k, 11, 7, 5, mark=False)), s["lg_" + k])
               for k in ("kept", "reverted", "failed", "open") if k in kinds]
    legend.append(LegendItem(_swatch(f'<line x1="1" y1="7" x2="21" y2="7" stroke="{KEPT}" stroke-width="2"/>'),
                             s["lg_best"]))
    if snap.target_us:
        legend.append(LegendItem(_swatch(f'<line x1="1" y1="7" x2="21" y2="7" stroke="{TARGET}" stroke-width="1.5" '
                                         'stroke-dasharray="4 3"/>'), f"{s['lg_target']} {fmt_us(snap.target_us)} µs"))
    desc = "; ".join(f"{label}: {s[kind]} {fmt_us(v)} µs" if v is not None else f"{label}: {s[kind]}"
                     for label, v, kind in pts)
    return Chart("time", _frame("time", s["chart_time"], desc, h, "".join(parts)), legend, s["time_caption"])


def _marker(kind: str, x: float, y: float, r: float = 7.0, mark: bool = True) -> str:
    """The mark of a round of ``kind``; ``mark=False`` for the legend's copy (not a data point)."""
    return _marker_shape(kind, x, y, r).replace('class="marker ', 'class="marker ' if mark else 'class="legend-')


def _marker_shape(kind: str, x: float, y: float, r: float) -> str:
    if kind == "baseline":
        return f'<circle class="marker baseline" cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="#fff" stroke="{KEPT}" ' \
               f'stroke-width="2.5"/>'
    if kind == "kept":
        return f'<circle class="marker kept" cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{KEPT}"/>'
    if kind == "reverted":
        return (f'<rect class="marker reverted" x="{x - r + 1:.1f}" y="{y - r + 1:.1f}" width="{2 * r - 2:.1f}" '
                f'height="{2 * r - 2:.1f}" fill="{REVERTED}"/>')
    if kind == "failed":
        return (f'<path class="marker failed" d="M{x - r:.1f},{y - r:.1f} L{x + r:.1f},{y + r:.1f} M{x + r:.1f},'
                f'{y - r:.1f} L{x - r:.1f},{y + r:.1f}" stroke="{FAILED}" stroke-width="3"/>')
    return f'<circle class="marker open" cx="{x:.1f}" cy="{y:.1f}" r="{r - 1}" fill="none" stroke="#555" ' \
           f'stroke-width="2"/>'


# ---------------------------------------------------------------------------------------------- per-core bars
def cores_chart(before: Measurement | None, after: Measurement | None, s: dict[str, str]) -> Chart | None:
    if before is None or after is None:
        return None
    active = {c.name for m in (before, after) for c in m.cores if c.active}
    listed = list(dict.fromkeys([c.name for c in before.cores] + [c.name for c in after.cores]))
    names = [n for n in listed if n in active]
    if not names:
        return None
    b = {c.name: c for c in before.cores}
    a = {c.name: c for c in after.cores}
    label_h = 6.6 * max(len(n) for n in names) + 8  # rotated core names under the axis
    h, x0, x1, y0 = 290 + label_h, 70.0, W - 16.0, 12.0
    y1 = y0 + 230
    y_of = lambda v: y1 - (y1 - y0) * v / 100  # noqa: E731
    bw = min((x1 - x0) / len(names), 48.0)  # a few cores: bars of a readable width, not a wall
    font = min(FONT, max(8.0, bw * 0.9))
    parts = [_y_ticks([0, 25, 50, 75, 100], x0, x1, y_of), _axes(x0, y0, x1, y1, s["axis_core"], s["axis_pct"], h)]
    for i, n in enumerate(names):
        x = x0 + i * bw
        for j, (src, colour, when) in enumerate(((b, BEFORE, s["before"]), (a, AFTER, s["after"]))):
            c = src.get(n)
            if c is None or not c.active:  # an idle core has no bubble to show; a 0-height bar would read as data
                continue
            hh = y1 - y_of(max(0.0, min(100.0, c.utilization_pct)))
            bx, bwid = x + 1 + j * (bw - 2) / 2, max((bw - 2) / 2 - 0.5, 0.5)
            parts.append(f'<rect class="core-bar" x="{bx:.1f}" y="{y1 - hh:.1f}" width="{bwid:.1f}" height="{hh:.1f}" '
                         f'fill="{colour}"><title>{escape(n)} {escape(when)}: {escape(s["utilization"])} '
                         f'{c.utilization_pct:.1f}%, {escape(s["bubble"])} {c.bubble_rate_pct:.1f}%</title></rect>')
            yb = y_of(max(0.0, min(100.0, c.bubble_rate_pct)))
            parts.append(f'<line class="bubble-tick" x1="{bx:.1f}" x2="{bx + bwid:.1f}" y1="{yb:.1f}" y2="{yb:.1f}" '
                         f'stroke="{BUBBLE}" stroke-width="2"/>')
        cx = x + bw / 2 + font * 0.35
        parts.append(f'<text class="tick x core-label" transform="translate({cx:.1f} {y1 + 6}) rotate(-90)" '
                     f'text-anchor="end" font-size="{font:.1f}">{escape(n)}</text>')
    legend = [LegendItem(swatch_box(BEFORE), s["lg_util_before"]), LegendItem(swatch_box(AFTER), s["lg_util_after"]),
              LegendItem(_swatch(f'<line x1="3" y1="7" x2="19" y2="7" stroke="{BUBBLE}" stroke-width="2.5"/>'),
                         s["lg_bubble"])]
    idle = len(listed) - len(names)
    desc = (f"{len(names)} AIC/AIV; {s['utilization']} {s['before']} {before.active_core_utilization_pct:.1f}% → "
            f"{s['after']} {after.active_core_utilization_pct:.1f}%; {s['bubble']} {s['before']} "
            f"{before.active_bubble_rate_pct:.1f}% → {s['after']} {after.active_bubble_rate_pct:.1f}%")
    return Chart("cores", _frame("cores", s["chart_cores"], desc, h, "".join(parts)), legend,
                 s["cores_caption"].format(idle=idle))


# ---------------------------------------------------------------------------------------------- swim lanes
@dataclass
class Lanes:
    """The tasks of one trace by lane (pid 1, fake lane dropped), times relative to T0."""

    names: list[str]  # lane names in drawing order: HUB first, then AIC, AIV by core number
    tasks: dict[str, list[tuple[float, float, str]]]  # lane → (start − T0, duration, leafHash)
    idle: int  # listed AIC/AIV lanes without a task
    op_time: float  # last AIC/AIV end − T0: the folder's max_work_time
    e2e: float  # last AIC/AIV end − first AIC/AIV start
    offset: float  # first AIC/AIV start − T0
    first_is_hub: bool


def _core_key(name: str) -> tuple[int, int, str]:
    kind = name.split("_")[0]
    order = {"HUB": 0, "AIC": 1, "AIV": 2}.get(kind, 3)
    tail = name.rsplit("_", 1)[-1]
    return order, int(tail) if tail.isdigit() else 0, name


def read_lanes(path: str) -> Lanes | None:
    """The lanes of one ``merged_swimlane.json`` (plain or .gz). T0 is the first real task on any lane (B.1)."""
    p = Path(path)
    if not path or not p.is_file():
        return None
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    names: dict[int, str] = {}
    raw: list[tuple[int, float, float, str]] = []
    for ev in data.get("traceEvents", []):
        if ev.get("pid") != 1:
            continue
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[ev["tid"]] = str((ev.get("args") or {}).get("name", ""))
        elif ev.get("ph") == "X":
            hint = (ev.get("args") or {}).get("event-hint", "") or ""
            leaf = hint.split("leafHash:")[-1].split(",")[0].strip() if "leafHash:" in hint else "0"
            raw.append((ev["tid"], float(ev["ts"]), float(ev["dur"]), leaf))
    real = [(names.get(t, str(t)), ts, d, lf) for t, ts, d, lf in raw if "Fake" not in names.get(t, "Fake")]
    core = [r for r in real if r[0].startswith(("AIC", "AIV")) and "AICPU" not in r[0]]
    if not core:
        return None
    t0 = min(ts for _, ts, _, _ in real)
    first = min(ts for _, ts, _, _ in core)
    end = max(ts + d for _, ts, d, _ in core)
    tasks: dict[str, list[tuple[float, float, str]]] = {}
    for name, ts, d, lf in real:  # an overlapped task's second lane (tid + 1) carries the same core name: one row
        tasks.setdefault(name, []).append((ts - t0, d, lf))
    listed = {n for n in names.values() if n.startswith(("AIC", "AIV")) and "AICPU" not in n}
    first_lane = min(real, key=lambda r: r[1])[0]
    return Lanes(names=sorted(tasks, key=_core_key), tasks=tasks, idle=len(listed - set(tasks)), op_time=end - t0,
                 e2e=end - first, offset=first - t0, first_is_hub=not first_lane.startswith(("AIC", "AIV")))


def _category(lane: str, leaf: str, m: Measurement, s: dict[str, str]) -> str:
    if leaf in ("", "0") or not lane.startswith(("AIC", "AIV")):
        return s["cat_hub"]
    kind = lane.split("_")[0]
    ops = m.leaf_ops.get(leaf)
    return f"{kind}: {ops}" if ops else f"{kind} {s['cat_unknown']}"


class Palette:
    """Category → colour for a whole report: the first category seen gets the first colour, in every panel."""

    def __init__(self) -> None:
        self.colours: dict[str, str] = {}

    def __call__(self, category: str, hub: str) -> str:
        if category == hub:
            return HUB_COLOUR
        if category not in self.colours:
            self.colours[category] = PALETTE[len(self.colours) % len(PALETTE)]
        return self.colours[category]


def lanes_chart(lanes: Lanes, m: Measurement, title: str, s: dict[str, str], palette: Palette, key: str,
                span_us: float | None = None) -> Chart:
    """One panel: a row per core that ran a task, bars coloured by what the task computes, axis from T0.

    ``span_us``: the time axis's extent shared by every panel of a report (the longest run), so that a run 13×
    shorter is drawn 13× shorter; the panel's own time when None."""
    lane_h, x0, x1, y0 = 15.0, 92.0, W - 16.0, 26.0
    y1 = y0 + lane_h * len(lanes.names)
    h = y1 + 52
    ticks = nice_ticks(max(span_us or 0.0, lanes.op_time))
    scale = (x1 - x0) / ticks[-1]
    parts = [f'<text class="panel-title" x="{x0}" y="16" font-size="{TITLE_FONT}" font-weight="bold">'
             f'{escape(title)}</text>']
    for v in ticks:
        x = x0 + v * scale
        parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#ececec"/>'
                     f'<text class="tick x" x="{x:.1f}" y="{y1 + 16}" text-anchor="middle">{_tick_text(v, ticks)}</text>')
    parts.append(_axes(x0, y0, x1, y1, s["axis_since_t0"], s["axis_lane"], h))
    xe = x0 + lanes.offset * scale
    parts.append(f'<line class="first-core-task" x1="{xe:.1f}" y1="{y0}" x2="{xe:.1f}" y2="{y1}" stroke="#555" '
                 'stroke-dasharray="2 3"/>')
    seen: dict[str, str] = {}
    for i, lane in enumerate(lanes.names):
        y = y0 + i * lane_h
        parts.append(f'<text class="tick y lane-label" x="{x0 - 6}" y="{y + lane_h - 4:.1f}" text-anchor="end" '
                     f'font-size="{FONT - 1}">{escape(lane)}</text>')
        evs = sorted(lanes.tasks[lane])
        min_w = lanes.op_time / MAX_RECTS_PER_LANE if len(evs) > MAX_RECTS_PER_LANE else 0.0
        merged: list[list] = []
        for ts, d, lf in evs:
            if merged and min_w and ts - (merged[-1][0] + merged[-1][1]) < min_w:
                merged[-1][1] = ts + d - merged[-1][0]
            else:
                merged.append([ts, d, lf])
        for ts, d, lf in merged:
            cat = _category(lane, lf, m, s)
            colour = palette(cat, s["cat_hub"])
            seen.setdefault(cat, colour)
            parts.append(f'<rect class="task" x="{x0 + ts * scale:.2f}" y="{y + 2:.1f}" width="{max(d * scale, 1.5):.2f}" '
                         f'height="{lane_h - 4:.1f}" fill="{colour}"/>')
    legend = [LegendItem(swatch_box(c), cat) for cat, c in sorted(seen.items(), key=lambda kv: kv[0] != s["cat_hub"])]
    legend.append(LegendItem(_swatch('<line x1="11" y1="1" x2="11" y2="13" stroke="#555" stroke-dasharray="2 2"/>'),
                             s["lg_first_core"]))
    n = sum(len(v) for v in lanes.tasks.values())
    desc = f"{title}: {n} {s['tasks']}, {len(lanes.names)} lanes, {fmt_us(lanes.op_time)} µs"
    return Chart("lanes", _frame("lanes", f"{s['chart_lanes']} — {title}", desc, h, "".join(parts), f"lanes-{key}"),
                 legend)
