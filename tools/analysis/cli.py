"""``pypto-tune analyze DIR [--json] [--lang zh|en] [--outer-loops N] [--run-mode sim|npu] [--no-report]``.

Only parses arguments and turns library errors into one message on stderr (exit 2). DIR may be a run folder, an
``output/`` folder or a workspace; with several runs the NEWEST is analysed and the choice is printed (to stderr
with ``--json`` so stdout stays machine-readable). The analyze_perf reference would take the oldest (E.4.28).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from pypto_tune.tools.errors import PyptoTuneError

if TYPE_CHECKING:
    from pypto_tune.tools.analysis.models import RunAnalysis


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2 (argparse's own convention)
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pypto-tune analyze`` (shared with the main CLI, whose ``--help`` shows them; the engine is
    imported only when a run is analysed, so building the parser stays cheap)."""
    p.add_argument("dir", help="a run folder output_<ts>, an output/ folder, or a workspace holding output/")
    p.add_argument("--json", action="store_true", help="print the full analysis as JSON")
    p.add_argument("--lang", choices=("zh", "en"), default="zh", help="report language (default zh)")
    p.add_argument("--outer-loops", type=int, default=None,
                   help="product of the trip counts of all non-innermost pypto.loops (for t/iter)")
    p.add_argument("--run-mode", choices=("sim", "npu"), default=None, help="default: from the folder layout")
    p.add_argument("--no-report", action="store_true", help="do not write performance_analysis_report.md")


def _parser() -> _Parser:
    p = _Parser(prog="pypto-tune analyze", description="Analyse a PyPTO run's swimlane output (NPU or SIM layout).")
    add_arguments(p)
    return p


def summary_text(a: RunAnalysis, report: Path | None, note: str) -> str:
    """The human-readable summary printed without --json."""
    r = a.ratings
    lines = [note,
             f"operator time (max_work_time): {a.operator_time_us:.3f} µs   AICore E2E: {a.e2e_us:.3f} µs   "
             + (f"AICPU-side E2E: {a.aicpu_e2e_us:.3f} µs   " if a.aicpu_e2e_us is not None else "")
             + f"tasks: {a.task_count}",
             f"reference  util {a.avg_core_utilization_pct:6.2f} %  bubble {a.avg_bubble_rate_pct:6.2f} %  "
             f"load balance {a.load_balance_pct:7.2f} %  stars {r.get('utilization')}/{r.get('bubble')}/"
             f"{r.get('load_balance')} overall {r.get('overall')}",
             f"corrected  util {a.active_core_utilization_pct:6.2f} %  bubble {a.active_bubble_rate_pct:6.2f} %  "
             f"load balance {a.active_load_balance_pct:7.2f} %  (active cores only)",
             f"cross-check from trace: {'agrees' if a.crosscheck.agrees else 'DISAGREES'}"]
    if a.invalid_reasons:
        lines.append("INVALID run:")
        lines += [f"  - {x}" for x in a.invalid_reasons]
    if a.bottlenecks:
        lines.append("bottlenecks:")
        lines += [f"  - {b.severity}: {b.message}" + (" [false alarm]" if b.false_alarm else "") for b in a.bottlenecks]
    if a.suggestions:
        lines.append("suggestions (ranked):")
        lines += [f"  {s.priority:2d}. {s.catalog_id:5s} [{s.stage}] {s.title}" for s in a.suggestions[:12]]
    lines += [f"warning: {w}" for w in a.warnings]
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines) + "\n"


def analyze_command(argv: list[str] | argparse.Namespace) -> int:
    """Entry point (an argument list, or the options the main CLI parsed); returns the exit status (0 ok, 2 usage or
    artifact error)."""
    from pypto_tune.tools.analysis.engine import analyze_runs
    from pypto_tune.tools.analysis.layout import find_run_dirs, locate
    from pypto_tune.tools.analysis.report import write_report

    if isinstance(argv, argparse.Namespace):
        args = argv
    else:
        try:
            args = _parser().parse_args(argv)
        except _UsageError as exc:
            print(f"pypto-tune analyze: {exc}", file=sys.stderr)
            return 2
    try:
        dirs = find_run_dirs(Path(args.dir))
        if not dirs:
            print(f"pypto-tune analyze: no PyPTO run folder (output_<timestamp>) found at {args.dir}; pass a run "
                  "folder, its output/ parent, or a workspace holding output/", file=sys.stderr)
            return 2
        picked = dirs[-1]
        note = (f"analysed the newest of {len(dirs)} runs: {picked}" if len(dirs) > 1 else f"analysed {picked}")
        a = analyze_runs([picked], run_mode=args.run_mode, outer_loops=args.outer_loops)
        report = None if args.no_report else write_report(a, locate(picked).report_path, args.lang)
    except PyptoTuneError as exc:
        print(f"pypto-tune analyze: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the report folder is read-only
        print(f"pypto-tune analyze: {exc}", file=sys.stderr)
        return 2
    if args.json:
        if len(dirs) > 1:
            print(note, file=sys.stderr)
        data = a.model_dump(mode="json")
        data["picked_run"] = str(picked)
        data["runs_found"] = len(dirs)
        data["report_path"] = str(report) if report else ""
        sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.write(summary_text(a, report, note))
    return 0


if __name__ == "__main__":
    raise SystemExit(analyze_command(sys.argv[1:]))
