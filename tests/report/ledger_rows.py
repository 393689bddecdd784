"""Write ledger rows the way the operations write them, for report scenarios too costly or too rare to run for real
(an NPU round that needed kept-state references, chips left behind, a regression flag, a person's confirmation).

Each method mirrors one operation's inserts (same tables, columns and JSON shapes; the module named in its docstring
is the one it copies), so the snapshot builder reads these rows exactly as it reads a live session's. Times are
synthetic; everything else — hashes, patches, knob changes — is computed with the server's own functions.
"""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pypto_tune.tools.session.ledger import Ledger
from functools import lru_cache

from pypto_tune.tools.session.recorder import patch_row
from pypto_tune.tools.operations.base import code_hash as _code_hash
from pypto_tune.tools.patching import hash_sources, set_runtime_debug
from pypto_tune.tools.snapshot import KnobChange


@lru_cache(maxsize=64)
def _hash_of(items: tuple[tuple[str, str], ...]) -> str:
    return _code_hash(dict(items))


def code_hash(sources: dict[str, str]) -> str:
    """The server's code hash (a libcst parse, ~0.4 s): the same few sources are hashed dozens of times here."""
    return _hash_of(tuple(sorted(sources.items())))

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = (ROOT / "fixtures" / "operators" / "softmax" / "softmax.py").read_text()
VEC = "softmax.py:softmax_kernel.set_vec_tile_shapes#1"


def with_vec_tile(sources: dict[str, str], tile: str) -> dict[str, str]:
    return {"softmax.py": sources["softmax.py"].replace("pypto.set_vec_tile_shapes(1, 4, 256)",
                                                        f"pypto.set_vec_tile_shapes({tile})")}


def with_tile_b(sources: dict[str, str], value: int) -> dict[str, str]:
    return {"softmax.py": sources["softmax.py"].replace("TILE_B = 4", f"TILE_B = {value}")}


def analysis(op_time: float, *, active_util: float, busy_us: list[float], theoretical_aiv: int = 48,
             aicpu_e2e: float | None = None) -> dict[str, Any]:
    """What collect_swimlane stores as a measurement's analysis (the keys the snapshot reads): NPU lists only the
    cores that ran tasks; the platform's AIV count comes from the core-usage rows (device properties)."""
    cores = [{"name": f"AIV_{25 + i}", "core_type": "AIV", "work_us": op_time, "busy_us": b,
              "wait_schedule_us": op_time - b, "utilization_pct": b / op_time * 100,
              "bubble_rate_pct": (op_time - b) / op_time * 100, "active": True} for i, b in enumerate(busy_us)]
    return {"run_dirs": [], "operator_time_us": op_time, "avg_core_utilization_pct": active_util / 2,
            "avg_bubble_rate_pct": 40.0, "load_balance_pct": 100.0, "active_core_utilization_pct": active_util,
            "active_bubble_rate_pct": 100 - active_util, "active_load_balance_pct": 95.0,
            "ratings": {"utilization": 2, "bubble": 2, "load_balance": 5, "overall": 3}, "cores": cores,
            "core_usage": {"rows": [{"core_type": "AIV", "theoretical_cores": theoretical_aiv}]},
            "aicpu_e2e_us": aicpu_e2e, "trace_copies": []}


