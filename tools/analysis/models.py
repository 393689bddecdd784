"""Typed results of the analysis engine.

Every time is µs and every percentage 0–100 unless the field name says otherwise. Figures that reproduce a reference
script carry the reference name in their description; corrected figures are prefixed ``active_`` (domain E.2).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from pypto_tune.tools.analysis.pipe_usage import PipeUsage
from pypto_tune.tools.snapshot import CoreStat

Stage = Literal["frontend", "swimlane", "incore"]


# ---------------------------------------------------------------------------------------------- bubble_analysis.log
class LogTask(BaseModel):
    """One ``Task:<key>, label:<label>, wait: <µs>`` line of a Top-10 or Top-3 list."""

    key: int  # seqNo << 32 | taskId
    label: str
    wait_us: float


class LogCore(BaseModel):
    """One ``[<core>] Execute task num:`` block (domain A.3)."""

    name: str  # "AIV_25", "HUB_80", "Fake Core_0", "AI-CPU_3"
    core_type: str  # "AIC" / "AIV" / "HUB" / "AI-CPU" / "Fake Core"
    index: int  # core index = blockIdx + 1 (0 = Fake Core)
    n_real: int
    n_fake: int = 0
    work_us: float  # Core Total Work Time (from the global T0)
    wait_total_us: float
    wait_schedule_us: float
    wait_predecessor_us: float
    top3: list[LogTask] = Field(default_factory=list)
    line: int  # 1-based line of the header, for error messages


class BubbleLog(BaseModel):
    path: str
    top10: list[LogTask] = Field(default_factory=list)
    cores: list[LogCore] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------- derived results
class Bottleneck(BaseModel):
    """A flag raised by the reference thresholds (analyze_perf, domain B.2) or by a corrected figure."""

    kind: Literal["utilization", "bubble", "load_balance", "dependency", "short_tasks", "leaf_imbalance",
                  "core_fill"]
    severity: Literal["high", "medium", "low"]
    metric: str  # which number triggered it, e.g. "avg_core_utilization_pct"
    value: float
    threshold: float
    source: Literal["reference", "corrected"]
    message: str
    message_zh: str = ""  # the same flag in Chinese for the zh report; "" falls back to ``message``
    false_alarm: bool = False  # the reference flag is contradicted by the corrected figure (domain E.2)


class LeafStat(BaseModel):
    """Per-leafHash statistics (analyze_swimlane.py, domain B.4) plus source mapping (A.7)."""

    leaf_hash: str  # decimal string: u64 does not fit JSON numbers safely
    core_type: str  # "AIC" / "AIV" (from the lanes that ran it)
    count: int
    min_us: float
    max_us: float
    avg_us: float
    total_us: float
    lanes_used: int  # distinct lanes (names) that ran it
    root_name: str = ""  # func_magicname of its root function without TENSOR_LOOP_
    hash_order: str = ""  # from hashOrder-hint (newer builds only)
    subgraph_count: int | None = None
    tasks_per_iter: float | None = None  # subgraph_count / outer_loops
    merge_granularities: list[int] = Field(default_factory=list)  # B.4 merge guide: of 2/4/8/16 those ≤ 4·t/iter
    merge_hint: str = ""  # e.g. 'vec_nbuffer_setting={-2: 1, -1: 2}' (0.2.0 integer keys)
    source: str = ""  # "file.py:5-6" or "(no source info)"
    compute_ops: list[str] = Field(default_factory=list)
    is_cube: bool = False
    psg_ids: list[int] = Field(default_factory=list)
    short_task: bool = False  # avg < 10 µs (domain B.8)


class CoreUsageRow(BaseModel):
    """FULL / NOT FULL per leafHash (analyze_core_usage.py, domain B.5)."""

    leaf_hash: str
    core_type: str
    used_cores: int
    theoretical_cores: int
    theoretical_source: Literal["platform", "lanes", "given"]
    usage_pct: float
    full: bool
    psg_ids: list[int] = Field(default_factory=list)


class CoreUsage(BaseModel):
    rows: list[CoreUsageRow] = Field(default_factory=list)
    all_full: bool = True
    aic_full: bool | None = None  # None when no AIC leaf ran (cube merges need FULL AIC, R17)
    aiv_full: bool | None = None


class LoadGap(BaseModel):
    """The S-3 leaf-total gap (domain B.6): (total₁ − total₂) / total₁ · 100 over leaves sorted by total."""

    gap_pct: float | None = None  # None with fewer than two leaves
    first_leaf: str = ""
    second_leaf: str = ""
    first_total_us: float = 0.0
    second_total_us: float = 0.0
    severe: bool = False  # > 20 %


class ChainGroup(BaseModel):
    label: str  # A, B, ...
    count: int  # number of chain starts with this signature
    levels: list[list[str]]  # per level the sorted "leafHash/opmagic" pairs (first MAX_LEVELS_KEPT levels)
    depth: int = 0  # number of levels (may exceed len(levels))
    distinct_leaves: int
    distinct_psg: int


class ScopeCandidate(BaseModel):
    """A truncated AIV chain that satisfies the sg_set_scope condition of B.7."""

    group: str
    leaf_hashes: list[str]
    psg_ids: list[int]
    count: int


class AivChains(BaseModel):
    """AIV dependency chains (analyze_aiv_dep_chains.py, domain B.7; successor-less sinks are kept)."""

    aiv_tasks: int = 0
    total_tasks: int = 0
    reference_task_count: int = 0  # rows the reference keeps (it drops rows without successors)
    groups: list[ChainGroup] = Field(default_factory=list)
    truncated_groups: list[ChainGroup] = Field(default_factory=list)
    scope_candidates: list[ScopeCandidate] = Field(default_factory=list)


class CrossCheck(BaseModel):
    """B.9: the log recomputed from merged_swimlane.json alone."""

    max_delta_work_us: float = 0.0
    max_delta_wait_us: float = 0.0
    max_delta_schedule_us: float = 0.0
    max_delta_predecessor_us: float = 0.0
    task_counts_equal: bool = True
    top10_equal: bool = True
    agrees: bool = True
    tolerance_us: float = 1e-6
    disagreements: list[str] = Field(default_factory=list)  # first few, human readable


class Suggestion(BaseModel):
    catalog_id: str
    stage: Stage
    priority: int  # rank, 1 = try first
    stars: int = 0
    p_level: str = ""
    title: str = ""
    reason: str
    reason_zh: str = ""  # the same reason in Chinese for the zh report; "" falls back to ``reason``
    symptom: str = ""  # A/B/C/D or a B.8 threshold name
    evidence: dict[str, Any] = Field(default_factory=dict)
    knobs: list[str] = Field(default_factory=list)


class DirAnalysis(BaseModel):
    """The figures of one output folder; ``RunAnalysis`` sums or merges these."""

    run_dir: str
    layout: Literal["sim", "npu"]
    log_path: str
    trace_path: str
    operator_time_us: float  # max_work_time (B.10)
    e2e_us: float  # writer's AICore end-to-end time (B.3)
    writer_utilization_pct: float  # writer's aggregate Σdur / (lanes · E2E) (B.3)
    trace_span_us: float  # max end − T0 over all lanes incl. HUB (B.10)
    sim_total_us: float | None = None  # _simulate.stat.report.txt Total Cycles / 1800
    avg_core_utilization_pct: float
    avg_bubble_rate_pct: float
    load_balance_pct: float
    active_core_utilization_pct: float
    active_bubble_rate_pct: float
    active_load_balance_pct: float
    task_count: int  # real X events on pid 1 (fake excluded)
    fake_task_count: int
    crosscheck: CrossCheck | None = None
    invalid_reasons: list[str] = Field(default_factory=list)
    label_layout: str = ""  # "0.2.0" (>>20) or "ref" (>>16)
    aicpu_e2e_us: float | None = None  # AICPU-side AICore end-to-end time (A.5, B.10); None without a trace
    aicpu_trace_paths: list[str] = Field(default_factory=list)
    pipe_usage: PipeUsage | None = None  # pipe_usage.csv (A.6) when the folder has one


class RunAnalysis(BaseModel):
    """One analysis of one test invocation (which may have made several output folders)."""

    run_dirs: list[str]
    run_mode: str | None = None
    operator_time_us: float = Field(description="Σ over output folders of max_work_time (B.10, the session metric)")
    e2e_us: float = Field(description="Σ over output folders of the writer's AICore end-to-end time (B.3)")
    aicpu_e2e_us: float | None = Field(None, description="Σ over output folders of the AICPU-side AICore end-to-end "
                                       "time from machine_runtime_operator_trace*.json (NPU, A.5, B.10); None "
                                       "unless every folder has one")
    pipe_usage: list[PipeUsage] = Field(default_factory=list, description="pipe_usage.csv of each folder that has one "
                                        "(A.6)")
    trace_span_us: float = 0.0
    writer_utilization_pct: float = 0.0
    avg_core_utilization_pct: float = Field(description="reference (analyze_perf): mean over all AIC+AIV, idle = 0")
    avg_bubble_rate_pct: float = Field(description="reference (analyze_perf): mean over all AIC+AIV")
    load_balance_pct: float = Field(description="reference (analyze_perf): AIC only, idle included, unbounded")
    avg_aic_utilization_pct: float = 0.0
    avg_aiv_utilization_pct: float = 0.0
    avg_aic_bubble_rate_pct: float = 0.0
    avg_aiv_bubble_rate_pct: float = 0.0
    active_core_utilization_pct: float = Field(description="corrected: mean over active AIC+AIV cores only")
    active_bubble_rate_pct: float = Field(description="corrected: mean over active AIC+AIV cores only")
    active_load_balance_pct: float = Field(description="corrected: worst per-type balance of active cores, 0..100")
    max_aic_wait_predecessor_us: float = 0.0
    ratings: dict[str, int] = Field(default_factory=dict)  # reference ratings: utilization/bubble/load_balance/overall
    active_ratings: dict[str, int] = Field(default_factory=dict)  # same table on the corrected figures
    cores: list[CoreStat] = Field(default_factory=list)
    bottlenecks: list[Bottleneck] = Field(default_factory=list)
    suggestions: list[Suggestion] = Field(default_factory=list)
    directions: list[str] = Field(default_factory=list)  # analyze_perf's direction section: stages to look at
    leaves: list[LeafStat] = Field(default_factory=list)
    core_usage: CoreUsage = Field(default_factory=CoreUsage)
    load_gap: LoadGap = Field(default_factory=LoadGap)
    aiv_chains: AivChains = Field(default_factory=AivChains)
    short_task_fraction: float = 0.0  # share of real compute tasks (leafHash ≠ 0) shorter than 10 µs, 0..1
    crosscheck: CrossCheck = Field(default_factory=CrossCheck)
    invalid_reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    trace_paths: list[str] = Field(default_factory=list)
    log_paths: list[str] = Field(default_factory=list)
    task_count: int = 0
    fake_task_count: int = 0
    outer_loops: int = 1
    outer_loops_source: Literal["given", "inferred", "default"] = "default"
    per_dir: list[DirAnalysis] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------- catalogue
class CatalogItem(BaseModel):
    id: str  # F-1 … F-15, S-1 … S-13, I-1 … I-9
    stage: Stage
    stars: int  # catalog per-stage table
    symptom_stars: dict[str, int] = Field(default_factory=dict)  # symptom-table stars where they differ (E.3.15)
    p_level: str  # "P0" … "P4"
    title_zh: str
    title_en: str
    knobs: list[str] = Field(default_factory=list)
    api: str = ""
    preconditions: list[str] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list)  # "A" bubble, "B" utilisation, "C" imbalance, "D" in-core
    sim_check: str = ""  # what happened when tried in SIM (domain C)
    sim_check_zh: str = ""  # the same in Chinese, quoted in zh suggestion reasons


class Catalog(BaseModel):
    version: str
    symptoms: dict[str, str] = Field(default_factory=dict)
    items: list[CatalogItem]

    def get(self, item_id: str) -> CatalogItem | None:
        for item in self.items:
            if item.id == item_id:
                return item
        return None
