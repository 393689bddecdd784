"""Result models of the session operations (the MCP layer returns them as structured content).

Every result ends with ``next_actions``: the calls the rules allow now, so an agent never has to guess.

Schemas are published to every client in ``tools/list`` and read by the model, so they are kept lean: fields a
result always has are required (no default), and the job object of a ``wait=false`` call is its own model
(``JobHandle``) instead of an optional field repeated in every result (the server also drops pydantic's titles).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, SerializerFunctionWrapHandler, WithJsonSchema, model_serializer,
)

from pypto_tune.tools.snapshot import CoreStat, EnvCheck


# Any JSON value, spelled out: a bare ``{}`` schema says nothing and strict clients (the Inspector's --strict) flag it.
# One ``type`` per arm: a ``type`` array is less portable (single-type dialects reject it).
JsonValue = Annotated[Any, WithJsonSchema({"anyOf": [{"type": t} for t in ("number", "string", "boolean", "array",
                                                                            "object", "null")]})]

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
    progress: str = Field(default="", description="where the job is: phase (repeat 2/3, 1/4 trials done), elapsed "
                          "seconds, last output line")
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
    decided_by: str = Field("", description="which rule of the verdict order decided (precision-line, "
                            "pytest-summary, unittest-summary, generic-line, session-pattern, exit-status, ...)")
    deciding_lines: list[dict[str, Any]] = Field(default_factory=list, description="the output lines that decided, "
                                                 "with line numbers and their role (pass / fail / error / ...)")
    code_hash: str
    record_id: int
    round: int | None = None
    device_id: str | None = None
    env_checks: list[EnvCheck] = Field(default_factory=list)
    attempts_left: int | None = Field(default=None, description="baseline retries left before the user must confirm")
    command_problem: bool = Field(False, description="the test exited 0 but printed no verdict line: a problem of the "
                                  "command (start_session again with a pass_pattern), not of the operator; never "
                                  "counted as a baseline failure")
    suggested_pass_pattern: str | None = Field(None, description="with command_problem: a pattern for the last line "
                                               "the test printed, if that is its success line")


class DebugResult(_Result):
    enabled: bool
    changed_files: list[str]
    diff: str


class KernelTime(BaseModel):
    """One jit kernel of a test that runs several (each output folder is one kernel call)."""

    kernel: str = Field(description="the jit function's name; 'name#2' for its second call in one run")
    operator_time_us: float = Field(description="median of its max_work_time over the samples")
    e2e_us: float = Field(description="median of its AICore end-to-end time")
    samples: int


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
    per_kernel: list[KernelTime] = Field(default_factory=list, description="per jit kernel, when the test runs "
                                         "several kernels or calls one several times")


class SuggestionOut(BaseModel):
    catalog_id: str
    stage: str
    priority: str = ""
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    knobs: list[str] = Field(default_factory=list, description="this operator's knobs that carry it out")
    action: str = Field(default="", description="knob | analysis | structural (ALGORITHM stage); empty outside a "
                        "session")


class AnalyzeResult(_Result):
    """The whole analysis as the operations build it. The MCP tool publishes ``AnalysisSummary`` instead (see
    ``tools/operations/result_views.py``); the whole object stays reachable through the analysis resource or
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


class KnobChangeOut(BaseModel):
    """A knob's value before and after (accepts the patching library's ``KnobChange`` as is)."""

    model_config = ConfigDict(from_attributes=True)

    knob_id: str
    file: str
    line: int
    before: JsonValue
    after: JsonValue