class Writer:
    """One session's rows, appended in the order the operations append them."""

    def __init__(self, workspace: Path, *, run_mode: str = "npu", devices: list[str] | None = None,
                 repeats: int = 3, goal_speedup: float = 4.0, sid: str = "20261203-090000-abc123") -> None:
        self.ws = workspace
        self.ledger = Ledger.for_workspace(workspace)
        self.sid = sid
        self.run_mode = run_mode
        self.sources = {"softmax.py": SOFTMAX}
        self.kept = dict(self.sources)
        self.clock = datetime(2026, 12, 3, 9, 0, 0, tzinfo=timezone.utc)
        self.argv = ["python3", "softmax.py", "--run-mode", run_mode]
        self.ledger.insert(
            "sessions", id=sid, created_at=self.now(), workspace=str(workspace), operator="softmax",
            operator_files=["softmax.py"], test_command=self.argv, shell=False, run_mode=run_mode,
            goal_kind="speedup", goal_value=goal_speedup, timeout_s=300.0, device_ids=devices or ["0"],
            time_limit_h=12.0, repeats=repeats, original_sources=self.sources,
            original_hash=code_hash(self.sources), original_raw_hash=hash_sources(self.sources), config={})
        self.transition("state", None, "S1_SETUP", "session started with a goal (R1)")

    def now(self) -> str:
        self.clock += timedelta(seconds=5)
        return self.clock.isoformat(timespec="seconds")

    def transition(self, level: str, frm: str | None, to: str, reason: str) -> None:
        self.ledger.insert("transitions", session_id=self.sid, at=self.now(), level=level, from_value=frm,
                           to_value=to, reason=reason, summary={})

    # -- setup (tools/operations/setup.py) ----------------------------------------------------------------------
    def env_ok(self) -> None:
        for name in ("npu-smi info", "torch_npu device count", "import pypto"):
            self.ledger.insert("env_checks", session_id=self.sid, at=self.now(), batch=1, name=name, ok=True,
                               detail="ok")

    def correction(self, before: list[str], after: list[str]) -> None:
        self.ledger.insert("corrections", session_id=self.sid, at=self.now(), field="test_command",
                           before_value=before, after_value=after,
                           reason="corrected before the baseline precision passed")

    def question(self, text: str, last_record: int) -> int:
        return self.ledger.insert("questions", session_id=self.sid, at=self.now(), kind="baseline-retry",
                                  text=text, info={"last_record_id": last_record})

    def confirmation(self, question_id: int, detail: int, source: str | None) -> None:
        self.ledger.insert("confirmations", session_id=self.sid, at=self.now(), kind="baseline-retry",
                           detail=str(detail), source=source, question_id=question_id)

    def run(self, purpose: str, round_no: int | None, device: str | None, sources: dict[str, str], *,
            exit_code: int | None = 0, timed_out: bool = False, batch: str | None = None) -> int:
        """tools/operations/runs.py ``RunOps.run``: one ``runs`` row."""
        return self.ledger.insert(
            "runs", session_id=self.sid, at=self.now(), purpose=purpose, round=round_no, argv=self.argv,
            env={"TILE_FWK_DEVICE_ID": device or ""}, cwd="/tmp/exec", exit_code=exit_code, signal=None,
            timed_out=timed_out, cancelled=False, duration_s=8.0, started_epoch=0.0, output_head="",
            output_tail="", output_bytes=0, output_dirs=[], code_hash=code_hash(sources),
            raw_hash=hash_sources(sources), device_id=device, exec_hash="e" * 64, exec_dir="/tmp/exec",
            tampered=[], batch=batch)

    def precision(self, run_id: int, verdict: str, round_no: int | None, device: str | None,
                  sources: dict[str, str], key: str = "PRECISION: passed (max abs diff 0.000e+00)") -> int:
        """setup.py ``run_precision_check`` / search.py ``_trial``: one ``precision_records`` row."""
        rt = None if verdict == "passed" else ("timeout" if verdict == "timeout" else "runtime-error")
        return self.ledger.insert(
            "precision_records", session_id=self.sid, at=self.now(), run_id=run_id, command=self.argv,
            verdict=verdict, numerics_checked=self.run_mode == "npu", exit_code=0 if verdict == "passed" else 2,
            duration_s=8.0, key_output=key, reason="", code_hash=code_hash(sources), round=round_no,
            device_id=device, result_type=rt)

    def debug_on(self) -> None:
        after = set_runtime_debug(self.sources, True)
        self.ledger.insert("patches", **patch_row(self.sid, kind="debug-on", round_no=None, before=self.sources,
                                                   after=after, note="runtime debug enabled"))
        self.kept = dict(after)  # a patch outside a round changes the kept state directly (tools/session/state.py)

    # -- measurements (tools/operations/runs.py) ----------------------------------------------------------------
    def measure(self, purpose: str, round_no: int, sources: dict[str, str], samples: list[float], device: str,
                a: dict[str, Any], *, kernels: dict[str, list[float]] | None = None, batch: str | None = None,
                e2e: float | None = None, stage: str | None = None, prior_runs: list[int] | None = None) -> int:
        """``RunOps.measure`` + ``record_measurement``: one run per sample, then one ``measurements`` row.
        ``prior_runs``: runs of the same measurement taken earlier (an NPU round that measured again after
        kept-state references absorbs its first repeats)."""
        prior = list(prior_runs or [])
        run_ids = prior + [self.run(purpose, round_no, device, sources, batch=batch)
                           for _ in samples[len(prior):]]
        per_kernel = {k: {"time": v, "e2e": [x * 0.9 for x in v]} for k, v in (kernels or {}).items()}
        return self.ledger.insert(
            "measurements", session_id=self.sid, at=self.now(), round=round_no, code_hash=code_hash(sources),
            valid=True, invalid_reasons=[], operator_time_us=statistics.median(samples),
            e2e_us=e2e if e2e is not None else statistics.median(samples) * 0.9, samples=samples, analysis=a,
            archive="", run_ids=run_ids, stage=stage, per_kernel=per_kernel)

    # -- rounds (tools/operations/rounds.py, search.py) ---------------------------------------------------------
    def admission(self, path: str, change: KnobChange | None, *, round_no: int | None = None,
                  checked: list[str] | None = None, unchecked: list[str] | None = None) -> None:
        """base.py ``SessionContext.admit``: the ``admissions`` row (round None for a new round: it is opened afterwards)."""
        info = {"kind": "knob" if change else "structural",
                "change": change.model_dump(mode="json") if change else None, "knob_kind": "vec_tile",
                "catalog_ids": ["F-10"], "formatting_files": [], "checked": checked or [],
                "unchecked": unchecked or [], "structural_lines": []}
        self.ledger.insert("admissions", session_id=self.sid, at=self.now(), round=round_no, path=path,
                           verdict="knob" if change else "structural",
                           knob_id=change.knob_id if change else None, info=info)

    def open_round(self, n: int, stage: str, catalog_id: str, change: KnobChange, after: dict[str, str],
                   before_us: float, kind: str = "config", rationale: str = "", batch: str = "") -> None:
        """apply_tuning_patch's transaction (or the round + trial patch of _record_batch)."""
        with self.ledger.transaction() as tx:
            tx.insert("rounds", session_id=self.sid, number=n, opened_at=self.now(), stage=stage, outer_round=1,
                      kind=kind, catalog_id=catalog_id,
                      change=f"{change.knob_id}: {change.before!r} → {change.after!r}", rationale=rationale,
                      before_hash=code_hash(self.kept), before_raw_hash=hash_sources(self.kept), before_us=before_us)
            tx.insert("patches", **patch_row(self.sid, kind="trial" if kind == "trial" else "tuning", round_no=n,
                                              before=self.kept, after=after, note=rationale or batch,
                                              catalog_id=catalog_id, changes=[change]))

    def decide(self, n: int, decision: str, result_type: str, after_us: float | None, delta_pct: float | None,
               notes: str, after: dict[str, str], *, trial: bool = False) -> None:
        """record_round's ``close_round`` (a revert patch when not kept), or a candidate's rows in
        ``_record_batch`` (no revert: it ran on a private copy; the winner's bytes arrive by a trial-apply patch)."""
        with self.ledger.transaction() as tx:
            if trial and decision == "kept":
                tx.insert("patches", **patch_row(self.sid, kind="trial-apply", round_no=n, before=self.kept,
                                                  after=after, note="best candidate written and kept"))
            elif decision != "kept" and not trial:
                tx.insert("patches", **patch_row(self.sid, kind="revert", round_no=n, before=after,
                                                  after=self.kept, note=f"round {n} rolled back"))
            tx.insert("round_decisions", session_id=self.sid, number=n, at=self.now(), decision=decision,
                      result_type=result_type, after_us=after_us, delta_pct=delta_pct, error_output="",
                      notes=notes, restored_hash=code_hash(after if decision == "kept" else self.kept))
        if decision == "kept":
            self.kept = dict(after)

    def trial_row(self, batch: str, cand: dict[str, Any], n: int, outcome: str, time_us: float | None,
                  info: dict[str, Any]) -> None:
        self.ledger.insert("trials", session_id=self.sid, at=self.now(), batch=batch, candidate=cand, round=n,
                           outcome=outcome, operator_time_us=time_us, info=info)
