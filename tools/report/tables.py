"""The report's tables, built once as cells: the Markdown and the HTML print the same numbers from the same cells.

A header or a metric name may carry a glossary reference (``Label.ref``): a link in HTML, a footnote in Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson

from pypto_tune.tools.report.i18n import term
from pypto_tune.tools.report.metrics import (
    Spread, baseline_measurement, best_measurement, fmt_chips, fmt_pct, fmt_us, measurement_label, speedup, stars,
    stars_change,
)
from pypto_tune.tools.report.values import knob_value, round_change, source_text
from pypto_tune.tools.snapshot import Measurement, RoundRecord, SessionSnapshot

# Status marks every font draws (DejaVu and Noto CJK have them; emoji need an emoji font the set-up does not install).
MARKS = {"kept": "✔ ", "reverted": "↩ ", "failed": "✘ "}
# Glossary entries in the order the Definitions section lists them (keys ``g_<id>`` in i18n.json).
GLOSSARY = ("op-time", "e2e", "aicpu", "util", "bubble", "lb", "cv", "stars", "tasks", "delta", "sim", "catalog",
            "stage", "outer", "cores")


@dataclass
class Label:
    """Text with an optional glossary reference."""

    text: str
    ref: str | None = None

    def markdown(self, refs: bool = True) -> str:
        return f"{self.text}[^{self.ref}]" if self.ref and refs else self.text

    def __str__(self) -> str:
        return self.text


@dataclass
class Cell:
    """One table cell: its text, an optional CSS class (HTML), tooltip and code formatting."""

    text: str
    cls: str = ""
    title: str = ""
    code: bool = False
    ref: str | None = None  # glossary reference of a metric name
    footnote: bool = True  # False: linked to its definition in HTML, no footnote mark on every Markdown row

    def markdown(self, refs: bool = True) -> str:
        text = self.text.replace("|", "\\|").replace("\n", " ")
        text = f"`{text}`" if self.code and text not in ("", "—") else text
        return f"{text}[^{self.ref}]" if self.ref and refs and self.footnote else text


def _cell(x: Any) -> Cell:
    return x if isinstance(x, Cell) else Cell(str(x))


@dataclass
class Table:
    """Header and rows of one table, already formatted."""

    head: list[Label]
    rows: list[list[Cell]]
    classes: list[str] = field(default_factory=list)  # one CSS class per row (HTML)
    num: set[int] = field(default_factory=set)  # numeric columns (right-aligned, never wrapped, in HTML)
    cls: str = ""  # the table's CSS class

    def __post_init__(self) -> None:
        self.head = [h if isinstance(h, Label) else Label(str(h)) for h in self.head]
        self.rows = [[_cell(c) for c in row] for row in self.rows]
        self.classes = self.classes or [""] * len(self.rows)

    def markdown(self, refs: bool = True) -> str:
        """``refs=False``: no footnote references (the status board has no Definitions section to point at)."""
        lines = ["| " + " | ".join(h.markdown(refs).replace("|", "\\|") for h in self.head) + " |",
                 "|" + "".join("---:|" if i in self.num else "---|" for i in range(len(self.head)))]
        lines += ["| " + " | ".join(c.markdown(refs) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)


def verdict_text(snap: SessionSnapshot, s: dict[str, str], verdict: str | None) -> str:
    """A precision verdict as a reader must take it: in SIM a pass only means compiled and simulated."""
    if verdict == "passed" and snap.run_mode == "sim":
        return s["v_passed_sim"]
    return term(s, "v", verdict)


# ---------------------------------------------------------------------------------------------- rounds
def result_cell(r: RoundRecord, s: dict[str, str]) -> Cell:
    """Status and result type in one cell: ``✅ kept · gain``; ⚑n when the decision carried flags."""
    mark = MARKS.get(r.decision or "", "")
    text = mark + (s[r.decision] if r.decision else s["open"]) + (f" · {term(s, 'rt', r.result_type)}"
                                                                  if r.result_type else "")
    if r.flags:
        text += f" ⚑{len(r.flags)}"
    return Cell(text, cls=f"result {r.decision or 'open'}", title="; ".join(r.flags))


def in_order(rounds: list[RoundRecord]) -> list[RoundRecord]:
    """Rounds by number: a batch's trials are decided together and may be recorded out of order."""
    return sorted(rounds, key=lambda r: r.number)


@lru_cache(maxsize=1)
def _catalog_titles() -> dict[str, dict[str, str]]:
    raw = resources.files("pypto_tune.prompts").joinpath("catalog.json").read_bytes()
    return {it["id"]: {"zh": it["title_zh"], "en": it["title_en"]} for it in orjson.loads(raw)["items"]}


