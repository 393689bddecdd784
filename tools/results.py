"""Result models of the session operations (the MCP layer returns them as structured content).

Every result ends with ``next_actions``: the calls the rules allow now, so an agent never has to guess.

Schemas are published to every client in ``tools/list`` and read by the model, so they are kept lean: fields a
result always has are required (no default), and the job object of a ``wait=false`` call is its own model
(``JobHandle``) instead of an optional field repeated in every result (the server also drops pydantic's titles).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from pypto_tune.tools.snapshot import CoreStat, EnvCheck, KnobChange


# Any JSON value, spelled out: a bare ``{}`` schema says nothing and strict clients (the Inspector's --strict) flag it.
JsonValue = Annotated[Any, WithJsonSchema({"type": ["number", "string", "boolean", "array", "object", "null"]})]

JobStatus = Literal["running", "done", "failed", "cancelled"]


class JobHandle(BaseModel):
    """A background job (wait=false, wait_job, cancel_job); result is the tool's final result once done."""

    job_id: str
    tool: str
    status: JobStatus
    elapsed_s: float
    message: str
    next_actions: list[str]
    last_output: str = Field(default="", description="tail of the run's output so far")
    result: dict[str, Any] | None = Field(default=None, description="the tool's final result once done")
    error: str | None = Field(default=None, description="why the job failed or was cancelled")


class _Result(BaseModel):
    session_id: str | None
    state: str | None = Field(description="level-1 state (S1_SETUP…DONE)")
    stage: str | None = Field(description="tuning stage (FRONTEND, SWIMLANE_1, …)")
    message: str = Field(description="what happened")
    next_actions: list[str] = Field(description="the calls the rules allow now")


class StartSessionResult(_Result):
    resumed: bool = Field(description="true when an unfinished session on this workspace was resumed")
    operator_files: list[str]
    test_command: list[str]
    run_mode: str
    goal: str
    read_only: bool = Field(False, description="another server holds the workspace: this one only reads")


class PrecisionResult(_Result):
    verdict: Literal["passed", "failed", "timeout", "error"]
    numerics_checked: bool = Field(description="false in SIM: the simulator does not compute outputs, so only "
                                   "'compiled and simulated' is shown")
    exit_code: int | None
    duration_s: float
    key_output: str
    reason: str = Field("", description="why this verdict, in one sentence (e.g. 'exit 0 but no verdict line')")
    code_hash: str
    record_id: int
    round: int | None = None
    device_id: str | None = None
    env_checks: list[EnvCheck] = Field(default_factory=list)
    attempts_left: int | None = Field(default=None, description="baseline retries left before the user must confirm")


class DebugResult(_Result):
    enabled: bool
    changed_files: list[str]
    diff: str


class CollectResult(_Result):
    output_dirs: list[str]
    artifacts: list[str]
    operator_time_us: float | None = Field(description="median over the repeats; null when the measurement is "
                                           "invalid")
    e2e_us: float | None
    samples_us: list[float]
    valid: bool
    invalid_reasons: list[str]
    measurement_id: int
    round: int
    target_us: float | None
    baseline_us: float | None


class SuggestionOut(BaseModel):
    catalog_id: str
    stage: str
    priority: str = ""
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class AnalyzeResult(_Result):
    """The whole analysis as the operations build it. The MCP tool publishes ``AnalysisSummary`` instead (see
    ``tools/result_views.py``); the whole object stays reachable through the analysis resource or
    ``detail="full"``."""

    state: str | None = None  # an output_dir analysis has no session, hence no state or stage
    stage: str | None = None
    measurement_id: int | None = Field(default=None, description="the session measurement analysed")
    output_dirs: list[str]
    operator_time_us: float
    e2e_us: float
    avg_core_utilization: float = Field(description="reference formula, %, idle cores count as 0")
    avg_bubble_rate: float = Field(description="reference formula, %")
    load_balance: float = Field(description="reference formula (AIC only, may be negative), %")
    active_core_utilization: float = Field(description="corrected: active cores only, %")
    active_bubble_rate: float = Field(description="corrected: active cores only, %")
    active_load_balance: float = Field(description="corrected: per active core type, bounded 0..100, %")
    cores: list[CoreStat]
    ratings: dict[str, int]
    bottlenecks: list[Any]
    suggestions: list[SuggestionOut]
    warnings: list[str] = Field(default_factory=list)
    report_path: str
    details: dict[str, Any] = Field(default_factory=dict, description="per-leaf, core usage, cross-check, chains")


