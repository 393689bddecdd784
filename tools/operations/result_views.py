"""What a client reads: compact views of results, as pure functions from a result model to a smaller one or to text.

Why: an agent's context is the scarce resource. A whole analysis of one SIM run is 30–90 KB (72 per-core rows of
which most are idle, every suggestion's evidence, per-leaf tables, dependency chains); sent as structured content and
again as its JSON text it filled 80–126 KB of the agent's window per call. The summary keeps the headline figures and
the top items of each list, says how many were left out, and points at the whole analysis (a resource, or
``detail="full"``). The text beside the structured content is a short human reading, never the same JSON again.

No MCP imports: the server adapter decides when to use these; they only shape data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel
from pypto_tune.tools.operations.results import (
    AnalysisSummary,
    AnalyzeResult,
    BottleneckLine,
    CoreLine,
    JobHandle,
    KernelLine,
    LeafLine,
    Omitted,
    SuggestionOut,
)

# The summary's structured content stays under this many bytes of JSON (the text adds at most TEXT_BUDGET), so a
# default analyze_bubbles result is ≤ 8 KB on the wire whatever the run looked like.
SUMMARY_BUDGET = 6000
TEXT_BUDGET = 1800

_SEVERITY = {"high": 0, "medium": 1, "low": 2}
_ENVELOPE = ("session_id", "state", "stage", "message", "next_actions")


@dataclass(frozen=True)
class Limits:
    """How many items of each list the summary keeps (the first ones after sorting)."""

    cores: int = 6
    bottlenecks: int = 5
    suggestions: int = 5
    kernels: int = 4
    leaves: int = 5
    warnings: int = 4
    text_chars: int = 240  # one reason, message or warning

    def shrunk(self) -> Limits:
        """One step smaller, for results that still exceed the byte budget (never below one item)."""
        return replace(self, cores=max(1, self.cores - 1), bottlenecks=max(1, self.bottlenecks - 1),
                       suggestions=max(1, self.suggestions - 1), kernels=max(1, self.kernels - 1),
                       leaves=max(1, self.leaves - 1), warnings=max(1, self.warnings - 1),
                       text_chars=max(80, self.text_chars - 40))


# ---------------------------------------------------------------------------------------------- analysis summary
def summarize_analysis(full: AnalyzeResult, *, lang: str = "zh", detail_uri: str | None = None,
                       include_full: bool = False, limits: Limits = Limits(),
                       budget_bytes: int = SUMMARY_BUDGET) -> AnalysisSummary:
    """The published form of an analysis: headline figures, the top items of each list, counts of what was left out.

    ``lang`` picks the language of the bottleneck messages (the analysis carries both). ``detail_uri`` is where the
    whole analysis can be read (a session measurement's resource); ``include_full`` puts the whole analysis into the
    ``full`` field instead (``detail="full"``), which is not counted against ``budget_bytes``.
    """
    summary = _summary(full, lang, detail_uri, limits)
    # Shrink until the summary fits: the limits above fit every recorded run, this guards the unusual ones (hundreds
    # of suggestions' evidence, very long warnings) so the promise "≤ 8 KB by default" holds by construction.
    for _ in range(12):
        if len(summary.model_dump_json()) <= budget_bytes:
            break
        limits = limits.shrunk()
        summary = _summary(full, lang, detail_uri, limits)
    if include_full:
        summary.full = full.model_dump(mode="json")
    return summary


def _summary(full: AnalyzeResult, lang: str, detail_uri: str | None, lim: Limits) -> AnalysisSummary:
    active = [c for c in full.cores if c.active]
    worst = sorted(active, key=lambda c: (c.utilization_pct, -c.bubble_rate_pct, c.name))
    bottlenecks = sorted((_as_dict(b) for b in full.bottlenecks),
                         key=lambda b: (bool(b.get("false_alarm")), _SEVERITY.get(str(b.get("severity")), 3)))
    per_dir = [d for d in full.details.get("per_dir", []) if isinstance(d, dict)]
    leaves = sorted((d for d in full.details.get("leaves", []) if isinstance(d, dict)),
                    key=lambda d: -float(d.get("total_us") or 0.0))
    return AnalysisSummary(
        session_id=full.session_id, state=full.state, stage=full.stage, message=full.message,
        next_actions=list(full.next_actions), measurement_id=full.measurement_id, output_dirs=list(full.output_dirs),
        operator_time_us=_r(full.operator_time_us), e2e_us=_r(full.e2e_us),
        avg_core_utilization=_r(full.avg_core_utilization), avg_bubble_rate=_r(full.avg_bubble_rate),
        load_balance=_r(full.load_balance), active_core_utilization=_r(full.active_core_utilization),
        active_bubble_rate=_r(full.active_bubble_rate), active_load_balance=_r(full.active_load_balance),
        ratings=dict(full.ratings), cores_total=len(full.cores), cores_active=len(active),
        worst_cores=[CoreLine(name=c.name, core_type=c.core_type, utilization_pct=_r(c.utilization_pct),
                              bubble_rate_pct=_r(c.bubble_rate_pct), work_us=_r(c.work_us),
                              wait_schedule_us=_r(c.wait_schedule_us)) for c in worst[:lim.cores]],
        bottlenecks=[_bottleneck_line(b, lang, lim.text_chars) for b in bottlenecks[:lim.bottlenecks]],
        suggestions=[SuggestionOut(catalog_id=s.catalog_id, stage=s.stage, priority=s.priority,
                                   reason=_clip(s.reason, lim.text_chars), evidence=_compact(s.evidence),
                                   knobs=s.knobs[:4], action=s.action)
                     for s in full.suggestions[:lim.suggestions]],
        kernels=[_kernel_line(d) for d in per_dir[:lim.kernels]],
        top_leaves=[_leaf_line(d) for d in leaves[:lim.leaves]],
        warnings=[_clip(w, lim.text_chars) for w in full.warnings[:lim.warnings]],
        omitted=Omitted(cores=len(full.cores) - min(len(worst), lim.cores),
                        bottlenecks=max(0, len(bottlenecks) - lim.bottlenecks),
                        suggestions=max(0, len(full.suggestions) - lim.suggestions),
                        kernels=max(0, len(per_dir) - lim.kernels), leaves=max(0, len(leaves) - lim.leaves),
                        warnings=max(0, len(full.warnings) - lim.warnings)),
        report_path=full.report_path, detail_uri=detail_uri,
    )


def _bottleneck_line(b: dict[str, Any], lang: str, chars: int) -> BottleneckLine:
    message = (b.get("message_zh") if lang == "zh" else None) or b.get("message") or ""
    return BottleneckLine(kind=str(b.get("kind", "")), severity=str(b.get("severity", "")),
                          source=str(b.get("source", "")), value=_r(float(b.get("value") or 0.0)),
                          threshold=_r(float(b.get("threshold") or 0.0)), message=_clip(str(message), chars),
                          false_alarm=bool(b.get("false_alarm", False)))


def _kernel_line(d: dict[str, Any]) -> KernelLine:
    return KernelLine(run_dir=PurePath(str(d.get("run_dir", ""))).name,
                      operator_time_us=_r(float(d.get("operator_time_us") or 0.0)),
                      e2e_us=_r(float(d.get("e2e_us") or 0.0)), task_count=int(d.get("task_count") or 0),
                      active_core_utilization_pct=_r(float(d.get("active_core_utilization_pct") or 0.0)),
                      active_bubble_rate_pct=_r(float(d.get("active_bubble_rate_pct") or 0.0)))


def _leaf_line(d: dict[str, Any]) -> LeafLine:
    return LeafLine(leaf_hash=str(d.get("leaf_hash", "")), core_type=str(d.get("core_type", "")),
                    count=int(d.get("count") or 0), avg_us=_r(float(d.get("avg_us") or 0.0)),
                    total_us=_r(float(d.get("total_us") or 0.0)), source=str(d.get("source", "")),
                    short_task=bool(d.get("short_task", False)))


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj if isinstance(obj, dict) else {"message": str(obj)}


def _r(x: float) -> float:
    """Three decimals: µs to the nanosecond and percentages to a thousandth are all a decision needs."""
    return round(float(x), 3)


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _compact(value: Any, depth: int = 0) -> Any:
    """Evidence without noise: floats rounded, lists cut to their first five items, nesting cut at three levels."""
    if isinstance(value, float):
        return _r(value)
    if isinstance(value, dict):
        if depth >= 3:
            return f"{{{len(value)} keys}}"
        return {str(k): _compact(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_compact(v, depth + 1) for v in list(value)[:5]]
        return items + [f"+{len(value) - 5} more"] if len(value) > 5 else items
    if isinstance(value, str):
        return _clip(value, 160)
    return value


# ---------------------------------------------------------------------------------------------- text content
def analysis_text(s: AnalysisSummary) -> str:
    """A few lines a person (or a text-only client) reads; the numbers are those of the structured content."""
    lines = [s.message or f"analysed {', '.join(PurePath(d).name for d in s.output_dirs)}",
             (f"operator time {s.operator_time_us:.3f} µs (E2E {s.e2e_us:.3f} µs); active cores: utilisation "
              f"{s.active_core_utilization:.2f} %, bubble {s.active_bubble_rate:.2f} %, balance "
              f"{s.active_load_balance:.2f} % (reference: {s.avg_core_utilization:.2f} / {s.avg_bubble_rate:.2f}"
              f" / {s.load_balance:.2f} %)"),
             (f"cores: {s.cores_active} of {s.cores_total} active; lowest utilisation: "
              + (", ".join(f"{c.name} {c.utilization_pct:.1f} %" for c in s.worst_cores[:4]) or "—"))]
    lines += [f"bottleneck [{b.severity}{', false alarm' if b.false_alarm else ''}]: {b.message}"
              for b in s.bottlenecks[:3]]
    lines += [f"suggest {x.catalog_id}"
              + (f" via {', '.join(x.knobs[:2])}" if x.knobs else f" ({x.action})" if x.action else "")
              + f": {_clip(x.reason, 140)}" for x in s.suggestions[:3]]
    lines += [f"kernel {k.run_dir}: {k.operator_time_us:.3f} µs, {k.task_count} tasks" for k in s.kernels[:2]]
    lines += [f"warning: {_clip(w, 160)}" for w in s.warnings[:2]]
    left = {k: v for k, v in s.omitted.model_dump().items() if v}
    shown_more = (len(s.bottlenecks) > 3) or (len(s.suggestions) > 3)
    if left or shown_more or s.detail_uri:
        where = s.detail_uri or 'analyze_bubbles(detail="full")'
        lines.append("left out: " + (", ".join(f"{v} {k}" for k, v in left.items()) or "nothing")
                     + f"; structured content has the top items, the whole analysis is at {where}")
    lines.append(f"report: {s.report_path}")
    if s.next_actions:
        lines.append("next: " + ", ".join(s.next_actions))
    return _clip("\n".join(lines), TEXT_BUDGET)


def job_text(job: JobHandle) -> str:
    lines = [job.message or f"{job.tool} job {job.job_id}: {job.status}",
             f"job {job.job_id} ({job.tool}): {job.status} after {job.elapsed_s:.1f} s"]
    if job.last_output and job.status == "running":
        lines.append("last output: " + _clip(job.last_output.strip().splitlines()[-1] if job.last_output.strip()
                                             else "", 200))
    if job.error:
        lines.append("error: " + _clip(job.error, 600))
    if job.result is not None:
        lines.append("result: " + _clip(str(job.result.get("message", "")), 300)
                     + " (the whole result is in structured content, field 'result')")
    if job.next_actions:
        lines.append("next: " + ", ".join(job.next_actions))
    return "\n".join(lines)


def result_text(result: BaseModel, *, block_chars: int = 3000) -> str:
    """A generic reading of a result: the message, each field once (scalars inline, lists counted with their first
    items, long text such as a board or a diff as a block), then the allowed next calls."""
    if isinstance(result, AnalysisSummary):
        return analysis_text(result)
    if isinstance(result, JobHandle):
        return job_text(result)
    data = result.model_dump(mode="json")
    head = [str(data.get("message") or "")] if data.get("message") else []
    where = " · ".join(str(data[k]) for k in ("session_id", "state", "stage") if data.get(k))
    fields: list[str] = []
    blocks: list[str] = []
    for name, value in data.items():
        if name in _ENVELOPE or value is None or value == [] or value == {} or value == "":
            continue
        if isinstance(value, str) and ("\n" in value or len(value) > 160):
            text = value if len(value) <= block_chars else (value[:block_chars] + f"\n… ({len(value) - block_chars}"
                                                            " more characters in the structured content)")
            blocks.append(f"{name}:\n{text.rstrip()}")
        elif isinstance(value, list):
            fields.append(_list_line(name, value))
        elif isinstance(value, dict):
            fields.append(f"{name}: {_clip(json.dumps(value, ensure_ascii=False), 200)}")
        elif isinstance(value, float):
            fields.append(f"{name}: {value:.6g}")
        else:
            fields.append(f"{name}: {value}")
    tail = ([f"session: {where}"] if where else []) + (
        ["next: " + ", ".join(data["next_actions"])] if data.get("next_actions") else [])
    return "\n".join(head + fields + blocks + tail)


def _list_line(name: str, items: list[Any]) -> str:
    if all(not isinstance(v, (dict, list)) for v in items):
        shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in items[:10])
        return f"{name}: {shown}" + (f" (+{len(items) - 10} more)" if len(items) > 10 else "")
    rows = [_clip(json.dumps(v, ensure_ascii=False, separators=(",", ":")), 160) for v in items[:5]]
    more = f"\n  … +{len(items) - 5} more in the structured content" if len(items) > 5 else ""
    return f"{name}: {len(items)} item(s)\n  " + "\n  ".join(rows) + more