class PatchResult(_Result):
    round: int
    kind: Literal["config", "algorithm", "manual", "correction"]
    knob_changes: list[KnobChangeOut]
    diff: str
    code_hash: str
    legality_checked: list[str] = Field(default_factory=list, description="effective values checked (domain C)")
    legality_unchecked: list[str] = Field(default_factory=list, description="values the server could not evaluate")
    ran_with: list[JsonValue] = Field(default_factory=list, description="the values the changed site had when the "
                                      "test ran it (run-time probe)")
    shared_with: list[str] = Field(default_factory=list, description="other kernels and tests whose code reaches the "
                                   "changed site: the change changes them too")


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
    flags: list[str] = Field(default_factory=list, description="what got worse although the decision metric may "
                             "not have: E2E time, or one kernel of several")



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
    success_rate_pct: float | None = Field(description="share of decided rounds that measured a gain, kept or not "
                                           "chosen in their batch (%)")
    finished: bool
    running_job: str | None
    drift: bool
    ledger_findings: list[str] = Field(default_factory=list, description="ledger rows the server did not write "
                                       "(ignored) or wrote and that were deleted")
    checklist: list[dict[str, str]] = Field(default_factory=list, description="the current stage's checklist: "
                                            "catalog_id, title, status (untried / tried / failed / "
                                            "not-applicable), reason")
    kept_samples: int = Field(0, description="samples behind best_us: the kept time is their median")


class KnobOut(BaseModel):
    """One knob. In list_knobs' summary it leaves out what is empty or unknown (a null, an empty text or list): the
    field's absence says the same in fewer bytes, and a large operator has dozens of knobs; ``full`` has every field."""

    _brief: str = PrivateAttr("")  # list_knobs' summary: "live" or "dead"

    id: str
    kind: str
    file: str = Field("", description="the file (in the summary: the id's prefix)")
    line: int
    value: JsonValue = Field(None, description="the value in the current code (a dead site's is left out of the "
                             "summary)")
    catalog_ids: list[str] = Field(default_factory=list)
    legal: str = Field("", description="the legal values of this kind of knob (in the summary: legal_by_kind)")
    tunable: bool = True
    legal_here: str = Field("", description="legal values for this operator's shapes and dtypes")
    not_tunable_because: str = Field("", description="why not tunable: where it reaches the problem")
    kernel: str | None = Field(None, description="the jit kernel this knob configures")
    kernel_ran: bool | None = Field(None, description="false: the test never ran this kernel (tuning it changes "
                                    "nothing measured); null: not known yet")
    live: bool | None = Field(None, description="true: this test runs the site (run-time probe); false: it never "
                              "does (listed under dead_knobs, never proposed, a change is refused); null: no record")
    effective: list[JsonValue] = Field(default_factory=list, description="the values the site had when it ran "
                                       "(one per distinct kernel execution)")
    ran_in: list[str] = Field(default_factory=list, description="kernels and tests that ran it")
    shapes: list[JsonValue] = Field(default_factory=list, description="shapes of the tensors and views of the "
                                    "kernels that ran it (what its tile tiles)")
    dtypes: list[str] = Field(default_factory=list, description="the dtypes of those kernels as they ran, with what "
                              "their casts produce (a tile's legality is judged on them)")
    shared_with: list[str] = Field(default_factory=list, description="other kernels and tests whose code reaches "
                                   "this site: a change here changes them too")
    tune_by: list[str] = Field(default_factory=list, description="for a site whose value is an expression: the "
                               "knobs that tune it — this site's own id (pin the call's arguments to literals) and "
                               "the tiling sources its value flows from")
    feeds: list[str] = Field(default_factory=list, description="for a tiling source: the tile calls it feeds")
    why: str = Field("", description="why the site is dead, or why the run says nothing")
    unroll: str = Field("", description="inside a pypto.loop_unroll body, or the loop itself: the unroll variants "
                        "that executed at the test's shapes, and those only traced and compiled")

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not self._brief:
            return data
        if self._brief == "dead":  # never proposed, a change is refused: where it is and why is all there is to say
            return {k: data[k] for k in ("id", "kind", "line", "kernel", "kernel_ran", "why")
                    if data[k] not in (None, "")}
        return {k: v for k, v in data.items() if k in _KNOB_ALWAYS or v not in (None, "", [], {})}


_KNOB_ALWAYS = frozenset({"id", "kind", "line", "value", "catalog_ids", "tunable"})


class KnobsResult(_Result):
    detail: Literal["summary", "full"] = Field("summary", description="summary: what choosing a knob needs; full: "
                                               "every field of every knob")
    legal_by_kind: dict[str, str] = Field(default_factory=dict, description="summary: the legal values of each "
                                          "kind of knob, once (a knob's legal_here is the range for this operator)")
    knobs: list[KnobOut] = Field(description="live knobs (and, without a probe record, every knob)")
    dead_knobs: list[KnobOut] = Field(default_factory=list, description="sites this test never runs: listed apart, "
                                      "never proposed, a change to them is refused (GATE live-site)")
    probe: str = Field("", description="which run-time probe record the map is built on, or why there is none")


