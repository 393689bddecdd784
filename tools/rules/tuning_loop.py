"""The tuning rules as data and pure decisions: rule ids, stages, thresholds, keep/revert, stage exit.

Rule ids are what refusals print (``GATE <rule-id>: ...``) and what the prompts and README cite; each maps to the rule of
domain.md D.2 it enforces. Nothing in this module touches files, processes or the ledger.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from pypto_tune.tools.errors import InputError


class Rule(BaseModel):
    id: str
    source: str  # domain.md rule it enforces
    text_en: str
    text_zh: str


RULES: list[Rule] = [
    Rule(id="goal", source="R1", text_en="A session starts only with a goal: a speed-up factor or a target time in µs; "
         "the target is computed from the measured baseline.",
         text_zh="会话必须带目标启动：提速倍数或目标时间（µs）；目标值由实测基线计算。"),
    Rule(id="env-check", source="R3", text_en="The environment checklist must pass before the first precision run.",
         text_zh="首次精度校验前，环境检查清单必须全部通过。"),
    Rule(id="baseline-retry", source="R5", text_en="A failing baseline precision run is not fixed: it may be retried on "
         "another device id; after 3 failures the server waits for the user's explicit confirmation.",
         text_zh="基线精度失败不做修复：可换卡重试；失败 3 次后必须等待用户明确确认。"),
    Rule(id="precision-first", source="R6", text_en="No debug toggle, collection, round analysis or patch without a "
         "passing precision record for the current code hash.",
         text_zh="当前代码哈希没有精度通过记录时，禁止开关调试、采集、分析或打补丁。"),
    Rule(id="debug-mode", source="R2/R7", text_en="Measurements are taken with runtime_debug_mode 1 on every jit.",
         text_zh="性能采集必须在所有 jit 上开启 runtime_debug_mode 1。"),
    Rule(id="sequence", source="D.1", text_en="Setup → collect → analyze → tune → report, in this order, no skipping.",
         text_zh="准备 → 采集 → 分析 → 调优 → 报告，顺序执行，不可跳过。"),
    Rule(id="stage-analysis", source="R15/R16", text_en="Every SWIMLANE_n and INCORE_n stage starts with a fresh "
         "collection and analysis (the stage's round baseline) before its first patch.",
         text_zh="每个 SWIMLANE_n / INCORE_n 阶段开始时须重新采集并分析（阶段基线），之后才能修改。"),
    Rule(id="one-change", source="R9", text_en="One knob per round: the candidate differs from the last kept state in "
         "exactly one knob. Two knobs only as a linked pair (linked-pair); several or zero knobs only as a declared "
         "algorithm-level change (R23).",
         text_zh="每轮只改一个参数：候选代码与上次保留状态恰好相差一个 knob；两个 knob 只能作为联动对（linked-pair）；"
         "多处或结构性修改只能作为声明的算法级修改（R23）。"),
    Rule(id="linked-pair", source="R9/C", text_en="Two knobs change in one round only when the kept state's run links "
         "them: a loop's block and the tile that tiles the view the block sets (the server reads the link from the "
         "run-time probe's record; nobody declares it). Such a pair is one change point, because it is one tiling "
         "decision: the tile's rows beyond the view are clipped, so neither knob's value means anything without the "
         "other's, and one verified, measured round judges the decision as a whole. Each knob is held to all a change "
         "of it alone is held to (a tuning knob, not a problem size; a value that is data; its own domain; live in "
         "this test; no-retry), legality is checked on both values at once at every tile call and loop they reach, "
         "the round records both knobs and its gain is the pair's. Any other two-knob change is refused (one-change).",
         text_zh="只有当保留状态的运行显示两个 knob 联动时，才允许一轮同时修改这两个 knob：循环的分块大小，以及对该分块所设"
         "view 做切分的 tile（联动关系由服务器从运行时探针记录中读出，任何人都不能声明）。这样的一对是一个改动点，因为它是"
         "同一个切分决策：tile 超出 view 的行会被截断，任一 knob 的取值离开另一个都没有意义，由一轮精度校验和测量整体裁决。"
         "每个 knob 都按单独修改它时的全部规则检查（必须是调优 knob 而非问题规模；取值是数据；在其自身取值域内；在本测试中"
         "实际运行；不重试），合法性按两个取值同时生效，在它们影响的每个 tile 调用和循环上检查；该轮记录两个 knob，收益归于"
         "这一对。其他任何同时修改两个 knob 的改动都会被拒绝（one-change）。"),
    Rule(id="catalog-stage", source="R10", text_en="Each round cites one catalogue id that belongs to the current stage.",
         text_zh="每轮必须引用一个属于当前阶段的优化目录编号。"),
    Rule(id="round-open", source="D.1", text_en="A round is open: verify, measure and record it (or revert it) before "
         "starting another.", text_zh="当前轮次未结束：先验证、测量并记录（或回退），再开始下一轮。"),
    Rule(id="no-round", source="D.1", text_en="There is no open round.", text_zh="当前没有进行中的轮次。"),
    Rule(id="verify-after-change", source="R11", text_en="Every change is verified by a precision run on its own hash "
         "before it can be measured or recorded as a gain.",
         text_zh="每次修改后必须对其代码哈希做精度校验，之后才能测量或记录收益。"),
    Rule(id="correction-limit", source="R11", text_en="After a precision failure in a round, at most one quick "
         "correction of the same knob is allowed; otherwise the round is rolled back.",
         text_zh="轮内精度失败后最多允许一次同一参数的快速修正，否则回退。"),
    Rule(id="measure-first", source="R12", text_en="Keep or revert is decided by the server from its own measurement "
         "of the round's hash against the last kept state; collect_swimlane must run first.",
         text_zh="保留/回退由服务器依据本轮代码的实测与上次保留状态对比决定；须先执行 collect_swimlane。"),
    Rule(id="drift", source="R6/R9", text_en="The operator files changed behind the server's back; tuning is blocked "
         "until the change is reverted or adopted through a precision run (recorded as a manual round).",
         text_zh="算子文件被绕过服务器修改；须回退或通过一次精度校验采纳（记为手动轮次）后才能继续。"),
    Rule(id="stage-exit", source="R14", text_en="A stage ends at its consecutive-no-gain threshold (5/8/5); it may be "
         "left earlier only when every checklist item is tried or marked not-applicable with a reason.",
         text_zh="阶段在连续无提升达到阈值（5/8/5）时结束；提前离开须清单全部尝试或标注不适用并说明原因。"),
    Rule(id="finished", source="R14b", text_en="The session has terminated (target reached, utilisation > 80 % of "
         "both the active cores and the platform's cores of the types the kernel uses with bubble < 10 %, time limit, "
         "outer loop 3 done, or user stop): only reporting is allowed.",
         text_zh="会话已终止（达标；活跃核与算子可用的同类型平台核利用率均 > 80% 且气泡率 < 10%；超时；三轮外循环结束；或用户停止）：只允许生成报告。"),
    Rule(id="report-end", source="R21", text_en="The final report is rendered only after the session terminated.",
         text_zh="最终报告只能在会话终止后生成。"),
    Rule(id="report-debug", source="R22", text_en="debug_options are restored before the report (render_report does "
         "it itself and records it).", text_zh="生成报告前恢复 debug_options（render_report 会自动恢复并记录）。"),
    Rule(id="algorithm", source="R23", text_en="Algorithm-level changes only after the configuration stages "
         "converged without reaching the target; one at a time, with one catalogue id.",
         text_zh="算法级修改仅在配置阶段收敛仍未达标后进行；每次一个，并引用一个目录编号。"),
    Rule(id="legality", source="C", text_en="Every change is checked against domain C on the effective value of every "
         "tiling call, loop and view it affects, whichever way it was written (structured edit, diff or adopted edit); "
         "a tile call that ran is checked on the value it gets in each kernel that ran it and on that kernel's shapes "
         "(run-time probe), and a changed tiling source whose value there cannot be derived is refused; a value that "
         "names something the server cannot evaluate, or never ran and cannot be evaluated, passes as unchecked and "
         "is recorded so.",
         text_zh="每次修改都按领域规则 C 检查其影响到的每个 tile 调用、循环与 view 的实际取值（无论以结构化修改、diff 还是采纳外部修改提交）；"
         "运行过的 tile 调用按其在每个运行它的 kernel 中的取值及该 kernel 的实际形状（运行时探针）检查，若修改的 tile 来源在该处的新取值无法推导则拒绝；"
         "引用了服务器无法求值的名字、或未运行且无法求值的取值记为“未检查”。"),
    Rule(id="live-site", source="R9/C", text_en="A change is made only where the test runs: the run-time probe of the "
         "state a change starts from marks every knob site live or dead for this test, and a change to a dead site (a "
         "branch, helper or kernel the test never runs) is refused.",
         text_zh="只修改测试实际运行的位置：运行时探针记录修改起点状态下每个 knob 位置对本测试是否运行（live/dead），"
         "修改 dead 位置（测试从不进入的分支、辅助函数或 kernel）会被拒绝。"),
    Rule(id="ledger-integrity", source="—", text_en="Every ledger row carries the server's seal; while rows "
         "without one exist (or sealed rows are missing) nothing is run, changed or judged.", text_zh="账本每一行都带有"
         "服务器的封印；只要存在无封印的行（或已封印的行缺失），就不运行、不修改、不裁决。"),
    Rule(id="measure-once", source="R12", text_en="A round is measured once: the server decides how many samples "
         "(repeats, and on the NPU the sequential rule); measuring the same code again until a number suits is "
         "refused.", text_zh="每轮只测量一次：样本数由服务器决定（重复次数，NPU 上由序贯规则决定）；不允许为得到满意的数字"
         "而重复测量同一代码。"),
    Rule(id="no-retry", source="R19", text_en="A change that failed, regressed or brought no gain is never tried again: "
         "the same code (by meaning), or the same knob and value from the same kept state, is refused with the round "
         "that tried it.", text_zh="失败、退化或无收益的修改不再重试：相同语义的代码，或在同一保留状态上的相同参数与取值，"
         "会被拒绝并指出尝试过它的轮次。"),
    Rule(id="confirmation", source="R5", text_en="A question the server asks a person (retry a baseline that failed "
         "3 times) is answered by that person: through the client's elicitation, or `pypto-tune confirm` typed at a "
         "terminal; the agent's own argument is not an answer.",
         text_zh="服务器向用户提出的问题（基线失败 3 次后是否重试）必须由用户本人回答：通过客户端的交互确认（elicitation），"
         "或在终端中输入 `pypto-tune confirm`；智能体自己传入的参数不算回答。"),
    Rule(id="busy", source="—", text_en="A run is in progress for this session; wait for its job.",
         text_zh="本会话有运行中的任务，请等待其完成。"),
    Rule(id="session-lock", source="—", text_en="Another server process holds this workspace's session lock; "
         "read-only calls still work.", text_zh="另一个服务器进程持有该工作区的会话锁；只读调用仍可用。"),
    Rule(id="command-fixed", source="—", text_en="The test command is checked at session start and may be corrected "
         "(start_session again, recorded as a correction) only until the baseline precision passes; then it is fixed.",
         text_zh="测试命令在会话开始时校验；基线精度通过之前可以修正（再次调用 start_session，记为一次修正），通过后即固定。"),
    Rule(id="sandbox", source="—", text_en="Every measured or verified run executes in the run sandbox (bubblewrap), "
         "where only the recorded closure exists; a server that cannot build it refuses to measure unless the person "
         "starting it passed --unsandboxed (the session is then marked unsandboxed).",
         text_zh="每次测量或验证的运行都在运行沙箱（bubblewrap）中执行，其中只有账本记录的文件闭包；无法创建沙箱的服务器拒绝测量，"
         "除非启动者显式传入 --unsandboxed（该会话随即被标记为未沙箱化）。"),
    Rule(id="environment", source="—", text_en="The environment runs execute in (variables, interpreter, its roots, "
         "the sandbox) is recorded at session start; a resume from a server whose environment differs is refused "
         "with the differences named, unless a person accepts it as the session's new baseline.",
         text_zh="运行所用的环境（环境变量、解释器及其根目录、沙箱）在会话开始时记录；环境不同的服务器恢复会话会被拒绝并列出差异，"
         "除非由用户本人确认将其作为会话的新基准。"),
    Rule(id="same-work", source="B.10", text_en="A measured run calls the same jit kernels, as often, as the kept "
         "state's runs did; a change after which the test skips or adds a kernel call (a guard, a caught exception or "
         "a branch on the tiling deciding what runs) measures other work, and its time is not compared.",
         text_zh="被测运行调用的 jit 内核及次数必须与保留状态的运行相同；修改后测试跳过或新增了内核调用（由分块取值上的"
         "检查、被捕获的异常或分支决定运行内容），测得的是另一份工作，其时间不参与比较。"),
]
RULES_BY_ID = {r.id: r for r in RULES}

StageGroup = Literal["frontend", "swimlane", "incore"]


@dataclass(frozen=True)
class StageDef:
    name: str
    group: StageGroup | Literal["algorithm"]
    outer_round: int
    no_gain_threshold: int
    catalog_prefix: str


# Domain D.1 level 2, with the outer loop unrolled (at most 3 swimlane/in-core cycles, R15).
STAGES: list[StageDef] = [
    StageDef("FRONTEND", "frontend", 1, 5, "F-"),
    StageDef("SWIMLANE_1", "swimlane", 1, 8, "S-"),
    StageDef("INCORE_1", "incore", 1, 5, "I-"),
    StageDef("SWIMLANE_2", "swimlane", 2, 8, "S-"),
    StageDef("INCORE_2", "incore", 2, 5, "I-"),
    StageDef("SWIMLANE_3", "swimlane", 3, 8, "S-"),
    StageDef("INCORE_3", "incore", 3, 5, "I-"),
]
ALGORITHM_STAGE = StageDef("ALGORITHM", "algorithm", 3, 3, "")
STAGES_BY_NAME = {s.name: s for s in STAGES + [ALGORITHM_STAGE]}

LEVEL1 = ["S1_SETUP", "S2_COLLECT", "S3_ANALYZE", "S4_TUNE", "S5_REPORT", "DONE"]

BASELINE_ATTEMPTS = 3  # R5: "max 3" (E.3.11 resolved to the stricter reading)
DEFAULT_TIMEOUT_S = 300.0  # R4/R5: "> 300 s" is a timeout
GLOBAL_UTIL_PCT = 80.0  # R14b, on active cores (E.2.4)
GLOBAL_BUBBLE_PCT = 10.0
SIM_TRANSFER_WARN_PCT = 0.5  # E.1: SIM gains below this may not transfer to the NPU
NPU_MIN_MARGIN_PCT = 1.0
NPU_SINGLE_SHOT_MARGIN_PCT = 4.0  # E.1: single-shot NPU comparisons below ~4 % are noise


def next_stage(name: str) -> StageDef | None:
    names = [s.name for s in STAGES]
    if name not in names:
        return None
    i = names.index(name)
    return STAGES[i + 1] if i + 1 < len(STAGES) else None


def stage_exit_reason(stage: str, consecutive_no_gain: int) -> str:
    """R14: '' while the stage goes on; why it ends once its consecutive-no-gain streak reaches the threshold."""
    sdef = STAGES_BY_NAME[stage]
    if consecutive_no_gain >= sdef.no_gain_threshold:
        return f"{consecutive_no_gain} consecutive rounds without gain (threshold {sdef.no_gain_threshold})"
    return ""


@dataclass(frozen=True)
class StageStep:
    to: str | None  # the stage entered; None: the session finishes (reporting only)
    why: str  # the transition's reason, as the ledger records it
    next_step: str  # what the agent does next


def after_stage(stage: str, reason: str, *, converged: bool) -> StageStep:
    """Where leaving ``stage`` leads (R23): the next configuration stage; after the last one, ALGORITHM when the
    configuration stages converged by measurement, else the report — an early exit by a complete checklist
    (``converged`` False) never opens ALGORITHM, whose declared changes need convergence shown by measurement (marks
    alone must not walk a session there); after ALGORITHM, the report."""
    nxt = next_stage(stage)
    if nxt is not None:
        return StageStep(nxt.name, f"{stage} left: {reason}",
                         f"stage {stage} left ({reason}); now {nxt.name}: collect_swimlane + analyze_bubbles first "
                         "(R15)")
    if stage == ALGORITHM_STAGE.name:
        return StageStep(None, f"algorithm stage done ({reason})", "all stages done: reporting only")
    if not converged:
        return StageStep(None, f"{stage} left early ({reason}); the configuration stages did not converge by "
                         "measurement, so no algorithm stage (R23)",
                         "last configuration stage left early: reporting only (ALGORITHM needs measured convergence)")
    return StageStep(ALGORITHM_STAGE.name, f"{stage} left: {reason}; configuration stages converged (R23)",
                     "configuration stages converged without reaching the target: stage ALGORITHM (declared "
                     "algorithm-level changes, algorithm=true), or stop_session + render_report")


class Judgement(BaseModel):
    result_type: Literal["gain", "no-gain", "regression"]
    after_us: float
    delta_pct: float
    margin_pct: float
    decisive: bool = True  # False: the noise band still straddles the decision (more samples would help)
    note: str = ""


NPU_MIN_REPEATS = 3  # a floor the agent cannot lower (issue #10, attack 9)
NPU_MAX_SAMPLES_FACTOR = 6  # an ambiguous NPU round takes more repeats (of both states), up to 6 × repeats each
NPU_Z = 2.5  # confidence multiplier; simulated at σ = 2 %, 3 repeats: a true 5 % gain kept in 99.1 % of rounds, a true
# 0.5 % one in 1.0 % (z = 2 gave 99.9 % / 3.1 %: too many noise wins; z = 3 lost real 5 % gains)
MEDIAN_SE_FACTOR = 1.2533  # standard error of a median ≈ 1.2533 σ/√n for normal noise


def repeats_for(run_mode: str, repeats: int | None) -> int:
    """How many samples of each state a measurement takes: SIM one (deterministic), the NPU at least
    ``NPU_MIN_REPEATS`` — a floor the agent cannot lower — and never more than 20."""
    if repeats is not None and run_mode == "npu" and int(repeats) < NPU_MIN_REPEATS:
        raise InputError(f"repeats on the NPU must be at least {NPU_MIN_REPEATS}, got {repeats}",
                         hint=f"NPU times are noisy: the server measures at least {NPU_MIN_REPEATS} times and more "
                         "when a difference is not decisive; omit repeats for the default")
    reps = int(repeats) if repeats is not None else (1 if run_mode == "sim" else NPU_MIN_REPEATS)
    if not 1 <= reps <= 20:
        raise InputError(f"repeats must be 1..20, got {reps}", hint=f"NPU default {NPU_MIN_REPEATS}, SIM 1 "
                         "(deterministic)")
    return reps


def _rel_se_pct(before: list[float], after: list[float]) -> float:
    """Standard error (in % of the kept time) of the difference of the two medians, from the pooled spread.

    Pooling matters: three samples alone give a wild σ; the kept state usually has several measurements (baseline,
    stage re-collections), and both sides share the same noise source (the device)."""
    mb, ma = statistics.median(before), statistics.median(after)
    resid = [x / mb - 1.0 for x in before] + [x / ma - 1.0 for x in after]
    dof = max(len(resid) - 2, 1)
    sigma = (sum(r * r for r in resid) / dof) ** 0.5
    return MEDIAN_SE_FACTOR * sigma * (1.0 / len(before) + 1.0 / len(after)) ** 0.5 * 100.0


def judge_measurement(before_us: float, samples_us: list[float], run_mode: str,
                      before_samples: list[float] | None = None, *, final: bool = True) -> Judgement:
    """Keep/revert from the server's own samples against the last kept state (E.1 resolved).

    SIM is deterministic, so a gain is any strict improvement. On the NPU the decision needs confidence: with the
    difference of the medians ``d`` and its standard error ``se`` (pooled from the kept state's samples and the
    round's), a gain is ``d + z·se < −1 %`` (surely better by more than 1 %), a regression ``d − z·se > +1 %``, and
    no-gain ``d − z·se > −1 %`` (surely not 1 % better), z = 2.5. Anything else is not decisive: the caller measures
    both states again (``collect_swimlane`` takes up to 6 × ``repeats`` samples of each); when ``final`` an
    undecided change is not kept. This is stricter than E.1's "median better by max(2σ, 1 %)", which kept 7 % of
    true 0.5 % changes at σ = 2 % in simulation. Without samples of the kept state (legacy) the round's own σ is used;
    a single-shot comparison needs 4 %. "Equal" is never a gain: every kept change earned its place.
    """
    after = statistics.median(samples_us)
    delta_pct = (after - before_us) / before_us * 100.0 if before_us else 0.0
    note = ""
    if run_mode == "sim":
        if delta_pct < 0:
            kind: Literal["gain", "no-gain", "regression"] = "gain"
            if -delta_pct < SIM_TRANSFER_WARN_PCT:
                note = f"gain of {-delta_pct:.2f} % is below {SIM_TRANSFER_WARN_PCT} %: may not transfer to the NPU"
        else:
            kind = "regression" if delta_pct > 0 else "no-gain"
        return Judgement(result_type=kind, after_us=after, delta_pct=delta_pct, margin_pct=0.0, note=note)
    before = list(before_samples or [])
    if len(before) + len(samples_us) >= 4 and before:
        se = _rel_se_pct(before, samples_us)
    elif len(samples_us) >= 3:
        se = statistics.pstdev(samples_us) / after * 100.0 if after else 0.0
    else:
        se = NPU_SINGLE_SHOT_MARGIN_PCT / 2
    lo, hi = delta_pct - NPU_Z * se, delta_pct + NPU_Z * se
    margin = max(2 * se, NPU_MIN_MARGIN_PCT)
    if hi < -NPU_MIN_MARGIN_PCT:
        kind, decisive = "gain", True
    elif lo > NPU_MIN_MARGIN_PCT:
        kind, decisive = "regression", True
    elif lo > -NPU_MIN_MARGIN_PCT:
        kind, decisive = "no-gain", True
    else:
        decisive = False
        kind = "gain" if delta_pct < -margin else "regression" if delta_pct > margin else "no-gain"
    if not decisive and final:
        # The change did not prove itself within the sample budget: it is not kept (no-gain), whatever the median.
        kind = "regression" if delta_pct > margin else "no-gain"
        note = (f"not decisive after {len(samples_us)} samples (±{NPU_Z * se:.2f} %): not kept — a gain must be "
                "shown beyond the noise")
    return Judgement(result_type=kind, after_us=after, delta_pct=delta_pct, margin_pct=margin, decisive=decisive,
                     note=note)


_JUDGED = {"gain": "gain", "no-gain": "no gain", "regression": "slower"}


@dataclass(frozen=True)
class BatchTrial:
    """A trial of a batch as the keep-the-best rule sees it: its samples (empty: it failed), the kept state's samples
    measured beside it (NPU; empty: the kept state's own), whether the server discarded it, its round and place."""
    round_no: int
    index: int
    samples: tuple[float, ...]
    kept_pool: tuple[float, ...]
    invalid: bool


@dataclass(frozen=True)
class BatchOutcome:
    decision: Literal["kept", "reverted", "failed", "invalid"]
    result_type: str  # "" for a failed trial: its failure kind stands
    reason: str = ""  # "" for a failed or invalid trial: its own reason stands
    delta_pct: float | None = None
    margin_pct: float | None = None


def judge_batch(kept_us: float, kept_samples: list[float], run_mode: str,
                trials: list[BatchTrial]) -> list[BatchOutcome]:
    """Keep the best of a batch: every measured trial is judged against the kept state (``judge_measurement``); of the
    gains, the fastest is kept (a tie goes to the one listed first) and the others are "not-chosen" — one change
    point is kept per round. A trial without samples failed; an invalid one says nothing of its code."""
    out: list[BatchOutcome] = []
    for t in trials:
        if t.invalid:
            out.append(BatchOutcome("invalid", "invalid"))
            continue
        if not t.samples:
            out.append(BatchOutcome("failed", ""))
            continue
        pool = list(t.kept_pool or kept_samples)
        j = judge_measurement(statistics.median(pool) if t.kept_pool else kept_us, list(t.samples), run_mode, pool)
        reason = "; ".join(x for x in (f"{_JUDGED[j.result_type]}: {j.delta_pct:+.2f} % against the kept state",
                                       j.note) if x)
        out.append(BatchOutcome("reverted", j.result_type, reason, j.delta_pct, j.margin_pct))
    gains = [i for i, o in enumerate(out) if o.result_type == "gain"]
    if not gains:
        return out
    best = min(gains, key=lambda i: (statistics.median(trials[i].samples), trials[i].index))
    win, win_us = trials[best], statistics.median(trials[best].samples)
    for i in gains:
        o = out[i]
        if i == best:
            out[i] = BatchOutcome("kept", o.result_type, o.reason, o.delta_pct, o.margin_pct)
        elif statistics.median(trials[i].samples) == win_us:
            out[i] = BatchOutcome("reverted", "not-chosen", f"a gain ({o.delta_pct:+.2f} %) equal to round "
                                  f"{win.round_no}'s: one change is kept per batch, and a tie goes to the one listed "
                                  "first", o.delta_pct, o.margin_pct)
        else:
            out[i] = BatchOutcome("reverted", "not-chosen", f"a gain ({o.delta_pct:+.2f} %), smaller than round "
                                  f"{win.round_no}'s ({out[best].delta_pct:+.2f} %), which was kept", o.delta_pct,
                                  o.margin_pct)
    return out


def classify_failure(verdict: str, key_output: str) -> Literal[
    "compile-failure", "runtime-error", "precision-failure", "timeout"
]:
    """Map a failed verification to the round-table result type of domain D.3."""
    text = key_output.lower()
    if verdict == "timeout":
        return "timeout"
    compile_marks = ("run pass failed", "fc4000", "f21004", "invalid l1/l0", "compile", "syntaxerror", "codegen")
    if any(m in text for m in compile_marks):
        return "compile-failure"
    if "errcode: ffffff" in text and "costmodelrunonce" in text.replace("_", ""):
        # SIM: the cost model would not build what PyPTO compiled (its ParseInput::BuildFunction; PyPTO's arctic
        # LSTM with ``vec_nbuffer_setting`` {-1: 8} or {-1: 16}): the candidate's value made no program the
        # simulator runs, as a pass error does — not a value that came out wrong (SIM computes none)
        return "compile-failure"
    if verdict == "failed":
        return "precision-failure"
    return "runtime-error"


def _per_kernel(calls: list[str]) -> dict[str, int]:
    """How often each kernel was called: ``pool#1``, ``pool#2`` → {pool: 2} (the numbering is per run)."""
    out: dict[str, int] = {}
    for c in calls:
        head, sep, number = c.rpartition("#")
        name = head if sep and number.isdigit() else c
        out[name] = out.get(name, 0) + 1
    return out


def work_changed(kept_calls: list[str] | None, kept_folders: int | None, calls: list[str] | None,
                 folders: int) -> str | None:
    """Why a run's time cannot be compared with the kept state's (rule ``same-work``), or None.

    The session metric sums the work time over a run's output folders, one per jit kernel call (B.10): a run that
    calls fewer kernels is faster without any kernel being faster. ``kept_calls`` / ``calls``: the kernel calls of
    one run (``softmax_kernel``, ``pool#1``, ``pool#2``), None where they could not be named, in which case the
    number of output folders decides. Nothing known of the kept state (the baseline itself): None."""
    if kept_calls is not None and calls is not None:
        before, now = _per_kernel(kept_calls), _per_kernel(calls)
        if before == now:
            return None
        diffs = [f"{k} {now.get(k, 0)} time(s) now, {before.get(k, 0)} in the kept state's runs"
                 for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
        return (f"the run called other kernels than the kept state's runs ({'; '.join(diffs)}): with this change "
                "the test runs other work (a guard, a caught exception or a branch on the tiling decides what runs), "
                "so its time is not comparable with the kept time (rule same-work)")
    if kept_folders is not None and kept_folders != folders:
        return (f"the run wrote {folders} output folder(s), one per kernel call, the kept state's runs "
                f"{kept_folders}: with this change the test runs other work, so its time is not comparable with the "
                "kept time (rule same-work)")
    return None
