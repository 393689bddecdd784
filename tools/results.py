"""Result models of the session operations (the MCP layer returns them as structured content).

Every result ends with ``next_actions``: the calls the rules allow now, so an agent never has to guess.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from pypto_tune.tools.snapshot import CoreStat, EnvCheck, KnobChange


class JobResult(BaseModel):
    job_id: str
    tool: str
    status: Literal["running", "done", "failed", "cancelled"]
    elapsed_s: float
    last_output: str = ""
    result: dict[str, Any] | None = None
    error: str | None = None
    next_actions: list[str] = Field(default_factory=list)


class _Result(BaseModel):
    session_id: str | None = None
    state: str | None = Field(default=None, description="level-1 state after the call (S1_SETUP ... DONE)")
    stage: str | None = Field(default=None, description="tuning stage after the call (FRONTEND, SWIMLANE_1, ...)")
    message: str = Field(default="", description="what happened, in one or two sentences")
    next_actions: list[str] = Field(default_factory=list, description="the calls the rules allow now")
    job: JobResult | None = Field(default=None, description="set when called with wait=false: poll wait_job")


class StartSessionResult(_Result):
    resumed: bool = Field(description="true when an unfinished session on this workspace was resumed")
    operator_files: list[str]
    test_command: list[str]
    run_mode: str
    goal: str


class PrecisionResult(_Result):
    # Optional only so that a wait=false call can return the same model with just ``job`` set.
    verdict: Literal["passed", "failed", "timeout", "error"] | None = None
    numerics_checked: bool | None = Field(default=None, description="false in SIM: the simulator does not compute "
                                          "outputs, so only 'compiled and simulated' is shown")
    exit_code: int | None = None
    duration_s: float | None = None
    key_output: str = ""
    code_hash: str = ""
    record_id: int | None = None
    round: int | None = None
    device_id: str | None = None
    env_checks: list[EnvCheck] = Field(default_factory=list)
    attempts_left: int | None = Field(default=None, description="baseline retries left before the user must confirm")


class DebugResult(_Result):
    enabled: bool
    changed_files: list[str]
    diff: str


class CollectResult(_Result):
    output_dirs: list[str] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    operator_time_us: float | None = None
    e2e_us: float | None = None
    samples_us: list[float] = Field(default_factory=list)
    valid: bool = True
    invalid_reasons: list[str] = Field(default_factory=list)
    measurement_id: int | None = None
    round: int | None = None
    target_us: float | None = None
    baseline_us: float | None = None


class SuggestionOut(BaseModel):
    catalog_id: str
    stage: str
    priority: str = ""
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class AnalyzeResult(_Result):
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


class PatchResult(_Result):
    round: int
    kind: Literal["config", "algorithm", "manual", "correction"]
    knob_changes: list[KnobChange]
    diff: str
    code_hash: str


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
    baseline_us: float | None = None
    target_us: float | None = None
    best_us: float | None = None
    rounds: int = 0
    kept: int = 0
    success_rate_pct: float | None = None
    finished: bool = False
    running_job: str | None = None
    drift: bool = False


class KnobOut(BaseModel):
    id: str
    kind: str
    file: str
    line: int
    value: Any
    catalog_ids: list[str]
    legal: str


class KnobsResult(_Result):
    knobs: list[KnobOut]


class ChecklistResult(_Result):
    stage_group: str
    items: list[dict[str, str]]


