"""Runs and their numbers: executing the test command, collecting swim lanes, analysing them."""

from __future__ import annotations

import gzip
import logging
import shutil
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools import gates
from pypto_tune.tools.analysis import analyze_runs, find_run_dirs, validate_run, write_report
from pypto_tune.tools.artifacts import archive_run_dirs
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.ledger import LEDGER_DIR, now_iso
from pypto_tune.tools.patching import (
    hash_sources,
)
from pypto_tune.tools.results import (
    AnalyzeResult,
    CollectResult,
    SuggestionOut,
)
from pypto_tune.tools.runner import RunResult, run_command
from pypto_tune.tools.state import SessionState
from pypto_tune.tools.workspace import inside

from pypto_tune.tools.operations.base import (
    OperationsBase, Progress, _Handle, code_hash,
)


log = logging.getLogger("pypto_tune.service")


class RunOps(OperationsBase):
    """_run, collect_swimlane, analyze_bubbles."""

    async def _run(self, h: _Handle, st: SessionState, *, purpose: str, round_no: int | None,
                   device_id: str | None, sources: dict[str, str], progress: Progress) -> tuple[RunResult, int,
                                                                                               list[Path]]:
        env = self._child_env(st, device_id)
        argv = list(st.session["test_command"])
        result = await run_command(argv, cwd=h.workspace, env=env, timeout_s=float(st.session["timeout_s"]),
                                   on_progress=progress)
        # a folder another run of this session already claimed is never ours, whatever its timestamp says
        claimed = {d for r in h.ledger.rows("runs", st.id) for d in r["output_dirs"]}
        dirs = [d for d in find_run_dirs(h.workspace, created_after=result.started_at) if str(d) not in claimed]
        run_id = h.ledger.insert(
            "runs", session_id=st.id, at=now_iso(), purpose=purpose, round=round_no, argv=argv,
            env={k: v for k, v in env.items()}, cwd=str(h.workspace), exit_code=result.exit_code,
            signal=result.signal, timed_out=result.timed_out, cancelled=result.cancelled,
            duration_s=result.duration_s, started_epoch=result.started_at, output_head=result.output_head,
            output_tail=result.output_tail, output_bytes=result.output_bytes,
            output_dirs=[str(d) for d in dirs], code_hash=code_hash(sources), raw_hash=hash_sources(sources),
            device_id=device_id,
        )
        return result, run_id, dirs

    async def collect_swimlane(self, session_id: str, *, progress: Progress = None) -> CollectResult:
        """Run the test with runtime_debug_mode 1, parse the new output folders and record a measurement."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "collect_swimlane")
        h.busy = "collect_swimlane"
        try:
            if st.open_round is not None:
                round_no, purpose = st.open_round.number, "measure"
            elif st.level1 == "S2_COLLECT":
                round_no, purpose = 0, "baseline"
            else:
                round_no, purpose = -1, "stage-baseline"
            reps = int(st.session["repeats"])
            samples: list[float] = []
            e2es: list[float] = []
            run_ids: list[int] = []
            all_dirs: list[Path] = []
            invalid: list[str] = []
            analysis_json: dict[str, Any] = {}
            for i in range(reps):
                async def rep_progress(elapsed: float, line: str, i: int = i) -> None:
                    if progress:
                        await progress(elapsed, f"repeat {i + 1}/{reps}: {line}")
                result, run_id, dirs = await self._run(h, st, purpose=purpose, round_no=round_no,
                                                       device_id=self._device_for(st), sources=st.expected_sources,
                                                       progress=rep_progress)
                run_ids.append(run_id)
                if result.timed_out or result.exit_code != 0:
                    invalid.append(f"repeat {i + 1}: the test command failed (exit {result.exit_code}, timeout "
                                   f"{result.timed_out}): {result.output_tail[-400:]}")
                    break
                if not dirs:
                    invalid.append(f"repeat {i + 1}: no output folder was created under {h.workspace / 'output'}")
                    break
                reasons = [r for d in dirs for r in validate_run(d, st.run_mode)]
                if reasons:
                    invalid.extend(f"repeat {i + 1}: {r}" for r in reasons)
                    all_dirs.extend(dirs)
                    break
                analysis = analyze_runs(dirs, run_mode=st.run_mode, source_root=h.workspace)
                samples.append(float(analysis.operator_time_us))
                e2es.append(float(analysis.e2e_us))
                all_dirs.extend(dirs)
                analysis_json = analysis.model_dump(mode="json")
            valid = not invalid and bool(samples)
            art_dir = h.workspace / LEDGER_DIR / "artifacts" / st.id
            label = f"round{round_no}" if round_no >= 0 else f"{(st.stage or 'stage').lower()}-entry"
            archive = ""
            traces: list[str] = []
            if all_dirs:
                stamp = datetime.now().strftime("%H%M%S%f")
                archive = str(archive_run_dirs(all_dirs, art_dir / f"{label}-{stamp}.tar.gz"))
                traces = _keep_traces(all_dirs, art_dir / "traces" / f"{label}-{stamp}")
            analysis_json["trace_copies"] = traces
            op_time = statistics.median(samples) if valid else None
            e2e = statistics.median(e2es) if valid else None
            mid = h.ledger.insert(
                "measurements", session_id=st.id, at=now_iso(), round=round_no, code_hash=st.current_hash,
                valid=valid, invalid_reasons=invalid, operator_time_us=op_time, e2e_us=e2e, samples=samples,
                analysis=analysis_json, archive=archive, run_ids=run_ids, stage=st.stage,
            )
            st2 = self._state(h, session_id)
            if not valid:
                msg = ("the measurement is INVALID and was not used: " + "; ".join(invalid)
                       + (" — in SIM keep stitch_function_max_num ≥ the number of loop iterations (domain B.9.3)"
                          if st.run_mode == "sim" else ""))
                if st.open_round is None:
                    raise self._refuse(h, st.id, "collect_swimlane", GateRefusal(
                        "measure-first", msg, allowed=gates.allowed_actions(st2),
                        hint="fix the cause (the source was not changed by this call) and collect again"))
            else:
                msg = f"operator time {op_time:.3f} µs (median of {len(samples)}; E2E {e2e:.3f} µs)"
                if purpose == "baseline":
                    self._transition(h, st2, "state", "S3_ANALYZE", "baseline collected (S2)")
                    st2 = self._state(h, session_id)
                    msg += f"; baseline set, target {st2.target_us:.3f} µs"
            return CollectResult(
                **self._base(st2, msg), output_dirs=[str(d) for d in all_dirs],
                artifacts=[a for a in [archive] if a] + traces, operator_time_us=op_time, e2e_us=e2e,
                samples_us=samples, valid=valid, invalid_reasons=invalid, measurement_id=mid, round=round_no,
                target_us=st2.target_us, baseline_us=st2.baseline_us,
            )
        finally:
            h.busy = None

    def analyze_bubbles(self, session_id: str | None = None, *, output_dir: str | None = None,
                        lang: str = "zh", outer_loops: int | None = None) -> AnalyzeResult:
        """Analyse the latest valid measurement of the session (or any output folder, without a session)."""
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be 'zh' or 'en', got {lang!r}", hint="zh is the default")
        if session_id is None:
            if not output_dir:
                raise InputError("give session_id, or output_dir to analyse a folder without a session",
                                 hint="e.g. output_dir='/path/to/output/output_2026...'")
            base = Path(output_dir).expanduser()
            if not base.is_absolute() and self.default_workspace:
                base = self.default_workspace / base
            base = base.resolve()
            if self.default_workspace is None:
                # Without a workspace there is no boundary to check against, and the analysis writes a report
                # file next to the run: refuse rather than write anywhere on the machine.
                raise InputError("analyze_bubbles(output_dir=...) needs a server started with --workspace DIR",
                                 hint="restart the server with --workspace, or run `pypto-tune analyze DIR`")
            inside(self.default_workspace, base, what="output_dir")
            dirs = find_run_dirs(base)
            if not dirs:
                raise InputError(f"no PyPTO run folder (output_<timestamp>) found at {base}",
                                 hint="pass a run folder, its output/ parent, or a workspace holding output/")
            picked = [dirs[-1]]
            analysis = analyze_runs(picked, outer_loops=outer_loops)
            report = write_report(analysis, _report_dir(picked[0]) / "performance_analysis_report.md", lang)
            note = f"analysed the newest run {picked[0].name}" + (f" of {len(dirs)} found" if len(dirs) > 1 else "")
            return _analysis_result(analysis, report, {"session_id": None, "message": note, "next_actions": []})

        h = self._find(session_id)
        st = self._state(h, session_id)
        self._gate(h, st, "analyze_bubbles", mutating=False)
        m = st.last_valid_measurement()
        if m is None:
            raise self._refuse(h, st.id, "analyze_bubbles", GateRefusal(
                "sequence", "there is no valid measurement to analyse yet", allowed=gates.allowed_actions(st),
                hint="collect_swimlane first"))
        dirs = [Path(d) for d in m["analysis"].get("run_dirs", [])]
        missing = [d for d in dirs if not d.exists()]
        if missing:
            raise InputError(f"the run folders of measurement {m['id']} are gone: {missing[0]}",
                             hint=f"the compressed copy is {m['archive']}; collect_swimlane again for fresh data")
        analysis = analyze_runs(dirs, run_mode=st.run_mode, outer_loops=outer_loops, source_root=h.workspace)
        report = write_report(analysis, _report_dir(dirs[0]) / "performance_analysis_report.md", lang)
        h.ledger.insert("analyses", session_id=st.id, at=now_iso(), measurement_id=m["id"], stage=st.stage,
                        report_path=str(report),
                        suggestions=[s.model_dump(mode="json") for s in analysis.suggestions])
        msg = f"analysed measurement {m['id']} (round {m['round']})"
        st2 = self._state(h, session_id)
        if st2.level1 == "S3_ANALYZE":
            h.lock.acquire()
            self._transition(h, st2, "state", "S4_TUNE", "baseline analysed (S3)")
            st2 = self._state(h, session_id)
            self._transition(h, st2, "stage", "FRONTEND", "tuning starts with the frontend stage")
            st2 = self._state(h, session_id)
            msg += "; tuning starts: stage FRONTEND"
        return _analysis_result(analysis, report, self._base(st2, msg))



def _report_dir(run_dir: Path) -> Path:
    sim = run_dir / "CostModelSimulationOutput"
    return sim if sim.is_dir() else run_dir


def _keep_traces(dirs: list[Path], dest: Path) -> list[str]:
    """Keep a gzip copy of each run's merged_swimlane.json so reports can draw lanes after output/ is cleaned."""
    out = []
    dest.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(dirs):
        for cand in (d / "CostModelSimulationOutput" / "merged_swimlane.json", d / "merged_swimlane.json"):
            if cand.is_file():
                target = dest / f"{i:02d}-{d.name}-merged_swimlane.json.gz"
                with cand.open("rb") as src, gzip.open(target, "wb", compresslevel=5) as dst:
                    shutil.copyfileobj(src, dst)
                out.append(str(target))
                break
    return out


