"""Runs and their numbers: executing the test command, collecting swim lanes, analysing them."""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field
import shutil
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.analysis import analyze_runs, find_run_dirs, validate_run, write_report
from pypto_tune.tools.analysis.engine import SIM_LIMIT_NAME
from pypto_tune.tools.running.artifacts import archive_run_dirs
from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.session.discarded import ENVIRONMENT
from pypto_tune.tools.session.ledger import LEDGER_DIR, now_iso
from pypto_tune.tools.patching import (
    hash_sources,
)
from pypto_tune.tools.operations.results import (
    AnalyzeResult,
    CollectResult,
    KernelTime,
    SuggestionOut,
)
from pypto_tune.tools.running.chips import ChipHealth, chip_health
from pypto_tune.tools.code.codestate import ExecFile, exec_files
from pypto_tune.tools.running.execution import dir_digest
from pypto_tune.tools.running.run_outputs import foreign_sources
from pypto_tune.tools.running.executors.base import RunSpec
from pypto_tune.tools.running import probe
from pypto_tune.tools.running.probe import store as probe_store
from pypto_tune.tools.running.runner import RunResult
from pypto_tune.tools.running.verdict import SIM_NOTE, VerdictResult
from pypto_tune.tools.rules.precision import judge_precision
from pypto_tune.tools.session.state import SessionState
from pypto_tune.tools.code.workspace import inside

from pypto_tune.tools.operations.base import (
    exclusive, Progress, Handle, SessionContext, code_hash,
)
from pypto_tune.tools.operations.run_world import RunWorldOps
from pypto_tune.tools.operations.stages import StageControl


log = logging.getLogger("pypto_tune.service")

# Runs that carry the run-time probe (tools/running/probe/): every precision run — the baseline's and each change's
# verification, so the kept state always has a record — never a run made only to measure. On the NPU a measurement
# is always a run of its own (probe-free: the probe's Python wrappers run on the host between device calls). In SIM,
# a batch trial's precision run is also its first sample (sim_run_serves_both).
PROBED_PURPOSES = frozenset({"precision", "trial-precision"})


def sim_run_serves_both(run_mode: str) -> bool:
    """Whether a change's precision run is also its first measurement sample: in SIM only — a batch trial's always,
    a manual round's when ``collect_swimlane`` follows ``run_precision_check`` of the same bytes with no run in
    between (``RunOps.offer_sample`` / ``take_sample``).

    The simulator is a cost model of the compiled program — deterministic, blind to the host's Python, so the probe
    cannot move its cycles — and it writes the swimlane files on every run, precision or not. A second run of the
    same bytes wrote the same files (measured 2026-12-05 on a campaign's softmax trials: every file of both output
    folders equal byte for byte but the simulator's config file, which names its own folder). Each change ran the
    test twice; now once, and the sample still passes every check of ``measure`` (exit code, own output folders,
    sources, validity, rule same-work), folders rewritten after the run included: an edit of WORKSPACE/output/
    between run_precision_check and collect_swimlane makes the measurement invalid. On the NPU the measurement stays
    a run of its own."""
    return run_mode == "sim"


#: What the ledger keeps of one run's output: the first and the last RUN_OUTPUT_KEPT_BYTES (the runner captured up to
#: 2 MiB each, and the verdict was judged on that capture; ``runs.output_bytes`` keeps the whole count). Once a
#: session's runs hold SESSION_OUTPUT_BUDGET_BYTES of output, each later run keeps OVER_BUDGET_KEPT_BYTES at each
#: end. A test printing 50 MB per run thus adds at most 128 KiB of output per run to the ledger, and a session at
#: most 64 MiB plus 8 KiB per run after that (a chatty test once stored 4 MB per run: gigabytes per session).
RUN_OUTPUT_KEPT_BYTES = 64 * 1024
SESSION_OUTPUT_BUDGET_BYTES = 64 * 1024 * 1024
OVER_BUDGET_KEPT_BYTES = 4 * 1024


def stored_output(head: str, tail: str, session_stored_bytes: int) -> tuple[str, str]:
    """The head and tail of a run's output as the ledger stores them (see RUN_OUTPUT_KEPT_BYTES)."""
    keep = RUN_OUTPUT_KEPT_BYTES if session_stored_bytes < SESSION_OUTPUT_BUDGET_BYTES else OVER_BUDGET_KEPT_BYTES
    hb, tb = head.encode("utf-8", "surrogateescape"), tail.encode("utf-8", "surrogateescape")
    if not tb and len(hb) > keep:  # all of it fitted the capture's head: its end is the tail to keep
        hb, tb = hb[:keep], hb[-keep:]
    return (hb[:keep].decode("utf-8", "ignore"), tb[-keep:].decode("utf-8", "ignore"))


