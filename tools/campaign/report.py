"""The campaign report (Markdown and self-contained HTML, zh and en): operators sorted by gain, time spent,
failures and why, and a link to each session's own report.

Filled only from the final board (:mod:`.board`, itself read from the ledgers) and the journal. Written next to the
board as ``campaign_report.md/.html`` (zh, the project's default language) and ``campaign_report_en.md/.html``.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from pypto_tune.tools.campaign.board import _STYLE, Board, OperatorRow, _rel, fmt_s, fmt_us, fmt_x
from pypto_tune.tools.campaign.journal import CampaignDir, atomic_write

# The campaign report is read on a page (1280 px, or A4): long texts wrap, numbers do not, the why column takes the
# room that is left. (The board's own style is for a live dashboard.)
REPORT_STYLE = """
table.operators{table-layout:auto}table.operators td,table.failures td{overflow-wrap:anywhere}
td.num{white-space:nowrap}td.why{min-width:14em}td.why details summary{cursor:pointer}
td.why pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;margin:4px 0}
th{word-break:keep-all}
@page{size:A4;margin:12mm}@media print{body{max-width:none;margin:0;padding:0;font-size:10px}th,td{padding:2px 3px}
td.why{min-width:9em}td.num{white-space:normal}}
"""

STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "title": "Campaign report", "summary": "Summary", "by_gain": "Operators, by gain", "failures": "Failures "
        "and why", "events": "What happened to the campaign", "operator": "operator", "status": "status",
        "baseline": "baseline µs", "best": "best µs", "speedup": "speed-up", "goal": "goal", "reached": "goal reached",
        "trials": "trials (kept / failed)", "time": "time spent", "runs": "run time", "report": "session report",
        "why": "why it ended", "yes": "yes", "no": "no", "none": "No operator failed and no trial failed.",
        "state": "state", "executor": "executor", "nodes": "nodes", "elapsed": "wall time",
        "run_sum": "sum of the sessions' run time", "best_op": "best speed-up", "trials_used": "trials run",
        "drivers": "driver processes (a resume adds one)", "losses": "runs lost with their node and run again",
        "ops": "operators", "trial_failures": "failed trials", "sim": "SIM: a precision pass only means the kernel "
        "compiled and simulated — the simulator computes no output values.",
        "done": "done", "failed": "failed", "stopped": "stopped", "not-started": "not started", "queued": "queued",
        "running": "running", "id": "campaign", "open": "open",
        "paused": "paused between two steps by Ctrl-C or SIGTERM; resuming the campaign continues this session",
        "refused_by": "a rule refused a step ({rule}): {text}", "whole": "whole text",
        "st_finished": "finished", "st_stopped": "stopped", "st_interrupted": "interrupted (resumable)",
        "st_running": "running", "st_stopping": "stopping",
    },
    "zh": {
        "title": "调优战役报告", "summary": "概览", "by_gain": "各算子（按收益排序）", "failures": "失败及原因",
        "events": "战役过程", "operator": "算子", "status": "状态", "baseline": "基线 µs", "best": "最佳 µs",
        "speedup": "加速比", "goal": "目标", "reached": "达成目标", "trials": "试验（保留 / 失败）", "time": "耗时",
        "runs": "运行时间", "report": "会话报告", "why": "结束原因", "yes": "是", "no": "否",
        "none": "没有算子失败，也没有试验失败。", "state": "状态", "executor": "执行器", "nodes": "节点",
        "elapsed": "总耗时", "run_sum": "各会话运行时间之和", "best_op": "最佳加速比", "trials_used": "已运行试验",
        "drivers": "驱动进程数（每次恢复加一）", "losses": "因节点丢失而重新运行的运行次数", "ops": "算子数",
        "trial_failures": "失败的试验", "sim": "SIM：精度通过仅表示内核已编译并完成仿真——仿真器不计算输出数值。",
        "done": "完成", "failed": "失败", "stopped": "已停止", "not-started": "未开始", "queued": "排队中",
        "running": "运行中", "id": "战役", "open": "打开",
        "paused": "被 Ctrl-C 或 SIGTERM 暂停在两步之间；恢复战役即可继续此会话",
        "refused_by": "某一步被规则拒绝（{rule}）：{text}", "whole": "全文",
        "st_finished": "已完成", "st_stopped": "已停止", "st_interrupted": "已中断（可恢复）", "st_running": "运行中",
        "st_stopping": "正在停止",
    },
}


WHY_CHARS = 160  # a "why it ended" cell shows this much; the whole text is one click away


def why_text(reason: str, lang: str) -> str:
    """Why an operator ended, as a sentence for a person: a session's finish reason in the report's words (a budget
    end is a budget end, not a user stop), a pause as a pause, and a refusal by its rule and first sentence rather
    than the agent-facing ``GATE … Next: … Allowed now: …`` text."""
    from pypto_tune.tools.campaign.driver import PAUSED
    from pypto_tune.tools.report.i18n import finish_reason_text, strings

    s = STRINGS[lang]
    text = (reason or "").strip()
    if not text:
        return "—"
    if text == PAUSED:
        return s["paused"]
    text = text.removeprefix("campaign: ")
    gate = re.search(r"GATE ([\w-]+): ([^\n]*)", text)
    if gate:
        return s["refused_by"].format(rule=gate.group(1), text=gate.group(2).strip())
    first = text.splitlines()[0]
    said = finish_reason_text(strings(lang), first)
    return said if said != first else first


def _short(text: str, n: int = WHY_CHARS) -> str:
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[n // 2:] else cut) + "…"


def _reached(r: OperatorRow) -> bool | None:
    if r.best_us is None or not r.goal:
        return None
    if r.goal.endswith("x") and r.speedup is not None:
        return r.speedup >= float(r.goal[:-1]) - 1e-9
    if r.goal.startswith("≤"):
        return r.best_us <= float(r.goal.split()[1]) + 1e-9
    return None


def by_gain(rows: list[OperatorRow]) -> list[OperatorRow]:
    """Operators with a measured speed-up first, largest first; then the others in the spec's order."""
    measured = sorted((r for r in rows if r.speedup is not None), key=lambda r: -(r.speedup or 0.0))
    return measured + [r for r in rows if r.speedup is None]


