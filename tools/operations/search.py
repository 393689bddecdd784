"""The server finds the speed: concrete candidates (``propose_candidates``) and gated parallel trials
(``run_candidates``).

Each candidate of a batch is a full round under every rule: admitted by the one admission path from the kept state
(exactly one legal knob, never a change that already failed), run on its own private copy of the recorded bytes
(``tools/running/execution.py`` through the session's executor: the local pool or Ray), verified by its own precision run,
measured by the server, judged against the kept state, and recorded as its own ledger round. At the end the best
candidate that beats the kept state is written to the workspace and kept; the others are recorded as not chosen,
no gain, regression or failed. Stage counters and exit rules count every trial — but a trial the server discarded
for its own reasons (the interpreter's files changed; the sandbox, the executor or the disk failed) is *invalid*: a ``trials`` row without a round, no result of its code (``tools/session/discarded.py``).
The winner is written only over the bytes the server recorded (``SessionContext.write``): an edit made during the batch stays.

Crash or cancellation before the batch is recorded leaves only the runs (their round numbers are never reused):
nothing half-decided, and the workspace still holds the kept state.
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio

from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.running.chips import implicates_chip
from pypto_tune.tools.running.executors.base import ExecutorError
from pypto_tune.tools.running.sandbox import SandboxUnavailable
from pypto_tune.tools.errors import GateRefusal, InputError, KnobValueError, domain_error
from pypto_tune.tools.session.discarded import invalid_next_step, voided_rounds
from pypto_tune.tools.operations.base import (
    Progress, SessionContext, UnrecordedEdit, Handle, describe_change, next_round, code_hash, exclusive,
)
from pypto_tune.tools.patching import plan_knob_edit
from pypto_tune.tools.search import pairs
from pypto_tune.tools.operations.results import CandidateOut, CandidatesResult, TrialOut, TrialsResult
from pypto_tune.tools.session.state import SessionState
from pypto_tune.tools.operations.runs import RunOps, check_run, sim_run_serves_both
from pypto_tune.tools.operations.setup import verdict_options
from pypto_tune.tools.operations.stages import StageControl

log = logging.getLogger("pypto_tune.service")

MAX_BATCH = 16  # a batch is a set of rounds; more than this is a grid search, not a next step
#: propose_candidates admits candidates (the server's admission: 0.5–4 s each on a loaded 2-core machine) for at most
#: this long, then answers; the rest are marked admitted=false and admitted when run (issue #17: answer within 5 s)
PROPOSE_BUDGET_S = 2.5
# how a measured trial's reason names its judgement against the kept state (tuning_loop.judge_measurement)
@dataclass
class _Trial:
    index: int
    candidate: dict[str, Any]
    knob: str
    value: Any
    catalog_id: str
    sources: dict[str, str] = field(default_factory=dict)
    change: Any = None
    changes: list[Any] = field(default_factory=list)  # what the round records: the one knob, or a linked pair's two
    pair_with: dict[str, Any] | None = None  # a linked pair's second knob (rule linked-pair)
    round_no: int = 0
    verdict: str = ""
    reason: str = ""
    result_type: str = ""
    precision_id: int | None = None
    samples: list[float] = field(default_factory=list)
    measured: Any = None
    error: str = ""
    decision: str = ""
    delta_pct: float | None = None
    margin_pct: float | None = None
    device: str | None = None
    kept_pool: list[float] = field(default_factory=list)
    chip_failures: list[dict[str, Any]] = field(default_factory=list)  # R5: chips this trial failed on first
    #: why the server discarded the trial for its own reasons (its runs' copy or the interpreter's files changed,
    #: the executor or the sandbox failed, the disk filled): an invalid trial, no result of its code
    invalid: str = ""

    @property
    def retry_note(self) -> str:
        if not self.chip_failures:
            return ""
        failed = ", ".join(f"chip {f['device_id']} ({f['result_type']})" for f in self.chip_failures)
        return f"R5 card retry: failed on {failed}, run again on chip {self.device}"


class SearchOps:
    """propose_candidates, run_candidates. A trial runs and is measured through ``runs``; the batch is judged by
    ``stages`` (the JUDGE step)."""

    def __init__(self, ctx: SessionContext, *, runs: RunOps, stages: StageControl) -> None:
        self.ctx = ctx
        self.runs = runs
        self.stages = stages
        self._proposals: dict[str, dict[str, dict[str, Any]]] = {}  # session -> candidate id -> candidate
        self._admission_caches: dict[str, Any] = {}  # session -> tools.search.AdmissionCache

    # ------------------------------------------------------------------------------------------------ propose
    def propose_candidates(self, session_id: str, *, limit: int = 8, knob: str | None = None) -> CandidatesResult:
        """Concrete, legal trials for the current stage, one knob away from the kept state, ranked with reasons."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        self.ctx.gate(h, st, "propose_candidates", mutating=False)
        if not 1 <= int(limit) <= 64:
            raise InputError(f"limit must be 1..64, got {limit}", hint="the default is 8")
        proposal = self._search(h, st, limit=int(limit), knob=knob, budget_s=PROPOSE_BUDGET_S)
        cands = [c.model_dump(mode="json") for c in proposal.candidates]
        self._proposals.setdefault(st.id, {}).update({c["id"]: c for c in cands})
        msg = (f"{len(cands)} candidate(s) for {st.stage}" + (f" ({proposal.why_none})" if proposal.why_none else
                                                               " (the stage's knobs are exhausted)"
                                                               if proposal.exhausted else "")
               + "; run them with run_candidates(candidates=[ids...])")
        base = self.ctx.result_base(st, msg)
        return CandidatesResult(**base, candidates=[CandidateOut(**c) for c in cands],
                                needs_algorithm_stage=[n.model_dump(mode="json") for n in
                                                       proposal.needs_algorithm_stage],
                                exhausted=proposal.exhausted, excluded=dict(proposal.excluded),
                                notes=list(proposal.notes), ranking_flat=proposal.ranking_flat,
                                dead_sites=len(proposal.dead_sites), known_outcomes=list(proposal.known_outcomes))

    def _search(self, h: Handle, st: SessionState, *, limit: int | None, knob: str | None = None,
                budget_s: float | None = None) -> Any:
        """tools/search on this session: the kept sources, the stage, this operator's latest analysis and the
        session's history (what was tried, from which kept state, with which outcome)."""
        from pypto_tune.tools.search import AdmissionCache, search

        cache = self._admission_caches.setdefault(st.id, AdmissionCache())
        return search(st.kept_sources, stage=st.stage or "", context=self.ctx.context_files(h, st),
                      analysis=self._kept_analysis(st), history=self._history(st), limit=limit, knob=knob,
                      kept_hash=st.kept_hash, cache=cache, budget_s=budget_s, run=self._kept_record(h, st))

    def _kept_record(self, h: Handle, st: SessionState) -> dict[str, Any] | None:
        """The probe record of the kept state: looked up by the kept hash the state already carries (the same
        functional code hash ``probes.record_for`` computes, without re-reading the sources)."""
        from pypto_tune.tools.operations import probes

        rows = h.ledger.rows("probes", st.id, "code_hash = ?", (st.kept_hash,))
        if not rows:
            return probes.record_for(h.ledger, st.id, st.kept_sources)
        reported = [r for r in rows if r["status"] == "reported"]
        return dict((reported or rows)[-1]["record"])

    def _kept_analysis(self, st: SessionState) -> dict[str, Any]:
        m = st.last_valid_measurement(st.kept_hash) or st.last_valid_measurement()
        return dict(m["analysis"]) if m else {}

    def _history(self, st: SessionState) -> list[dict[str, Any]]:
        """Every decided round with one knob change, as the search reads it (what was tried, from which kept
        state, with which outcome and times)."""
        out = []
        voided = voided_rounds(st.rows)  # decided on runs the server discarded (tools/session/discarded.py)
        for r in st.rounds:
            n = int(r["number"])
            d = st.decisions.get(n)
            if d is None or n in voided:
                continue
            patch = next((p for p in st.rows["patches"] if p["round"] == n and p["kind"] in
                          ("tuning", "manual-adopt", "trial")), None)
            # a linked pair's round (two knobs, rule linked-pair) is read by the pair proposals, marked pair_with
            if patch is None or len(patch["knob_changes"]) not in (1, 2) or (
                    len(patch["knob_changes"]) == 2 and r["kind"] == "algorithm"):
                continue
            c = patch["knob_changes"][0]
            other = patch["knob_changes"][1] if len(patch["knob_changes"]) == 2 else None
            rt = d["result_type"]
            outcome = ("kept" if d["decision"] == "kept" else "failed" if d["decision"] == "failed"
                       else "regression" if rt == "regression" else "not-chosen" if rt == "not-chosen"
                       else "no-gain")
            out.append({"knob_id": c["knob_id"], "value": c["after"], "before_value": c["before"],
                        "from_kept_hash": r["before_hash"], "outcome": outcome,
                        "failure_type": rt if d["decision"] == "failed" else None, "before_us": r["before_us"],
                        "after_us": d["after_us"], "semantic_hash": self.ctx.patch_semantic_hash(patch), "round": n,
                        "stage": r["stage"], "catalog_id": r["catalog_id"],
                        "pair_with": {"knob": other["knob_id"], "value": other["after"], "before": other["before"]}
                        if other else None})
        return out

    # ------------------------------------------------------------------------------------------------ run
    @exclusive
    async def run_candidates(self, session_id: str, candidates: list[Any], *, parallel: int | None = None,
                             progress: Progress = None) -> TrialsResult:
        """Run candidates as gated rounds, concurrently; keep the best one that beats the kept state."""

        def start() -> tuple[Any, SessionState, list[_Trial], list[str]]:
            h = self.ctx.find(session_id)
            st = self.ctx.state(h, session_id)
            self.ctx.gate(h, st, "run_candidates")
            if not isinstance(candidates, list) or not candidates:
                raise InputError("candidates must be a non-empty list of candidate objects or ids",
                                 hint="call propose_candidates first and pass its candidates (or their ids) unchanged")
            if len(candidates) > MAX_BATCH:
                raise InputError(f"at most {MAX_BATCH} candidates per batch, got {len(candidates)}",
                                 hint="run the best-ranked ones first; the ranking learns from every batch")
            stage = tuning_loop.STAGES_BY_NAME[st.stage]  # type: ignore[index]
            return (h, st, *self._prepare(h, st, candidates, stage))

        # the state, the gates and each candidate's admission (0.5–4 s apiece) run off the event loop: a job started
        # with wait=false gets its handle back at once, and wait_job / get_status answer meanwhile (issue #17)
        h, st, trials, refused = await anyio.to_thread.run_sync(start)
        await self.ctx.executor.prepare()  # Ray connects here, off the event loop's critical path
        # NPU: one trial per healthy chip (a chip that failed or hung in this session is not handed out, tools/running/chips.py)
        chips = (self.runs.chips(h, st).for_trials() if st.run_mode == "npu"
                 else tuple(st.session["device_ids"]))
        capacity = self.ctx.executor.capacity(st.run_mode, list(chips))  # type: ignore[arg-type]
        k = max(1, min(int(parallel or capacity), capacity, len(trials) or 1))
        if not trials:
            st2 = self.ctx.state(h, session_id)
            return TrialsResult(**self.ctx.result_base(st2, "no candidate could be run: " + "; ".join(refused)),
                                trials=[], refused=refused, parallel=k, batch="")
        batch = uuid.uuid4().hex[:10]
        first = next_round(st)
        for i, t in enumerate(trials):
            t.round_no = first + i
        h.busy = "run_candidates"
        t0 = time.monotonic()
        try:
            limiter = anyio.CapacityLimiter(k)
            status: dict[int, str] = {t.round_no: "queued" for t in trials}

            async def report() -> None:
                while True:  # at once, then every 2 s: a client learns the batch's size first
                    if progress:
                        done = sum(1 for v in status.values() if v.startswith("done"))
                        await progress(time.monotonic() - t0, ", ".join(
                            f"r{n}: {v}" for n, v in sorted(status.items()))[:300],
                            phase=f"{done}/{len(trials)} trials done", step=done, steps=len(trials))
                    await anyio.sleep(2.0)

            try:
                async with anyio.create_task_group() as outer:
                    outer.start_soon(report)
                    async with anyio.create_task_group() as tg:
                        for t in trials:
                            tg.start_soon(self._trial, h, st, t, batch, limiter, status)
                    outer.cancel_scope.cancel()
            except BaseExceptionGroup as group:  # its own text is "unhandled errors in a TaskGroup": name the cause
                known = domain_error(group)
                if known is None:
                    raise
                raise known from group
            winner = self._decide(st, trials)
            held = self._record_batch(h, st, trials, winner, batch)
        finally:
            h.busy = None
        st2 = self.ctx.state(h, session_id)
        verdict = self.stages.judge(h, st2)
        st2 = self.ctx.state(h, session_id)
        wall = time.monotonic() - t0
        msg = (f"batch {batch}: {len(trials)} trial(s) on {k} worker(s) in {wall:.1f} s; "
               + (f"kept round {winner.round_no} ({describe_change(winner.changes)}, "
                  f"{winner.delta_pct:+.2f} %)" if winner else "no candidate beat the kept state"))
        if held:
            msg += f"; NOT WRITTEN: {held}"
        invalid = [t for t in trials if t.invalid]
        if invalid:
            msg += (f"; {len(invalid)} trial(s) INVALID, discarded by the server for its own reasons and not charged "
                    "to their values (they stay proposable): "
                    + "; ".join(f"r{t.round_no} {t.knob} = {t.value!r}: {t.invalid[:240]}" for t in invalid[:4])
                    + f". Next: {invalid_next_step(invalid[0].invalid)}")
        retried = [t.retry_note.replace("R5 card retry: ", f"r{t.round_no} ") for t in trials if t.chip_failures]
        if retried:
            msg += "; R5 card retry: " + "; ".join(retried)
        if verdict:
            msg += f"; {verdict}"
        return TrialsResult(
            **self.ctx.result_base(st2, msg), batch=batch, parallel=k, wall_s=round(wall, 3), refused=refused,
            winner_round=winner.round_no if winner else None, best_us=st2.kept_us,
            trials=[TrialOut(candidate=str(t.candidate.get("id") or ""), knob=t.knob, value=t.value,
                             pair_with=t.pair_with,
                             catalog_id=t.catalog_id, round=t.round_no, verdict=t.verdict or "not-run",
                             operator_time_us=statistics.median(t.samples) if t.samples else None,
                             delta_pct=t.delta_pct, decision=t.decision, result_type=t.result_type,
                             # the error first: a data-less trial's precision reason says "passed", which is not
                             # why it failed (its error names the invalid measurement)
                             reason="; ".join(x for x in (t.invalid or t.error or t.reason, t.retry_note) if x),
                             device_id=t.device, retried_from=[str(f["device_id"]) for f in t.chip_failures])
                    for t in trials],
        )

    def _prepare(self, h: Handle, st: SessionState, candidates: list[Any], stage: Any
                 ) -> tuple[list[_Trial], list[str]]:
        """Resolve ids, build each candidate's code from the kept state and admit it; refused ones are listed."""
        from pypto_tune.tools.search import AdmissionCache, remember_refusal

        known = self._proposals.get(st.id, {})
        unknown_ids = [c for c in candidates if isinstance(c, str) and c not in known]
        if unknown_ids:
            # ids from an earlier server process (or a proposal of another kept state): ask the search again; an id
            # is a hash of (knob, value, kept state), so a stale one simply stays unknown
            fresh = self._search(h, st, limit=64, budget_s=PROPOSE_BUDGET_S)
            known = {**known, **{c.id: c.model_dump(mode="json") for c in fresh.candidates}}
        trials: list[_Trial] = []
        refused: list[str] = []
        seen: set[str] = set()
        for i, c in enumerate(candidates):
            cand = known.get(c) if isinstance(c, str) else c
            if not isinstance(cand, dict) or "knob" not in cand or "value" not in cand:
                refused.append(f"#{i + 1}: unknown candidate {c!r} (pass propose_candidates' objects or ids of this "
                               "server's proposals)")
                continue
            cid = str(cand.get("catalog_id") or "")
            if not cid.startswith(stage.catalog_prefix):
                refused.append(f"#{i + 1} {cand['knob']}: catalogue id {cid!r} is not of stage {st.stage}")
                continue
            second = cand.get("pair_with")
            try:
                if second:  # a linked pair: both knobs in one edit, admitted only as that pair (rule linked-pair)
                    if not isinstance(second, dict) or "knob" not in second or "value" not in second:
                        raise InputError("pair_with must name the second knob and its value",
                                         hint="pass propose_candidates' pair candidates (or their ids) unchanged")
                    plan = pairs.plan_edit(st.kept_sources, (cand["knob"], cand["value"]),
                                           (second["knob"], second["value"]), context=self.ctx.context_files(h, st))
                else:
                    plan = plan_knob_edit(st.kept_sources, cand["knob"], cand["value"], context=self.ctx.context_files(h, st))
                adm = self.ctx.admit(h, st, "run_candidates", st.kept_sources, plan.new_sources, catalog_id=cid,
                                  path="candidate")
                if second and (adm.kind != "pair" or {c.knob_id for c in adm.changes} != {cand["knob"],
                                                                                          second["knob"]}):
                    raise InputError(f"admitted as {adm.describe()}, not as the pair it names",
                                     hint="call propose_candidates again and pass its pair candidates unchanged")
            except (GateRefusal, KnobValueError, InputError) as exc:
                what = f"{cand['knob']} = {cand['value']!r}" + (
                    f" + {second.get('knob')} = {second.get('value')!r}" if isinstance(second, dict) else "")
                refused.append(f"#{i + 1} {what}: {str(exc).splitlines()[0]}")
                if isinstance(exc, (GateRefusal, KnobValueError)):
                    # a proposal that went out past the answer budget unadmitted: the search remembers the
                    # admission's answer for this kept state, as if it had asked itself, and proposes it no more
                    remember_refusal(self._admission_caches.setdefault(st.id, AdmissionCache()), st.kept_sources,
                                     self.ctx.context_files(h, st), self._kept_record(h, st), cand["knob"],
                                     cand["value"], second if isinstance(second, dict) else None,
                                     str(exc).splitlines()[0])
                continue
            sem = self.ctx.patch_semantic_hash({"after_raw_hash": code_hash(plan.new_sources), "after_sources": plan.new_sources})
            if sem in seen:
                refused.append(f"#{i + 1} {cand['knob']} = {cand['value']!r}: the same code as an earlier candidate "
                               "of this batch")
                continue
            seen.add(sem)
            # The ledger keeps the candidate as it ran: admitted here, with the diff that ran. A proposal past the
            # answer budget went out unchecked (admitted=false, no diff), and a row saying so of a trial that was
            # admitted and measured would depend on how loaded the machine was when it was proposed.
            trials.append(_Trial(index=i, candidate={**cand, "admitted": True, "diff": plan.diff},
                                 knob=cand["knob"], value=cand["value"],
                                 catalog_id=cid, sources=plan.new_sources, change=adm.change,
                                 changes=list(adm.changes) if adm.kind == "pair" else [adm.change]
                                 if adm.change is not None else [],
                                 pair_with=second if second else None))
        return trials, refused

    async def _trial(self, h: Handle, st: SessionState, t: _Trial, batch: str, limiter: anyio.CapacityLimiter,
                     status: dict[int, str]) -> None:
        """One candidate (see ``_run_trial``). A failure of the server's own means — the executor, the sandbox, the
        file system (a full disk) — makes the trial invalid instead of ending the whole batch: it is recorded as
        such, never as a failure of the candidate, and the other trials still count."""
        try:
            await self._run_trial(h, st, t, batch, limiter, status)
        except (OSError, ExecutorError, SandboxUnavailable) as exc:
            log.warning("trial r%s discarded: %s", t.round_no, exc)
            what = f"{exc.strerror} ({exc.filename})" if isinstance(exc, OSError) and exc.filename else str(exc)
            t.invalid = f"the server could not run it: {what.splitlines()[0][:500]}"
            status[t.round_no] = "done: invalid"

    async def _run_trial(self, h: Handle, st: SessionState, t: _Trial, batch: str,
                         limiter: anyio.CapacityLimiter, status: dict[int, str]) -> None:
        """One candidate: precision on its own bytes, then the measurement — each run on a private copy."""
        async with limiter:
            status[t.round_no] = "verifying"
            code = code_hash(t.sources)
            avoid: tuple[str, ...] = ()
            while True:
                out = await self.runs.run(h, st, purpose="trial-precision", round_no=t.round_no, device_id=st.device,
                                      sources=t.sources, progress=None, batch=batch, pooled=True, avoid=avoid)
                result, run_id = out.result, out.run_id
                checked = check_run(out, st.run_mode, **verdict_options(st))
                verdict = checked.judged
                v, reason, result_type = checked.verdict, checked.reason, checked.result_type
                t.verdict, t.reason = v, reason
                t.device = out.device_id
                t.precision_id = h.record(st.id).precision_record(run_id=run_id, command=list(result.argv), verdict=v,
                                                                  numerics_checked=verdict.numerics_checked,
                                                                  exit_code=result.exit_code,
                                                                  duration_s=result.duration_s,
                                                                  key_output=verdict.key_output, reason=reason,
                                                                  code_hash=code, round=t.round_no, device_id=t.device,
                                                                  result_type=result_type)
                if v == "passed" or not self._retry_on_another_chip(h, st, t, out, result_type, reason):
                    break
                # R5 (card retry): a hang or device error on the NPU says nothing about the candidate, so it is run
                # once more on another healthy chip before it is recorded failed; both attempts stay in the ledger
                # (a precision record each, naming its chip). If the same bytes then pass, tools/running/chips.py leaves
                # the first chip behind; if they fail again, the code is at fault and no chip is blamed.
                avoid += (str(t.device),)
                status[t.round_no] = f"retrying on another chip (chip {t.device}: {result_type})"
            if out.environment_discard:  # the server discarded the run: nothing was learnt about the candidate
                t.invalid = reason
                status[t.round_no] = "done: invalid (run discarded)"
                return
            if v != "passed":
                t.result_type, t.error = result_type or "precision-failure", reason
                if t.chip_failures:  # the retry failed too: the code, not a chip
                    t.error += (f" (first on chip {t.chip_failures[0]['device_id']}: "
                                f"{t.chip_failures[0]['result_type']}; the same code failed on two chips)")
                elif st.run_mode == "npu" and implicates_chip(result_type) and not out.tampered:
                    t.error += " (no other healthy chip to run it again on, R5)"
                status[t.round_no] = f"done: {t.result_type}"
                return
            status[t.round_no] = "measuring"
            m = await self.runs.measure(h, st, sources=t.sources, code=code,
                                    purpose="trial-measure", round_no=t.round_no,
                                    count=int(st.session["repeats"]), label=f"candidate r{t.round_no}",
                                    progress=None, batch=batch, pooled=True,
                                    first=out if sim_run_serves_both(st.run_mode) else None)
            if st.run_mode == "npu" and m.valid and st.kept_samples and st.kept_us is not None:
                await self._sample_until_decisive(h, st, t, m, code, batch, status)
            self.runs.record_measurement(h, st, m, round_no=t.round_no, code=code,
                                     label=f"round{t.round_no}")
            t.measured = m
            if m.discarded:
                t.invalid = m.discarded
            elif not m.valid:
                t.result_type, t.error = "runtime-error", "invalid measurement: " + "; ".join(m.invalid)
            else:
                t.samples = list(m.samples)
            status[t.round_no] = f"done: {'measured' if m.valid else 'no data'}"

    def _retry_on_another_chip(self, h: Handle, st: SessionState, t: _Trial, out: Any, result_type: str | None,
                               reason: str) -> bool:
        """Whether a failed trial precision run is run again on another chip (R5, see ``tools/running/chips.py``): NPU
        only, once per trial, only for a failure that may be the chip's (hang, device/runtime error — never a
        compile or precision failure of the candidate's code, nor a discarded run), and only while another healthy
        chip is left. A retry is noted in ``t.chip_failures`` (the chip, what went wrong, its run and record)."""
        if (st.run_mode != "npu" or t.chip_failures or out.tampered or t.device is None
                or not implicates_chip(result_type)):
            return False
        if not self.runs.chips(h, st).retry_chips(t.device):
            return False
        t.chip_failures.append({"device_id": str(t.device), "result_type": result_type, "run_id": out.run_id,
                                "precision_id": t.precision_id, "reason": reason[:300]})
        return True

    async def _sample_until_decisive(self, h: Handle, st: SessionState, t: _Trial, m: Any, code: str, batch: str,
                                     status: dict[int, str]) -> None:
        """NPU: the same sequential rule as a manual round's collect_swimlane — while the difference to the kept
        state is not decisive, measure the kept state and the candidate ``repeats`` more times each (up to 6 ×
        ``repeats``), so a batch neither keeps noise nor loses a real gain to it."""
        reps = int(st.session["repeats"])
        pool = list(st.kept_samples)
        while len(m.samples) < reps * tuning_loop.NPU_MAX_SAMPLES_FACTOR:
            j = tuning_loop.judge_measurement(statistics.median(pool), m.samples, "npu", pool, final=False)
            if j.decisive:
                break
            status[t.round_no] = f"measuring more ({len(m.samples)} samples, not decisive)"
            ref = await self.runs.measure(h, st, sources=st.kept_sources, code=st.kept_hash,
                                      purpose="kept-reference", round_no=-2, count=reps,
                                      label=f"kept-state reference for r{t.round_no}", progress=None, batch=batch,
                                      pooled=True)
            self.runs.record_measurement(h, st, ref, round_no=-2, code=st.kept_hash,
                                     label=f"round{t.round_no}-reference")
            more = await self.runs.measure(h, st, sources=t.sources, code=code,
                                       purpose="trial-measure", round_no=t.round_no, count=reps,
                                       label=f"candidate r{t.round_no}", progress=None, batch=batch, pooled=True)
            m.absorb(more)
            if ref.valid:  # an invalid reference never joins the kept time (state.kept_samples_of)
                pool += ref.samples
            if not (ref.valid and more.valid):
                break
        t.kept_pool = pool

    def _decide(self, st: SessionState, trials: list[_Trial]) -> _Trial | None:
        """Apply the keep-the-best-of-a-batch rule (``tuning_loop.judge_batch``) to the trials; the kept one, if any."""
        assert st.kept_us is not None or all(t.invalid or not t.samples for t in trials)
        outcomes = tuning_loop.judge_batch(
            st.kept_us or 0.0, st.kept_samples, st.run_mode,
            [tuning_loop.BatchTrial(t.round_no, t.index, tuple(t.samples), tuple(t.kept_pool), bool(t.invalid))
             for t in trials])
        winner = None
        for t, o in zip(trials, outcomes):
            t.decision = o.decision
            if o.decision == "invalid":
                t.result_type, t.samples = "invalid", []
                continue
            if o.decision == "failed":
                t.result_type = t.result_type or "runtime-error"
                continue
            t.result_type, t.reason, t.delta_pct, t.margin_pct = o.result_type, o.reason, o.delta_pct, o.margin_pct
            if o.decision == "kept":
                winner = t
        return winner

    def _record_batch(self, h: Handle, st: SessionState, trials: list[_Trial], winner: _Trial | None,
                      batch: str) -> str:
        """One transaction for the whole batch (after the winner's bytes are written, intent first). Returns '' or
        why the winner was not written: an operator file changed while the batch ran and nobody recorded the edit
        (``SessionContext.write`` refuses to write over it). The decision is recorded all the same and the edit stays on disk:
        the workspace then differs from the recorded state (drift), and revert_patch writes the kept bytes after
        keeping a copy of the edit in quarantine."""
        held = ""
        if winner is not None:
            try:
                self.ctx.write(h, st, winner.sources, "run_candidates")
            except UnrecordedEdit as edit:
                held = (f"{edit.message}; round {winner.round_no} is kept all the same (held): revert_patch writes "
                        "it after copying the edit to quarantine, or adopt the edit later as a round of its own")
        stage = tuning_loop.STAGES_BY_NAME[st.stage]  # type: ignore[index]
        ordered = sorted(trials, key=lambda t: (t is winner, t.round_no))  # the kept one decides last
        with h.record(st.id).transaction() as rec:
            for t in ordered:
                if t.invalid:
                    # no round: the trial says nothing of its code (no decision, no R19, no stage count); its runs
                    # keep their round number, which is never reused (next_round)
                    rec.trial(batch=batch, candidate=t.candidate, round=t.round_no, outcome="invalid",
                              operator_time_us=None,
                              info={"verdict": t.verdict, "result_type": "invalid", "reason": t.invalid,
                                    "device_id": t.device, "chip_failures": t.chip_failures})
                    continue
                desc = describe_change(t.changes) if t.changes else t.knob
                rec.round_opened(number=t.round_no, stage=st.stage, outer_round=st.outer_round, kind="trial",
                                 catalog_id=t.catalog_id, change=desc,
                                 rationale=f"candidate {t.candidate.get('id', '')} of batch {batch}: "
                                           f"{str(t.candidate.get('why', ''))[:300]}",
                                 before_hash=st.kept_hash, before_raw_hash=st.kept_raw_hash, before_us=st.kept_us)
                rec.patch(kind="trial", round_no=t.round_no, before=st.kept_sources, after=t.sources,
                          note=f"candidate of batch {batch}", catalog_id=t.catalog_id, changes=t.changes)
                if t is winner:
                    rec.patch(kind="trial-apply", round_no=t.round_no, before=st.expected_sources, after=t.sources,
                              note=f"batch {batch}: best candidate written and kept" if not held
                              else f"batch {batch}: best candidate kept, NOT written: {held}",
                              catalog_id=t.catalog_id, changes=t.changes)
                after_us = statistics.median(t.samples) if t.samples else None
                rec.round_decision(number=t.round_no, decision=t.decision, result_type=t.result_type,
                                   after_us=after_us, delta_pct=t.delta_pct, error_output=(t.error or "")[-4000:],
                                   notes="; ".join(x for x in (t.reason, t.retry_note) if x)[:1000],
                                   restored_hash=code_hash(t.sources) if t is winner else st.kept_hash)
                if stage.group in ("frontend", "swimlane", "incore"):
                    rec.checklist_mark(stage_group=stage.group, stage=st.stage, catalog_id=t.catalog_id,
                                       status="tried" if t.decision != "failed" else "failed",
                                       reason=f"round {t.round_no} (batch {batch}): {t.result_type}",
                                       round=t.round_no)
                rec.trial(batch=batch, candidate=t.candidate, round=t.round_no,
                          outcome=t.decision if t.decision != "reverted" else t.result_type, operator_time_us=after_us,
                          info={"verdict": t.verdict, "result_type": t.result_type, "delta_pct": t.delta_pct,
                                "margin_pct": t.margin_pct,
                                "samples": t.samples, "device_id": t.device, "reason": t.error or t.reason,
                                "chip_failures": t.chip_failures})
        return held

