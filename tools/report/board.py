"""The live status board (domain D.3, R18): compact after every round, the fuller board every 5 rounds."""

from __future__ import annotations

from pypto_tune.tools.report.i18n import strings, term
from pypto_tune.tools.report.metrics import (
    achievement_rate, cumulative_gain_pct, fmt_pct, fmt_us, progress_bar, speedup,
)
from pypto_tune.tools.snapshot import SessionSnapshot

STALL_AFTER = 3  # the seed's "连续 3 次优化无提升" warning


def _goal(snap: SessionSnapshot, lang: str) -> str:
    if snap.goal_kind == "speedup":
        return f"{snap.goal_value:g}×" if lang == "en" else f"提升 {snap.goal_value:g} 倍"
    return f"≤ {snap.goal_value:g} µs"


def round_table(snap: SessionSnapshot, lang: str) -> list[str]:
    s = strings(lang)
    lines = [f"| {s['round']} | {s['outer']} | {s['stage']} | {s['catalog']} | {s['change']} | {s['precision']} | "
             f"{s['time_us']} | {s['delta']} | {s['result']} | {s['status']} |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| {s['baseline']} | — | — | — | — | — | {fmt_us(snap.baseline_us)} | — | {s['rt_baseline']} | ✅ |"]
    for r in snap.rounds:
        mark = {"kept": "✅ " + s["kept"], "reverted": "↩️ " + s["reverted"], "failed": "❌ " + s["failed"]}.get(
            r.decision or "", "…")
        change = r.change.replace("|", "\\|")
        lines.append(f"| {r.number} | {r.outer_round} | {r.stage} | {r.catalog_id} | {change} | "
                     f"{term(s, 'v', r.precision_verdict)} | {fmt_us(r.after_us)} | {fmt_pct(r.delta_pct, True)} | "
                     f"{term(s, 'rt', r.result_type)} | {mark} |")
    return lines


def consecutive_no_gain(snap: SessionSnapshot) -> int:
    n = 0
    for r in reversed([r for r in snap.rounds if r.decision]):
        if r.result_type == "gain":
            break
        if r.result_type in ("no-gain", "regression"):
            n += 1
    return n


def render_status_board(snap: SessionSnapshot, lang: str = "zh", *, full: bool | None = None) -> str:
    """Markdown board. ``full=None``: the fuller board when the number of decided rounds is a multiple of 5."""
    s = strings(lang)
    decided = [r for r in snap.rounds if r.decision]
    if full is None:
        full = bool(decided) and len(decided) % 5 == 0
    kept = [r for r in decided if r.decision == "kept"]
    rate = achievement_rate(snap)
    sp = speedup(snap)
    out = [f"## {s['board_title']} — {snap.operator}", ""]
    if snap.run_mode == "sim":
        out += [f"> {s['sim_note']}", ""]
    out += [
        f"- {s['goal']}: {_goal(snap, lang)} | {s['baseline']}: {fmt_us(snap.baseline_us)} µs | "
        f"{s['target']}: {fmt_us(snap.target_us)} µs",
        f"- {s['best']}: {fmt_us(snap.best_us)} µs ({s['cumulative_gain']} {fmt_pct(cumulative_gain_pct(snap))}"
        + (f", {sp:.2f}×" if sp else "") + ")",
        f"- {s['stage']}: {snap.state}" + (f" / {snap.stage}" if snap.stage else "")
        + f" | {s['outer_round']} {snap.outer_round}/3 | {s['step']}: {snap.step or '—'}",
        f"- {s['progress']}: {progress_bar(rate)}",
        f"- {s['success_rate']}: {len(kept)}/{len(decided)}" + (f" ({len(kept) / len(decided) * 100:.0f}%)"
                                                              if decided else ""),
        f"- {s['failures']}: {sum(1 for r in decided if r.decision == 'failed')}",
    ]
    if snap.finish_reason:
        out.append(f"- {s['finish_reason']}: {snap.finish_reason}")
    if snap.checklist:
        group = {"F": "frontend", "S": "swimlane", "I": "incore"}.get((snap.stage or "F")[0], "frontend")
        items = [c for c in snap.checklist if c.stage_group == group]
        left = [c.catalog_id for c in items if c.status == "untried"]
        out.append(f"- {s['checklist_left']} ({group}): {len(left)}/{len(items)}")
    streak = consecutive_no_gain(snap)
    if streak >= STALL_AFTER:
        out += ["", f"> ⚠️ {s['stall'].format(n=streak)}"]
    if full:
        out += ["", f"### {s['stages']}", "", f"| {s['stage']} | {s['status']} | {s['rounds']} | {s['no_gain']} | "
                f"{s['failures']} |", "|---|---|---|---|---|"]
        for st in snap.stages:
            out.append(f"| {st.stage} | {term(s, 'st', st.status)} | {st.rounds} | {st.consecutive_no_gain}/{st.no_gain_threshold}"
                       f" | {st.failures} |")
    out += ["", f"### {s['rounds']}", ""] + round_table(snap, lang)
    return "\n".join(out) + "\n"
