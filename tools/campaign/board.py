"""The campaign board: live progress, as data (``board.json``), in the terminal and as a refreshing HTML page.

Every figure comes from the sessions' ledgers (:mod:`.facts`) and the campaign's journal; nothing is kept only in
the driver's memory except what each session is doing this second (``activity``). The HTML page is self-contained
(no script, no fetch, no external file): while the campaign runs it reloads itself every few seconds
(``<meta http-equiv="refresh">``), and the last one written — finished, stopped or interrupted — does not.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from pypto_tune.tools.campaign.journal import CampaignDir, atomic_write, now_iso
from pypto_tune.tools.campaign.manifest import CampaignSpec

if TYPE_CHECKING:  # the board is read by the MCP server's campaign tools, which must not import the ledger to start
    from pypto_tune.tools.campaign.facts import SessionFacts

BOARD_JSON = "board.json"
BOARD_HTML = "board.html"
REFRESH_S = 5
OpStatus = Literal["queued", "running", "done", "failed", "stopped", "not-started"]
#: what the SIM banner says wherever a verdict is shown (the simulator computes no output values)
SIM_NOTE = "SIM: precision only means compiled and simulated — the simulator computes no output values"


class OperatorRow(BaseModel):
    name: str
    status: OpStatus
    activity: str = ""
    session_id: str | None = None
    run_mode: str = "sim"
    stage: str | None = None
    goal: str = ""
    baseline_us: float | None = None
    best_us: float | None = None
    speedup: float | None = None
    trials: int = 0
    trials_budget: int = 0
    kept: int = 0
    failed: int = 0
    failures: list[str] = Field(default_factory=list, description="failed trials by result type")
    reason: str = Field("", description="why the session ended, or why the operator failed")
    elapsed_s: float = 0.0
    run_s: float = Field(0.0, description="sum of the durations of the session's runs")
    reports: list[str] = Field(default_factory=list)
    workspace: str = ""


class Board(BaseModel):
    campaign_id: str
    name: str
    state: Literal["running", "stopping", "finished", "stopped", "interrupted"]
    executor: str
    nodes: list[str] = Field(default_factory=list)
    slots: int = 1
    started_at: str
    updated_at: str
    elapsed_s: float
    counts: dict[str, int]
    best_speedup: float | None = None
    best_operator: str | None = None
    trials_used: int = 0
    trials_budget: int | None = None
    wall_budget_h: float | None = None
    wall_left_s: float | None = None
    eta_s: float | None = Field(None, description="estimate from the runs measured so far; budgets may end it sooner")
    run_losses: int = Field(0, description="runs lost with their node and run again elsewhere")
    drivers: int = Field(1, description="driver processes that ran this campaign (a resume adds one)")
    sim: bool = True
    operators: list[OperatorRow]
    reports: list[str] = Field(default_factory=list)
    folder: str = ""


def _operator_status(events: list[dict[str, Any]]) -> dict[str, tuple[OpStatus, str]]:
    """Per operator, what the journal says last: running (a session started), done/stopped/failed."""
    out: dict[str, tuple[OpStatus, str]] = {}
    for e in events:
        op, ev = e.get("operator"), e.get("event")
        if not op:
            continue
        if ev in ("session", "workspace-copied"):
            out[op] = ("running", "")
        elif ev == "operator-done":
            out[op] = ("stopped" if e.get("status") == "stopped" else "done", str(e.get("reason") or ""))
        elif ev == "operator-already-done":
            out[op] = ("done", "")
        elif ev == "operator-failed":
            out[op] = ("failed", str(e.get("reason") or ""))
    return out


def _reports(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in events:
        if e.get("event") == "reports" and e.get("operator"):
            out[e["operator"]] = list(e.get("paths") or [])
    return out


def build_board(spec: CampaignSpec, campaign_id: str, cdir: CampaignDir, *, state: str,
                facts: dict[str, SessionFacts | None], activity: dict[str, str], executor: str, nodes: list[str],
                slots: int, wall_left_s: float | None) -> Board:
    events = cdir.events()
    status = _operator_status(events)
    reports = _reports(events)
    live = state in ("running", "stopping")
    rows: list[OperatorRow] = []
    for op in spec.operators:
        f = facts.get(op.name)
        st, reason = status.get(op.name, ("queued" if live else "not-started", ""))
        if st == "running" and not live:
            st = "not-started" if f is None else "stopped"
            reason = reason or "the driver ended before this session did (resume the campaign to continue it)"
        row = OperatorRow(name=op.name, status=st, activity=activity.get(op.name, "") if st == "running" else "",
                          run_mode=op.run_mode, goal=op.goal, trials_budget=op.trials, reason=reason,
                          reports=reports.get(op.name, []), workspace=str(op.workspace))
        if f is not None:
            row.session_id, row.stage, row.baseline_us, row.best_us = f.session_id, f.stage, f.baseline_us, f.best_us
            row.speedup = f.speedup
            row.trials, row.kept, row.failed, row.failures = f.trials, f.kept, f.failed, f.failures
            row.elapsed_s, row.run_s = round(f.elapsed_s, 1), f.run_s
            if st in ("done", "stopped") and not reason:
                row.reason = f.finish_reason or ""
        rows.append(row)
    counts = {k: sum(1 for r in rows if r.status == k) for k in ("done", "running", "queued", "failed", "stopped",
                                                                   "not-started")}
    best = max((r for r in rows if r.speedup), key=lambda r: r.speedup or 0.0, default=None)
    started = cdir.record()["created_at"]
    elapsed = (datetime.now().astimezone() - datetime.fromisoformat(started)).total_seconds()
    return Board(campaign_id=campaign_id, name=spec.name, state=state, executor=executor, nodes=nodes, slots=slots,
                 started_at=started, updated_at=now_iso(), elapsed_s=round(elapsed, 1), counts=counts,
                 best_speedup=best.speedup if best else None, best_operator=best.name if best else None,
                 trials_used=sum(r.trials for r in rows), trials_budget=spec.trials, wall_budget_h=spec.wall_h,
                 wall_left_s=None if wall_left_s is None else round(max(wall_left_s, 0.0), 1),
                 eta_s=_eta(rows, slots) if live else None,
                 run_losses=sum(1 for e in events if e.get("event") == "run-lost"),
                 drivers=sum(1 for e in events if e.get("event") == "driver-started"),
                 sim=any(o.run_mode == "sim" for o in spec.operators), operators=rows, folder=str(cdir.path))


def _eta(rows: list[OperatorRow], slots: int) -> float | None:
    """Seconds of runs still to come at the pace measured so far, spread over the slots: each remaining trial is a
    precision run and a measurement, each operator not started a baseline and a collection. An estimate: a session
    may end sooner (a stage exit, its goal, a budget)."""
    runs = sum(r.run_s for r in rows)
    n_runs = sum(2 * r.trials + 2 for r in rows if r.session_id)
    if not n_runs or runs <= 0:
        return None
    per_run = runs / n_runs
    left = 0
    for r in rows:
        if r.status in ("queued", "running"):
            left += 2 * max(r.trials_budget - r.trials, 0) + (0 if r.baseline_us else 2)
    return round(left * per_run / max(slots, 1), 1)


# ------------------------------------------------------------------------------------------------ rendering


def fmt_us(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def fmt_x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def fmt_s(v: float | None) -> str:
    if v is None:
        return "—"
    v = max(v, 0.0)
    if v < 120:
        return f"{v:.0f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.1f} h"


def summary_line(b: Board) -> str:
    c = b.counts
    parts = [f"{c['done']} done", f"{c['running']} running", f"{c['queued']} queued"]
    if c["failed"]:
        parts.append(f"{c['failed']} failed")
    if c["stopped"]:
        parts.append(f"{c['stopped']} stopped")
    if c["not-started"]:
        parts.append(f"{c['not-started']} not started")
    best = f"best {fmt_x(b.best_speedup)} ({b.best_operator})" if b.best_speedup else "best —"
    left = f"; wall budget left {fmt_s(b.wall_left_s)}" if b.wall_left_s is not None else ""
    eta = f"; estimate {fmt_s(b.eta_s)} to go" if b.eta_s is not None else ""
    trials = f"trials {b.trials_used}" + (f"/{b.trials_budget}" if b.trials_budget is not None else "")
    return (f"campaign {b.campaign_id} [{b.state}] {fmt_s(b.elapsed_s)}: " + ", ".join(parts)
            + f"; {best}; {trials}{left}{eta}" + (f"; {b.run_losses} run(s) lost with a node, run again"
                                                   if b.run_losses else ""))


def render_terminal(b: Board) -> str:
    head = ["operator", "status", "stage", "trials", "baseline µs", "best µs", "speed-up", "goal", "now / why"]
    lines = [[r.name, r.status, r.stage or "—", f"{r.trials}/{r.trials_budget}", fmt_us(r.baseline_us),
              fmt_us(r.best_us), fmt_x(r.speedup), r.goal, (r.activity or r.reason)[:60]] for r in b.operators]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    out = [summary_line(b), "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in lines]
    if b.sim:
        out.append(f"({SIM_NOTE})")
    return "\n".join(out)


_STYLE = """
body{font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Noto Sans","PingFang SC","Microsoft YaHei",sans-serif;
margin:24px auto;max-width:1180px;padding:0 16px;color:#1f2328}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;border-radius:6px}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.tile{border:1px solid #d0d7de;border-radius:8px;padding:8px 14px;min-width:110px}
.tile b{display:block;font-size:20px}
tr.done td.st{color:#1a7f37}tr.failed td.st{color:#cf222e}tr.running td.st{color:#0969da}
tr.stopped td.st,tr.not-started td.st,tr.queued td.st{color:#6e7781}
.bar{background:#eaeef2;border-radius:4px;height:8px;min-width:80px}.bar i{display:block;height:8px;
background:#2da44e;border-radius:4px}
small{color:#57606a}
"""


def _rel(target: str, base: Path) -> str:
    try:
        return os.path.relpath(target, base)
    except ValueError:
        return Path(target).as_uri()


def render_html(b: Board) -> str:
    live = b.state in ("running", "stopping")
    base = Path(b.folder)
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if live else ""
    tiles = [("done", b.counts["done"]), ("running", b.counts["running"]), ("queued", b.counts["queued"]),
             ("failed", b.counts["failed"]), ("best speed-up", fmt_x(b.best_speedup)),
             ("trials", f"{b.trials_used}" + (f" / {b.trials_budget}" if b.trials_budget is not None else "")),
             ("elapsed", fmt_s(b.elapsed_s))]
    if b.wall_left_s is not None:
        tiles.append(("wall budget left", fmt_s(b.wall_left_s)))
    if b.eta_s is not None:
        tiles.append(("estimate to go", fmt_s(b.eta_s)))
    rows = []
    for r in b.operators:
        pct = min(100.0, 100.0 * r.trials / r.trials_budget) if r.trials_budget else 0.0
        links = " ".join(f'<a href="{escape(_rel(p, base))}">{escape(Path(p).suffix[1:])}'
                         f'{" en" if "_en." in p else ""}</a>' for p in r.reports if "_tuning_report_" in p)
        rows.append(
            f'<tr class="{r.status}"><td>{escape(r.name)}</td><td class="st">{r.status}</td>'
            f"<td>{escape(r.stage or '—')}</td>"
            f'<td><div class="bar" title="{r.trials} of {r.trials_budget} trials"><i style="width:{pct:.0f}%"></i>'
            f"</div><small>{r.trials}/{r.trials_budget}</small></td>"
            f'<td class="num">{fmt_us(r.baseline_us)}</td><td class="num">{fmt_us(r.best_us)}</td>'
            f'<td class="num speedup">{fmt_x(r.speedup)}</td><td>{escape(r.goal)}</td>'
            f"<td>{escape(r.activity or r.reason)}</td><td>{links or '—'}</td></tr>")
    nodes = ", ".join(escape(n) for n in b.nodes) or "—"
    sim = f'<p class="note sim">{escape(SIM_NOTE)}</p>' if b.sim else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}
<title>Campaign {escape(b.campaign_id)} — {b.state}</title><style>{_STYLE}</style></head>
<body data-state="{b.state}">
<h1>Campaign {escape(b.name)} <small>{escape(b.campaign_id)} · {b.state}</small></h1>
<p><small>updated {escape(b.updated_at)} · executor {escape(b.executor)} · {b.slots} slot(s) · nodes: {nodes}
{'' if not b.run_losses else f' · {b.run_losses} run(s) lost with a node and run again elsewhere'}</small></p>
{sim}
<div class="tiles">{''.join(f'<div class="tile" data-k="{escape(k)}"><b>{escape(str(v))}</b>{escape(k)}</div>'
                            for k, v in tiles)}</div>
<table class="operators"><thead><tr><th>operator</th><th>status</th><th>stage</th><th>trials</th>
<th>baseline µs</th><th>best µs</th><th>speed-up</th><th>goal</th><th>now / why</th><th>report</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""


def write_board(cdir: CampaignDir, b: Board) -> None:
    for name, text in ((BOARD_JSON, b.model_dump_json(indent=1)), (BOARD_HTML, render_html(b))):
        atomic_write(cdir.path / name, text)


def read_board(cdir: CampaignDir) -> Board | None:
    try:
        return Board.model_validate(json.loads((cdir.path / BOARD_JSON).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
