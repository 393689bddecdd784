"""Build the ``SessionSnapshot`` (the one view the board, report and ledger resource render) from derived state."""

from __future__ import annotations

import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.running.chips import chip_health
from pypto_tune.tools.snapshot import (
    AdmissionRecord,
    BatchRecord,
    ChecklistItem,
    Confirmation,
    CoreStat,
    Correction,
    DeviceEvent,
    EnvCheck,
    KernelFigures,
    FolderFigures,
    KnobChange,
    KnobSetting,
    Measurement,
    PrecisionRecord,
    Refusal,
    RoundRecord,
    SessionSnapshot,
    StageStat,
    StageTransition,
    TypeBalance,
)
from pypto_tune.tools.session.state import PERSON_SOURCES, SessionState, kept_samples_of
from pypto_tune.tools.rules.retry import CHANGE_PATCHES

# record_round writes "noise margin 2.31 %" into the decision's notes on the NPU (tools/operations/rounds.py).
_MARGIN = re.compile(r"noise margin (\d+(?:\.\d+)?) %")


def _kernels(raw: Any) -> list[KernelFigures]:
    out = []
    for label, figs in (raw or {}).items():
        times = [float(x) for x in (figs or {}).get("time", [])]
        e2es = [float(x) for x in (figs or {}).get("e2e", [])]
        if not times:
            continue
        out.append(KernelFigures(label=label, time_samples_us=times, e2e_samples_us=e2es,
                                 time_us=statistics.median(times), e2e_us=statistics.median(e2es) if e2es else None))
    return out


def _folders(a: dict[str, Any], traces: list[str]) -> list[FolderFigures]:
    """Each output folder of the analysed run with its own figures and the archived copy of its trace (the copy's
    name carries the folder's name: ``NN-<folder>-merged_swimlane.json.gz``)."""
    out = []
    for d in a.get("per_dir") or []:
        name = Path(str(d.get("run_dir", ""))).name
        copy = next((t for t in traces if name and Path(t).name.split("-", 1)[-1].startswith(name + "-")), "")
        out.append(FolderFigures(trace_path=copy or str(d.get("trace_path") or ""),
                                 operator_time_us=float(d.get("operator_time_us") or 0.0),
                                 e2e_us=float(d.get("e2e_us") or 0.0), task_count=int(d.get("task_count") or 0)))
    return out


def _balance(cores: list[CoreStat]) -> list[TypeBalance]:
    """Per core type, the busy time of its active cores: the numbers the load-balance percentages are made of."""
    from pypto_tune.tools.analysis.metrics import reference_load_balance

    out = []
    for t in ("AIC", "AIV"):
        listed = [c for c in cores if c.core_type == t]
        busy = [c.busy_us for c in listed if c.active]
        if not listed:
            continue
        b = TypeBalance(core_type=t, cores_listed=len(listed), cores_active=len(busy))
        if busy:
            b.busy_min_us, b.busy_max_us, b.busy_mean_us = min(busy), max(busy), statistics.fmean(busy)
        if len(busy) >= 2 and b.busy_mean_us:
            b.balance_pct = reference_load_balance(busy)  # the analysis's own formula, not clamped here
            b.cv = statistics.pstdev(busy) / b.busy_mean_us
        out.append(b)
    return out


def _leaf_ops(a: dict[str, Any]) -> dict[str, str]:
    return {str(x["leaf_hash"]): ", ".join(x.get("compute_ops") or []) for x in a.get("leaves") or []
            if x.get("leaf_hash") is not None and x.get("compute_ops")}