@dataclass
class Measured:
    """Samples of one code state gathered by ``measure`` (one or several batches)."""

    samples: list[float] = field(default_factory=list)
    e2es: list[float] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    archive: str = ""
    traces: list[str] = field(default_factory=list)

    per_kernel: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # label -> {"time": [], "e2e": []}
    discarded: str = ""  # why the server discarded a run of these samples (its reason, not the code's failure)

    @property
    def valid(self) -> bool:
        return not self.invalid and bool(self.samples)

    def add_kernels(self, calls: "KernelCalls", analysis: Any) -> None:
        """Per-kernel figures of one run: each output folder named after its jit (``softmax_kernel#2`` for a
        second call), so a test that runs several kernels shows which one moved (issue #11)."""
        if calls.error:
            self.notes.append(f"kernels not named: {calls.error}")
            return
        labels = calls.by_dir
        for d in analysis.per_dir:
            label = labels.get(str(d.run_dir)) or labels.get(str(Path(d.run_dir)))
            if label is None:
                continue
            k = self.per_kernel.setdefault(label, {"time": [], "e2e": []})
            k["time"].append(float(d.operator_time_us))
            k["e2e"].append(float(d.e2e_us))
        # the stored analysis names each folder's kernel too (the search reads per_dir[i]["kernel"] after the
        # output folders may be gone)
        for entry in self.analysis.get("per_dir", []):
            label = labels.get(str(entry.get("run_dir")))
            if label is not None:
                entry["kernel"] = label

    def absorb(self, other: "Measured") -> None:
        self.samples += other.samples
        self.e2es += other.e2es
        self.run_ids += other.run_ids
        self.dirs += other.dirs
        self.invalid += other.invalid
        self.discarded = self.discarded or other.discarded
        self.notes += other.notes
        for label, figs in other.per_kernel.items():
            mine = self.per_kernel.setdefault(label, {"time": [], "e2e": []})
            mine["time"] += figs["time"]
            mine["e2e"] += figs["e2e"]
        if other.analysis:
            self.analysis = other.analysis


@dataclass
class KernelCalls:
    """The kernel each output folder of one run belongs to, read once from the folders' ``program.json`` for both
    its uses: the per-kernel figures and rule same-work."""

    by_dir: dict[str, str] = field(default_factory=dict)  # str(run folder) → label, in call order
    error: str = ""  # why a folder's kernel could not be named ("" when all were)

    @property
    def labels(self) -> list[str] | None:
        return None if self.error else list(self.by_dir.values())


def _kernel_calls(dirs: list[Path]) -> KernelCalls:
    from pypto_tune.tools.analysis.kernel_name import label_kernel_runs
    from pypto_tune.tools.errors import ArtifactError

    try:
        return KernelCalls({r.run_dir: r.label for r in label_kernel_runs(dirs)})
    except ArtifactError as exc:
        return KernelCalls(error=exc.message)


def _kept_work(st: SessionState) -> tuple[list[str] | None, int | None]:
    """The kernel calls and output folders of one run of the kept state, from its latest valid measurement (None,
    None before the baseline was measured). What rule same-work compares every later run with."""
    kept = [m for m in st.rows["measurements"] if m["valid"] and m["code_hash"] == st.kept_hash]
    if not kept:
        return None, None
    last = kept[-1]
    calls = list(last.get("per_kernel") or {}) or None
    folders = len((last.get("analysis") or {}).get("run_dirs") or []) or None
    return calls, folders


@dataclass
class RunOutcome:
    """One recorded run: what the command did, its ledger row, its output folders (now in WORKSPACE/output/), and
    the files that changed in its private copy while it ran (non-empty: the run is discarded)."""

    result: RunResult
    run_id: int
    dirs: list[Path]
    tampered: list[str] = field(default_factory=list)
    device_id: str | None = None
    output_digests: dict[str, str] = field(default_factory=dict)  # str(dir) → digest when it left the copy
    output_sources: dict[str, list[str]] = field(default_factory=dict)  # str(dir) → recorded files program.json names
    rejected_outputs: dict[str, list[str]] = field(default_factory=dict)  # folder name → why it did not count

    @property
    def rejected_reason(self) -> str:
        """Why output folders the run left did not count (not born in this run, or not its compiled code)."""
        return "; ".join(f"{name}: {', '.join(why)}" for name, why in sorted(self.rejected_outputs.items()))

    @property
    def rejected_verdict(self) -> str:
        """The precision verdict's reason when the test exited 0 and every output folder it left was rejected."""
        return ("the test exited 0 but no output folder it left counts — not born in this run or not compiled from "
                f"its recorded copy: {self.rejected_reason}")

    def __iter__(self):  # (result, run_id, dirs), as callers unpack it
        return iter((self.result, self.run_id, self.dirs))

    @property
    def environment_discard(self) -> bool:
        """Discarded for the environment's sake only (``discarded.ENVIRONMENT``), not for a rewritten copy."""
        return bool(self.tampered) and all(t.startswith(ENVIRONMENT) for t in self.tampered)

    @property
    def tamper_reason(self) -> str:
        if not self.tampered:
            return ""
        box = [t.removeprefix("sandbox ") for t in self.tampered if t.startswith("sandbox ")]
        if box:
            return ("the run sandbox could not be set up (" + box[0] + "): the test never ran, so the run is "
                    "discarded — it says nothing about the code; check bubblewrap and the folders the session "
                    "mounts (serve --sandbox-root), then run it again")
        res = [t.removeprefix("resource ") for t in self.tampered if t.startswith("resource ")]
        if res:
            return ("the disk filled while the run executed (" + "; ".join(res) + "): what it wrote or printed may be "
                    "cut short, so the run is discarded — it says nothing about the code; free space and run it again")
        env = [t for t in self.tampered if t.startswith("interpreter ")]
        if env:
            return ("the interpreter's files changed since the session scanned them before its baseline ("
                    + "; ".join(t.removeprefix("interpreter ") for t in env[:5]) + "): the run may not have "
                    "executed what the ledger records and is discarded — put them back is not enough (the scan "
                    "sees any write since); start a new session to tune against the changed environment")
        return ("files of the run's private copy changed while it ran (" + ", ".join(self.tampered[:5]) + "): the "
                "run did not execute the recorded bytes and is discarded")