def _session_report(r: OperatorRow, lang: str) -> str | None:
    want = "_en." if lang == "en" else None
    for p in r.reports:
        if "_tuning_report_" not in p:
            continue
        is_en = "_en." in p
        if (want and is_en) or (not want and not is_en):
            if p.endswith(".html"):
                return p
    return next((p for p in r.reports if "_tuning_report_" in p), None)


def _summary(b: Board, s: dict[str, str]) -> list[tuple[str, str]]:
    counts = ", ".join(f"{s[k]} {v}" for k, v in b.counts.items() if v)
    run_sum = sum(r.run_s for r in b.operators)
    return [(s["id"], b.campaign_id), (s["state"], s.get("st_" + b.state, b.state)),
            (s["ops"], f"{len(b.operators)} ({counts})"),
            (s["executor"], f"{b.executor}, {b.slots} slot(s)"), (s["nodes"], ", ".join(b.nodes) or "—"),
            (s["elapsed"], fmt_s(b.elapsed_s)), (s["run_sum"], fmt_s(run_sum)),
            (s["best_op"], f"{fmt_x(b.best_speedup)} ({b.best_operator})" if b.best_speedup else "—"),
            (s["trials_used"], str(b.trials_used) + (f" / {b.trials_budget}" if b.trials_budget is not None else "")),
            (s["drivers"], str(b.drivers)), (s["losses"], str(b.run_losses))]


def _failures(b: Board) -> list[tuple[str, str, str]]:
    out = []
    for r in b.operators:
        if r.status == "failed":
            out.append((r.name, r.status, r.reason))
        if r.failures:
            out.append((r.name, "trials", ", ".join(r.failures)))
    return out


