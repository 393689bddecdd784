"""The final report (R21) in Markdown and self-contained HTML, zh or en, filled only from the SessionSnapshot."""

from __future__ import annotations

import difflib
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined

from pypto_tune.tools.report import svg
from pypto_tune.tools.report.board import kept_time_def, round_table, verdict_text
from pypto_tune.tools.report.i18n import strings, term
from pypto_tune.tools.report.metrics import (
    Spread, achievement_rate, baseline_measurement, best_measurement, cumulative_gain_pct, fmt_chips, fmt_pct, fmt_us,
    measurement_label, search_share, speedup, stars,
)
from pypto_tune.tools.snapshot import RoundRecord, SessionSnapshot


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


def multi_kernel(snap: SessionSnapshot) -> bool:
    """Whether any measurement saw more than one kernel call (the per-kernel figures then say something)."""
    return any(len(m.per_kernel) > 1 for m in snap.measurements)


def _compare(snap: SessionSnapshot, s: dict[str, str]) -> list[tuple[str, str, str, str]]:
    b, a = baseline_measurement(snap), best_measurement(snap)
    if b is None or a is None:
        return []
    rows = [
        (s["op_time"], fmt_us(b.operator_time_us), fmt_us(a.operator_time_us), ""),
        (s["e2e"], fmt_us(b.e2e_us), fmt_us(a.e2e_us), ""),
    ]
    if snap.run_mode == "npu" or b.aicpu_e2e_us is not None or a.aicpu_e2e_us is not None:
        rows.append((s["aicpu_e2e"], fmt_us(b.aicpu_e2e_us), fmt_us(a.aicpu_e2e_us), ""))
    if multi_kernel(snap):
        bk = {k.label: k for k in b.per_kernel}
        ak = {k.label: k for k in a.per_kernel}
        for label in dict.fromkeys([*bk, *ak]):
            rows.append((f"{s['kernel']} {label}: {s['kernel_time']}",
                         fmt_us(bk[label].time_us) if label in bk else "—",
                         fmt_us(ak[label].time_us) if label in ak else "—", ""))
    rows += [
        (s["util_ref"], fmt_pct(b.avg_core_utilization_pct), fmt_pct(a.avg_core_utilization_pct),
         f"{stars(b.ratings.get('utilization'))} → {stars(a.ratings.get('utilization'))}"),
        (s["util_act"], fmt_pct(b.active_core_utilization_pct), fmt_pct(a.active_core_utilization_pct), ""),
        (s["util_platform"], fmt_pct(b.platform_utilization_pct), fmt_pct(a.platform_utilization_pct), ""),
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


class Table:
    """Header and rows of one table, already formatted: the Markdown and the HTML template print the same cells."""

    def __init__(self, head: list[str], rows: list[list[str]], classes: list[str] | None = None,
                 num: set[int] | None = None) -> None:
        self.head, self.rows = head, rows
        self.classes = classes or [""] * len(rows)  # one CSS class per row (HTML)
        self.num = num or set()  # numeric columns (right-aligned in HTML)

    def markdown(self) -> str:
        cell = lambda x: str(x).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines = ["| " + " | ".join(cell(h) for h in self.head) + " |", "|" + "---|" * len(self.head)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)


def _measurements(snap: SessionSnapshot, s: dict[str, str]) -> Table:
    npu = snap.run_mode == "npu"
    head = ["#", s["measurement"]] + ([s["chips"]] if npu else []) + [
        s["n_samples"], s["median_us"], s["range_us"], s["sigma"], s["e2e"]] + ([s["aicpu_e2e"]] if npu else []) + [
        s["util_act"], s["util_platform"]]
    rows, classes = [], []
    for m in snap.measurements:
        sp = Spread(m.samples_us or [m.operator_time_us])
        what = measurement_label(m, s) + (f" · {s['batch']} {m.batch}" if m.batch else "")
        rows.append([str(m.id), what] + ([fmt_chips(m.device_ids)] if npu else []) + [
            str(sp.n), fmt_us(m.operator_time_us), sp.range_text(), sp.sigma_text(), fmt_us(m.e2e_us)]
            + ([fmt_us(m.aicpu_e2e_us)] if npu else [])
            + [fmt_pct(m.active_core_utilization_pct), fmt_pct(m.platform_utilization_pct)])
        classes.append("reference" if m.round == -2 else "")
    first_num = 3 if npu else 2
    return Table(head, rows, classes, num=set(range(first_num, len(head))))


def _kernels(snap: SessionSnapshot, s: dict[str, str]) -> Table | None:
    if not multi_kernel(snap):
        return None
    head = ["#", s["measurement"], s["kernel"], s["n_samples"], s["kernel_time"], s["kernel_e2e"]]
    rows, classes = [], []
    for m in snap.measurements:
        if not m.per_kernel:
            continue
        what = measurement_label(m, s)
        for k in m.per_kernel:
            rows.append([str(m.id), what, k.label, str(len(k.time_samples_us)), fmt_us(k.time_us), fmt_us(k.e2e_us)])
            classes.append("")
        rows.append([str(m.id), what, s["sum_metric"], str(len(m.samples_us) or 1), fmt_us(m.operator_time_us),
                     fmt_us(m.e2e_us)])
        classes.append("sum")
    return Table(head, rows, classes, num={3, 4, 5})


def _knob_value(r: RoundRecord) -> str:
    if r.knob_changes:
        return "; ".join(f"{c.knob_id} = {c.after!r}" for c in r.knob_changes)
    return r.change


def _batches(snap: SessionSnapshot, s: dict[str, str]) -> list[dict[str, Any]]:
    by_number = {r.number: r for r in snap.rounds}
    npu = snap.run_mode == "npu"
    out = []
    for b in snap.batches:
        head = [s["round"], s["candidate"], s["knob_value"], s["catalog"], s["precision"], s["time_us"]] + (
            [s["n_samples"], s["chips"]] if npu else []) + [s["delta_kept"], s["result"], s["decision"]]
        rows, classes = [], []
        for n in b.rounds:
            r = by_number[n]
            sp = Spread(r.samples_us)
            decision = (("★ " + s["winner"] + ", ") if r.winner else "") + (s[r.decision] if r.decision else "…")
            rows.append([str(n), r.candidate_id or "—", _knob_value(r), r.catalog_id,
                         verdict_text(snap, s, r.precision_verdict), fmt_us(r.after_us)]
                        + ([f"{sp.n} (σ {sp.sigma_text()})" if sp.n else "—", fmt_chips(r.device_ids)] if npu else [])
                        + [fmt_pct(r.delta_pct, True), term(s, "rt", r.result_type), decision])
            classes.append("winner" if r.winner else (r.decision or ""))
        head_line = s["batch_head"].format(batch=b.batch, stage=b.stage, at=b.at, n=len(b.rounds),
                                           kept=fmt_us(b.kept_before_us))
        if b.winner_round is not None:
            w = by_number[b.winner_round]
            tail = s["batch_won"].format(round=b.winner_round, time=fmt_us(b.winner_us), delta=fmt_pct(w.delta_pct, True))
        else:
            tail = s["batch_none"]
        sep = "" if head_line.endswith("。") else " "  # zh sentences need no space between them
        out.append({"batch": b.batch, "summary": head_line + sep + tail, "winner": b.winner_round,
                    "table": Table(head, rows, classes, num={5, 6} if not npu else {5, 6, 8})})
    return out


def _round_details(snap: SessionSnapshot, s: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for r in snap.rounds:
        lines: list[str] = []
        for a in r.admissions:
            what = s["adm_knob"] + (f" `{a.knob_id}`" if a.knob_id else "") if a.verdict == "knob" else (
                s["adm_structural"] + (": " + "; ".join(a.structural_lines[:3]) if a.structural_lines else ""))
            line = (f"{s['adm_correction']} — " if a.correction else "") + f"{s['admission']}: {what} " \
                f"({s.get('p_' + a.path, a.path)})"
            if a.checked:
                line += f"; {s['legal_checked']}: " + "; ".join(a.checked[:6]) + (" …" if len(a.checked) > 6 else "")
            if a.unchecked:
                line += f"; {s['legal_unchecked']}: " + "; ".join(a.unchecked[:6])
            if a.formatting_files:
                line += f"; {s['formatting_only']}: " + ", ".join(a.formatting_files)
            lines.append(line)
        if r.samples_us and r.after_us is not None:
            sp = Spread(r.samples_us)
            line = (s["decided_chips"].format(n=sp.n, chips=fmt_chips(r.device_ids)) if r.device_ids
                    else s["decided_from"].format(n=sp.n))
            line += f" ({s['median']} {fmt_us(sp.median)} µs"
            if sp.n > 1:
                line += f", {sp.range_text()}, σ {sp.sigma_text()}"
            line += ")"
            if r.kept_samples_n:
                line += " " + s["vs_kept"].format(n=r.kept_samples_n)
            if r.noise_margin_pct is not None:
                if snap.run_mode == "sim":
                    line += f"; {s['noise_margin']}: {s['margin_sim']}"
                else:
                    line += f"; {s['noise_margin']} {r.noise_margin_pct:.2f}%" + (
                        f" ({s['margin_recomputed']})" if r.margin_recomputed else "")
            lines.append(line)
        refs = [m for m in snap.measurements if m.round == -2 and m.for_round == r.number]
        for m in refs:
            sp = Spread(m.samples_us or [m.operator_time_us])
            lines.append(f"{s['m_ref'].format(n=r.number)}: {s['n_samples']} {sp.n}, "
                         + (s["on_chips"].format(chips=fmt_chips(m.device_ids)) + ", " if m.device_ids else "")
                         + f"{s['median']} {fmt_us(m.operator_time_us)} µs, {sp.range_text()}"
                         + (f", σ {sp.sigma_text()}" if sp.n > 1 else ""))
        lines += [f"⚑ {f}" for f in r.flags]
        if lines:
            out.append({"number": r.number, "title": f"{s['round']} {r.number} — {r.catalog_id}: {r.change}",
                        "lines": lines})
    return out


def _chips(snap: SessionSnapshot, s: dict[str, str]) -> dict[str, Any] | None:
    if snap.run_mode != "npu":
        return None
    lines = [s["rotation_line"].format(at=e.at, chip=e.device_id, why=s["de_" + e.reason], run=e.run_id,
                                       purpose=s.get("pu_" + e.purpose, e.purpose), next=e.next_device)
             for e in snap.device_events]
    per = ", ".join(f"{d}: {n}" for d, n in snap.runs_per_device.items()) or "—"
    return {"pool": ", ".join(snap.device_ids) or "—", "per_chip": per, "next": snap.current_device or "—",
            "rotations": lines}


def _overview_extra(snap: SessionSnapshot, s: dict[str, str]) -> list[str]:
    out = []
    if snap.kept_samples_us and snap.best_us is not None:
        out.append(f"{s['kept_time']}: {fmt_us(snap.best_us)} µs (" + kept_time_def(snap, s) + ")")
    if snap.run_mode == "npu":
        out.append(f"{s['repeats']}: {snap.repeats} | {s['chip_pool']}: {', '.join(snap.device_ids) or '—'} | "
                   f"{s['runs_per_chip']}: " + (", ".join(f"{d}: {n}" for d, n in snap.runs_per_device.items())
                                                or "—"))
    if snap.batches:
        search, total, share = search_share(snap)
        out.append(f"{s['search_share']}: " + s["search_share_text"].format(
            search=fmt_us(search), total=fmt_us(total), share=fmt_pct(share)) + f" — {s['search_share_def']}")
    for c in snap.corrections:
        before = " ".join(c.before) if isinstance(c.before, list) else str(c.before)
        after = " ".join(c.after) if isinstance(c.after, list) else str(c.after)
        out.append(f"{s['corrections']}: " + s["correction_line"].format(at=c.at, before=before, after=after,
                                                                          reason=c.reason))
    for c in snap.confirmations:
        source = s["src_" + c.source] if c.by_person and c.source else s["src_other"] + (
            f" ({c.source})" if c.source else "")
        out.append(f"{s['confirmations']}: " + s["conf_line"].format(at=c.at, what=s.get("c_" + c.kind, c.kind),
                                                                     source=source))
    if snap.pending_question:
        out.append(f"{s['pending_question']}: {snap.pending_question}")
    return out


def _context(snap: SessionSnapshot, lang: str) -> dict[str, Any]:
    s = strings(lang)
    sp = speedup(snap)
    rate = achievement_rate(snap)
    goal = (f"{snap.goal_value:g}×" if snap.goal_kind == "speedup" else f"≤ {snap.goal_value:g} µs")
    return {
        "verdict": lambda v: verdict_text(snap, s, v), "measure_table": _measurements(snap, s),
        "kernel_table": _kernels(snap, s), "batches": _batches(snap, s), "round_details": _round_details(snap, s),
        "chips": _chips(snap, s), "overview_extra": _overview_extra(snap, s),
        "npu_note": s["npu_note"].format(repeats=snap.repeats),
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


def report_name(snap: SessionSnapshot, fmt: str, lang: str, *, per_session: bool = False) -> str:
    """R21's stable name ``{operator}_tuning_report[_en].{fmt}``, or with ``per_session`` the session's own
    ``{operator}_tuning_report_{session_id}[_en].{fmt}`` that a later session on the same operator never overwrites."""
    suffix = "" if lang == "zh" else f"_{lang}"
    session = f"_{snap.session_id}" if per_session else ""
    return f"{snap.operator}_tuning_report{session}{suffix}.{fmt}"


def write_report_files(snap: SessionSnapshot, fmt: str, lang: str, out_dir: Path) -> list[Path]:
    """Render once and write it under the session's own name and, as the latest report, under R21's stable name.

    Returns ``[per-session path, stable path]``. The stable file is a byte copy of the session's, written after it,
    so the two never disagree.
    """
    own = render_report(snap, fmt, lang, out_dir, name=report_name(snap, fmt, lang, per_session=True))
    stable = out_dir / report_name(snap, fmt, lang)
    tmp = stable.with_suffix(stable.suffix + ".tmp")
    tmp.write_bytes(own.read_bytes())
    tmp.replace(stable)
    return [own, stable]


def render_report(snap: SessionSnapshot, fmt: str, lang: str = "zh", out_dir: Path | None = None, *,
                  name: str | None = None) -> Path:
    """Write ``{operator}_tuning_report[_en].{md|html}`` (or ``name``) into ``out_dir`` and return its path."""
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
    path = target_dir / (name or report_name(snap, fmt, lang))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