@dataclass(frozen=True)
class CheckedRun:
    """A precision run judged as the ledger records it: the test's verdict (R4) amended by what the server saw of the
    run, and the result type a failure is recorded as."""

    verdict: str
    reason: str
    result_type: str | None  # None when passed
    command_problem: bool  # exit 0 and no verdict line at all
    judged: VerdictResult


#: result type of a run the server discarded for its own reasons (``RunOutcome.tampered``): not the code's failure
DISCARDED = "discarded"

NO_SIM_FOLDER = ("the test exited 0 but the simulator wrote no output folder: nothing was simulated (is the jit "
                 "run_mode SIM and the test calling the kernel?)")


def check_run(out: RunOutcome, run_mode: str, **verdict_options: Any) -> CheckedRun:
    """The one place a precision run's verdict and failure type are decided, for a manual round's check and a
    search trial's alike. The failure type is read from what the run did and printed, never from the server's own
    annotations: the SIM note ("compiled and simulated only") once made every SIM run without a usable output
    folder a "compile failure", which the search's history and the knowledge store learn as a fact about the
    candidate's value."""
    judged = judge_precision(out.result, run_mode, **verdict_options)
    v, reason = judged.verdict, judged.reason
    if out.tampered:
        # discarded: the run may not have executed the recorded code, so it says nothing about that code. When only
        # the environment is to blame (the interpreter's files, a full disk, the sandbox), its type is no failure
        # type of the code (tools/session/discarded.py: never R19, never the search's history); a copy rewritten
        # while it ran (an attack on the run by a process of the agent's account) stays charged to the change
        return CheckedRun("error", out.tamper_reason, DISCARDED if out.environment_discard else "runtime-error",
                          False, judged)
    if v == "passed" and run_mode == "sim" and not out.dirs:
        # the test ran to its end and said it passed, but left nothing this run compiled from its recorded copy: a
        # run that cannot be measured, not a candidate that failed to compile
        if out.rejected_outputs:
            return CheckedRun("failed", out.rejected_verdict, "runtime-error", False, judged)
        # no folder at all: a compile error the test caught and printed past is still the candidate's, read from
        # the run's error lines only (a pass line may well say "compiled and simulated", as our fixtures' do)
        deciding = {f"L{d.line_no}: {d.text}" for d in judged.deciding_lines}
        errors = [line for line in judged.key_output.splitlines() if line not in deciding and line != SIM_NOTE]
        kind = tuning_loop.classify_failure("error", "\n".join(errors))
        return CheckedRun("failed", NO_SIM_FOLDER, kind, False, judged)
    if v == "passed":
        return CheckedRun(v, reason, None, False, judged)
    # a run without any verdict line is flagged for the caller: at the baseline it is the command's problem
    # (COMMAND_PROBLEM, not counted under R5); for a change, the candidate's run stopped saying what the baseline's said
    return CheckedRun(v, reason, tuning_loop.classify_failure(v, judged.key_output + "\n" + reason),
                      judged.command_problem and v == "failed", judged)


