"""Build the ``SessionSnapshot`` (the one view the board, report and ledger resource render) from derived state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pypto_tune.tools import gates, rules
from pypto_tune.tools.snapshot import (
    ChecklistItem,
    CoreStat,
    EnvCheck,
    KnobChange,
    Measurement,
    PrecisionRecord,
    Refusal,
    RoundRecord,
    SessionSnapshot,
    StageStat,
    StageTransition,
)
from pypto_tune.tools.state import SessionState


def _measurement(m: dict[str, Any]) -> Measurement | None:
    if not m["valid"]:
        return None
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
    )


def build_snapshot(st: SessionState) -> SessionSnapshot:
    s = st.session
    rows = st.rows
    measurements = [x for x in (_measurement(m) for m in rows["measurements"]) if x is not None]
    by_round_meas: dict[int, dict[str, Any]] = {}
    for m in rows["measurements"]:
        by_round_meas[int(m["round"])] = m

    rounds: list[RoundRecord] = []
    for r in st.rounds:
        n = int(r["number"])
        d = st.decisions.get(n)
        patches = [p for p in rows["patches"] if p["round"] == n and p["kind"] in
                   ("tuning", "correction", "manual-adopt")]
        precs = [p for p in rows["precision_records"] if p["round"] == n]
        changes = []
        for p in patches[-1:]:
            for c in p["knob_changes"]:
                changes.append(KnobChange.model_validate(c))
        rounds.append(RoundRecord(
            number=n, outer_round=int(r["outer_round"]), stage=r["stage"], kind=r["kind"],
            catalog_id=r["catalog_id"], change=r["change"], rationale=r["rationale"], knob_changes=changes,
            diff="\n".join(p["diff"] for p in patches), precision_verdict=precs[-1]["verdict"] if precs else None,
            before_us=r["before_us"], after_us=d["after_us"] if d else None, delta_pct=d["delta_pct"] if d else None,
            result_type=d["result_type"] if d else None, decision=d["decision"] if d else None,
            error_output=d["error_output"] if d else "", notes=d["notes"] if d else "", started_at=r["opened_at"],
            finished_at=d["at"] if d else "", before_hash=r["before_hash"],
            after_hash=patches[-1]["after_hash"] if patches else "",
        ))

    stages: list[StageStat] = []
    entered = {t["to_value"]: t for t in rows["transitions"] if t["level"] == "stage"}
    left = {t["from_value"]: t for t in rows["transitions"] if t["level"] == "stage" and t["from_value"]}
    for sdef in rules.STAGES + [rules.ALGORITHM_STAGE]:
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

    final_knobs: list[dict[str, Any]] = []
    try:
        from pypto_tune.tools.patching import extract_knobs

        final_knobs = [{"id": k.id, "file": k.file, "line": k.line, "value": k.value}
                       for k in extract_knobs(st.kept_sources)]
    except Exception:
        pass

    debug_rows = [p for p in rows["patches"] if p["kind"] in ("debug-on", "debug-off", "debug-restore")]
    restored = bool(debug_rows) and debug_rows[-1]["kind"] in ("debug-off", "debug-restore")
    finished_at = next((t["at"] for t in reversed(rows["transitions"])
                        if t["level"] == "state" and t["to_value"] in ("S5_REPORT",)), None)
    data_paths = sorted({m["archive"] for m in rows["measurements"] if m["archive"]})
    data_paths += [a["report_path"] for a in rows["analyses"]]
    return SessionSnapshot(
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
        final_knobs=final_knobs, data_paths=data_paths,
    )