def catalog_cell(cid: str | None, s: dict[str, str]) -> Cell:
    """A catalogue id with its entry's title on hover (what ``F-10`` means, in the report's language)."""
    titles = _catalog_titles().get(cid or "")
    return Cell(cid or "—", cls="word", title=s["catalog_hover"].format(id=cid, title=titles[s["lang"]]) if titles
                else "", ref="catalog", footnote=False)


def rounds_table(snap: SessionSnapshot, s: dict[str, str]) -> Table:
    """The round log: Outer appears only when the session had more than one outer round, Batch only with batches."""
    outer = any(r.outer_round != 1 for r in snap.rounds)
    batch = any(r.batch for r in snap.rounds)
    head = [Label(s["round"])] + ([Label(s["outer"], "outer")] if outer else []) + [
        Label(s["stage"], "stage"), Label(s["catalog"], "catalog"), Label(s["change"]), Label(s["precision"], "sim"),
        Label(s["time_us"], "op-time"), Label(s["delta"], "delta"), Label(s["result"])] + (
        [Label(s["batch"])] if batch else [])
    base = [Cell(s["baseline"], cls="word")] + ([Cell("—")] if outer else []) + [
        Cell("—"), Cell("—"), Cell("—"), Cell("—"), Cell(fmt_us(snap.baseline_us)), Cell("—"),
        Cell(MARKS["kept"] + s["rt_baseline"], cls="result kept")] + ([Cell("—")] if batch else [])
    rows, classes = [base], ["baseline"]
    for r in in_order(snap.rounds):
        cells = [Cell(str(r.number))] + ([Cell(str(r.outer_round))] if outer else []) + [
            Cell(r.stage, cls="word"), catalog_cell(r.catalog_id, s),
            Cell(round_change(r, s), cls="change", code=bool(r.knob_changes)),
            Cell(verdict_text(snap, s, r.precision_verdict), cls="result"), Cell(fmt_us(r.after_us)),
            Cell(fmt_pct(r.delta_pct, True)), result_cell(r, s)]
        if batch:
            cells.append(Cell("—") if r.batch is None else Cell(r.batch + (f" ★ {s['winner']}" if r.winner else ""),
                                                                 cls="result"))
        rows.append(cells)
        classes.append("round-row" + (" trial" if r.batch else "") + (" winner" if r.winner else ""))
    first_num = 2 if outer else 1
    return Table(head, rows, classes, num={first_num + 4, first_num + 5}, cls="rounds")


# ---------------------------------------------------------------------------------------------- before / after
def compare_table(snap: SessionSnapshot, s: dict[str, str]) -> Table | None:
    b, a = baseline_measurement(snap), best_measurement(snap)
    if b is None or a is None:
        return None

    rows: list[list[Cell]] = []

    def add(label: Label, before: str, after: str, rating: str = "") -> None:
        rows.append([Cell(label.text, cls="metric", ref=label.ref), Cell(before), Cell(after), Cell(rating)])

    add(Label(s["op_time"], "op-time"), fmt_us(b.operator_time_us), fmt_us(a.operator_time_us))
    add(Label(s["e2e"], "e2e"), fmt_us(b.e2e_us), fmt_us(a.e2e_us))
    if snap.run_mode == "npu" or b.aicpu_e2e_us is not None or a.aicpu_e2e_us is not None:
        add(Label(s["aicpu_e2e"], "aicpu"), fmt_us(b.aicpu_e2e_us), fmt_us(a.aicpu_e2e_us))
    if any(len(m.per_kernel) > 1 for m in snap.measurements):
        bk = {k.label: k for k in b.per_kernel}
        ak = {k.label: k for k in a.per_kernel}
        for label in dict.fromkeys([*bk, *ak]):
            add(Label(f"{s['kernel']} {label}: {s['kernel_time']}"),
                fmt_us(bk[label].time_us) if label in bk else "—", fmt_us(ak[label].time_us) if label in ak else "—")
    r_b, r_a, x_b, x_a = b.ratings, a.ratings, b.active_ratings, a.active_ratings
    add(Label(s["util_ref"], "util"), fmt_pct(b.avg_core_utilization_pct), fmt_pct(a.avg_core_utilization_pct),
        stars_change(r_b, r_a, "utilization"))
    add(Label(s["util_act"], "util"), fmt_pct(b.active_core_utilization_pct), fmt_pct(a.active_core_utilization_pct),
        stars_change(x_b, x_a, "utilization"))
    add(Label(s["util_platform"], "util"), fmt_pct(b.platform_utilization_pct), fmt_pct(a.platform_utilization_pct))
    add(Label(s["bubble_ref"], "bubble"), fmt_pct(b.avg_bubble_rate_pct), fmt_pct(a.avg_bubble_rate_pct),
        stars_change(r_b, r_a, "bubble"))
    add(Label(s["bubble_act"], "bubble"), fmt_pct(b.active_bubble_rate_pct), fmt_pct(a.active_bubble_rate_pct),
        stars_change(x_b, x_a, "bubble"))
    add(Label(s["lb_ref"], "lb"), fmt_pct(b.load_balance_pct), fmt_pct(a.load_balance_pct),
        stars_change(r_b, r_a, "load_balance"))
    add(Label(s["lb_act"], "lb"), fmt_pct(b.active_load_balance_pct), fmt_pct(a.active_load_balance_pct),
        stars_change(x_b, x_a, "load_balance"))
    add(Label(s["overall_rating"] + f" ({s['ref_short']})", "stars"), "", "", stars_change(r_b, r_a, "overall"))
    add(Label(s["overall_rating"] + f" ({s['act_short']})", "stars"), "", "", stars_change(x_b, x_a, "overall"))
    add(Label(s["task_count"], "tasks"), str(b.task_count) if b.task_count is not None else "—",
        str(a.task_count) if a.task_count is not None else "—")
    return Table([Label(s["metric"]), Label(s["before"]), Label(s["after"]), Label(s["rating"], "stars")], rows,
                 num={1, 2}, cls="compare")