class RunOps:
    """run (every execution of the test command), collect_swimlane, analyze_bubbles. A run executes in the session's
    recorded world (``worlds``); a stage's entry analysis marks the checklist through ``stages``."""

    def __init__(self, ctx: SessionContext, *, worlds: RunWorldOps, stages: StageControl) -> None:
        self.ctx = ctx
        self.worlds = worlds
        self.stages = stages

    async def run(self, h: Handle, st: SessionState, *, purpose: str, round_no: int | None,
                   device_id: str | None, sources: dict[str, str], progress: Progress,
                   batch: str | None = None, pooled: bool = False, avoid: tuple[str, ...] = ()) -> "RunOutcome":
        """Run the session's test command on a private copy of exactly the recorded state (``sources`` for the
        operator files, the blob store for everything else; ``tools/running/execution.py``) and record the run.

        A run whose copy changed while it ran (``tampered``) returns no output folders: nothing it produced may
        become a verdict or a measurement. ``pooled``: see ``chips``; ``avoid``: chips a pooled run must not
        take (the chip a trial just failed on, R5).
        """
        h.fresh_sim_runs.pop(st.id, None)  # a run in between: an offered sample is no longer the last run
        world = self.worlds.run_world(h, st)
        env = self.worlds.child_env(st, device_id)
        argv = list(st.test_command)
        files = exec_files(h.workspace, st.tree, sources) if st.tree else _legacy_files(h.workspace, st, sources)
        # pooled: a candidate trial takes whichever chip is free among the healthy chips of the session's pool, read
        # from the ledger at this moment (a chip that hung or failed in this session is not handed out while a
        # healthy one is left, tools/running/chips.py); otherwise the run goes to the session's current chip (state.device)
        pool = tuple(str(d) for d in st.session["device_ids"])
        if pooled and st.run_mode == "npu":
            pool = self.chips(h, st).for_trials(avoid)
        probed = purpose in PROBED_PURPOSES
        spec = RunSpec(files=files, argv=argv, env=env, workspace=str(h.workspace),
                       timeout_s=float(st.session["timeout_s"]), run_mode=st.run_mode,  # type: ignore[arg-type]
                       device_id=None if pooled else device_id, device_pool=pool, tag=f"{purpose}-r{round_no}",
                       sandboxed=world.sandboxed, closure=world.closure,
                       # the run-time probe (tools/running/probe/): its hook folder first on the run's PYTHONPATH; the
                       # records it writes into the folder DIR_ENV names come back as iso.captured
                       pythonpath_first=(str(probe.HOOK_DIR),) if probed else (),
                       capture_env=probe.DIR_ENV if probed else None)
        iso = await self.ctx.executor.run(spec, on_progress=progress)
        # files under the workspace path (where the sandbox mounts the copy) or under the copy itself (unsandboxed)
        # are the run's workspace files
        record = probe.parse_records(iso.captured, [str(h.workspace), iso.exec_dir]) if probed else None
        device_id = iso.device_id if st.run_mode == "npu" and iso.device_id is not None else device_id
        result, dirs = iso.result, list(iso.output_dirs)
        fp = self.ctx.fingerprint(h, st)
        if fp is not None:  # the interpreter's files, scanned before the baseline (interpreter_files.py)
            moved = await h.env_watch.changes_since(fp, ended_at=time.time())
            iso.tampered = list(iso.tampered) + [f"interpreter {c}" for c in moved[:20]]
        full = _disk_nearly_full([h.workspace, iso.exec_dir])
        if full:  # its output may have been cut short: what it says is the disk's, not the code's
            iso.tampered = list(iso.tampered) + [f"resource {full}"]
        box = _sandbox_failure(result) if world.sandboxed else ""
        if box:  # bubblewrap could not set the sandbox up: the test never ran
            iso.tampered = list(iso.tampered) + [f"sandbox {box}"]
        if iso.tampered:
            log.warning("run %s: discarded: %s", purpose, iso.tampered)
            dirs = []
        head, tail = stored_output(result.output_head, result.output_tail, h.ledger.stored_output_bytes(st.id))
        run_row = dict(
            at=now_iso(), purpose=purpose, round=round_no, argv=iso.argv,
            env={k: v for k, v in env.items()}, cwd=iso.exec_dir, exit_code=result.exit_code,
            signal=result.signal, timed_out=result.timed_out, cancelled=result.cancelled,
            duration_s=result.duration_s, started_epoch=result.started_at, output_head=head,
            output_tail=tail, output_bytes=result.output_bytes,
            output_dirs=[str(d) for d in dirs], code_hash=code_hash(sources), raw_hash=hash_sources(sources),
            device_id=device_id, exec_hash=iso.exec_hash, exec_dir=iso.exec_dir, tampered=iso.tampered,
            batch=batch,
        )
        if iso.tampered:
            record = None  # a discarded run's probe says nothing either
        known = [r["modules_hash"] for r in h.ledger.rows("probes", st.id)] if record is not None else []
        with h.record(st.id).transaction() as rec:
            run_id = rec.run(**run_row)
            if record is not None:
                record = record.model_copy(update={"ran_sources": dict(sources)})
                rec.probe(at=run_row["at"], run_id=run_id, code_hash=run_row["code_hash"],
                          fields=probe_store.to_row(record, known))
        return RunOutcome(result, run_id, dirs, list(iso.tampered), device_id if st.run_mode == "npu" else None,
                          dict(iso.output_digests), {str(d): list(iso.output_sources.get(str(d), [])) for d in dirs},
                          dict(iso.rejected_outputs))

    def chips(self, h: Handle, st: SessionState) -> ChipHealth:
        """The session's chips as the ledger knows them now (``tools/running/chips.py``): which failed, which are healthy.
        Read afresh, not from ``st``: trials of a batch run concurrently and one may have just left a chip behind."""
        rows = {t: h.ledger.rows(t, st.id) for t in ("runs", "precision_records")}
        return chip_health(rows, [str(d) for d in st.session["device_ids"]])

    def offer_sample(self, h: Handle, st: SessionState, sources: dict[str, str], out: "RunOutcome",
                     verdict: str) -> None:
        """After a precision run of ``sources``: a passed, untouched SIM run may be the sample of the next
        ``collect_swimlane`` of exactly these bytes (:func:`sim_run_serves_both`). The bytes, not the code hash: the
        hash leaves the runtime-debug switch out (it does not change numerics), and the baseline is measured after
        enable_runtime_debug, on other bytes than its precision run's."""
        if verdict == "passed" and sim_run_serves_both(st.run_mode) and not out.tampered:
            h.fresh_sim_runs[st.id] = (hash_sources(sources), out)

    def take_sample(self, h: Handle, st: SessionState) -> "RunOutcome | None":
        """The offered sample, when it is of the bytes about to be measured and no run came after it; used once."""
        fresh = h.fresh_sim_runs.pop(st.id, None)
        if fresh is None or fresh[0] != hash_sources(st.expected_sources) or not sim_run_serves_both(st.run_mode):
            return None
        return fresh[1]

    async def measure(self, h: Handle, st: SessionState, *, sources: dict[str, str], code: str, purpose: str,
                       round_no: int, count: int, label: str, progress: Progress,
                       batch: str | None = None, pooled: bool = False,
                       first: "RunOutcome | None" = None) -> "Measured":
        """``count`` runs of ``sources``, each analysed by the server; stops at the first invalid run.

        A run that hangs until the timeout is a chip problem on the NPU: the state moves to the next healthy chip of
        the pool (R5 rotation, ``tools/running/chips.py``; a pooled run leaves the hung chip out) and that repeat is tried
        once more there.

        ``first``: a run of exactly these sources the server already made (the trial's precision run, SIM only — see
        :func:`sim_run_serves_both`) that serves as the first sample; it passes every check a fresh run would.
        """
        m = Measured()
        i = 0
        retries = max(len(st.session["device_ids"]) - 1, 0)
        while i < count:
            async def rep_progress(elapsed: float, line: str, i: int = i, **_: object) -> None:
                if progress:
                    await progress(elapsed, line, phase=f"{label} {i + 1}/{count}", step=i, steps=count)
            if i == 0 and first is not None:
                out = first
                await rep_progress(0.0, "the precision run of these bytes (SIM: one run serves both)")
            else:
                out = await self.run(h, st, purpose=purpose, round_no=round_no, device_id=st.device,
                                      sources=sources, progress=rep_progress, batch=batch, pooled=pooled)
            result, run_id, dirs = out
            m.run_ids.append(run_id)
            if result.timed_out and retries > 0 and st.run_mode == "npu":
                retries -= 1
                st = self.ctx.state(h, st.id)  # the hung chip is left behind
                m.notes.append(f"{label} {i + 1}: chip timed out after {result.duration_s:.0f} s; retried on chip "
                               f"{st.device}")
                continue
            if out.tampered:
                m.invalid.append(f"{label} {i + 1}: {out.tamper_reason}")
                m.discarded = out.tamper_reason if out.environment_discard else ""
                break
            if result.timed_out or result.exit_code != 0:
                m.invalid.append(f"{label} {i + 1}: the test command failed (exit {result.exit_code}, timeout "
                                 f"{result.timed_out}): {result.output_tail[-400:]}")
                break
            if not dirs:
                m.invalid.append(f"{label} {i + 1}: the run wrote no output folder" + (
                    f" of its own ({out.rejected_reason})" if out.rejected_outputs else ""))
                break
            if out.rejected_outputs:
                m.invalid.append(f"{label} {i + 1}: output folders that were not born in this run or not compiled "
                                 f"from its recorded copy ({out.rejected_reason}): the run's figures cannot be told "
                                 "apart from them")
                break
            foreign = _foreign_sources(st, out.output_sources)
            if foreign:
                m.invalid.append(f"{label} {i + 1}: {foreign}")
                break
            reasons = [r for d in dirs for r in validate_run(d, st.run_mode)]
            m.dirs.extend(dirs)
            if reasons:
                m.invalid.extend(f"{label} {i + 1}: {r}" for r in reasons)
                break
            # off the event loop: parallel trials keep reporting progress while one of them is analysed
            analysis = await anyio.to_thread.run_sync(
                lambda: analyze_runs(dirs, run_mode=st.run_mode, source_root=h.workspace))
            rewritten = await anyio.to_thread.run_sync(lambda: _rewritten_outputs(dirs, out.output_digests))
            if rewritten:
                m.invalid.append(f"{label} {i + 1}: run folders changed after the run ended ("
                                 + ", ".join(Path(d).name for d in rewritten[:3]) + "): their figures are not the "
                                 "run's — nothing may write to WORKSPACE/output/ while the server measures")
                break
            if analysis.invalid_reasons:
                m.invalid.extend(f"{label} {i + 1}: {r}" for r in analysis.invalid_reasons)
                break
            calls = _kernel_calls(dirs)
            changed = tuning_loop.work_changed(*_kept_work(st), calls.labels, len(dirs))
            if changed:
                m.invalid.append(f"{label} {i + 1}: {changed}")
                break
            m.samples.append(float(analysis.operator_time_us))
            m.e2es.append(float(analysis.e2e_us))
            m.analysis = analysis.model_dump(mode="json")
            for entry in m.analysis.get("per_dir", []):
                entry["sources"] = out.output_sources.get(str(entry.get("run_dir")), [])
            m.add_kernels(calls, analysis)
            i += 1
        return m

    def record_measurement(self, h: Handle, st: SessionState, m: "Measured", *, round_no: int, code: str,
                            label: str) -> int:
        art_dir = h.workspace / LEDGER_DIR / "artifacts" / st.id
        archive = ""
        traces: list[str] = []
        if m.dirs:
            stamp = datetime.now().strftime("%H%M%S%f")
            archive = str(archive_run_dirs(m.dirs, art_dir / f"{label}-{stamp}.tar.gz"))
            traces = _keep_traces(m.dirs, art_dir / "traces" / f"{label}-{stamp}")
        analysis = dict(m.analysis)
        analysis["trace_copies"] = traces
        m.archive, m.traces = archive, traces
        return h.record(st.id).measurement(round=round_no, code_hash=code, valid=m.valid, invalid_reasons=m.invalid,
                                           operator_time_us=statistics.median(m.samples) if m.valid else None,
                                           e2e_us=statistics.median(m.e2es) if m.valid else None, samples=m.samples,
                                           analysis=analysis, archive=archive, run_ids=m.run_ids, stage=st.stage,
                                           per_kernel=m.per_kernel)

    @exclusive
    async def collect_swimlane(self, session_id: str, *, progress: Progress = None) -> CollectResult:
        """Run the test with runtime_debug_mode 1, parse the new output folders and record a measurement.

        On the NPU a round's measurement is sequential: after ``repeats`` samples the server asks whether the
        difference to the kept state is decisive (``tuning_loop.judge_measurement``); if not, it measures the kept state
        and the candidate ``repeats`` more times each, up to 6 × ``repeats`` — so noise can neither keep a
        change that did not pay nor drop one that did, and the agent has no say in how often it is measured.
        """
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "collect_swimlane")
        h.busy = "collect_swimlane"
        try:
            if st.open_round is not None:
                round_no, purpose = st.open_round.number, "measure"
            elif st.level1 == "S2_COLLECT":
                round_no, purpose = 0, "baseline"
            else:
                round_no, purpose = -1, "stage-baseline"
            reps = int(st.session["repeats"])
            label = f"round{round_no}" if round_no >= 0 else f"{(st.stage or 'stage').lower()}-entry"
            m = await self.measure(h, st, sources=st.expected_sources, code=st.current_hash, purpose=purpose,
                                    round_no=round_no, count=reps, label="repeat", progress=progress,
                                    first=self.take_sample(h, st))
            notes = list(m.notes)
            if (purpose == "measure" and st.run_mode == "npu" and m.valid and st.kept_samples
                    and st.kept_us is not None):
                kept_pool = list(st.kept_samples)
                cap = reps * tuning_loop.NPU_MAX_SAMPLES_FACTOR
                while True:
                    j = tuning_loop.judge_measurement(statistics.median(kept_pool), m.samples, "npu", kept_pool,
                                                final=False)
                    if j.decisive or len(m.samples) >= cap:
                        break
                    ref = await self.measure(h, st, sources=st.kept_sources, code=st.kept_hash,
                                              purpose="kept-reference", round_no=-2, count=reps,
                                              label="kept-state reference", progress=progress)
                    self.record_measurement(h, st, ref, round_no=-2, code=st.kept_hash, label=f"{label}-reference")
                    more = await self.measure(h, st, sources=st.expected_sources, code=st.current_hash,
                                               purpose=purpose, round_no=round_no, count=reps, label="repeat",
                                               progress=progress)
                    m.absorb(more)
                    if ref.valid:  # an invalid reference never joins the kept time (state.kept_samples_of)
                        kept_pool += ref.samples
                    notes.append(f"not decisive at ±{tuning_loop.NPU_Z} se: measured the kept state and the candidate "
                                 f"{reps} more times each ({len(m.samples)} samples)")
                    if not (ref.valid and more.valid):
                        break
            mid = self.record_measurement(h, st, m, round_no=round_no, code=st.current_hash, label=label)
            st2 = self.ctx.state(h, session_id)
            if not m.valid:
                # the stitch advice is for what B.9.3 describes (split device tasks, missing swimlane files), not
                # for a cause already named with its own way out (the simulator's limit, rule same-work...)
                stitch = any("B.9.3" in r or (" is missing in " in r and SIM_LIMIT_NAME not in r) for r in m.invalid)
                msg = ("the measurement is INVALID and was not used: " + "; ".join(m.invalid)
                       + (" — in SIM keep stitch_function_max_num ≥ the number of loop iterations (domain B.9.3)"
                          if st.run_mode == "sim" and stitch else ""))
                if st.open_round is None:
                    raise self.ctx.refuse(h, st.id, "collect_swimlane",
                                       gates.invalid_measurement(msg, gates.allowed_actions(st2)))
            else:
                op_time, e2e = statistics.median(m.samples), statistics.median(m.e2es)
                spread = (f", spread {min(m.samples):.3f}–{max(m.samples):.3f}" if len(m.samples) > 1 else "")
                msg = f"operator time {op_time:.3f} µs (median of {len(m.samples)}{spread}; E2E {e2e:.3f} µs)"
                if len(m.per_kernel) > 1 or any(len(v["time"]) > len(m.samples) for v in m.per_kernel.values()):
                    msg += "; per kernel: " + ", ".join(
                        f"{k} {statistics.median(v['time']):.3f} µs" for k, v in m.per_kernel.items())
                if purpose == "baseline":
                    self.ctx.transition(h, st2, "state", "S3_ANALYZE", "baseline collected (S2)")
                    st2 = self.ctx.state(h, session_id)
                    msg += f"; baseline set, target {st2.target_us:.3f} µs"
                elif purpose == "stage-baseline":
                    msg += f"; kept time (median of all {len(st2.kept_samples)} samples of the kept code) " \
                           f"{st2.kept_us:.3f} µs"
            if notes:
                msg += " — " + "; ".join(notes)
            return CollectResult(
                **self.ctx.result_base(st2, msg), output_dirs=[str(d) for d in m.dirs],
                artifacts=[a for a in [m.archive] if a] + m.traces,
                operator_time_us=statistics.median(m.samples) if m.valid else None,
                e2e_us=statistics.median(m.e2es) if m.valid else None,
                samples_us=m.samples, valid=m.valid, invalid_reasons=m.invalid, measurement_id=mid, round=round_no,
                target_us=st2.target_us, baseline_us=st2.baseline_us,
                per_kernel=[KernelTime(kernel=k, operator_time_us=statistics.median(v["time"]),
                                       e2e_us=statistics.median(v["e2e"]), samples=len(v["time"]))
                            for k, v in m.per_kernel.items()],
            )
        finally:
            h.busy = None

    def _measurement_to_analyse(self, h: Any, st: Any, measurement: int | None,
                                round_no: int | None) -> tuple[dict[str, Any], str]:
        """The measurement ``analyze_bubbles`` reads, and how it was chosen (issue #17): after a batch the latest
        measurement is often a trial that was not kept, so the default is the kept state's newest valid
        measurement; ``measurement`` or ``round`` pick another one explicitly."""
        rows = [m for m in st.rows["measurements"] if m["round"] != -2]  # kept-state reference samples: not runs
        if measurement is not None and round_no is not None:
            raise InputError("give measurement or round, not both",
                             hint="measurement = a measurement id (collect_swimlane and run_candidates name it); "
                             "round = a round number (0 = the baseline)")
        if measurement is not None:
            m = next((x for x in rows if int(x["id"]) == int(measurement)), None)
            if m is None:
                known = ", ".join(_measurement_label(x) for x in rows[-6:]) or "none yet"
                raise InputError(f"session {st.id} has no measurement {measurement}",
                                 hint=f"the latest are: {known}; or omit it to analyse the kept state")
            if not m["valid"]:
                raise InputError(f"measurement {measurement} is invalid ({'; '.join(m.get('invalid_reasons') or [])[:300]}"
                                 "): its figures are not analysed", hint="pick a valid one, or omit it")
            return m, "as asked"
        if round_no is not None:
            ms = [x for x in rows if x["round"] is not None and int(x["round"]) == int(round_no) and x["valid"]]
            if not ms:
                with_data = sorted({int(x["round"]) for x in rows if x["valid"] and x["round"] is not None
                                    and int(x["round"]) >= 0})
                raise InputError(f"round {round_no} has no valid measurement in session {st.id}",
                                 hint=f"rounds with one: {with_data or 'none yet'} (0 = the baseline); a round that "
                                 "failed its precision check was never measured")
            return ms[-1], f"round {round_no} as asked"
        m = st.last_valid_measurement(st.kept_hash)
        if m is None:
            raise self.ctx.refuse(h, st.id, "analyze_bubbles", gates.nothing_to_analyse(gates.allowed_actions(st)))
        which = "the kept state"
        latest = st.last_valid_measurement()
        if latest is not None and int(latest["id"]) != int(m["id"]):
            which += (f"; the newest measurement is {latest['id']} (round {latest['round']}, not kept): pass "
                      f"round={latest['round']} or measurement={latest['id']} to analyse it")
        return m, which

    @exclusive
    def analyze_bubbles(self, session_id: str | None = None, *, output_dir: str | None = None,
                        lang: str = "zh", outer_loops: int | None = None, measurement: int | None = None,
                        round: int | None = None) -> AnalyzeResult:  # noqa: A002 - the tool's parameter name
        """Analyse a measurement of the session — the kept state's by default, or the one ``measurement`` (its id)
        or ``round`` (its number; 0 = the baseline) names — or any output folder, without a session."""
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be 'zh' or 'en', got {lang!r}", hint="zh is the default")
        if session_id is None:
            if not output_dir:
                raise InputError("give session_id, or output_dir to analyse a folder without a session",
                                 hint="e.g. output_dir='/path/to/output/output_2026...'")
            base = Path(output_dir).expanduser()
            if not base.is_absolute() and self.ctx.default_workspace:
                base = self.ctx.default_workspace / base
            base = base.resolve()
            if self.ctx.default_workspace is None:
                # Without a workspace there is no boundary to check against, and the analysis writes a report
                # file next to the run: refuse rather than write anywhere on the machine.
                raise InputError("analyze_bubbles(output_dir=...) needs a server started with --workspace DIR",
                                 hint="restart the server with --workspace, or run `pypto-tune analyze DIR`")
            inside(self.ctx.default_workspace, base, what="output_dir")
            dirs = find_run_dirs(base)
            if not dirs:
                raise InputError(f"no PyPTO run folder (output_<timestamp>) found at {base}",
                                 hint="pass a run folder, its output/ parent, or a workspace holding output/")
            picked = [dirs[-1]]
            analysis = analyze_runs(picked, outer_loops=outer_loops)
            # derived files go under .pypto-tune/ only: the tool is read-only for everything the user owns
            report = write_report(analysis, self.ctx.default_workspace / LEDGER_DIR / "reports" / "adhoc"
                                  / f"{picked[0].name}-analysis.{lang}.md", lang)
            note = f"analysed the newest run {picked[0].name}" + (f" of {len(dirs)} found" if len(dirs) > 1 else "")
            return _analysis_result(analysis, report, {"session_id": None, "message": note, "next_actions": []},
                                    lang)

        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "analyze_bubbles", mutating=False)
        m, which = self._measurement_to_analyse(h, st, measurement, round)
        dirs = [Path(d) for d in m["analysis"].get("run_dirs", [])]
        missing = [d for d in dirs if not d.exists()]
        if missing:
            raise InputError(f"the run folders of measurement {m['id']} are gone: {missing[0]}",
                             hint=f"the compressed copy is {m['archive']}; collect_swimlane again for fresh data")
        analysis = analyze_runs(dirs, run_mode=st.run_mode, outer_loops=outer_loops, source_root=h.workspace)
        report = write_report(analysis, h.workspace / LEDGER_DIR / "reports" / st.id
                              / f"analysis-m{m['id']}.{lang}.md", lang)
        msg = f"analysed measurement {m['id']} (round {m['round']}; {which})"
        try:
            h.lock.acquire()
        except GateRefusal as held:
            # a second window on a held workspace reads; only the holder records (issue #11)
            return _analysis_result(analysis, report, self.ctx.result_base(st, msg + f" — not recorded: {held.message}"),
                                    lang)
        h.record(st.id).analysis(measurement_id=m["id"], stage=st.stage, report_path=str(report),
                                 suggestions=[s.model_dump(mode="json") for s in analysis.suggestions])
        st2 = self.ctx.state(h, session_id)
        if st2.level1 == "S3_ANALYZE":
            self.ctx.transition(h, st2, "state", "S4_TUNE", "baseline analysed (S3)")
            st2 = self.ctx.state(h, session_id)
            self.ctx.transition(h, st2, "stage", "FRONTEND", "tuning starts with the frontend stage")
            st2 = self.ctx.state(h, session_id)
            msg += "; tuning starts: stage FRONTEND"
        if st2.stage is not None and st2.stage_analyzed and st2.level1 == "S4_TUNE" and not st2.finished:
            self.stages.auto_mark(h, st2)
            st2 = self.ctx.state(h, session_id)
        result = _analysis_result(analysis, report, {**self.ctx.result_base(st2, msg), "measurement_id": m["id"]}, lang)
        shown, other = self.stages.suggestions(h, st2, result.suggestions)
        if other:
            result.message += (f"; {len(shown)} suggestion(s) for {st2.stage} shown, {other} of other stages left "
                               "out (the analysis report has all)")
        result.suggestions = shown
        return result



