"""The live status board (domain D.3, R18): compact after every round, the fuller board every 5 rounds."""

from __future__ import annotations

from pypto_tune.tools.report.i18n import finish_reason_text, strings, term
from pypto_tune.tools.report.metrics import (
    Spread, achievement_rate, best_measurement, cumulative_gain_pct, fmt_chips, fmt_pct, fmt_us,
    measurement_label, progress_bar, search_share, speedup,
)
from pypto_tune.tools.report.tables import rounds_table
from pypto_tune.tools.snapshot import SessionSnapshot

STALL_AFTER = 3  # the seed's "连续 3 次优化无提升" warning


def _goal(snap: SessionSnapshot, lang: str) -> str:
    if snap.goal_kind == "speedup":
        return f"{snap.goal_value:g}×" if lang == "en" else f"提升 {snap.goal_value:g} 倍"
    return f"≤ {snap.goal_value:g} µs"


def kept_time_def(snap: SessionSnapshot, s: dict[str, str]) -> str:
    """What the kept (best) time is: the median of every sample of the kept code, not the latest or best one."""
    n = len(snap.kept_samples_us)
    return s["kept_time_one"] if n == 1 else s["kept_time_def"].format(n=n)


def round_table(snap: SessionSnapshot, lang: str) -> list[str]:
    """The round log as Markdown lines (the board's and the report's): the SIM caveat above it when it applies."""
    s = strings(lang)
    lines = [f"> ⚠️ {s['sim_short']}", ""] if snap.run_mode == "sim" else []
    return lines + rounds_table(snap, s).markdown(refs=False).splitlines()


def _measure_lines(snap: SessionSnapshot, s: dict[str, str]) -> list[str]:
    """The latest measurement's repeats, chips, times beside the metric and per-kernel figures; the best state's
    utilisation on both scales."""
    out = []
    latest = next((m for m in reversed(snap.measurements) if m.round != -2), None)
    if latest is not None:
        sp = Spread(latest.samples_us or [latest.operator_time_us])
        line = (f"- {s['latest_measurement']} #{latest.id} ({measurement_label(latest, s)}): "
                f"{fmt_us(latest.operator_time_us)} µs ({s['n_samples']} {sp.n}"
                + (f", {sp.range_text()}, {s['sigma']} {sp.cv_text()}" if sp.n > 1 else "")
                + (f", {s['chip']} {fmt_chips(latest.device_ids)}" if latest.device_ids else "") + ")"
                + f" | {s['e2e']}: {fmt_us(latest.e2e_us)}")
        if snap.run_mode == "npu" or latest.aicpu_e2e_us is not None:
            line += f" | {s['aicpu_e2e']}: {fmt_us(latest.aicpu_e2e_us)}"
        out.append(line)
        if len(latest.per_kernel) > 1:
            out.append(f"- {s['per_kernel']}: " + "; ".join(
                f"{k.label} {fmt_us(k.time_us)} µs (E2E {fmt_us(k.e2e_us)})" for k in latest.per_kernel)
                + f" — {s['sum_metric']} {fmt_us(latest.operator_time_us)} µs")
    best = best_measurement(snap)
    if best is not None:
        out.append(f"- {s['util_act']}: {fmt_pct(best.active_core_utilization_pct)} | {s['util_platform']}: "
                   f"{fmt_pct(best.platform_utilization_pct)}")
    return out


def consecutive_no_gain(snap: SessionSnapshot) -> int:
    n = 0
    for r in reversed([r for r in snap.rounds if r.decision]):
        if r.result_type in ("gain", "not-chosen"):  # as tools/session/state.py counts: a batch that found a gain
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
    # A trial that measured a gain is a success even when a faster candidate of its batch was the one kept.
    gained = [r for r in decided if r.result_type in ("gain", "not-chosen")]
    rate = achievement_rate(snap)
    sp = speedup(snap)
    out = [f"## {s['board_title']} — {snap.operator}", ""]
    if snap.run_mode == "sim":
        out += [f"> {s['sim_note']}", ""]
    else:
        out += [f"> {s['npu_note'].format(repeats=snap.repeats)}", ""]
    if snap.sandbox == "none":
        out += [f"> ⚠️ {s['unsandboxed_note']} ({snap.sandbox_note})", ""]
    kept_n = (" — " + kept_time_def(snap, s)) if snap.kept_samples_us else ""
    out += [
        f"- {s['goal']}: {_goal(snap, lang)} | {s['baseline']}: {fmt_us(snap.baseline_us)} µs | "
        f"{s['target']}: {fmt_us(snap.target_us)} µs",
        f"- {s['best']}: {fmt_us(snap.best_us)} µs ({s['cumulative_gain']} {fmt_pct(cumulative_gain_pct(snap))}"
        + (f", {sp:.2f}×" if sp else "") + ")" + kept_n,
        f"- {s['stage']}: {snap.state}" + (f" / {snap.stage}" if snap.stage else "")
        + f" | {s['outer_round']} {snap.outer_round}/3 | {s['step']}: {snap.step or '—'}",
        f"- {s['progress']}: {progress_bar(rate)}",
        f"- {s['success_rate']}: {len(gained)}/{len(decided)}" + (f" ({len(gained) / len(decided) * 100:.0f}%)"
                                                                if decided else ""),
        f"- {s['failures']}: {sum(1 for r in decided if r.decision == 'failed')}",
    ]
    if snap.finish_reason:
        out.append(f"- {s['finish_reason']}: {finish_reason_text(s, snap.finish_reason)}")
    if snap.run_mode == "npu":
        out.append(f"- {s['chip_pool']}: {', '.join(snap.device_ids) or '—'} | {s['next_chip']} "
                   f"{snap.current_device or '—'} | {s['chip_rotations']}: {len(snap.device_events)}"
                   + "".join(f"; {s['chip']} {e.device_id} {s['de_' + e.reason]} → {e.next_device}"
                             for e in snap.device_events[-3:]))
    out += _measure_lines(snap, s)
    if snap.batches:
        b = snap.batches[-1]
        if b.winner_round is not None:
            w = next(r for r in snap.rounds if r.number == b.winner_round)
            out.append("- ★ " + s["board_batch"].format(batch=b.batch, n=len(b.rounds), round=b.winner_round,
                                                       time=fmt_us(b.winner_us), delta=fmt_pct(w.delta_pct, True)))
        else:
            out.append("- " + s["board_batch_none"].format(batch=b.batch, n=len(b.rounds)))
        search, total, share = search_share(snap)
        out.append(f"- {s['search_share']}: " + s["search_share_text"].format(
            search=fmt_us(search), total=fmt_us(total), share=fmt_pct(share)))
    if snap.pending_question:
        out.append(f"- ⏸ {s['pending_question']}: {snap.pending_question}")
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