def _analysis_result(analysis: Any, report: Path, base: dict[str, Any]) -> AnalyzeResult:
    a = analysis
    details = {}
    for key in ("leaves", "core_usage", "crosscheck", "aiv_chains", "per_dir", "task_count", "invalid_reasons"):
        if hasattr(a, key):
            val = getattr(a, key)
            details[key] = val.model_dump(mode="json") if hasattr(val, "model_dump") else (
                [v.model_dump(mode="json") if hasattr(v, "model_dump") else v for v in val]
                if isinstance(val, list) else val)
    return AnalyzeResult(
        **base, output_dirs=list(a.run_dirs), operator_time_us=a.operator_time_us, e2e_us=a.e2e_us,
        avg_core_utilization=a.avg_core_utilization_pct, avg_bubble_rate=a.avg_bubble_rate_pct,
        load_balance=a.load_balance_pct, active_core_utilization=a.active_core_utilization_pct,
        active_bubble_rate=a.active_bubble_rate_pct, active_load_balance=a.active_load_balance_pct,
        cores=list(a.cores), ratings=dict(a.ratings),
        bottlenecks=[b.model_dump(mode="json") if hasattr(b, "model_dump") else b for b in a.bottlenecks],
        suggestions=[SuggestionOut(catalog_id=s.catalog_id, stage=s.stage, priority=str(getattr(s, "priority", "")),
                                   reason=s.reason, evidence=dict(getattr(s, "evidence", {}) or {}))
                     for s in a.suggestions],
        warnings=list(getattr(a, "warnings", [])), report_path=str(report), details=details,
    )