class ChecklistResult(_Result):
    stage_group: str
    items: list[dict[str, str]]


class CandidateOut(BaseModel):
    """One concrete trial: one knob away from the kept state, admitted by the server (legal, never tried)."""

    id: str = Field(description="pass it (or the whole object) to run_candidates")
    knob: str = Field(description="knob id (as apply_tuning_patch's knob)")
    value: JsonValue = Field(description="the new value")
    catalog_id: str
    why: str = Field(description="why it is ranked here")
    evidence: dict[str, Any] = Field(default_factory=dict, description="the numbers behind 'why' (this operator's "
                                     "analysis and measurements; priors are labelled as such)")
    before: JsonValue = Field(default=None, description="the knob's value in the kept state")
    rank: int = 0
    score: float = Field(0.0, description="ranking score (predicted log2 speed-up units; only the order matters)")
    diff: str = ""
    admitted: bool = Field(True, description="false: checked by the legality functions only (past the answer "
                           "budget); run_candidates admits it before running it")
    kind: str = Field("knob", description="'pair': a linked pair — knob/value are its block, pair_with its tile — "
                      "run as one round (rule linked-pair)")
    pair_with: dict[str, Any] | None = Field(None, description="kind 'pair': the second knob (knob, value, before)")


class CandidatesResult(_Result):
    candidates: list[CandidateOut]
    needs_algorithm_stage: list[dict[str, Any]] = Field(default_factory=list, description="suggestions no knob of "
                                                        "this operator can carry out (structural: ALGORITHM stage)")
    exhausted: bool = Field(False, description="no legal, untried candidate is left for this stage")
    excluded: dict[str, int] = Field(default_factory=dict, description="dropped candidate values and why")
    notes: list[str] = Field(default_factory=list)
    ranking_flat: bool = Field(False, description="the first candidates score the same: nothing measured or modelled "
                               "tells them apart, and their order is not a prediction")
    dead_sites: int = Field(0, description="knob sites the test never ran (dead): never proposed")
    known_outcomes: list[dict[str, Any]] = Field(default_factory=list, description="candidates not proposed because "
                                                 "this session already measured their effective configuration (tiles "
                                                 "clamped to what they tile): knob, value, same_as_round, "
                                                 "operator_time_us")


class TrialOut(BaseModel):
    """One candidate of a run_candidates batch: its own ledger round."""

    candidate: str = Field(description="the id of the candidate this trial ran (propose_candidates' id)")
    knob: str
    value: JsonValue
    pair_with: dict[str, Any] | None = Field(None, description="a linked pair's trial: its second knob and value")
    catalog_id: str
    round: int
    verdict: str = Field(description="precision verdict of the candidate's own code (SIM: compiled and simulated "
                         "only, numerics not checked)")
    operator_time_us: float | None
    delta_pct: float | None = Field(description="against the kept state")
    decision: str = Field(description="kept / reverted / failed / invalid (discarded by the server for its own "
                          "reasons — not charged to the value, which stays proposable; reason says why)")
    result_type: str = Field(description="gain / not-chosen / no-gain / regression / compile-failure / ...")
    reason: str = Field(default="", description="why it was kept or not: its measurement against the kept state, "
                        "the candidate that beat or tied it, or the error that stopped it")
    device_id: str | None = Field(default=None, description="NPU: the chip that ran the trial")
    retried_from: list[str] = Field(default_factory=list, description="NPU: chips whose run of this trial hung or "
                                    "failed with a device/runtime error before it ran again on device_id (R5 card "
                                    "retry, once per trial)")


class TrialsResult(_Result):
    batch: str
    parallel: int = Field(description="trials that ran at once")
    wall_s: float = 0.0
    trials: list[TrialOut]
    refused: list[str] = Field(default_factory=list, description="candidates not run, with the rule that refused "
                               "each")
    winner_round: int | None = None
    best_us: float | None = None