def _measurement(m: dict[str, Any], runs: dict[int, dict[str, Any]] | None = None, run_mode: str = "sim",
                 for_round: int | None = None) -> Measurement | None:
    if not m["valid"]:
        return None
    runs = runs or {}
    run_ids = [int(r) for r in (m.get("run_ids") or [])]
    mine = [runs[r] for r in run_ids if r in runs]
    a = m["analysis"] or {}
    cores = []
    for c in a.get("cores", []):
        try:
            cores.append(CoreStat.model_validate(c))
        except Exception:  # an analysis from an older schema: keep the measurement, drop the core detail
            pass
    traces = a.get("trace_copies") or a.get("trace_paths") or []
    return Measurement(
        id=int(m["id"]), round=int(m["round"]), at=m["at"], operator_time_us=float(m["operator_time_us"]),
        e2e_us=float(m["e2e_us"] or 0.0), samples_us=list(m["samples"]),
        avg_core_utilization_pct=float(a.get("avg_core_utilization_pct", 0.0)),
        avg_bubble_rate_pct=float(a.get("avg_bubble_rate_pct", 0.0)),
        load_balance_pct=float(a.get("load_balance_pct", 0.0)),
        active_core_utilization_pct=float(a.get("active_core_utilization_pct", 0.0)),
        active_bubble_rate_pct=float(a.get("active_bubble_rate_pct", 0.0)),
        active_load_balance_pct=float(a.get("active_load_balance_pct", 0.0)),
        ratings={k: int(v) for k, v in (a.get("ratings") or {}).items() if isinstance(v, (int, float))},
        cores=cores, output_dirs=list(a.get("run_dirs", [])), artifact_archive=m["archive"],
        trace_paths=[t for t in traces if Path(t).exists()], code_hash=m["code_hash"],
        stage=m.get("stage"), run_ids=run_ids,
        device_ids=[str(r["device_id"]) for r in mine if r.get("device_id") is not None] if run_mode == "npu" else [],
        batch=next((r["batch"] for r in mine if r.get("batch")), None), for_round=for_round,
        aicpu_e2e_us=a.get("aicpu_e2e_us"), platform_utilization_pct=gates.platform_utilization(a),
        per_kernel=_kernels(m.get("per_kernel")),
        active_ratings={k: int(v) for k, v in (a.get("active_ratings") or {}).items() if isinstance(v, (int, float))},
        task_count=a.get("task_count"), folders=_folders(a, list(a.get("trace_copies") or [])),
        balance=_balance(cores), leaf_ops=_leaf_ops(a),
    )


def _kept_pool(rows: dict[str, list[Any]], kept_hash: str, before_id: int) -> list[float]:
    """Every sample of the kept code recorded before measurement ``before_id``: what a decision compared with
    (``SessionState.kept_samples`` at that moment; kept-state references of the round itself included)."""
    return kept_samples_of(rows["measurements"], kept_hash, before_id)


def _flags(notes: str) -> list[str]:
    parts = [p.strip() for line in (notes or "").splitlines() for p in line.split("; ")]
    return [p for p in parts if p.startswith("FLAG:")]


def _when(at: str) -> datetime | None:
    try:
        return datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None


def _admission(a: dict[str, Any], correction: bool = False) -> AdmissionRecord:
    info = a["info"] or {}
    return AdmissionRecord(
        at=a["at"], path=a["path"], verdict=a["verdict"], knob_id=a["knob_id"],
        checked=[str(x) for x in info.get("checked", [])], unchecked=[str(x) for x in info.get("unchecked", [])],
        formatting_files=[str(x) for x in info.get("formatting_files", [])],
        structural_lines=[str(x) for x in info.get("structural_lines", [])], correction=correction,
        ran_with=list(info.get("ran_with", [])), shared_with=[str(x) for x in info.get("shared_with", [])])


def _admissions_by_round(rows: dict[str, list[Any]]) -> dict[int, list[AdmissionRecord]]:
    """Admission rows of a round's first change carry no round number (the round is opened after the change is
    admitted): each round takes the latest earlier unmatched admission of the same knob and value. Corrections
    carry the open round's number."""
    out: dict[int, list[AdmissionRecord]] = {}
    free = [a for a in rows["admissions"] if a["round"] is None]
    used: set[int] = set()
    for r in rows["rounds"]:
        n = int(r["number"])
        first = next((p for p in rows["patches"] if p["round"] == n and p["kind"] in CHANGE_PATCHES), None)
        if first is None:
            continue
        change = (first["knob_changes"] or [None])[0]
        opened = _when(r["opened_at"])
        match = None
        for a in free:
            if int(a["id"]) in used:
                continue
            at = _when(a["at"])
            if opened is not None and at is not None and at > opened:
                break
            info_change = (a["info"] or {}).get("change") or next(iter((a["info"] or {}).get("changes") or []),
                                                                  None)  # a linked pair: its first knob
            if change is None:
                ok = a["verdict"] == "structural"
            else:
                ok = (a["knob_id"] == change.get("knob_id") and info_change is not None
                      and info_change.get("after") == change.get("after"))
            if ok:
                match = a
        if match is not None:
            used.add(int(match["id"]))
            out.setdefault(n, []).append(_admission(match))
    for a in rows["admissions"]:
        if a["round"] is not None:
            out.setdefault(int(a["round"]), []).append(_admission(a, correction=True))
    return out


