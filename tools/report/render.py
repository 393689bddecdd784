"""The final report (R21) in Markdown and self-contained HTML, zh or en, filled only from the SessionSnapshot."""

from __future__ import annotations

import difflib
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup

from pypto_tune.tools.report import fonts, svg, tables
from pypto_tune.tools.report.board import kept_time_def
from pypto_tune.tools.report.i18n import finish_reason_text, phrase_text, server_text, strings, term
from pypto_tune.tools.report.metrics import (
    Spread, achievement_rate, cumulative_gain_pct, fmt_chips, fmt_pct, fmt_us, search_share, speedup,
)
from pypto_tune.tools.report.names import report_name
from pypto_tune.tools.report.values import plain_text, round_change
from pypto_tune.tools.snapshot import Measurement, SessionSnapshot

MAX_FOLDER_PANELS = 4  # swim-lane panels per measurement (one per output folder of the analysed run)


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


def _best_diff(snap: SessionSnapshot) -> str:
    out = []
    for path in sorted(set(snap.original_sources) | set(snap.best_sources)):
        before = snap.original_sources.get(path, "").splitlines(True)
        after = snap.best_sources.get(path, "").splitlines(True)
        out.extend(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"))
    return "".join(out).rstrip("\n")


def workspace_relative(snap: SessionSnapshot, text: str) -> str:
    """``text`` with the workspace's absolute path taken out: the report speaks of ``softmax.py``, not of one
    machine's ``/tmp/demo1/softmax.py``."""
    ws = str(snap.workspace).rstrip("/")
    return text.replace(ws + "/", "").replace(ws, ".") if ws and ws != "/" else text


def _round_details(snap: SessionSnapshot, s: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for r in tables.in_order(snap.rounds):
        lines: list[str] = []
        for a in r.admissions:
            what = s["adm_knob"] + (f" {a.knob_id}" if a.knob_id else "") if a.verdict == "knob" else (
                s["adm_structural"] + (": " + "; ".join(a.structural_lines[:3]) if a.structural_lines else ""))
            line = (f"{s['adm_correction']} — " if a.correction else "") + f"{s['admission']}: {what} " \
                f"({s.get('p_' + a.path, a.path)})"
            if a.checked:
                line += f"; {s['legal_checked']}: " + "; ".join(server_text(s, c) for c in a.checked[:6]) + (
                    " …" if len(a.checked) > 6 else "")
            if a.unchecked:
                line += f"; {s['legal_unchecked']}: " + "; ".join(server_text(s, c) for c in a.unchecked[:6])
            if a.formatting_files:
                line += f"; {s['formatting_only']}: " + ", ".join(a.formatting_files)
            lines.append(line)
        if r.samples_us and r.after_us is not None:
            sp = Spread(r.samples_us)
            line = (s["decided_chips"].format(n=sp.n, chips=fmt_chips(r.device_ids)) if r.device_ids
                    else s["decided_from"].format(n=sp.n))
            line += f" ({s['median']} {fmt_us(sp.median)} µs"
            if sp.n > 1:
                line += f", {sp.range_text()}, {s['sigma']} {sp.cv_text()}"
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
                         + (f", {s['sigma']} {sp.cv_text()}" if sp.n > 1 else ""))
        lines += [f"⚑ {server_text(s, f)}" for f in r.flags]
        if lines:
            out.append({"number": r.number, "title": round_title(r, s), "lines": lines})
    return out


def round_title(r, s: dict[str, str]) -> str:
    return f"{s['round']} {r.number} — {r.catalog_id}: {round_change(r, s)}"


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
        what = s.get("cf_" + c.field, c.field)
        out.append(f"{s['corrections']} ({what}): " + s["correction_line"].format(
            at=c.at, before=plain_text(c.before), after=plain_text(c.after), reason=phrase_text(s, c.reason)))
    for c in snap.confirmations:
        source = s["src_" + c.source] if c.by_person and c.source else s["src_other"] + (
            f" ({c.source})" if c.source else "")
        out.append(f"{s['confirmations']}: " + s["conf_line"].format(at=c.at, what=s.get("c_" + c.kind, c.kind),
                                                                     source=source))
    if snap.pending_question:
        out.append(f"{s['pending_question']}: {snap.pending_question}")
    return out


# ---------------------------------------------------------------------------------------------- swim lanes
def _lane_panels(snap: SessionSnapshot, s: dict[str, str]) -> list[svg.Chart]:
    """Baseline and best panels, one per output folder of each measurement's analysed run, one shared palette and
    one shared time axis (the longest panel's), so the best run's gain is as visible as it is large."""
    palette = svg.Palette()
    found, drawn = [], set()
    for key, m in tables.measurement_for_lanes(snap):
        if m is None or m.id in drawn:  # nothing kept: the best state is the baseline, drawn once
            continue
        drawn.add(m.id)
        label = s["baseline"] if key == "baseline" else s["best"]
        folders = m.folders or [None] * len(m.trace_paths)
        for i, folder in enumerate(folders[:MAX_FOLDER_PANELS]):
            path = folder.trace_path if folder is not None else ""
            if not Path(path).is_file() and i < len(m.trace_paths):  # the copy moved: the recorded trace path
                path = m.trace_paths[i]
            lanes = svg.read_lanes(path)
            if lanes is not None:
                found.append((key, m, label, i, len(folders), lanes))
    span = max((f[-1].op_time for f in found), default=None)
    out = []
    for key, m, label, i, n, lanes in found:
        tasks = sum(len(v) for v in lanes.tasks.values())
        title = s["lanes_title"].format(label=label, op=fmt_us(lanes.op_time), tasks=tasks)
        chart = svg.lanes_chart(lanes, m, title, s, palette, f"{key}-{i}", span_us=span)
        chart.caption = _lanes_caption(lanes, m, i, n, tasks, s)
        if len(found) > 1 and span:
            chart.caption += " " + s["lanes_shared_axis"].format(span=fmt_us(span))
        out.append(chart)
    return out


def _lanes_caption(lanes: svg.Lanes, m: Measurement, i: int, n: int, tasks: int, s: dict[str, str]) -> str:
    by_kind: dict[str, int] = {}
    for lane, evs in lanes.tasks.items():
        kind = lane.split("_")[0]
        by_kind[kind] = by_kind.get(kind, 0) + len(evs)
    parts = " + ".join(f"{v} {k}" for k, v in sorted(by_kind.items(), key=lambda kv: svg._core_key(kv[0] + "_0")))
    text = [s["lanes_axis_note"].format(first=s["first_task_hub" if lanes.first_is_hub else "first_task_core"],
                                        op=fmt_us(lanes.op_time), e2e=fmt_us(lanes.e2e), offset=fmt_us(lanes.offset)),
            s["lanes_counts"].format(tasks=tasks, parts=parts, idle=lanes.idle)]
    if n > 1:
        text.append(s["lanes_folder"].format(i=i + 1, n=n, total=fmt_us(sum(f.operator_time_us for f in m.folders)
                                                                        if m.folders else m.operator_time_us)))
    if len(m.samples_us) > 1:
        text.append(s["lanes_repeats"].format(median=fmt_us(m.operator_time_us), n=len(m.samples_us)))
    text.append(s["lanes_colours"])
    return " ".join(text)


# ---------------------------------------------------------------------------------------------- glossary
def glossary(snap: SessionSnapshot, s: dict[str, str]) -> list[tuple[str, str, str]]:
    """(id, term, definition) of every term the report uses; the AICPU time only where it can appear (NPU)."""
    npu = snap.run_mode == "npu" or any(m.aicpu_e2e_us is not None for m in snap.measurements)
    out = []
    for g in tables.GLOSSARY:
        if g == "aicpu" and not npu:
            continue
        text = s[f"g_{g}"]
        sep = " — " if " — " in text else "——"
        name, _, definition = text.partition(sep)
        out.append((g, name, definition))
    return out


def _not_chosen_line(snap: SessionSnapshot, r, s: dict[str, str]) -> str:
    batch = next((b for b in snap.batches if r.number in b.rounds), None)
    winner = batch.winner_round if batch is not None and batch.winner_round is not None else "—"
    return s["not_chosen_line"].format(time=fmt_us(r.after_us), delta=fmt_pct(r.delta_pct, True), winner=winner)


def _context(snap: SessionSnapshot, lang: str) -> dict[str, Any]:
    s = strings(lang)
    sp = speedup(snap)
    rounds = tables.in_order(snap.rounds)
    goal = (f"{snap.goal_value:g}×" if snap.goal_kind == "speedup" else f"≤ {snap.goal_value:g} µs")
    return {
        "verdict": lambda v: tables.verdict_text(snap, s, v), "measure_table": tables.measurements_table(snap, s),
        "kernel_table": tables.kernels_table(snap, s), "batches": tables.batches(snap, s),
        "round_details": _round_details(snap, s), "chips": _chips(snap, s), "overview_extra": _overview_extra(snap, s),
        "npu_note": s["npu_note"].format(repeats=snap.repeats),
        "snap": snap, "s": s, "term": term, "f": _Fmt, "lang": lang, "goal": goal, "speed": f"{sp:.2f}×" if sp else "—",
        "gain": cumulative_gain_pct(snap), "rate": achievement_rate(snap),
        "reached": bool(snap.best_us is not None and snap.target_us is not None and snap.best_us <= snap.target_us),
        "duration": _duration(snap), "compare": tables.compare_table(snap, s),
        "compare_notes": tables.compare_notes(snap, s), "finish": finish_reason_text(s, snap.finish_reason),
        "kept": [r for r in rounds if r.decision == "kept"],
        # A gain another candidate of its batch beat was not a failure: it has its own section.
        "rolled": [r for r in rounds if r.decision in ("reverted", "failed") and r.result_type != "not-chosen"],
        "not_chosen": [{"round": r, "line": _not_chosen_line(snap, r, s)} for r in rounds
                       if r.result_type == "not-chosen"],
        "rel": lambda text: workspace_relative(snap, text or ""),
        "change": lambda r: round_change(r, s), "round_title": lambda r: round_title(r, s),
        "knobs": tables.knobs_table(snap, s), "best_diff": _best_diff(snap),
        "rounds_table": tables.rounds_table(snap, s), "glossary": glossary(snap, s),
        "generated": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


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


def render_text(snap: SessionSnapshot, fmt: str, lang: str = "zh") -> str:
    """The report's text (``md`` or ``html``)."""
    if fmt not in ("md", "html"):
        raise ValueError(f"fmt must be md or html, got {fmt!r}")
    ctx = _context(snap, lang)
    if fmt == "md":
        return _template("report.md.j2", autoescape=False).render(**ctx)
    s = ctx["s"]
    b, a = tables.baseline_measurement(snap), tables.best_measurement(snap)
    ctx["charts_time"] = [svg.time_chart(snap, s)]
    cores = svg.cores_chart(b, a, s)
    ctx["charts_cores"] = [cores] if cores else []
    ctx["charts_lanes"] = _lane_panels(snap, s)
    ctx["safe"] = Markup
    ctx["font_css"] = fonts.font_face_css() if lang == "zh" else ""
    return _template("report.html.j2", autoescape=True).render(**ctx)


def render_report(snap: SessionSnapshot, fmt: str, lang: str = "zh", out_dir: Path | None = None, *,
                  name: str | None = None) -> Path:
    """Write ``{operator}_tuning_report[_en].{md|html}`` (or ``name``) into ``out_dir`` and return its path."""
    text = render_text(snap, fmt, lang)
    target_dir = out_dir or Path(snap.workspace)
    target_dir.mkdir(parents=True, exist_ok=True)
    path = target_dir / (name or report_name(snap, fmt, lang))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