#: free bytes below which a run's file system counts as full when the run ends (its writes may have failed)
DISK_FULL_BELOW_BYTES = 4 * 1024 * 1024


def _disk_nearly_full(paths: list[Any]) -> str:
    """'' or which file system the run wrote to has (almost) no space left."""
    for path in paths:
        if not path:
            continue
        try:
            free = shutil.disk_usage(path).free
        except OSError:
            continue
        if free < DISK_FULL_BELOW_BYTES:
            return f"{path} has {free} bytes free"
    return ""


def _sandbox_failure(result: RunResult) -> str:
    """'' or bubblewrap's own complaint when it failed before the command started (it exits 1 and prints
    ``bwrap: <why>`` as the run's first output line)."""
    first = result.output_head.lstrip().split("\n", 1)[0]
    return first[:300] if result.exit_code == 1 and first.startswith("bwrap: ") else ""


def _foreign_sources(st: SessionState, sources: dict[str, list[str]]) -> str:
    """'' when every output folder was compiled from files the session's baseline measurement compiled, else why not
    (``tools/running/run_outputs.py::foreign_sources``)."""
    base = next((m for m in st.rows.get("measurements", []) if int(m["round"]) == 0 and m["valid"]), None)
    return foreign_sources((base["analysis"] or {}).get("per_dir", []), sources) if base is not None else ""