class CoreLine(BaseModel):
    name: str
    core_type: str
    utilization_pct: float
    bubble_rate_pct: float
    work_us: float
    wait_schedule_us: float


class BottleneckLine(BaseModel):
    kind: str
    severity: str
    source: str = Field(description="reference (the skill's scripts) or corrected (active cores only)")
    value: float
    threshold: float
    message: str
    false_alarm: bool = Field(description="the reference flag is contradicted by the corrected figure")


class KernelLine(BaseModel):
    run_dir: str = Field(description="output folder name (one per kernel call)")
    operator_time_us: float
    e2e_us: float
    task_count: int
    active_core_utilization_pct: float
    active_bubble_rate_pct: float


class LeafLine(BaseModel):
    leaf_hash: str
    core_type: str
    count: int
    avg_us: float
    total_us: float
    source: str
    short_task: bool


class Omitted(BaseModel):
    """Items of each list left out of the summary (the whole analysis has them all)."""

    cores: int
    bottlenecks: int
    suggestions: int
    kernels: int
    leaves: int
    warnings: int


class AnalysisSummary(_Result):
    """Headline figures and top items; the whole analysis is at detail_uri or with detail='full'."""

    state: str | None = None
    stage: str | None = None
    measurement_id: int | None = Field(description="the session measurement analysed (null for output_dir)")
    output_dirs: list[str]
    operator_time_us: float
    e2e_us: float
    avg_core_utilization: float = Field(description="reference formula, %, idle cores count as 0")
    avg_bubble_rate: float = Field(description="reference formula, %")
    load_balance: float = Field(description="reference formula (AIC only, may be negative), %")
    active_core_utilization: float = Field(description="corrected: active cores only, %")
    active_bubble_rate: float = Field(description="corrected: active cores only, %")
    active_load_balance: float = Field(description="corrected: per active core type, bounded 0..100, %")
    ratings: dict[str, int]
    cores_total: int
    cores_active: int
    worst_cores: list[CoreLine] = Field(description="active cores with the lowest utilisation first")
    bottlenecks: list[BottleneckLine] = Field(description="most severe first; false alarms last")
    suggestions: list[SuggestionOut] = Field(description="catalogue suggestions in rank order")
    kernels: list[KernelLine] = Field(description="one line per output folder (kernel call)")
    top_leaves: list[LeafLine] = Field(description="leaf functions by total time")
    warnings: list[str]
    omitted: Omitted
    report_path: str
    detail_uri: str | None = Field(description="resource with the whole analysis as JSON")
    full: dict[str, Any] | None = Field(default=None, description="the whole analysis, only with detail='full'")


class PatchResult(_Result):
    round: int
    kind: Literal["config", "algorithm", "manual", "correction"]
    knob_changes: list[KnobChange]
    diff: str
    code_hash: str
    legality_checked: list[str] = Field(default_factory=list, description="effective values checked (domain C)")
    legality_unchecked: list[str] = Field(default_factory=list, description="values the server could not evaluate")


class RevertResult(_Result):
    round: int | None
    restored_hash: str
    decision: str | None = None


class RecordResult(_Result):
    round: int
    before_us: float | None
    after_us: float | None
    delta_pct: float | None
    decision: Literal["kept", "reverted", "failed"]
    result_type: str
    finished: bool
    best_us: float | None = None
    target_us: float | None = None
    stage_consecutive_no_gain: int = 0
    stage_threshold: int = 0
    board: str = Field(default="", description="status board (full every 5 rounds)")


class ReportResult(_Result):
    paths: list[str]
    debug_restored_now: bool


class StatusResult(_Result):
    board: str
    baseline_us: float | None
    target_us: float | None
    best_us: float | None
    rounds: int
    kept: int
    success_rate_pct: float | None
    finished: bool
    running_job: str | None
    drift: bool


class KnobOut(BaseModel):
    id: str
    kind: str
    file: str
    line: int
    value: JsonValue
    catalog_ids: list[str]
    legal: str


class KnobsResult(_Result):
    knobs: list[KnobOut]


class ChecklistResult(_Result):
    stage_group: str
    items: list[dict[str, str]]
