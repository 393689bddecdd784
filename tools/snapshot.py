"""One read-only view of a session, built from the ledger.

The status board, the final report and the ``ledger`` resource all render this model, so they can never disagree
about a number. ``tools/session/ledger.py`` builds it (``Ledger.snapshot(session_id)``); nothing here touches SQLite.
All times are µs unless the field name says otherwise; percentages are 0–100.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

RunMode = Literal["sim", "npu"]
Verdict = Literal["passed", "failed", "timeout", "error"]
Decision = Literal["kept", "reverted", "failed"]
# Result types of domain D.3's round table.
# "not-chosen": a candidate of a run_candidates batch that gained, but another candidate of the batch gained more.
ResultType = Literal[
    "baseline", "gain", "no-gain", "regression", "compile-failure", "runtime-error", "precision-failure", "timeout",
    "abandoned", "not-chosen",
]
ChecklistStatus = Literal["untried", "tried", "failed", "not-applicable"]


class EnvCheck(BaseModel):
    name: str
    ok: bool
    detail: str = ""
    at: str = ""


class PrecisionRecord(BaseModel):
    id: int
    at: str  # ISO-8601 local time with offset
    command: list[str]
    verdict: Verdict
    numerics_checked: bool  # False in SIM: outputs are not computed, only compile + simulate is shown
    exit_code: int | None
    duration_s: float
    key_output: str
    code_hash: str
    round: int | None = None  # None for the baseline / manual checks
    device_id: str | None = None


class CoreStat(BaseModel):
    name: str  # e.g. "AIV_25"
    core_type: str  # "AIC" / "AIV"
    work_us: float
    busy_us: float
    wait_schedule_us: float
    utilization_pct: float
    bubble_rate_pct: float
    active: bool  # ran at least one real task


class KernelFigures(BaseModel):
    """One kernel of a test that runs several (issue #11): its own times beside the summed session metric."""

    label: str  # jit name, "#n" for its n-th call, "@file" when two files define the same name
    time_samples_us: list[float] = Field(default_factory=list)  # max_work_time of its folder, one per run
    e2e_samples_us: list[float] = Field(default_factory=list)  # writer's AICore end-to-end time, one per run
    time_us: float  # median of time_samples_us
    e2e_us: float | None = None  # median of e2e_samples_us


class FolderFigures(BaseModel):
    """One output folder of the measurement's analysed run (one kernel call): its own figures (B.10)."""

    trace_path: str = ""  # the archived copy of its merged_swimlane.json ("" when none was kept)
    operator_time_us: float  # its max_work_time: last AIC/AIV task end − T0 (first task start, any lane)
    e2e_us: float  # its AICore end-to-end time: last AIC/AIV task end − first AIC/AIV task start
    task_count: int  # real tasks of its trace, every lane (AIC, AIV, HUB), fake tasks excluded


class TypeBalance(BaseModel):
    """Busy time of one core type's active cores: the figures behind the load-balance percentages (B.2, E.2)."""

    core_type: str  # AIC / AIV
    cores_listed: int  # lanes the log lists (SIM lists idle cores too)
    cores_active: int  # cores that ran at least one real task
    busy_min_us: float | None = None
    busy_mean_us: float | None = None
    busy_max_us: float | None = None
    cv: float | None = None  # coefficient of variation: population σ ÷ mean of busy time (None below 2 cores)
    balance_pct: float | None = None  # (1 − cv)·100, not clamped: negative when cv > 1


class Measurement(BaseModel):
    id: int
    round: int  # 0 = baseline, -1 = stage-entry collection, -2 = kept-state reference samples of an NPU round
    at: str
    operator_time_us: float  # fixed session metric: sum over the run's output folders of max_work_time (B.10)
    e2e_us: float  # writer's AICore end-to-end time, summed the same way
    samples_us: list[float] = Field(default_factory=list)  # one per repeat; operator_time_us is their median
    avg_core_utilization_pct: float  # reference formula (idle cores count as 0)
    avg_bubble_rate_pct: float  # reference formula
    load_balance_pct: float  # reference formula (AIC only, may be negative)
    active_core_utilization_pct: float  # corrected: active cores only (domain E.2)
    active_bubble_rate_pct: float
    active_load_balance_pct: float  # corrected: over active cores of each type, bounded 0..100
    ratings: dict[str, int] = Field(default_factory=dict)  # utilization / bubble / load_balance / overall stars
    cores: list[CoreStat] = Field(default_factory=list)
    output_dirs: list[str] = Field(default_factory=list)
    artifact_archive: str = ""  # path of the compressed copy under WORKSPACE/.pypto-tune/
    trace_paths: list[str] = Field(default_factory=list)  # merged_swimlane.json files (plain or .gz), in run order
    code_hash: str = ""
    stage: str | None = None
    run_ids: list[int] = Field(default_factory=list)  # the runs behind the samples (ledger table runs)
    device_ids: list[str] = Field(default_factory=list)  # chip of each of those runs (NPU; empty in SIM)
    batch: str | None = None  # run_candidates batch the runs belonged to
    for_round: int | None = None  # round -2: the round whose keep/revert decision these kept-state samples served
    aicpu_e2e_us: float | None = None  # AICPU-side end-to-end time of the analysed run (NPU only, A.5/B.10)
    platform_utilization_pct: float | None = None  # busy time over the platform's cores of the used types (gates)
    per_kernel: list[KernelFigures] = Field(default_factory=list)
    active_ratings: dict[str, int] = Field(default_factory=dict)  # the same star table on the active-core figures
    task_count: int | None = None  # real tasks of the analysed run, every folder and lane (fake tasks excluded)
    folders: list[FolderFigures] = Field(default_factory=list)  # per output folder of the analysed run
    balance: list[TypeBalance] = Field(default_factory=list)  # per core type (AIC, AIV)
    leaf_ops: dict[str, str] = Field(default_factory=dict)  # leafHash → its compute ops ("SUB, EXP"); swim-lane colours


class KnobChange(BaseModel):
    knob_id: str
    file: str
    line: int
    before: Any
    after: Any


class AdmissionRecord(BaseModel):
    """How the server accounted for a change before writing or running it (ledger table ``admissions``)."""

    at: str
    path: str  # knob / diff / candidate / drift: which call proposed the change
    verdict: str  # knob (exactly one knob changed) / structural (a declared algorithm-level change)
    knob_id: str | None = None
    checked: list[str] = Field(default_factory=list)  # effective values checked against the legal ranges
    unchecked: list[str] = Field(default_factory=list)  # values the server could not evaluate (passed, recorded)
    formatting_files: list[str] = Field(default_factory=list)
    structural_lines: list[str] = Field(default_factory=list)
    correction: bool = False  # the round's one allowed correction (R11)
    # the run-time probe's view of the changed site (issue #17): what it ran with, who else runs it
    ran_with: list[Any] = Field(default_factory=list)
    shared_with: list[str] = Field(default_factory=list)


class RoundRecord(BaseModel):
    number: int  # 1..n; the baseline is not a round
    outer_round: int
    stage: str  # FRONTEND / SWIMLANE_1 / INCORE_1 / ... / ALGORITHM / MANUAL
    kind: Literal["config", "algorithm", "manual", "trial"] = "config"  # trial: a candidate of a run_candidates batch
    catalog_id: str
    change: str  # one-line human description
    rationale: str = ""
    knob_changes: list[KnobChange] = Field(default_factory=list)
    diff: str = ""
    precision_verdict: Verdict | None = None
    before_us: float | None = None  # time of the last kept state it was compared with
    after_us: float | None = None
    delta_pct: float | None = None  # (after - before) / before * 100; negative is faster
    result_type: ResultType | None = None
    decision: Decision | None = None  # None while the round is open
    error_output: str = ""  # key error output for failed rounds
    notes: str = ""
    started_at: str = ""
    finished_at: str = ""
    before_hash: str = ""
    after_hash: str = ""
    batch: str | None = None  # run_candidates batch id (kind "trial")
    candidate_id: str | None = None
    winner: bool = False  # the batch's best candidate, written to the workspace and kept
    samples_us: list[float] = Field(default_factory=list)  # the samples its keep/revert decision was made from
    device_ids: list[str] = Field(default_factory=list)  # chips of the runs behind those samples
    kept_samples_n: int | None = None  # samples of the kept state the decision compared with (when known)
    noise_margin_pct: float | None = None  # NPU: the margin the decision used; SIM: 0 (deterministic)
    margin_recomputed: bool = False  # True: not in the record, recomputed from the recorded samples (batch trials)
    flags: list[str] = Field(default_factory=list)  # regression flags the decision carried ("FLAG: ...")
    admissions: list[AdmissionRecord] = Field(default_factory=list)  # the change, then its correction if any


class BatchRecord(BaseModel):
    """One run_candidates call: its candidates are rounds of kind "trial"; at most one is kept."""

    batch: str
    at: str
    stage: str
    rounds: list[int]
    winner_round: int | None = None
    kept_before_us: float | None = None  # kept time the candidates were judged against
    winner_us: float | None = None
    gain_us: float = 0.0  # kept_before_us − winner_us (0 without a winner)


class DeviceEvent(BaseModel):
    """A chip left behind (R5, ``tools/running/chips.py``): it failed a baseline precision run, a run hung until the timeout,
    or a run failed there (hang, device error) whose same code then passed on another chip."""

    at: str
    run_id: int
    purpose: str
    round: int | None = None
    device_id: str
    reason: Literal["baseline-failed", "timed-out", "chip-failed"]
    next_device: str


class Correction(BaseModel):
    at: str
    field: str
    before: Any
    after: Any
    reason: str


class Confirmation(BaseModel):
    """A person's answer to a question the server asked (R5); ``by_person`` False: recorded, never counted."""

    at: str
    kind: str  # baseline-retry / declined
    source: str | None = None  # elicitation (the MCP client asked its user) / cli (`pypto-tune confirm`)
    by_person: bool = False
    question: str = ""
    question_at: str = ""


class KnobSetting(BaseModel):
    """One knob of the best configuration beside its value in the original source ("Best configuration")."""

    id: str
    file: str
    line: int
    kind: str = ""
    value: Any = None  # in the best kept source; None: not written, the default applies
    original: Any = None  # in the source at session start
    present: bool = True  # written in the best kept source
    tunable: bool = True  # False: a problem constant, the run mode, the debug mode (never tuned)
    changed: bool = False  # value differs from the original


class StageStat(BaseModel):
    stage: str
    status: Literal["pending", "active", "done", "skipped"]
    rounds: int = 0
    consecutive_no_gain: int = 0
    no_gain_threshold: int = 0
    failures: int = 0
    entered_at: str = ""
    left_at: str = ""
    exit_reason: str = ""


class ChecklistItem(BaseModel):
    stage_group: Literal["frontend", "swimlane", "incore"]
    catalog_id: str
    title: str
    status: ChecklistStatus = "untried"
    reason: str = ""  # required for not-applicable


class StageTransition(BaseModel):
    at: str
    from_stage: str
    to_stage: str
    reason: str


class Refusal(BaseModel):
    at: str
    tool: str
    rule: str
    message: str


class SessionSnapshot(BaseModel):
    session_id: str
    operator: str  # display name, e.g. the stem of the first operator file
    workspace: str
    operator_files: list[str]  # relative to workspace
    test_command: list[str]
    run_mode: RunMode
    goal_kind: Literal["speedup", "target_us"]
    goal_value: float
    baseline_us: float | None = None
    target_us: float | None = None
    best_us: float | None = None
    best_round: int | None = None  # None = baseline is best
    started_at: str
    finished_at: str | None = None
    time_limit_h: float = 12.0
    device_ids: list[str] = Field(default_factory=list)
    repeats: int = 1
    kept_samples_us: list[float] = Field(default_factory=list)  # every sample of the kept code; best_us is the median
    state: str  # level-1 state: S1_SETUP, S2_COLLECT, S3_ANALYZE, S4_TUNE, S5_REPORT, DONE
    stage: str | None = None  # level-2 phase while tuning
    outer_round: int = 1
    step: str | None = None  # level-3 step (MODIFY / VERIFY / MEASURE / RECORD ...)
    finish_reason: str | None = None
    env_checks: list[EnvCheck] = Field(default_factory=list)
    precision_records: list[PrecisionRecord] = Field(default_factory=list)
    measurements: list[Measurement] = Field(default_factory=list)
    rounds: list[RoundRecord] = Field(default_factory=list)
    stages: list[StageStat] = Field(default_factory=list)
    checklist: list[ChecklistItem] = Field(default_factory=list)
    transitions: list[StageTransition] = Field(default_factory=list)
    refusals: list[Refusal] = Field(default_factory=list)
    debug_restored: bool = False
    debug_restored_at: str | None = None
    original_sources: dict[str, str] = Field(default_factory=dict)  # path -> text at session start
    best_sources: dict[str, str] = Field(default_factory=dict)  # path -> text of the best kept state
    final_knobs: list[KnobSetting] = Field(default_factory=list)  # every knob of the best state, source order
    data_paths: list[str] = Field(default_factory=list)
    batches: list[BatchRecord] = Field(default_factory=list)
    device_events: list[DeviceEvent] = Field(default_factory=list)
    current_device: str | None = None  # the chip the next run would use (NPU)
    runs_per_device: dict[str, int] = Field(default_factory=dict)  # NPU: how many runs each chip carried
    corrections: list[Correction] = Field(default_factory=list)  # test command fixed before the baseline passed
    confirmations: list[Confirmation] = Field(default_factory=list)
    pending_question: str | None = None  # a question to a person still waiting for an answer
    # the run sandbox (issue #16): the tool runs executed in ("bubblewrap 0.8.0"); "none" when some run of the session
    # was unsandboxed (the person started the server with --unsandboxed), with what was missing; None: not recorded
    sandbox: str | None = None
    sandbox_note: str = ""