def compare_notes(snap: SessionSnapshot, s: dict[str, str]) -> list[str]:
    """What the before/after figures are made of where a percentage alone would mislead: the busy time per core
    type, why a load balance is negative or at its floor, why the stars did not move with the time."""
    b, a = baseline_measurement(snap), best_measurement(snap)
    if b is None or a is None:
        return []
    out = []
    for label, m in ((s["before"], b), (s["after"], a)):
        parts = [_balance_line(t, s) for t in m.balance]
        if parts:
            out.append(f"{s['balance_by_type']} — {label}: " + "; ".join(parts))
    explained: dict[str, list[str]] = {}  # one note per explanation, naming the measurements it holds for
    for label, m in ((s["before"], b), (s["after"], a)):
        aic = next((t for t in m.balance if t.core_type == "AIC"), None)
        if m.load_balance_pct < 0:
            explained.setdefault(s["lb_ref_negative"].format(value=fmt_pct(m.load_balance_pct),
                                                             cv=f"{1 - m.load_balance_pct / 100:.2f}"), []).append(label)
        elif m.load_balance_pct == 0 and aic is not None and aic.cores_active == 0:
            explained.setdefault(s["lb_ref_idle"], []).append(label)
        worst = min((t for t in m.balance if t.balance_pct is not None), key=lambda t: t.balance_pct or 0.0,
                    default=None)
        if worst is not None and worst.balance_pct is not None and worst.balance_pct < 0:
            explained.setdefault(s["lb_act_floor"].format(
                type=worst.core_type, pct=fmt_pct(worst.balance_pct),
                cv=f"{worst.cv:.2f}" if worst.cv is not None else "—"), []).append(label)
    out += [f"{' / '.join(labels)}: {text}" for text, labels in explained.items()]
    out.append(s["stars_note"])
    sp = speedup(snap)
    same = [(r_b.get("overall"), label) for r_b, r_a, label in (
        (b.ratings, a.ratings, s["ref_short"]), (b.active_ratings, a.active_ratings, s["act_short"]))
        if r_b.get("overall") and r_b.get("overall") == r_a.get("overall")]
    if sp and sp >= 1.05 and same:
        out.append(s["stars_same"].format(stars="; ".join(f"{stars(n)} ({label})" for n, label in same),
                                          speed=f"{sp:.2f}×"))
    return out


def _balance_line(t, s: dict[str, str]) -> str:
    if t.cores_active == 0:
        return s["balance_idle"].format(type=t.core_type, listed=t.cores_listed)
    if t.cores_active == 1:
        return s["balance_one"].format(type=t.core_type, listed=t.cores_listed, lo=fmt_us(t.busy_min_us))
    return s["balance_line"].format(type=t.core_type, active=t.cores_active, listed=t.cores_listed,
                                    lo=fmt_us(t.busy_min_us), hi=fmt_us(t.busy_max_us), mean=fmt_us(t.busy_mean_us),
                                    cv=f"{t.cv:.3f}" if t.cv is not None else "—", pct=fmt_pct(t.balance_pct))