def render_md(b: Board, lang: str, base: Path) -> str:
    s = STRINGS[lang]
    lines = [f"# {s['title']}: {b.name}", ""]
    if b.sim:
        lines += [f"> {s['sim']}", ""]
    lines += [f"## {s['summary']}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _summary(b, s)]
    lines += ["", f"## {s['by_gain']}", "",
              f"| {s['operator']} | {s['status']} | {s['baseline']} | {s['best']} | {s['speedup']} | {s['goal']} | "
              f"{s['reached']} | {s['trials']} | {s['time']} | {s['runs']} | {s['why']} | {s['report']} |",
              "|---|---|---:|---:|---:|---|---|---:|---:|---:|---|---|"]
    for r in by_gain(b.operators):
        reached = _reached(r)
        rep = _session_report(r, lang)
        link = f"[{Path(rep).name}]({_rel(rep, base)})" if rep else "—"
        why = why_text(r.reason, lang).replace("|", "\\|")
        lines.append(f"| {r.name} | {s[r.status]} | {fmt_us(r.baseline_us)} | {fmt_us(r.best_us)} | "
                     f"{fmt_x(r.speedup)} | {r.goal} | {'—' if reached is None else s['yes' if reached else 'no']} | "
                     f"{r.trials} ({r.kept} / {r.failed}) | {fmt_s(r.elapsed_s)} | {fmt_s(r.run_s)} | {why} | {link} |")
    lines += ["", f"## {s['failures']}", ""]
    fails = _failures(b)
    if not fails:
        lines.append(s["none"])
    else:
        lines += [f"| {s['operator']} | | {s['why']} |", "|---|---|---|"]
        lines += [f"| {n} | {s['trial_failures'] if k == 'trials' else s[k]} | "
                  f"{(w if k == 'trials' else why_text(w, lang)).replace('|', '/')} |" for n, k, w in fails]
    return "\n".join(lines) + "\n"


def _why_html(reason: str, lang: str, s: dict[str, str]) -> str:
    """The sentence, cut on a word with an ellipsis when long; the whole sentence and the text as recorded (a
    refusal's next calls included) in a details element."""
    said = why_text(reason, lang)
    whole = (reason or "").strip()
    if "GATE " not in whole and "\n" not in whole:
        whole = ""  # a finish reason said in the report's words: nothing more to show
    if len(said) <= WHY_CHARS and whole in ("", said):
        return escape(said)
    extra = f"<pre>{escape(whole)}</pre>" if whole and whole != said else ""
    return (f"<details><summary>{escape(_short(said))}</summary>"
            + (f"<p>{escape(said)}</p>" if len(said) > WHY_CHARS else "") + extra + "</details>")


def render_html(b: Board, lang: str, base: Path) -> str:
    s = STRINGS[lang]
    summ = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in _summary(b, s))
    rows = []
    for r in by_gain(b.operators):
        reached = _reached(r)
        rep = _session_report(r, lang)
        # the file name is long and unbreakable: a short link, the name on hover
        link = (f'<a href="{escape(_rel(rep, base))}" title="{escape(Path(rep).name)}">{escape(s["open"])}</a>'
                if rep else "—")
        rows.append(f'<tr class="{r.status}"><td>{escape(r.name)}</td><td class="st">{escape(s[r.status])}</td>'
                    f'<td class="num">{fmt_us(r.baseline_us)}</td><td class="num">{fmt_us(r.best_us)}</td>'
                    f'<td class="num speedup">{fmt_x(r.speedup)}</td><td>{escape(r.goal)}</td>'
                    f"<td>{'—' if reached is None else s['yes' if reached else 'no']}</td>"
                    f'<td class="num">{r.trials} ({r.kept} / {r.failed})</td><td class="num">{fmt_s(r.elapsed_s)}'
                    f'</td><td class="num">{fmt_s(r.run_s)}</td><td class="why">{_why_html(r.reason, lang, s)}</td>'
                    f"<td>{link}</td></tr>")
    fails = _failures(b)
    fail_html = (f"<p>{escape(s['none'])}</p>" if not fails else
                 '<table class="failures"><tbody>' + "".join(
                     f"<tr><td>{escape(n)}</td><td>{escape(s['trial_failures'] if k == 'trials' else s[k])}</td>"
                     f"<td class=\"why\">{escape(w) if k == 'trials' else _why_html(w, lang, s)}</td></tr>"
                     for n, k, w in fails) + "</tbody></table>")
    sim = f'<p class="note sim">{escape(s["sim"])}</p>' if b.sim else ""
    head = "".join(f"<th>{escape(s[k])}</th>" for k in ("operator", "status", "baseline", "best", "speedup", "goal",
                                                         "reached", "trials", "time", "runs", "why", "report"))
    from pypto_tune.tools.report.fonts import FAMILY, font_face_css

    # a zh report carries its CJK glyphs (tools/report/fonts.py): legible where no CJK font is installed
    font_face = font_face_css() if lang == "zh" else ""
    zh_family = (f'body{{font-family:"{FAMILY}",-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",'
                 'sans-serif}' if lang == "zh" else "")
    return f"""<!doctype html>
<html lang="{'zh-CN' if lang == 'zh' else 'en'}"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; font-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(s['title'])}: {escape(b.name)}</title><style>{font_face}{_STYLE}{REPORT_STYLE}{zh_family}</style></head>
<body>
<h1>{escape(s['title'])}: {escape(b.name)}</h1>
{sim}
<h2>{escape(s['summary'])}</h2>
<table class="summary"><tbody>{summ}</tbody></table>
<h2>{escape(s['by_gain'])}</h2>
<table class="operators"><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
<h2>{escape(s['failures'])}</h2>
{fail_html}
</body></html>
"""


def write_reports(cdir: CampaignDir, b: Board) -> list[Path]:
    out = []
    for lang, suffix in (("zh", ""), ("en", "_en")):
        for ext, render in (("md", render_md), ("html", render_html)):
            path = cdir.path / f"campaign_report{suffix}.{ext}"
            atomic_write(path, render(b, lang, cdir.path))
            out.append(path)
    return out