def _device_history(rows: dict[str, list[Any]], pool: list[str]) -> list[DeviceEvent]:
    """Every time the session left a chip behind (R5), as ``tools/running/chips.py`` replays the runs."""
    return [DeviceEvent(at=e.run["at"], run_id=int(e.run["id"]), purpose=e.run["purpose"], round=e.run["round"],
                        device_id=e.device_id, reason=e.reason, next_device=e.next_device)
            for e in chip_health(rows, pool).events
            if e.run["device_id"] is not None and e.next_device != e.device_id]


def _context_files(st: SessionState) -> dict[str, str]:
    """The workspace's other Python files as recorded at session start (they decide which names are problem
    constants, tools/patching/roles.py), from the blob store; {} when it cannot be read."""
    from pypto_tune.tools.code.codestate import BlobStore

    try:
        store = BlobStore(Path(st.session["workspace"]))
    except Exception:
        return {}
    out = {}
    for path, e in st.tree.items():
        if path.endswith(".py") and path not in st.kept_sources and e.link is None:
            try:
                out[path] = store.get(e.sha256).decode("utf-8", "surrogateescape")
            except Exception:
                continue
    return out


def _knob_settings(st: SessionState) -> list[KnobSetting]:
    """Every knob of the best kept state in source order, with its original value and whether it changed."""
    try:
        from pypto_tune.tools.patching import extract_knobs

        context = _context_files(st)
        original = {k.id: k for k in extract_knobs(dict(st.session["original_sources"]), context)}
        best = extract_knobs(st.kept_sources, context)
    except Exception:  # a source that no longer parses must not hide the rest of the report
        return []
    out = []
    for k in best:
        o = original.get(k.id)
        before = o.value if o is not None else None
        out.append(KnobSetting(id=k.id, file=k.file, line=k.line, kind=k.kind, value=k.value, original=before,
                               present=k.present, tunable=k.tunable, changed=_canonical(before) != _canonical(k.value)))
    return out


def _canonical(value: Any) -> Any:
    """A knob value compared by meaning of its JSON form (int keys and their string form are the same key)."""
    import orjson

    return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS))