# ---------------------------------------------------------------------------------------------- measurements
def measurements_table(snap: SessionSnapshot, s: dict[str, str]) -> Table:
    npu = snap.run_mode == "npu"
    head = [Label("#"), Label(s["measurement"])] + ([Label(s["chips"])] if npu else []) + [
        Label(s["n_samples"]), Label(s["median_us"], "op-time"), Label(s["range_us"]), Label(s["sigma"], "cv"),
        Label(s["e2e_short"], "e2e")] + ([Label(s["aicpu_short"], "aicpu")] if npu else []) + [
        Label(s["col_util_act"], "util"), Label(s["col_util_platform"], "util"), Label(s["col_tasks"], "tasks")]
    rows, classes = [], []
    for m in snap.measurements:
        sp = Spread(m.samples_us or [m.operator_time_us])
        what = measurement_label(m, s) + (f" · {s['batch']} {m.batch}" if m.batch else "")
        rows.append([str(m.id), what] + ([fmt_chips(m.device_ids)] if npu else []) + [
            str(sp.n), fmt_us(m.operator_time_us), sp.range_text(), sp.cv_text(), fmt_us(m.e2e_us)]
            + ([fmt_us(m.aicpu_e2e_us)] if npu else [])
            + [fmt_pct(m.active_core_utilization_pct), fmt_pct(m.platform_utilization_pct),
               str(m.task_count) if m.task_count is not None else "—"])
        classes.append("reference" if m.round == -2 else "")
    first_num = 3 if npu else 2
    return Table(head, rows, classes, num=set(range(first_num, len(head))), cls="measurements")


def kernels_table(snap: SessionSnapshot, s: dict[str, str]) -> Table | None:
    if not any(len(m.per_kernel) > 1 for m in snap.measurements):
        return None
    head = ["#", s["measurement"], s["kernel"], s["n_samples"], Label(s["kernel_time"], "op-time"),
            Label(s["kernel_e2e"], "e2e")]
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
    return Table(head, rows, classes, num={3, 4, 5}, cls="kernels")


# ---------------------------------------------------------------------------------------------- batches
def batches(snap: SessionSnapshot, s: dict[str, str]) -> list[dict[str, Any]]:
    by_number = {r.number: r for r in snap.rounds}
    npu = snap.run_mode == "npu"
    out = []
    for b in snap.batches:
        head = [s["round"], s["candidate"], s["knob_value"], s["catalog"], Label(s["precision"], "sim"),
                Label(s["time_us"], "op-time")] + ([s["n_samples"], s["chips"]] if npu else []) + [
            Label(s["delta_kept"], "delta"), s["result"], s["decision"]]
        rows, classes = [], []
        for n in b.rounds:
            r = by_number[n]
            sp = Spread(r.samples_us)
            decision = (("★ " + s["winner"] + ", ") if r.winner else "") + (s[r.decision] if r.decision else "…")
            rows.append([str(n), Cell(r.candidate_id or "—", cls="word"),
                         Cell(knob_value(r, s), cls="change", code=bool(r.knob_changes)), catalog_cell(r.catalog_id, s),
                         Cell(verdict_text(snap, s, r.precision_verdict), cls="result"), fmt_us(r.after_us)]
                        + ([f"{sp.n} ({s['sigma']} {sp.cv_text()})" if sp.n else "—", fmt_chips(r.device_ids)]
                           if npu else [])
                        + [fmt_pct(r.delta_pct, True), Cell(term(s, "rt", r.result_type), cls="result"),
                           Cell(decision, cls="result decision")])
            classes.append("winner" if r.winner else (r.decision or ""))
        head_line = s["batch_head"].format(batch=b.batch, stage=b.stage, at=b.at, n=len(b.rounds),
                                           kept=fmt_us(b.kept_before_us))
        if b.winner_round is not None:
            w = by_number[b.winner_round]
            tail = s["batch_won"].format(round=b.winner_round, time=fmt_us(b.winner_us),
                                         delta=fmt_pct(w.delta_pct, True))
        else:
            tail = s["batch_none"]
        sep = "" if head_line.endswith("。") else " "  # zh sentences need no space between them
        out.append({"batch": b.batch, "summary": head_line + sep + tail, "winner": b.winner_round,
                    "table": Table(head, rows, classes, num={5, 6} if not npu else {5, 6, 8}, cls="batch")})
    return out


# ---------------------------------------------------------------------------------------------- best configuration
def knobs_table(snap: SessionSnapshot, s: dict[str, str]) -> Table:
    """Tunable knobs written in the best source (or changed by the session), source order, ✱ on changed ones."""
    rows, classes = [], []
    for k in snap.final_knobs:
        if not k.tunable or not (k.present or k.changed):
            continue
        d = s["knob_default"]
        rows.append([Cell(("✱ " if k.changed else "") + k.id, code=False, cls="knob"), f"{k.file}:{k.line}",
                     Cell(source_text(k.original, d), code=True), Cell(source_text(k.value, d), code=True)])
        classes.append("changed" if k.changed else "")
    head = [s["knob"], s["location"], s["original"], s["best_value"]]
    return Table(head, rows, classes, cls="knobs")


def measurement_for_lanes(snap: SessionSnapshot) -> list[tuple[str, Measurement | None]]:
    return [("baseline", baseline_measurement(snap)), ("best", best_measurement(snap))]