def _measurement_label(m: dict[str, Any]) -> str:
    return f"measurement {m['id']} (round {m['round']}, {'valid' if m['valid'] else 'invalid'})"


def _rewritten_outputs(dirs: list[Path], digests: dict[str, str]) -> list[Path]:
    """Output folders whose bytes differ from what the run wrote (digests taken as they left the private copy).

    An executor that reports no digests at all is not checked (the check belongs to the executor's contract;
    both built-in executors report them); a folder missing from a non-empty report counts as rewritten.
    """
    if not digests:
        return []
    return [d for d in dirs if digests.get(str(d)) != dir_digest(Path(d))]


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


def _analysis_result(analysis: Any, report: Path, base: dict[str, Any], lang: str = "en") -> AnalyzeResult:
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
                                   reason=(getattr(s, "reason_zh", "") or s.reason) if lang == "zh" else s.reason,
                                   evidence=dict(getattr(s, "evidence", {}) or {}))
                     for s in a.suggestions],
        warnings=list(getattr(a, "warnings", [])), report_path=str(report), details=details,
    )


def _legacy_files(workspace: Path, st: SessionState, sources: dict[str, str]) -> dict[str, ExecFile]:
    """Sessions recorded before the whole tree was: the operator files from the ledger, the rest as on disk now."""
    from pypto_tune.tools.code.codestate import scan_tree
    from pypto_tune.tools.patching.files import to_bytes

    out: dict[str, ExecFile] = {}
    for path, e in scan_tree(workspace, strict=False).items():
        if path not in sources and e.link is None:
            out[path] = ExecFile(data=(workspace / path).read_bytes(), executable=e.executable)
    for path, text in sources.items():
        out[path] = ExecFile(data=to_bytes(text))
    return out