def build_snapshot(st: SessionState) -> SessionSnapshot:
    s = st.session
    rows = st.rows
    run_mode = str(s["run_mode"])
    runs = {int(r["id"]): r for r in rows["runs"]}
    ordered = sorted(rows["measurements"], key=lambda m: int(m["id"]))
    measurements = []
    for i, m in enumerate(ordered):
        for_round = None
        if int(m["round"]) == -2:  # recorded just before the measurement of the round it served
            for_round = next((int(x["round"]) for x in ordered[i + 1:] if int(x["round"]) >= 1), None)
        x = _measurement(m, runs, run_mode, for_round)
        if x is not None:
            measurements.append(x)
    trials = {int(t["round"]): t for t in rows["trials"] if t["round"] is not None}
    admissions = _admissions_by_round(rows)

    rounds: list[RoundRecord] = []
    for r in st.rounds:
        n = int(r["number"])
        d = st.decisions.get(n)
        patches = [p for p in rows["patches"] if p["round"] == n and p["kind"] in CHANGE_PATCHES]
        precs = [p for p in rows["precision_records"] if p["round"] == n]
        changes = []
        for p in patches[-1:]:
            for c in p["knob_changes"]:
                changes.append(KnobChange.model_validate(c))
        trial = trials.get(n)
        decisive = next((m for m in reversed(ordered) if int(m["round"]) == n and m["valid"]
                         and (not patches or m["code_hash"] == patches[-1]["after_hash"])), None)
        samples = [float(x) for x in (decisive["samples"] or [])] if decisive else []
        devices = ([str(runs[int(i)]["device_id"]) for i in (decisive["run_ids"] or [])
                    if int(i) in runs and runs[int(i)]["device_id"] is not None]
                   if decisive is not None and run_mode == "npu" else [])
        notes = d["notes"] if d else ""
        margin, recomputed, kept_n = None, False, None
        if d is not None and decisive is not None and d["after_us"] is not None:
            pool = _kept_pool(rows, r["before_hash"], int(decisive["id"]))
            kept_n = len(pool) or None
            if run_mode == "sim":
                margin = 0.0
            else:
                found = _MARGIN.search(notes or "")
                if found:
                    margin = float(found.group(1))
                elif r["before_us"] and samples:
                    # batch trials do not record their margin: the same judgement on the same recorded samples
                    margin = tuning_loop.judge_measurement(float(r["before_us"]), samples, "npu", pool).margin_pct
                    recomputed = True
        rounds.append(RoundRecord(
            number=n, outer_round=int(r["outer_round"]), stage=r["stage"], kind=r["kind"],
            catalog_id=r["catalog_id"], change=r["change"], rationale=r["rationale"], knob_changes=changes,
            diff="\n".join(p["diff"] for p in patches), precision_verdict=precs[-1]["verdict"] if precs else None,
            before_us=r["before_us"], after_us=d["after_us"] if d else None, delta_pct=d["delta_pct"] if d else None,
            result_type=d["result_type"] if d else None, decision=d["decision"] if d else None,
            error_output=d["error_output"] if d else "", notes=d["notes"] if d else "", started_at=r["opened_at"],
            finished_at=d["at"] if d else "", before_hash=r["before_hash"],
            after_hash=patches[-1]["after_hash"] if patches else "",
            batch=trial["batch"] if trial else None,
            candidate_id=str((trial["candidate"] or {}).get("id") or "") or None if trial else None,
            winner=bool(trial and d and d["decision"] == "kept"), samples_us=samples, device_ids=devices,
            kept_samples_n=kept_n, noise_margin_pct=margin, margin_recomputed=recomputed, flags=_flags(notes),
            admissions=admissions.get(n, []),
        ))

    batches: list[BatchRecord] = []
    for rr in rounds:
        if rr.batch is None:
            continue
        b = next((x for x in batches if x.batch == rr.batch), None)
        if b is None:
            b = BatchRecord(batch=rr.batch, at=rr.started_at, stage=rr.stage, rounds=[], kept_before_us=rr.before_us)
            batches.append(b)
        b.rounds.append(rr.number)
        if rr.winner:
            b.winner_round, b.winner_us = rr.number, rr.after_us
            if b.kept_before_us is not None and rr.after_us is not None:
                b.gain_us = b.kept_before_us - rr.after_us

    stages: list[StageStat] = []
    entered = {t["to_value"]: t for t in rows["transitions"] if t["level"] == "stage"}
    left = {t["from_value"]: t for t in rows["transitions"] if t["level"] == "stage" and t["from_value"]}
    for sdef in tuning_loop.STAGES + [tuning_loop.ALGORITHM_STAGE]:
        if sdef.name == "ALGORITHM" and "ALGORITHM" not in entered:
            continue
        c = st.counters.get(sdef.name)
        if sdef.name == st.stage and not st.finished:
            status = "active"
        elif sdef.name in entered:
            status = "done"
        elif st.finished:
            status = "skipped"
        else:
            status = "pending"
        exit_reason = left[sdef.name]["reason"] if sdef.name in left else (
            st.finish_reason or "" if sdef.name == st.stage and st.finished else "")
        stages.append(StageStat(
            stage=sdef.name, status=status, rounds=c.rounds if c else 0,
            consecutive_no_gain=c.consecutive_no_gain if c else 0, no_gain_threshold=sdef.no_gain_threshold,
            failures=c.failures if c else 0, entered_at=entered[sdef.name]["at"] if sdef.name in entered else "",
            left_at=left[sdef.name]["at"] if sdef.name in left else "", exit_reason=exit_reason,
        ))

    checklist: list[ChecklistItem] = []
    try:
        from pypto_tune.tools.analysis import load_catalog

        for item in load_catalog().items:
            if item.stage not in ("frontend", "swimlane", "incore"):
                continue
            mark = st.checklist.get((item.stage, item.id))
            checklist.append(ChecklistItem(stage_group=item.stage, catalog_id=item.id, title=item.title_en,
                                           status=mark["status"] if mark else "untried",
                                           reason=mark["reason"] if mark else ""))
    except Exception:  # the catalogue is package data; a broken install must not hide the ledger
        pass

    final_knobs = _knob_settings(st)

    debug_rows = [p for p in rows["patches"] if p["kind"] in ("debug-on", "debug-off", "debug-restore")]
    restored = bool(debug_rows) and debug_rows[-1]["kind"] in ("debug-off", "debug-restore")
    finished_at = next((t["at"] for t in reversed(rows["transitions"])
                        if t["level"] == "state" and t["to_value"] in ("S5_REPORT",)), None)
    data_paths = sorted({m["archive"] for m in rows["measurements"] if m["archive"]})
    data_paths += [a["report_path"] for a in rows["analyses"]]
    pool = [str(d) for d in s["device_ids"]]
    per_device: dict[str, int] = {}
    if run_mode == "npu":
        for r in rows["runs"]:
            if r["device_id"] is not None:
                per_device[str(r["device_id"])] = per_device.get(str(r["device_id"]), 0) + 1
    questions = {int(q["id"]): q for q in rows["questions"]}
    confirmations = []
    for c in rows["confirmations"]:
        q = questions.get(int(c["question_id"])) if c.get("question_id") is not None else None
        confirmations.append(Confirmation(at=c["at"], kind=c["kind"], source=c.get("source"),
                                          by_person=c.get("source") in PERSON_SOURCES,
                                          question=q["text"] if q else "", question_at=q["at"] if q else ""))
    sandbox_name, sandbox_note = _sandbox(st)
    return SessionSnapshot(
        sandbox=sandbox_name, sandbox_note=sandbox_note,
        session_id=st.id, operator=s["operator"], workspace=s["workspace"], operator_files=list(s["operator_files"]),
        test_command=list(s["test_command"]), run_mode=s["run_mode"], goal_kind=s["goal_kind"],
        goal_value=float(s["goal_value"]), baseline_us=st.baseline_us, target_us=st.target_us, best_us=st.kept_us,
        best_round=st.best_round, started_at=s["created_at"], finished_at=finished_at,
        time_limit_h=float(s["time_limit_h"]), device_ids=list(s["device_ids"]), repeats=int(s["repeats"]),
        state=st.level1, stage=st.stage, outer_round=st.outer_round, step=gates.round_phase(st),
        finish_reason=st.finish_reason,
        env_checks=[EnvCheck(name=r["name"], ok=bool(r["ok"]), detail=r["detail"], at=r["at"])
                    for r in rows["env_checks"]],
        precision_records=[PrecisionRecord(
            id=int(p["id"]), at=p["at"], command=list(p["command"]), verdict=p["verdict"],
            numerics_checked=bool(p["numerics_checked"]), exit_code=p["exit_code"], duration_s=float(p["duration_s"]),
            key_output=p["key_output"], code_hash=p["code_hash"], round=p["round"], device_id=p["device_id"],
        ) for p in rows["precision_records"]],
        measurements=measurements, rounds=rounds, stages=stages, checklist=checklist,
        transitions=[StageTransition(at=t["at"], from_stage=t["from_value"] or "", to_stage=t["to_value"],
                                     reason=t["reason"]) for t in rows["transitions"]],
        refusals=[Refusal(at=r["at"], tool=r["tool"], rule=r["rule"], message=r["message"])
                  for r in rows["refusals"]],
        debug_restored=restored, debug_restored_at=debug_rows[-1]["at"] if restored else None,
        original_sources=dict(s["original_sources"]), best_sources=dict(st.kept_sources),
        final_knobs=final_knobs, data_paths=data_paths, kept_samples_us=list(st.kept_samples), batches=batches,
        device_events=_device_history(rows, pool) if run_mode == "npu" and pool else [],
        current_device=st.device if run_mode == "npu" else None, runs_per_device=per_device,
        corrections=[Correction(at=c["at"], field=c["field"], before=c["before_value"], after=c["after_value"],
                                reason=c["reason"]) for c in rows["corrections"]],
        confirmations=confirmations,
        pending_question=st.pending_question["text"] if st.pending_question is not None else None,
    )


def _sandbox(st: SessionState) -> tuple[str | None, str]:
    """The sandbox the session's runs executed in: ``none`` (and what was missing) if any recorded world was
    unsandboxed, else the tool; None for sessions recorded before worlds were (tools/running/recorded_env.py)."""
    from pypto_tune.tools.running.recorded_env import CONFIG_KEY

    worlds = [(st.session["config"] or {}).get(CONFIG_KEY)]
    worlds += [c["after_value"] for c in st.rows.get("corrections", []) if c["field"] == "environment"]
    worlds = [w for w in worlds if isinstance(w, dict)]
    if not worlds:
        return None, ""
    bare = [w for w in worlds if w.get("sandbox") == "none"]
    if bare:
        return "none", str(bare[-1].get("sandbox_note", ""))
    return str(worlds[-1].get("sandbox", "")), ""
