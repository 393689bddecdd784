"""Concrete, legal candidates for the current stage, ranked (issue #12).

:func:`search` is the entry point ``propose_candidates`` calls; :func:`propose` returns only the candidate list.
The pipeline, for the kept state of one operator:

1. **knobs** — ``extract_knobs(kept, context)``; only tunable ones, optionally one asked for;
2. **values** — per knob from this operator's shapes, dtypes and loops (:mod:`.values`), each given the catalogue id
   of the current stage it serves (a knob with no id in this stage gets no candidate);
3. **never again** — a value tried from this same kept state, and (after planning) code whose semantic hash was
   tried and not kept, are dropped (rule ``no-retry``, R19);
4. **known** — a value whose *effective* configuration (tiles clamped to the tensor or view they tile) this session
   already measured is not proposed: it is reported in ``known_outcomes`` with the round and time that answer it;
5. **rank** — ``ranking="model"``: the session model (:mod:`.learn`) decides, a Gaussian process fitted to this
   session's decided trials whose prior mean is the score of the history rules, the shape model with its priors,
   the store and the analysis (:mod:`.rank`, :mod:`.history`, :mod:`.priors`); a knob measured without effect twice
   from the kept state is not proposed from it; ``ranking="plain"``: catalogue priority, then the nearest value;
6. **admit** — in rank order, each value is planned with ``plan_knob_edit`` and judged by the server's own
   ``admission.admit`` — the one admission path every change goes through — until ``limit`` are admitted. Cheap
   refusals come first from the same legality functions admission uses (``check_knob_value``, the effective-value
   checks of ``tools/patching/effective.py``), so that an illegal value is not planned at all. Nothing here
   restates a legality rule.

Analysis suggestions of this stage that no knob of this operator serves are returned as ``needs_algorithm_stage``
(structural changes, R23), never as candidates.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import (
    GateRefusal,
    InputError,
    KnobValueError,
    PatchError,
    PyptoTuneError,
)
from pypto_tune.tools.knowledge.situation import change_class
from pypto_tune.tools.patching import effective, extract_knobs, legality, plan_knob_edit, runcheck
from pypto_tune.tools.patching.models import EXPR_KEY, EditPlan, Knob
from pypto_tune.tools.snapshot import KnobChange
from pypto_tune.tools.search import failures, learn, linked, pairs, runpicture
from pypto_tune.tools.search import rank as R
from pypto_tune.tools.search.cache import AdmissionCache, admission_state_key, value_key
from pypto_tune.tools.search.hashing import code_hash, semantic_hash
from pypto_tune.tools.search.history import history_signals
from pypto_tune.tools.search.kernel import KernelModel
from pypto_tune.tools.search.models import (
    CATALOG_PREFIX,
    AlgorithmNote,
    Candidate,
    Proposal,
    StageGroup,
    TriedChange,
    norm_value,
)
from pypto_tune.tools.search.priors import Priors, load_priors
from pypto_tune.tools.search.values import Value, unroll_factors, values_for

Ranking = Literal["model", "plain"]
ALL_SIGNALS = frozenset({"model", "history", "analysis", "knowledge"})
ANALYSIS_ONLY = {"S-1"}  # catalogue items that are an analysis, not a change
MAX_REFUSALS_SHOWN = 5
FLAT_SCORE = 0.05  # scores closer than this are the same prediction (predicted log2 speed-up units)


@dataclass
class _Raw:
    knob: Knob
    value: Any
    catalog_id: str
    terms: list[R.Term] = field(default_factory=list)
    score: float = 0.0
    plain: tuple = ()
    step: float = 0.0
    note: str = ""
    model: dict[str, Any] = field(default_factory=dict)
    after_sig: str | None = None  # the kernel picture after the change (same picture: same prediction)
    prior_score: float = 0.0  # the prior's score (model, priors, store, history rules, analysis): the session model's prior
    learnt: learn.Prediction | None = None  # the session model's prediction (ranking "model")
    tier: int = 0  # 1: waits (below) behind the candidates that do not
    waits: str | None = None  # why it waits: its knob or kind measured only no effect, or its kind of move did
    effective: str | None = None  # the configuration as it would run (_effective_key), once computed
    twin_of: str | None = None  # a better-ranked candidate that runs the same configuration ("knob = value")
    point: learn.Point | None = None  # the change as the session model sees it (ranking "model")
    batch_after: str | None = None  # the better pick of a batch that moved this one up ("knob = value")

    def sort_key(self, ranking: Ranking) -> tuple:
        tail = (self.knob.id, value_key(self.value))
        if ranking == "plain":
            return (*self.plain, *tail)
        return (self.tier, -round(self.score, 9), *self.plain, *tail)


def _has_expr(v: Any) -> bool:
    if isinstance(v, dict):
        return EXPR_KEY in v or any(_has_expr(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_expr(x) for x in v)
    return False


def tile_view(knob: Knob, kernel: dict[str, Any] | None) -> list[int | None] | None:
    """The view a vector-tile knob tiles in its kernel (one loop iteration's data), from the kernel picture."""
    if kernel is None:
        return None
    feeds = {int(x.rsplit(":", 1)[1]) for x in knob.context.get("feeds", []) if str(x).rsplit(":", 1)[-1].isdigit()}
    for v in kernel.get("vec", []):
        if knob.kind == "vec_tile" and v.get("line") == knob.line:
            return v.get("block")
        if knob.kind == "tile_source" and v.get("line") in feeds:
            return v.get("block")
        if knob.kind in ("tile_constant", "local_constant") and norm_value(v.get("tile")) == norm_value(knob.value):
            return v.get("block")
    return None


def _stage_group(stage: str) -> StageGroup:
    s = stage.lower()
    for g in ("frontend", "swimlane", "incore"):
        if s.startswith(g):
            return g  # type: ignore[return-value]
    raise InputError(f"unknown stage {stage!r}", hint="frontend, swimlane or incore (or a stage name such as "
                     "SWIMLANE_1)")


def _candidate_id(kept_hash: str, knob_id: str, value: Any) -> str:
    return "c-" + hashlib.sha256(f"{kept_hash}\0{knob_id}\0{value_key(value)}".encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- catalogue ids


_CATALOG_ORDER: dict[str, tuple] | None = None


def _catalog_rank(cid: str) -> tuple:
    """Catalogue priority of an item (stage table): more stars first, then P-level, then catalogue order."""
    global _CATALOG_ORDER
    if _CATALOG_ORDER is None:
        from pypto_tune.tools.analysis.catalog import load_catalog

        _CATALOG_ORDER = {it.id: (-it.stars, it.p_level, i) for i, it in enumerate(load_catalog().items)}
    return _CATALOG_ORDER.get(cid, (0, "P9", 999))


def _catalog_title(cid: str) -> str:
    from pypto_tune.tools.analysis.catalog import load_catalog

    it = load_catalog().get(cid)
    return it.title_en if it else ""


def _grows(current: Any, value: Any) -> bool | None:
    from pypto_tune.tools.search.history import components

    a, b = components(current), components(value)
    if a is None or b is None or len(a) != len(b):
        return None
    pa, pb = math.prod(max(x, 1e-9) for x in a), math.prod(max(x, 1e-9) for x in b)
    return pb > pa


def choose_catalog_id(knob: Knob, stage: StageGroup, value: Any, fb: dict[str, Any] | None,
                      facts: R.Facts) -> str | None:
    """The catalogue id of this stage that the change serves, among the ids the knob serves (the server checks
    the same: rule ``catalog-stage``). None when the knob serves nothing in this stage that fits the change."""
    prefix = CATALOG_PREFIX[stage]
    ids = [c for c in knob.catalog_ids if c.startswith(prefix)]
    if not ids:
        return None
    kind, name = knob.kind, knob.name
    consumers = set(knob.context.get("consumers", []))
    grows = _grows(knob.value, value)
    named = kind in ("tile_constant", "local_constant", "tile_source")
    is_vec = kind == "vec_tile" or ("vec_tile" in consumers and (isinstance(knob.value, list)
                                                                 or kind == "tile_source"))
    is_cube = kind == "cube_tile" or (kind == "tile_source" and "cube_tile" in consumers)
    prefs: list[str] = []
    if stage == "frontend":
        if is_vec:
            prefs = ["F-10"]
        elif is_cube:
            prefs = ["F-9"]
        elif named and consumers & {"loop", "slice", "view"}:
            iters = (fb or {}).get("iterations") or 0
            cube = bool((fb or {}).get("has_cube"))
            if grows:
                prefs = (["F-3"] if iters > 100 else []) + (["F-1"] if cube else []) + ["F-2", "F-7", "F-11"]
            else:
                prefs = ["F-7", "F-11"]
        elif name == "unroll_list" or "unroll" in consumers:
            prefs = ["F-8", "F-2"]
        elif name == "combine_axis":
            prefs = ["F-15"]
    elif stage == "swimlane":
        if is_vec:
            prefs = ["S-3", "S-12"] if facts.load_gap_severe else ["S-12", "S-3"]
        elif is_cube:
            prefs = (["S-3"] if facts.load_gap_severe else []) + (["S-11", "S-2"] if grows else ["S-2", "S-11"])
        elif name == "vec_nbuffer_setting":
            prefs = ["S-5", "S-8"]
        elif name == "cube_l1_reuse_setting":
            prefs = ["S-6", "S-8"]
        elif name == "cube_nbuffer_setting":
            prefs = ["S-7", "S-8"]
        elif name == "stitch_function_max_num":
            prefs = ["S-9"]
        elif name == "device_sched_mode":
            prefs = ["S-10"]
    else:
        if kind == "cube_tile" and isinstance(value, dict) and isinstance(knob.value, dict) \
                and value.get("k") != knob.value.get("k") and value.get("m") == knob.value.get("m") \
                and value.get("n") == knob.value.get("n"):
            prefs = ["I-7"]  # gather granularity: only the K tiles
        elif name == "submit_before_loop":
            prefs = ["I-8"]
        elif kind == "cache_policy":
            prefs = ["I-2"]
    usable = [c for c in prefs if c in ids]
    if not usable:
        return None
    suggested = [c for c in usable if c in facts.suggestions]
    return suggested[0] if suggested else usable[0]


# ---------------------------------------------------------------------------------------------- the search


class _Context:
    """Everything computed once per call: knobs, kernel model, base features, facts, history lookups."""

    def __init__(self, kept: dict[str, str], context: dict[str, str] | None, stage: StageGroup,
                 analysis: dict[str, Any] | None, history: list[TriedChange], priors: Priors, kept_hash: str,
                 run: dict[str, Any] | None = None) -> None:
        self.kept, self.context, self.stage, self.priors = kept, context, stage, priors
        self.kept_hash = kept_hash
        self.run = _reported(run)
        self.knobs = extract_knobs(kept, context)
        self.model = KernelModel(kept, context)
        # what ran, when the kept state has a probe record: the kernels as they ran replace the static reading
        built = runpicture.build(kept, context, self.run) if self.run is not None else None
        self.runmap, self.picture = built if built is not None else (None, None)
        base = self.picture.features() if self.picture is not None and self.picture.reported else None
        if base is None:
            self.picture = None
        self.base = base if base is not None else self.model.features()
        self.facts = R.read_facts(analysis, priors)
        self.analysis = analysis
        self.history = history
        self.tried_here = _tried_here(history, kept_hash, _shadowed_sources(self.knobs),
                                      {k.id for k in self.knobs})
        self.bad_code = {t.semantic_hash: t for t in history if t.outcome != "kept" and t.semantic_hash}
        self.by_scope = {(f["file"], f["scope"]): i for i, f in enumerate(self.base)}
        self._loops_before: dict[str, Any] | None = None
        self._after_memo: dict[tuple, list[dict[str, Any]] | None] = {}
        self._scopes_memo: dict[str, set[tuple[str, str]]] = {}

    # which kernels a knob's value reaches
    def scopes_of(self, knob: Knob) -> set[tuple[str, str]]:
        if knob.id not in self._scopes_memo:
            self._scopes_memo[knob.id] = self._scopes_of(knob)
        return self._scopes_memo[knob.id]

    def _scopes_of(self, knob: Knob) -> set[tuple[str, str]]:
        if knob.function is None:
            name = knob.name
            out = set()
            for f in self.base:
                env = self.model.program.env(f["file"], f["scope"])
                if f["file"] == knob.file or (name in env and env[name] == knob.value):
                    out.add((f["file"], f["scope"]))
            return out
        fn = knob.function
        return {(f["file"], f["scope"]) for f in self.base
                if f["file"] == knob.file and (f["scope"] == fn or f["scope"].startswith(fn + ".")
                                               or fn.startswith(f["scope"] + "."))}

    def as_ran(self, knob: Knob) -> Knob:
        """A tile call written as an expression (``set_vec_tile_shapes(*tile_list)``) with the one value it ran
        with as its value, so that pinning it to literals starts from what ran; other knobs as they are."""
        if knob.kind not in ("vec_tile", "cube_tile") or self.runmap is None or not _has_expr(knob.value):
            return knob
        site = runpicture.site_of(self.runmap, knob.id)
        eff = self.runmap.of(site).effective if site is not None else []
        if len(eff) != 1 or _has_expr(eff[0]):
            return knob
        return knob.model_copy(update={"value": norm_value(eff[0])})

    def live(self, knob: Knob) -> bool | None:
        """Whether the test ran the knob's site (None: no probe record says)."""
        if self.runmap is None:
            return None
        site = runpicture.site_of(self.runmap, knob.id)
        return self.runmap.of(site).live if site is not None else None

    def kernel_of(self, knob: Knob) -> dict[str, Any] | None:
        if self.picture is not None:
            keys = self.picture.kernel_keys_of(knob)
            return next((f for f in self.base if f.get("kernel_key") in keys), None)
        scopes = self.scopes_of(knob)
        for f in self.base:
            if (f["file"], f["scope"]) in scopes:
                if knob.kind in ("vec_tile", "cube_tile") and not (
                        any(v["line"] == knob.line for v in f.get("vec", []))
                        or (f.get("cube") or {}).get("line") == knob.line):
                    continue
                return f
        return None

    def after(self, knob: Knob, value: Any) -> list[dict[str, Any]] | None:
        """Features of every kernel with the knob at ``value``; None when the model cannot see this knob."""
        return self.after_many([(knob, value)])

    def after_many(self, changes: list[tuple[Knob, Any]]) -> list[dict[str, Any]] | None:
        """Features of every kernel with several knobs at trial values at once (a linked pair's joint point);
        None when the model cannot see one of them."""
        memo_key = tuple((k.id, json.dumps(v, sort_keys=True, default=str)) for k, v in changes)
        if memo_key in self._after_memo:
            return self._after_memo[memo_key]
        if self.picture is not None:
            pic = self.picture.features(changes)
            self._after_memo[memo_key] = pic
            return pic
        env: dict[str, Any] = {}
        sites: dict[tuple[str, int], Any] = {}
        scopes: set[tuple[str, str]] = set()
        for knob, value in changes:
            if knob.kind in ("vec_tile", "cube_tile"):
                sites[(knob.file, knob.line)] = value
            elif knob.kind in ("tile_constant", "local_constant"):
                env[knob.name] = value
            else:
                self._after_memo[memo_key] = None
                return None
            scopes |= self.scopes_of(knob)
        out = self.model.features(env_override=env or None, site_override=sites or None, scopes=scopes)
        self._after_memo[memo_key] = out
        return out

    def loops_before(self) -> dict[str, Any]:
        if self._loops_before is None:
            self._loops_before = effective.loop_values(self.kept, self.model.program)
        return self._loops_before


def _prescreen(ctx: _Context, knob: Knob, value: Any) -> tuple[Any, str]:
    """('', normalised value) or the reason the server's own legality functions refuse the value. Only a fast
    first pass: every value that passes is still planned and admitted."""
    try:
        value = legality.check_knob_value(knob, value)
    except (KnobValueError, InputError) as exc:
        return value, exc.message
    try:
        if knob.kind == "vec_tile":
            reds = ctx.model.program.reductions.get(knob.file, [])
            sv = effective.SiteValue(knob.id, "vec_tile", knob.line, value, _ran_context(ctx, knob))
            effective.check_vec_tile(sv, reds, knob.value, transposes=ctx.model.program.transposes.get(knob.file, []))
        elif knob.kind == "cube_tile":  # L0 alignment and sizes on the operand dtypes that ran
            legality.validate("cube_tile", None, None, value, dict(_ran_context(ctx, knob), current=knob.value))
        elif knob.kind == "tile_source" and isinstance(value, int) and not isinstance(value, bool):
            _loops_as_ran(ctx, knob, value)  # a config field that blocks a loop
        elif knob.kind in ("tile_constant", "local_constant") and isinstance(value, int):
            _loops_as_ran(ctx, knob, value)
            before = ctx.loops_before()
            after: dict[str, Any] = {}
            for key, sv in before.items():
                code = sv.context.get("code", "")
                if knob.name not in code.replace("(", " ").replace(")", " ").replace("/", " ").split():
                    continue
                x, k = sv.value
                after[key] = effective.SiteValue(sv.site_id, sv.kind, sv.line, (x, value) if code.split("//")[-1]
                                                 .strip() == knob.name else (x, k), dict(sv.context))
            if after:
                effective.check_after({}, {}, {k: before[k] for k in after}, after, ctx.model.program)
    except KnobValueError as exc:
        return value, exc.message
    except Exception:  # noqa: BLE001, S110 — a pre-screen that cannot decide leaves it to the admission
        pass
    return value, ""


def _loops_as_ran(ctx: _Context, knob: Knob, value: Any) -> None:
    """The admission's check of the loops a block feeds, on the axis that ran (a dynamic axis: the kernel input it is
    read from): a block the loop cannot take is refused here, before it is planned or proposed unadmitted."""
    site = runpicture.site_of(ctx.runmap, knob.id) if ctx.runmap is not None else None
    if site is None or value == knob.value:
        return
    files = {**(ctx.context or {}), **ctx.kept}
    change = KnobChange(knob_id=knob.id, file=knob.file, line=knob.line, before=knob.value, after=value)
    runcheck.loop_checks(files, ctx.model.program, ctx.runmap, change, site)


def _ran_context(ctx: _Context, knob: Knob) -> dict[str, Any]:
    """A tile call's legality context with the shapes and dtypes its kernels ran with and cast to, when the probe
    recorded them (the admission judges each kernel on the same: tools/patching/runcheck.py). Without the shapes a
    rank-3 tile over a [1, 1, 160] reshape was proposed as [1, 16, 1024] four times and refused at run each time
    (PyPTO's GLM expert selection)."""
    out = dict(knob.context)
    site = runpicture.site_of(ctx.runmap, knob.id) if ctx.runmap is not None else None
    for e in ctx.runmap.executions(site) if site is not None else []:
        out["dtypes"] = sorted(set(out.get("dtypes", [])) | set(e.dtypes))
        out["cast_dtypes"] = sorted(set(out.get("cast_dtypes", [])) | set(e.cast_dtypes))
        shapes = out.setdefault("tensor_shapes", [])
        shapes += [list(s) for s in e.shapes if list(s) not in shapes]
    return out


def kernel_terms(ctx: _Context, after: list[dict[str, Any]]) -> tuple[list[R.Term], dict[str, Any]]:
    """The model's terms for going from the kept kernels (``ctx.base``) to ``after``, per kernel weighed by its share
    of the operator time, and what changes in each kernel."""
    terms: list[R.Term] = []
    info: dict[str, Any] = {}
    for fb, fa in zip(ctx.base, after):
        if fb == fa:
            continue
        kt = R.vector_terms(fb, fa, ctx.priors, ctx.facts.vector_cores)
        kt += R.cube_terms(fb, fa, ctx.priors, ctx.facts.cube_cores)
        share = ctx.facts.kernel_share.get(fb["scope"].rsplit(".", 1)[-1])
        gain = sum(t.score for t in kt)
        if share is not None and gain:
            # Amdahl: a kernel that takes a fraction of the operator time can only save that fraction
            op_gain = R.amdahl(gain, share)
            for t in kt:
                t.score *= op_gain / gain
            kt.append(R.Term("analysis", "kernel-share", 0.0, f"kernel {fb['scope']} takes {share * 100:.0f} % "
                             f"of the operator time: predicted {gain:+.2f} on it is {op_gain:+.2f} overall",
                             {"kernel": fb["scope"], "share_pct": round(share * 100, 2)}))
        terms += kt
        info[fb["scope"]] = _describe_change(fb, fa)
    return terms, info


def _tried_here(history: list[TriedChange], kept_hash: str, shadows: dict[str, set[str]] | None = None,
                knob_ids: set[str] | None = None) -> set[tuple[str, str]]:
    """(knob, value) pairs whose code from the kept state would be code already measured:

    * tried from this very state, or tried from an earlier state when every change kept since was a change of that
      same knob — the rest of the code is as it was then, and the knob's site is overwritten with the same value (a
      pinned tile call gives the same text from both states). The server's no-retry gate refuses such code;
      proposing it would only spend a trial on a refusal (candidates past the answer budget are not admitted, so
      this check is what stops them here);
    * the way back to an earlier kept state: the knob's value before a kept change, when every change kept since
      was of that knob, writes that state's code again. It was measured, and each kept change since beat it: a trial
      of it can only lose (the history's "walk-back" signal was a penalty; the trial would still be spent).

    Kept changes count from the session's first one up to the state that is kept now (after a revert to an earlier
    kept state, the changes kept after it are not on the way here). ``shadows``: per tile call, the tiling sources
    that feed that call alone — a value pinned at the call makes them irrelevant, so a kept change of one of them
    leaves a pinned value's code what it was (:func:`_shadowed_sources`); ``knob_ids``: the kept state's knobs — a
    kept change of a knob that is no knob any more (a source whose only consumer was pinned since: its text reaches
    nothing) changed nothing that runs."""
    shadows = shadows or {}
    out = {(t.knob_id, value_key(t.value)) for t in history if t.from_kept_hash == kept_hash}
    kept = sorted((t for t in history if t.outcome == "kept" and t.round is not None), key=lambda t: t.round)
    left_here = next((i for i, u in enumerate(kept) if u.from_kept_hash == kept_hash), None)
    if left_here is not None:  # this state was left by a kept change once: back here by a revert
        kept = kept[:left_here]
    for i, u in enumerate(kept):
        if u.before_value is not None and all(w.knob_id == u.knob_id for w in kept[i:]):
            out.add((u.knob_id, value_key(u.before_value)))
    for t in history:
        if t.from_kept_hash == kept_hash or t.outcome == "kept":
            continue
        # the kept change that left t's state, and every kept change after it
        since = [u for u in kept if u.from_kept_hash == t.from_kept_hash]
        if not since:
            continue
        later = [u for u in kept if u.round >= since[0].round]  # type: ignore[operator]
        same = {t.knob_id} | shadows.get(t.knob_id, set())
        if later and all(u.knob_id in same or (knob_ids and u.knob_id not in knob_ids) for u in later):
            out.add((t.knob_id, value_key(t.value)))
    return out


def _shadowed_sources(knobs: list[Knob]) -> dict[str, set[str]]:
    """Per tile call knob, the tiling sources (a comprehension literal, a config field) that feed that call and
    nothing else: once the call is pinned to literals they no longer reach anything, so the pinned code is the same
    whatever they hold (activations: after the helper's literal 32 → 128 was kept, pinning the call to [32, 512]
    runs exactly what pinning it from the first state ran)."""
    calls = {(k.file, k.line): k.id for k in knobs if k.kind in ("vec_tile", "cube_tile")}
    out: dict[str, set[str]] = {}
    for k in knobs:
        feeds = {(f, int(line)) for f, _, line in (str(x).rpartition(":") for x in k.context.get("feeds") or [])
                 if line.isdigit()}
        if k.kind == "tile_source" and len(feeds) == 1 and next(iter(feeds)) in calls:
            out.setdefault(calls[next(iter(feeds))], set()).add(k.id)
    return out


def _kept_us(ctx: _Context) -> float | None:
    """The kept state's time: its analysis, else what this session's trials say (the latest kept trial, or the
    reference of the trials run from this very state)."""
    if ctx.facts.operator_time_us:
        return float(ctx.facts.operator_time_us)
    here = [t.before_us for t in ctx.history if t.from_kept_hash == ctx.kept_hash and t.before_us]
    if here:
        return float(here[-1])
    kept = [t.after_us for t in ctx.history if t.outcome == "kept" and t.after_us]
    return float(kept[-1]) if kept else None


# ---------------------------------------------------------------------------------------------- the session's model

MAX_KNOWN_SHOWN = 6  # known outcomes listed in a proposal (the rest are counted in excluded["known"])


def _site_group(ctx: _Context, k: Knob) -> str:
    """Knobs that set the same tile calls that ran are one knob to the session model and its no-effect rule (the call
    pinned and the config field that feeds it: PyPTO's FFN example spent ten trials on one and six on the other; the
    field also feeds a call in a branch the test never takes, which must not make it a different knob)."""
    sites = _ran_tile_sites(ctx, k)
    return learn.SITES + ",".join(f"{f}:{line}" for f, line in sorted(sites)) if sites else k.id


def _clamp(k: Knob, value: Any, kernel: dict[str, Any] | None) -> list[int | None] | None:
    """What each component of a tile value is clamped to when it runs: the view a vector tile tiles, the matmul's
    M, K, N for a cube tile's m, k, n entries (L0, L1)."""
    if kernel is None:
        return None
    if isinstance(value, dict) and all(a in value for a in ("m", "k", "n")):
        mkn = (kernel.get("cube") or {}).get("mkn")
        return [x for x in mkn for _ in range(2)] if mkn else None
    return tile_view(k, kernel) if isinstance(value, list) else None


def _point(ctx: _Context, k: Knob | None, knob_id: str, value: Any, before: Any, state: str,
           stage: str | None) -> learn.Point:
    group = next((g for g in ("frontend", "swimlane", "incore") if (stage or "").lower().startswith(g)),
                 (stage or "").lower())
    if k is None:  # a knob of an earlier state only: it stands alone
        ext, ext0 = learn.log2_extents(value), learn.log2_extents(before)
        return learn.Point(knob_id, "knob:" + knob_id, ext, learn.direction(ext0, ext), state, group)
    kernel = ctx.kernel_of(k)
    clamp = _clamp(k, norm_value(value), kernel)
    ext, ext0 = learn.log2_extents(value, clamp), learn.log2_extents(before, clamp)
    kind, site = learn.kind_of(k.kind, k.name, k.context.get("consumers")), _site_group(ctx, k)
    problem = None
    if kind == "cube-tile":  # every cube-tile point has one (learn._shared): its matmul as it ran, else its own
        mkn = ((kernel or {}).get("cube") or {}).get("mkn")
        problem = ("mkn:" + "x".join(map(str, mkn)) if mkn and all(isinstance(x, int) for x in mkn)
                   else "knob:" + site)
    space = (None if ext is None or ext0 is None else site if isinstance(norm_value(value), (list, dict))
             else learn.PART + k.id)
    return learn.Point(site, kind, ext, learn.direction(ext0, ext), state, group, problem, ext0, space)


def _pure_tile(ctx: _Context, k: Knob) -> bool:
    """A knob that only sets tile calls the picture sees: its value counts as the tiles it makes, clamped."""
    uses = set(k.context.get("consumers", []))
    if k.kind in ("vec_tile", "cube_tile"):
        return ctx.kernel_of(k) is not None
    if k.kind in ("tile_source", "tile_constant", "local_constant") and uses and uses <= {"vec_tile", "cube_tile"}:
        if ctx.picture is not None:
            return bool(ctx.picture.kernel_keys_of(k))
        return ctx.kernel_of(k) is not None
    return False


def _effective_tiles(pic: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tile of every kernel as it runs: a vector tile clamped to the view it tiles, a cube tile to M, K, N."""
    out = []
    for f in pic:
        vec = [{"line": v.get("line"), "block": v.get("block"),
                "eff": v.get("eff_tile") if v.get("eff_tile") is not None else v.get("tile")} for v in f.get("vec", [])]
        cube = f.get("cube") or {}
        c = None
        if cube:
            eff = R._clipped_cube(cube.get("tile"), cube.get("mkn"))
            c = {"line": cube.get("line"), "mkn": cube.get("mkn"), "eff": eff if eff is not None else cube.get("tile")}
        out.append({"kernel": f.get("kernel_key") or f"{f.get('file')}:{f.get('scope')}", "trips": f.get("trips"),
                    "vec": vec, "cube": c})
    return out


def _as_run(k: Knob, value: Any) -> Any:
    """A knob's value as the run takes it, where two spellings run alike: a loop without an unroll list and one with
    ``[1]`` both unroll nothing (PyPTO's dynamic-GELU FFN: ``unroll_list = [1]`` after a kept ``[16, 8, 4, 2, 1]``
    measured 58.128 µs, the time of the state before the list was added, to the last digit), and lists of the same
    factors in any order (the arctic LSTM's shipped ``[1, 2, 4]`` and a trial's ``[4, 2, 1]``: 29.558 µs both)."""
    if _is_unroll(k) and (value is None or norm_value(value) == [1]):
        return [1]
    factors = unroll_factors(value) if _is_unroll(k) else None
    return list(factors) if factors is not None else value


def _effective_key(ctx: _Context, by_id: dict[str, Knob], now: dict[str, Any], config: dict[str, Any]) -> str:
    """A configuration as it runs: every knob that differs from the kept state by its value, except the knobs that
    only set tiles, which count by the tiles the run gets after PyPTO clamps each extent to the tensor or view it
    tiles (domain H.1: such a run is identical to the last digit). Where the picture cannot evaluate the change,
    every value counts as written (two configurations are then the same only if they are written the same)."""
    changes = [(by_id[i], v) for i, v in sorted(config.items())
               if i in by_id and value_key(_as_run(by_id[i], v)) != value_key(_as_run(by_id[i], now.get(i)))]
    pure = {k.id for k, _ in changes if _pure_tile(ctx, k)}
    pic = (ctx.after_many(changes) if changes else ctx.base) if pure or not changes else None
    counted = [(k.id, value_key(_as_run(k, v))) for k, v in changes if k.id not in pure or pic is None]
    tiles = _effective_tiles(pic) if pic is not None else None
    return json.dumps({"values": counted, "tiles": tiles}, sort_keys=True, default=str)


def _measured_configs(ctx: _Context, by_id: dict[str, Knob], now: dict[str, Any],
                      pairs: Iterable[TriedChange] = ()) -> dict[str, dict[str, Any]]:
    """Effective key → the measurement of that configuration in this session: the kept state itself, every state
    kept before it on the way here (the baseline too: setting a kept unroll list back to ``[1]`` is the baseline
    again — PyPTO's GLM expert selection measured it anew, to the last digit), and every trial that was measured
    (failures are left to the failure rules: a clamped tile that failed may fail on its raw size); with ``pairs``,
    the linked-pair rounds too (both knobs set)."""
    states = learn.state_configs(ctx.history, now, ctx.kept_hash)
    out: dict[str, dict[str, Any]] = {}
    kept_us = _kept_us(ctx)
    if kept_us is not None:
        made = [t for t in ctx.history if t.outcome == "kept" and t.round is not None
                and norm_value(t.value) == norm_value(now.get(t.knob_id))]
        out[_effective_key(ctx, by_id, now, now)] = {"round": made[-1].round if made else None,
                                                     "operator_time_us": round(kept_us, 4), "what": "the kept state"}
    for t in sorted([*ctx.history, *pairs], key=lambda t: t.round or 0):
        if t.outcome == "kept" and t.before_us is not None and t.from_kept_hash in states:
            out.setdefault(_effective_key(ctx, by_id, now, states[t.from_kept_hash]),
                           {"round": t.round, "operator_time_us": round(t.before_us, 4),
                            "what": f"the state kept before round {t.round}"})
        if t.outcome == "failed" or t.after_us is None or t.from_kept_hash not in states:
            continue
        config = {**states[t.from_kept_hash], t.knob_id: norm_value(t.value)}
        if t.pair_with is not None:
            config[t.pair_with.knob] = norm_value(t.pair_with.value)
        out.setdefault(_effective_key(ctx, by_id, now, config),
                       {"round": t.round, "operator_time_us": round(t.after_us, 4),
                        "what": f"{t.knob_id.split(':', 1)[-1]} = {t.value!r}"})
    return out


def _known_outcomes(ctx: _Context, raws: list[_Raw], excluded: dict[str, int]) -> tuple[list[_Raw],
                                                                                         list[dict[str, Any]]]:
    """The candidates whose effective configuration this session already measured are not run: they are returned
    as known outcomes (value, the round that measured the same configuration, its time)."""
    by_id = {k.id: ctx.as_ran(k) for k in ctx.knobs}
    now = {i: k.value for i, k in by_id.items()}
    measured = _measured_configs(ctx, by_id, now)
    keep, known = [], []
    for raw in raws:
        raw.effective = _effective_key(ctx, by_id, now, {**now, raw.knob.id: raw.value})
        m = measured.get(raw.effective)
        if m is None:
            keep.append(raw)
            continue
        excluded["known"] = excluded.get("known", 0) + 1
        if len(known) < MAX_KNOWN_SHOWN:
            known.append({"knob": raw.knob.id, "value": raw.value, "same_as_round": m["round"],
                          "operator_time_us": m["operator_time_us"], "same_as": m["what"]})
    return keep, known


def _one_per_configuration(raws: list[_Raw], excluded: dict[str, int]) -> list[_Raw]:
    """Every distinct configuration before any candidate that would run one of them again (PyPTO's FFN: a cube
    tile's m of 16 and of 32 on a matmul of 16 rows, proposed side by side, measured the same run twice in one
    batch). A twin stays in the list, after them, saying whose twin it is: its written value may still matter for a
    later step (a tile clipped to its view now, uncovered when the block grows)."""
    first: dict[str, _Raw] = {}
    distinct, twins = [], []
    for raw in raws:
        if raw.effective is None:
            distinct.append(raw)
        elif raw.effective in first:
            best = first[raw.effective]
            raw.twin_of = f"{best.knob.id.split(':', 1)[-1]} = {best.value!r}"
            twins.append(raw)
        else:
            first[raw.effective] = raw
            distinct.append(raw)
    if twins:
        excluded["twin"] = len(twins)  # not dropped: counted, and listed after the distinct configurations
    return distinct + twins


def _session_model(ctx: _Context, raws: list[_Raw], excluded: dict[str, int]
                   ) -> tuple[list[_Raw], learn.SessionModel]:
    """Rank by the session model (:mod:`.learn`): each candidate's prior score is the prior mean, this session's
    decided trials the data; a knob measured without effect twice from this state is dropped; a knob or kind
    measured only without effect goes behind the kinds nobody has tried yet."""
    by_id = {k.id: k for k in ctx.knobs}
    model = learn.fit(ctx.history, lambda t: _point(ctx, by_id.get(t.knob_id), t.knob_id, t.value,
                                                    _before_as_ran(ctx, by_id.get(t.knob_id), t.before_value),
                                                    t.from_kept_hash, t.stage), ctx.kept_hash,
                      here=_from_here(ctx, by_id))
    keep: list[tuple[_Raw, learn.Point]] = []
    for raw in raws:
        pt = _point(ctx, raw.knob, raw.knob.id, raw.value, raw.knob.value, ctx.kept_hash, ctx.stage)
        if model.exhausted_here(pt.group, ctx.kept_hash):
            excluded["no-effect-here"] = excluded.get("no-effect-here", 0) + 1
            continue
        keep.append((raw, pt))
    untried = {pt.kind for _, pt in keep} - model.tried_kinds()
    for raw, pt in keep:
        raw.prior_score = raw.score
        raw.point = pt
        raw.learnt = model.predict(pt, raw.score)
        raw.score = raw.learnt.score
        if untried and pt.kind not in untried and model.unresponsive(pt.group, pt.kind):
            raw.waits = ("its knob (or every knob of its kind) measured only no effect so far, so it waits for the "
                         f"kinds not tried yet ({', '.join(sorted(untried))})")
        elif flat := model.flat_level(pt):
            level = next(iter(learn.levels_moved(pt) or ()), "")
            raw.waits = (f"it moves the cube tile's {level} only, and {len(flat)} such moves in this session "
                         "measured no effect (rounds " + ", ".join(str(t.round) for t in flat) + "), so it waits "
                         "behind every other candidate")
        raw.tier = 1 if raw.waits else 0
    return [raw for raw, _ in keep], model


def _before_as_ran(ctx: _Context, k: Knob | None, before: Any) -> Any:
    """A trial's value before its change as the run had it. A tile call written as an expression
    (``set_vec_tile_shapes(1, cfg.h_tile)``) is recorded as written, and a move from an expression has no start: the
    model would read the trial apart from every candidate of the call, which starts from the value that ran (the
    arctic LSTM's pinned tile measured 4.6× slower at [4, 4096], and [2, 4096] was proposed next, "nothing measured
    near it"). Where the call still reads as it did, the value it ran with is that start."""
    if k is None or learn.log2_extents(before) is not None or norm_value(before) != norm_value(k.value):
        return before
    ran = ctx.as_ran(k)
    return ran.value if ran is not k else before


def _from_here(ctx: _Context, by_id: dict[str, Knob]) -> Callable[[TriedChange], tuple[learn.Point, float] | None]:
    """A trial made from an earlier kept state whose configuration is one knob away from the kept state's, read as
    that knob's move from here: (its point from here, log2(kept time / its time)). None for the others. The knob may
    be another than the trial's: a trial that set a value the kept state has since reached by another way, from a
    state the kept state has since left in one other knob."""
    now = {i: k.value for i, k in by_id.items()}
    states = learn.state_configs(ctx.history, now, ctx.kept_hash)
    kept_us = _kept_us(ctx)

    def read(t: TriedChange) -> tuple[learn.Point, float] | None:
        if (t.from_kept_hash == ctx.kept_hash or t.from_kept_hash not in states or kept_us is None
                or not t.after_us or t.pair_with is not None):
            return None
        config = {**states[t.from_kept_hash], t.knob_id: norm_value(t.value)}
        apart = [i for i in sorted(set(config) | set(now)) if norm_value(config.get(i)) != norm_value(now.get(i))]
        if len(apart) != 1 or apart[0] not in by_id:
            return None
        k = by_id[apart[0]]  # the trial's own knob, or the one the kept state moved since (the trial set its value)
        return (_point(ctx, k, k.id, config[k.id], k.value, ctx.kept_hash, t.stage),
                math.log2(kept_us / t.after_us))

    return read


#: how many leading places the batch order decides (run_candidates' batches are 1-4 trials)
BATCH_DEPTH = 4


class _BatchOrder:
    """The ranked candidates in the order a batch of parallel trials should take them (:class:`learn.BatchPicker`,
    ranking "model"; else rank order): a candidate whose knob an earlier place already tries gives way to one the
    model knows as little about. Only a place that stands counts (``stands``: admitted and proposed); one refused at
    admission (``drop``) leaves no mark on the next. The first place is the model's best."""

    def __init__(self, raws: list[_Raw], model: learn.SessionModel | None) -> None:
        self._raws = raws
        # a twin (runs a configuration a better-ranked candidate runs) stays behind every distinct one, as ranked;
        # with a model, every candidate has its point (_session_model)
        self._picker = (learn.BatchPicker(model, [(r.point, r.prior_score, 2 * r.tier + bool(r.twin_of))
                                                  for r in raws], BATCH_DEPTH) if model is not None else None)
        self._next = 0
        self._stood: list[_Raw] = []
        self._index = {id(r): i for i, r in enumerate(raws)}

    def __iter__(self):
        while True:
            if self._picker is None:
                if self._next >= len(self._raws):
                    return
                i = self._next
                self._next += 1
            else:
                i = self._picker.next()
                if i is None:
                    return
                if self._stood and any(j < i for j in self._picker.left):
                    self._raws[i].batch_after = ", ".join(f"{x.knob.name} = {_short_value(x.value)}"
                                                          for x in self._stood)
            yield self._raws[i]
            if self._picker is not None and i in self._picker.left:
                self._picker.drop(i)  # neither stood nor was dropped: the caller stopped looking at it

    def stands(self, raw: _Raw) -> None:
        self._stood.append(raw)
        if self._picker is not None:
            self._picker.accept(self._index[id(raw)])

    def drop(self, raw: _Raw) -> None:
        if self._picker is not None:
            self._picker.drop(self._index[id(raw)])


def _short_value(v: Any) -> str:
    return json.dumps(v, default=str)[:40]


def _knob_values(ctx: _Context, k: Knob, kernel: dict[str, Any] | None) -> list[Any]:
    """Candidate values of one knob for a kernel picture (the kept one, or a trial one for a pair's lookahead)."""
    k = ctx.as_ran(k)
    kd = dict(kernel) if kernel else None
    if kd is not None and k.kind in ("tile_constant", "local_constant", "tile_source") and isinstance(k.value, int):
        trips = kd.get("trips") or []
        if len(trips) == 1 and trips[0]:
            kd["_axis_for_block"] = trips[0] * k.value  # the axis a `X // BLOCK` loop walks
    if "unroll" in k.context.get("consumers", []):
        kd = dict(kd or {}, _unroll_trip=_unroll_trip(ctx, k))
    if k.kind == "loop_option" and k.name == "unroll_list" and k.context.get("trip_count") is None:
        trip = _unroll_trip(ctx, k)  # a loop over a run-time bound: its trip count as the test ran it
        if trip is not None:
            k = k.model_copy(update={"context": {**k.context, "trip_count": trip}})
    if kd is not None:
        kd["ub_elem_bytes"] = _ub_elem(ctx, kd)
    reds = {ax for r in ctx.model.program.reductions.get(k.file, []) for ax in r.axes
            if kernel is None or r.scope == kernel["scope"] or r.scope.startswith(kernel["scope"] + ".")}
    if ctx.runmap is not None and kernel is not None and kernel.get("kernel_key"):
        # the reductions of everything the kernel that ran reaches (a reduce in a helper it calls counts too)
        reds |= {ax for r in ctx.runmap.kernel_context(kernel["kernel_key"])[2] for ax in r.axes}
    has_cube = any(f.get("has_cube") for f in ctx.base) if kernel is None else bool(kernel.get("has_cube"))
    has_vector = (kernel is None or bool(kernel.get("vec")) or not has_cube) or any(
        (lf.get("core_type") == "AIV") for lf in (ctx.analysis or {}).get("leaves", []) or [])
    return values_for(k, kernel=kd, reduce_axes=reds, has_cube=has_cube, has_vector=has_vector,
                      view=tile_view(k, kernel))


def _is_unroll(k: Knob) -> bool:
    return k.name == "unroll_list" or "unroll" in k.context.get("consumers", [])


def _ub_elem(ctx: _Context, kernel: dict[str, Any]) -> int:
    """The element size a kernel's vector tiles hold in the unified buffer: its tensors' and what its casts produce
    (as the run recorded them, else as its text names them), the largest."""
    key = kernel.get("kernel_key")
    casts = (ctx.runmap.cast_dtypes(key) if ctx.runmap is not None and key else []) or \
        ctx.model.cast_dtypes(kernel.get("file", ""), kernel.get("scope", ""))
    from pypto_tune.tools.patching.models import DTYPE_BYTES

    return max([int(kernel.get("elem_bytes") or 4), *(DTYPE_BYTES.get(d, 0) for d in casts)])


def _unroll_trip(ctx: _Context, k: Knob) -> int | None:
    """The trip count of the loop an unroll list reaches (the ``loop_unroll`` its value feeds): as the run called it
    when the probe recorded the call, else the static reading of that loop (the loop option's ``trip_count``)."""
    fed = linked.feeds(k) or {(k.file, k.line)}
    if ctx.runmap is not None:
        for f, line in sorted(fed):
            for c in ctx.runmap.calls_at(f, line, {"loop_unroll"}):
                if (trips := legality.loop_trips(c.get("args"))) is not None:
                    return trips
            for c in ctx.runmap.calls_at(f, line, {"loop", "loop_unroll"}):
                if c.get("origin") == "direct" and (trips := runcheck.trips_as_ran(ctx.runmap, c)):
                    return max(trips)
    from pypto_tune.tools.patching.runmap import call_span

    spans = {(f, *call_span(ctx.kept.get(f) or (ctx.context or {}).get(f, ""), line, "loop_unroll")) for f, line in fed}
    for o in ctx.knobs:
        if o.kind == "loop_option" and o.name == "unroll_list" and any(f == o.file and lo <= o.line <= hi
                                                                        for f, lo, hi in spans):
            return o.context.get("trip_count")
    return None


def _pair_plans(ctx: _Context, knobs: list[Knob], by: Literal["model", "knowledge"],
                only: Callable[[str, Any], bool] | None = None) -> dict[str, linked.PairPlan]:
    """Plans of the linked (block, tile) pairs among ``knobs``, keyed by the block knob's id (the best plan of a
    block that feeds several tiles). ``by``: who scores the points — the shape model (``model``), or, when the store
    ranks without it, the store's measurements of similar changes (``knowledge``: the pair's joint point is one
    change of the tile's class, base → both knobs moved). The links themselves are the kernel picture's, either
    way: which block caps which tile is a fact of the shapes, not a weight. ``only``: the search's restriction of
    the values considered (the offline benchmark's measured grid) holds for the pair's points too — a plan whose
    best point may not be proposed would rank a pair that never comes."""
    out: dict[str, linked.PairPlan] = {}
    ids = {k.id for k in knobs}

    def score_model(feats: list[dict[str, Any]]) -> float:
        return sum(t.score for t in kernel_terms(ctx, feats)[0])

    def step_store(link: linked.Link) -> Callable[[list[dict[str, Any]], list[dict[str, Any]]], float]:
        tile = link.tile
        cls = change_class(tile.kind, tile.name, tile.context.get("consumers"))
        return lambda before, after: ctx.priors.measured_score(cls, before, after, ctx.stage)

    def asked(k: Knob, values: list[Value]) -> list[Any]:
        return [v.value for v in values if only is None or only(k.id, norm_value(v.value))]

    for link in linked.find_links([ctx.as_ran(k) for k in ctx.knobs], ctx.base, ctx.after_many):
        if link.block.id not in ids or link.tile.id not in ids:
            continue
        blocks = asked(link.block, _knob_values(ctx, link.block, ctx.kernel_of(link.block)))
        pl = linked.plan(link, base=ctx.base, after=ctx.after_many, block_values=blocks,
                         tile_values=lambda kern, t=link.tile: asked(t, _knob_values(ctx, t, kern)), by=by,
                         score=score_model if by == "model" else None,
                         step=step_store(link) if by == "knowledge" else None)
        prev = out.get(link.block.id)
        if prev is None or pl.best_score > prev.best_score:
            out[link.block.id] = pl
    return out


#: How many changes of one tile, tried from the kept state, must all have regressed before the model's prediction
#: for that tile is no longer counted there (upstream_bmm_scale, 2026-12-05: the vector-task priors predicted a gain
#: for every larger epilogue tile of a kernel whose cube side dominates; all 12 trials regressed, and the session
#: never moved the cube tile)
CONTRADICTED_AFTER = 3


def _tile_sites(k: Knob) -> set[tuple[str, int]]:
    """The tile calls a knob sets: a tile call's own line, or the calls a tiling source feeds."""
    if k.kind in ("vec_tile", "cube_tile"):
        return {(k.file, k.line)}
    if k.kind == "tile_source" and set(k.context.get("consumers", [])) & {"vec_tile", "cube_tile"}:
        return linked.feeds(k)
    return set()


def _ran_tile_sites(ctx: _Context, k: Knob) -> set[tuple[str, int]]:
    """The tile calls a knob sets that the test ran (all of them when no probe record says which ran)."""
    sites = _tile_sites(k)
    if len(sites) < 2:
        return sites
    calls = {(x.file, x.line): x for x in ctx.knobs if x.kind in ("vec_tile", "cube_tile")}
    ran = {s for s in sites if s not in calls or ctx.live(calls[s]) is not False}
    return ran or sites


def _contradicted(ctx: _Context, k: Knob, terms: list[R.Term]) -> list[R.Term]:
    """When every change of this knob's tile tried from the kept state regressed (at least ``CONTRADICTED_AFTER``,
    through whichever knob set it: the call pinned, or the config field that feeds it), the model's prediction for
    that tile is not counted here: its positive model terms are cancelled. The measurements outrank the model."""
    sites = _ran_tile_sites(ctx, k)
    model = sum(t.score for t in terms if t.source == "model")
    if not sites or model <= 0:
        return []
    by_id = {x.id: x for x in ctx.knobs}
    here = [t for t in ctx.history if t.from_kept_hash == ctx.kept_hash and t.knob_id in by_id
            and _ran_tile_sites(ctx, by_id[t.knob_id]) & sites]
    if len(here) < CONTRADICTED_AFTER or any(t.outcome != "regression" for t in here):
        return []
    worst = ", ".join(f"{t.knob_id.split(':', 1)[-1]} = {t.value!r}" for t in here[:3])
    return [R.Term("history", "model-contradicted", -model,
                   f"the model predicted gains for this tile, and all {len(here)} changes of it tried from this state "
                   f"regressed ({worst}{', …' if len(here) > 3 else ''}): its prediction is not counted here",
                   {"regressions": [{"knob": t.knob_id, "value": t.value, "round": t.round,
                                     "after_us": t.after_us} for t in here[:6]]})]


def _as_option(ctx: _Context, k: Knob) -> Knob:
    """A config number that only a jit option takes (``pass_options={"vec_nbuffer_setting": {-2: 1, -1:
    tiling["vec_nbuffer"]}}``) serves that option's catalogue ids: the knob as the option it feeds, for the choice
    of id; any other knob as it is."""
    if k.kind != "tile_source" or set(k.context.get("consumers", [])) != {"jit_options"}:
        return k
    fed = [o for o in ctx.knobs if o.kind == "jit_option" and o.file == k.file and k.name in str(o.value)]
    return k.model_copy(update={"name": fed[0].name, "kind": fed[0].kind}) if len(fed) == 1 else k


def _pair_first_tiles(plans: dict[str, linked.PairPlan], k: Knob) -> list[Value]:
    """The one tile larger than its view the search proposes: a linked pair's best tile, when the pair goes tile
    first (``PairPlan.tile_first``). Otherwise a tile beyond its view is never proposed (values.py): clipped, it
    only looks like a change."""
    return [Value(pl.best_tile, note=f"the linked pair's tile, clipped to {pl.view_now} until "
                  f"{pl.link.block.name} grows") for pl in plans.values()
            if pl.tile_first and pl.link.tile.id == k.id]


def _scored_by(pl: linked.PairPlan) -> str:
    """Where a pair's predictions come from, when not the model."""
    return "; predictions from the store's measurements of similar changes" if pl.by == "knowledge" else ""


def _note_pair(info: dict[str, Any], pl: linked.PairPlan) -> None:
    """The model's own reading of the candidate carries the pair it planned; a pair the store planned is in the
    store's term's evidence only (it is not the model's)."""
    if pl.by == "model":
        info["linked_pair"] = pl.summary()


def _pair_terms(plans: dict[str, linked.PairPlan], k: Knob, value: Any, terms: list[R.Term],
                info: dict[str, Any]) -> list[R.Term]:
    """The linked pair's terms (``linked``): its first step scores the best point reachable through it (discounted)
    — the pair's tile, clipped to the view of now, when the pair goes tile first; else a block step that opens room
    — and its other tile steps say what caps them. Nothing when the pair buys nothing over single steps, and nothing
    for a direction this session already saw fail or regress (the plan assumed the step would be kept)."""
    out: list[R.Term] = []
    pl = plans.get(k.id)
    if pl is not None and pl.needs_pair and not pl.tile_first:
        key = value_key(value)
        through = pl.through.get(key)
        own = sum(t.score for t in terms)
        stopped = any(t.source == "history" and t.score <= -1.0 for t in terms)
        if through is not None and not stopped and linked.LOOKAHEAD_DISCOUNT * through > own:
            tile = pl.link.tile
            extra = linked.LOOKAHEAD_DISCOUNT * through - own
            out.append(R.Term(pl.by, "opens-room", extra,
                              f"opens room for {tile.name}: with {k.name} = {value!r} its view is "
                              f"{pl.view_for.get(key)}, where {tile.name} = {pl.tile_for.get(key)!r} is predicted "
                              f"{through:+.2f} in two steps (best point it can see: {k.name} = {pl.best_block!r}, "
                              f"{tile.name} = {pl.best_tile!r}; a linked pair, the block first){_scored_by(pl)}",
                              {"linked_pair": pl.summary(), "two_step_score": round(through, 3)}))
            _note_pair(info, pl)
    for pl in plans.values():
        if not pl.needs_pair or pl.link.tile.id != k.id:
            continue
        b = pl.link.block
        _note_pair(info, pl)
        own = sum(t.score for t in terms)
        stopped = any(t.source == "history" and t.score <= -1.0 for t in terms)
        if pl.tile_first and norm_value(value) == norm_value(pl.best_tile):
            if not stopped and pl.tile_first_worth > own:
                out.append(R.Term(pl.by, "pair-tile-first", pl.tile_first_worth - own,
                                  f"the linked pair's tile, set first: clipped to the view {b.name} = {b.value!r} "
                                  f"gives it now ({pl.view_now}), it runs as the tile that fills that view "
                                  f"(predicted {pl.clipped_now:+.2f} alone), and {b.name} = {pl.best_block!r} then "
                                  f"uncovers it (predicted {pl.best_score:+.2f} in two steps; a block step alone is "
                                  f"predicted only {pl.block_alone_for.get(value_key(pl.best_block), 0.0):+.2f}, "
                                  f"and each step must be kept on its own){_scored_by(pl)}",
                                  {"linked_pair": pl.summary(), "two_step_score": round(pl.best_score, 3)}))
        elif pl.tile_first:
            out.append(R.Term(pl.by, "pair-tile-elsewhere", 0.0,
                              f"the linked pair with {b.name} wants {k.name} = {pl.best_tile!r} (set first, "
                              f"clipped now), then {b.name} = {pl.best_block!r}", {"linked_pair": pl.summary()}))
        else:
            out.append(R.Term(pl.by, "capped-by-block", 0.0,
                              f"capped by {b.name} = {b.value!r} (the view it tiles); the best point it can see "
                              f"needs {b.name} = {pl.best_block!r} first", {"linked_pair": pl.summary()}))
    return out


def _model_terms(ctx: _Context, knob: Knob, value: Any) -> tuple[list[R.Term], dict[str, Any]]:
    terms: list[R.Term] = []
    info: dict[str, Any] = {}
    after = ctx.after(knob, value)
    if after is not None:
        terms, info = kernel_terms(ctx, after)
        if not info and knob.kind in ("tile_constant", "local_constant", "vec_tile", "cube_tile", "tile_source"):
            info["note"] = "the static model sees no change in this operator's tiles or loops"
    kernel = ctx.kernel_of(knob)
    terms += R.option_terms(knob.name, value, knob.value, [kernel] if kernel else ctx.base, ctx.priors, ctx.facts)
    return terms, info


def _describe_change(fb: dict[str, Any], fa: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if fb.get("iterations") != fa.get("iterations"):
        out["loop_iterations"] = [fb.get("iterations"), fa.get("iterations")]
    for vb, va in zip(fb.get("vec", []), fa.get("vec", [])):
        if vb != va:
            out[f"vec_tile_line_{va['line']}"] = {
                "effective_tile": [vb.get("eff_tile"), va.get("eff_tile")],
                "tiles_per_iteration": [vb.get("tasks_per_block"), va.get("tasks_per_block")],
                "block": va.get("block"), "task_bytes": [vb.get("eff_bytes"), va.get("eff_bytes")]}
    cb, ca = fb.get("cube") or {}, fa.get("cube") or {}
    if cb != ca and ca:
        out["cube"] = {"tile": [cb.get("tile"), ca.get("tile")], "mkn": ca.get("mkn"),
                       "cube_tasks_per_iteration": [cb.get("tasks_per_iter"), ca.get("tasks_per_iter")],
                       "l0c_bytes": [cb.get("l0c_bytes"), ca.get("l0c_bytes")]}
    return out


def _why(raw: _Raw, ranking: Ranking) -> str:
    if ranking == "plain":
        return (f"plain ranking: catalogue priority of {raw.catalog_id} ({_catalog_title(raw.catalog_id)}), then the "
                f"nearest value ({raw.step:.1f} log2 step(s) from {raw.knob.value!r})")
    parts = [f"analysis: {t.text}" for t in raw.terms if t.name == "kernel-share"]
    # the session's own measurements first: they are about this operator, the model and priors are predictions
    for t in sorted(raw.terms, key=lambda t: (t.source != "history", -abs(t.score), t.name)):
        if t.name == "kernel-share":
            continue
        if not t.text or abs(t.score) < 1e-9:
            continue
        label = t.source + (f" [prior {t.rule}]" if t.rule else "")
        parts.append(f"{label}: {t.text} ({t.score:+.2f})")
    head = f"score {raw.score:+.2f} for {raw.catalog_id} ({_catalog_title(raw.catalog_id)})"
    if raw.waits:
        head = f"{head}; ranked low because {raw.waits}"
    if raw.twin_of:
        head = (f"runs the same configuration as {raw.twin_of} (ranked above), so it comes after every distinct "
                f"one; {head}")
    if raw.batch_after:
        head = (f"moved up for a batch: with {raw.batch_after} placed before it (taken as no effect until "
                f"measured), the candidates this one passed promise less than it does; {head}")
    # what this session measured comes first; the terms after it are its prior (up to four of them, as before the
    # session model: the line that names the session's evidence must not push the prior's own evidence out)
    learnt = [raw.learnt.text() + f"; the prior score {raw.prior_score:+.2f} sums"] if raw.learnt is not None else []
    if not parts and not learnt:
        return head + ": no signal beyond the catalogue (nothing measured or modelled for this knob yet)"
    return head + ": " + "; ".join(learnt + parts[:4]) + (f"; +{len(parts) - 4} more" if len(parts) > 4 else "")


def _evidence(raw: _Raw, priors: Priors) -> dict[str, Any]:
    ev: dict[str, Any] = {}
    hist = [t.evidence for t in raw.terms if t.source == "history" and t.evidence]
    if hist:
        ev["history"] = hist
    ana = {t.name: t.evidence for t in raw.terms if t.source == "analysis"}
    if ana:
        ev["analysis"] = ana
    if raw.model:
        ev["model"] = raw.model
    know = [t.evidence for t in raw.terms if t.source == "knowledge" and t.evidence]
    if know:
        ev["knowledge"] = know
    rules = sorted({t.rule for t in raw.terms if t.rule})
    if rules:
        ev["prior"] = [priors.rules[r].cite() for r in rules if r in priors.rules]
    if raw.note:
        ev["generation"] = raw.note
    if raw.learnt is not None:
        parts: dict[str, float] = {}
        for t in raw.terms:
            parts[t.source] = parts.get(t.source, 0.0) + t.score
        ev["session"] = raw.learnt.evidence(parts)
    return ev


def _algorithm_notes(ctx: _Context) -> list[AlgorithmNote]:
    """Suggestions of this stage that no tunable knob of this operator serves: they need a structural change."""
    if not ctx.analysis:
        return []
    served = {c for k in ctx.knobs if k.tunable for c in k.catalog_ids}
    out = []
    for s in ctx.analysis.get("suggestions") or []:
        cid = s.get("catalog_id", "")
        if s.get("stage") != ctx.stage or cid in served or cid in ANALYSIS_ONLY:
            continue
        out.append(AlgorithmNote(catalog_id=cid, title=s.get("title", ""),
                                 reason=f"{s.get('reason', '')} — no knob of this operator serves {cid}: it needs a "
                                 "structural change (ALGORITHM stage, R23)",
                                 evidence={k: v for k, v in (s.get("evidence") or {}).items()}))
    return out


def search(kept: dict[str, str], *, stage: str, context: dict[str, str] | None = None,
           analysis: dict[str, Any] | None = None, history: Iterable[TriedChange | dict[str, Any]] = (),
           priors: Priors | None = None, limit: int | None = 8, knob: str | None = None,
           kept_hash: str | None = None, ranking: Ranking = "model", cache: AdmissionCache | None = None,
           exclude: Iterable[tuple[str, Any]] = (),
           only: Callable[[str, Any], bool] | None = None,
           signals: frozenset[str] = ALL_SIGNALS, budget_s: float | None = None,
           run: dict[str, Any] | None = None) -> Proposal:
    """Rank and admit candidates for the current stage of one operator.

    ``kept``: the kept operator sources (relative path → exact text); ``context``: the workspace's other Python
    files (never edited; they decide which names are knobs). ``stage``: ``frontend`` / ``swimlane`` / ``incore``
    (or a stage name such as ``SWIMLANE_2``); candidates cite a catalogue id of that stage. ``analysis``: the latest
    analysis of this operator (``RunAnalysis.model_dump()``), or None. ``history``: every change this session tried
    (:class:`TriedChange`, or dicts of its fields). ``priors``: default the shipped ``priors.json``. ``limit``: how
    many admitted candidates to return (None: all — slow, every value is admitted). ``knob``: only this knob (id or
    name). ``kept_hash``: the ledger's hash of the kept state (default: computed the same way). ``ranking``:
    ``model`` (history, model + priors, analysis) or ``plain`` (catalogue priority, nearest value first).
    ``cache``: admission results to reuse. ``exclude``: (knob id, value) pairs to leave out (e.g. those already in a
    running batch). ``only``: a predicate (knob id, value) → bool restricting the values considered (the offline
    benchmark uses it to stay inside a measured grid). ``signals``: which families the model ranking adds up
    (``model``, ``history``, ``analysis``; the offline benchmark's ablations drop one). ``budget_s``: admit candidates
    (0.5–4 s each on a loaded 2-core machine) only until this many seconds have passed since the call began; the
    remaining ones are returned with ``admitted=False`` (None: admit every one, deterministic). ``run``: the
    run-time probe's record of the kept state (``tools/operations/probes.record_for``): dead sites are never
    proposed, values and predictions come from the shapes that ran, and the admission judges on what ran.

    Returns a :class:`Proposal`; never raises for a value the admission refuses (it is counted in ``excluded``).
    Raises InputError for an unknown stage or knob, or sources that do not parse.
    """
    started = time.monotonic()
    group = _stage_group(stage)
    hist = [h if isinstance(h, TriedChange) else TriedChange.model_validate(h) for h in history]
    paired = [h for h in hist if h.pair_with is not None]  # linked pairs' rounds: read by the pair proposals only
    hist = [h for h in hist if h.pair_with is None]
    priors = priors or load_priors()
    kept_hash = kept_hash or code_hash(kept)
    ctx = _Context(kept, context, group, analysis, hist, priors, kept_hash, run)
    excluded: dict[str, int] = {}
    refusals: list[str] = []
    skip = {(kid, value_key(norm_value(v))) for kid, v in exclude}

    knobs = [k for k in ctx.knobs if k.tunable]
    dead = [k.id for k in knobs if ctx.live(k) is False]
    knobs = [k for k in knobs if k.id not in set(dead)]  # a site this test never runs is never proposed
    live = knobs  # a linked pair is planned over every live knob, also when only one of them is asked for
    if knob is not None:
        chosen = [k for k in knobs if knob in (k.id, k.name) or k.id.endswith(knob)]
        if not chosen:
            asked_dead = [k.id for k in ctx.knobs if k.id in dead and (knob in (k.id, k.name) or k.id.endswith(knob))]
            if asked_dead:
                site = runpicture.site_of(ctx.runmap, asked_dead[0]) if ctx.runmap is not None else None
                why = ctx.runmap.of(site).why if site is not None else ""  # type: ignore[union-attr]
                raise InputError(f"knob {asked_dead[0]!r} is dead: the test never runs it ({why or 'not executed'})"
                                 + (f"; {len(asked_dead) - 1} more site(s) of that name are dead too"
                                    if len(asked_dead) > 1 else ""),
                                 hint="a change there would not run; list_knobs shows the live knobs")
            fixed = [k.id for k in ctx.knobs if not k.tunable and (knob in (k.id, k.name) or k.id.endswith(knob))]
            if fixed:
                raise InputError(f"knob {fixed[0]!r} is not tunable here (it reaches the problem, or it is the run "
                                 "mode or a debug switch)", hint="list_knobs says why under not_tunable_because")
            from pypto_tune.tools.analysis.catalog import load_catalog

            items = [it.id for it in load_catalog().items if knob in (it.knobs or [])]
            if items:
                raise InputError(f"no site of {knob!r} in the operator files: the catalogue's {', '.join(items)} "
                                 f"name it, and this operator has no live, tunable {knob} to change",
                                 hint="adding one is a structural change (ALGORITHM stage); list_knobs shows the "
                                 "knobs there are")
            raise InputError(f"no tunable knob {knob!r} in the operator files",
                             hint="list_knobs shows every knob; pass its id or name")
        knobs = chosen + _feeders(ctx, chosen, live)

    # the pairs are planned by the model when it ranks, else by the store when it ranks alone (the benchmark's
    # "store alone" arm: without a planner it could never reach a point two knobs make together)
    planner = ("model" if "model" in signals else "knowledge" if "knowledge" in signals and priors.knowledge
               else None)
    plans = _pair_plans(ctx, live, planner, only) if ranking == "model" and planner else {}
    kept_us = _kept_us(ctx)
    raws: list[_Raw] = []
    considered = 0
    for k in knobs:
        k = ctx.as_ran(k)
        kernel = ctx.kernel_of(k)
        for v in _knob_values(ctx, k, kernel) + _pair_first_tiles(plans, k):
            considered += 1
            cid = choose_catalog_id(_as_option(ctx, k), group, v.value, kernel, ctx.facts)
            if cid is None:
                excluded["not-this-stage"] = excluded.get("not-this-stage", 0) + 1
                continue
            value, why_not = _prescreen(ctx, k, v.value)
            value = norm_value(value)
            if why_not:
                excluded["illegal"] = excluded.get("illegal", 0) + 1
                continue
            if only is not None and not only(k.id, value):
                excluded["not-asked"] = excluded.get("not-asked", 0) + 1
                continue
            key = (k.id, value_key(value))
            if key in ctx.tried_here or key in skip:
                excluded["tried"] = excluded.get("tried", 0) + 1
                continue
            if failures.bounded_by_failure(ctx.history, kept_hash, k.id, value, unroll=_is_unroll(k)) is not None:
                # at or past a value that did not compile from this same state: it would not compile either
                excluded["failed-larger"] = excluded.get("failed-larger", 0) + 1
                continue
            raw = _Raw(k, value, cid, note=v.note)
            raw.step = R.step_distance(k.value, value)
            # plain: catalogue priority, then the nearest value, larger before smaller at equal distance
            raw.plain = (_catalog_rank(cid), round(raw.step, 9), -1 if _grows(k.value, value) else 0)
            if ranking == "model":
                terms: list[R.Term] = []
                info: dict[str, Any] = {}
                if "model" in signals:
                    terms, info = _model_terms(ctx, k, value)
                if "knowledge" in signals and priors.knowledge:  # the store's measured moves (tools/knowledge)
                    terms += [R.Term("knowledge", e.name, e.score, e.text, e.evidence) for e in priors.experience(
                        k, value, ctx.base, ctx.after(k, value), group, sum(t.score for t in terms), reached=kernel,
                        with_model="model" in signals)]
                if "history" in signals:
                    for s in history_signals(k.id, k.value, value, hist, kept_us=kept_us):
                        terms.append(R.Term("history", s.name, s.score, s.text, s.evidence))
                    terms += _contradicted(ctx, k, terms)
                terms += _pair_terms(plans, k, value, terms, info)
                if "analysis" in signals:
                    merges = k.name == "vec_nbuffer_setting" or k.name == "cube_nbuffer_setting"
                    after = ctx.after(k, value) or ctx.base
                    terms += R.analysis_terms(cid, ctx.base, after, merges, ctx.facts)
                raw.terms, raw.model = terms, info
                raw.score = sum(t.score for t in terms)
                pic = ctx.after(k, value)
                if pic is not None and pic != ctx.base:
                    raw.after_sig = "after:" + hashlib.sha256(json.dumps(pic, sort_keys=True, default=str)
                                                              .encode()).hexdigest()
            raws.append(raw)
    raws, known = _known_outcomes(ctx, raws, excluded)
    model: learn.SessionModel | None = None
    if ranking == "model":
        raws, model = _session_model(ctx, raws, excluded)
    raws.sort(key=lambda r: r.sort_key(ranking))
    if model is not None:
        raws = sorted(_spread(raws), key=lambda r: r.tier)  # spread within a tier: a flat kind waits for all others
    raws = _one_per_configuration(raws, excluded)
    order = _BatchOrder(raws, model)

    cache = cache if cache is not None else AdmissionCache()
    skey = admission_state_key(kept, context, ctx.run)
    out: list[Candidate] = []
    running: set[str] = set()  # the effective configurations the answer's candidates run
    checked_all = True
    unchecked = 0
    for raw in order:
        if limit is not None and len(out) >= limit:
            checked_all = False
            break
        key = cache.key(skey, raw.knob.id, raw.value)
        whole = cache.entries.get(cache.key(skey, raw.knob.id, ANY_VALUE))
        if whole is not None:  # refused at run for a reason no value of it can change
            excluded["illegal"] = excluded.get("illegal", 0) + 1
            if len(refusals) < MAX_REFUSALS_SHOWN:
                refusals.append(f"{raw.knob.id} = {raw.value!r}: {whole['refusal']}")
            order.drop(raw)
            continue
        expected = cache.admit_s if cache.admit_s is not None else 0.0  # what one more admission is likely to take
        if budget_s is not None and out and time.monotonic() - started + expected > budget_s \
                and cache.entries.get(key) is None:
            # out of time: the rest go out checked by the legality functions only (the pre-screen above); the
            # server's admission judges each again when it is run, and refuses what it would have refused here
            unchecked += 1
            out.append(_candidate(raw, kept_hash, ranking, priors, group, len(out) + 1, "", admitted=False))
            order.stands(raw)
            if raw.effective is not None:
                running.add(raw.effective)
            continue
        entry = _admit(cache, skey, kept, context, raw, ctx.run)
        if not entry["ok"]:
            excluded["illegal"] = excluded.get("illegal", 0) + 1
            if len(refusals) < MAX_REFUSALS_SHOWN:
                refusals.append(f"{raw.knob.id} = {raw.value!r}: {entry['refusal']}")
            order.drop(raw)
            continue
        bad = ctx.bad_code.get(entry["semantic_hash"])
        if bad is not None:
            excluded["failed-code"] = excluded.get("failed-code", 0) + 1
            order.drop(raw)
            continue
        out.append(_candidate(raw, kept_hash, ranking, priors, group, len(out) + 1, entry.get("diff", "")))
        order.stands(raw)
        if raw.effective is not None:
            running.add(raw.effective)
    if plans:
        out = _with_pairs(ctx, out, plans, hist + paired, knob, only, limit, cache, skey,
                          None if budget_s is None else budget_s - (time.monotonic() - started), excluded, refusals,
                          running)
    notes = []
    if unchecked:
        notes.append(f"{unchecked} candidate(s) past the {budget_s:g} s answer budget were checked by the legality "
                     "functions only (admitted=false); run_candidates admits each before it runs")
    if not ctx.facts.present:
        notes.append("no analysis given: ranked on the model, the priors and the history only")
    for pl in plans.values():
        if pl.needs_pair:
            b, t = pl.link.block, pl.link.tile
            order = (f"{t.name} = {pl.best_tile!r} goes first, clipped to the view it has now, and {b.name} follows "
                     "to uncover it (a block step alone is predicted to gain less, and each step must be kept)"
                     if pl.tile_first else f"{b.name} goes first and {t.name} follows once its view has room")
            who = "the model" if pl.by == "model" else "the store"
            notes.append(f"linked pair: the best point {who} can see needs {b.name} = {pl.best_block!r} and "
                         f"{t.name} = {pl.best_tile!r} together (predicted {pl.best_score:+.2f}, against "
                         f"{max(pl.tile_alone, pl.block_alone):+.2f} for either alone): {pl.link.describe()}, so "
                         + order)
    flat = ranking == "model" and _flat(out)
    if flat:
        n = sum(1 for c in out if abs(c.score - out[0].score) <= FLAT_SCORE)
        notes.append(f"ranking is flat: the first {n} candidates score the same ({out[0].score:+.2f}); nothing "
                     "measured or modelled tells them apart, so their order is the catalogue's priority and the "
                     "nearest value, not a prediction")
    if dead:
        notes.append(f"{len(dead)} knob site(s) the test never ran are not proposed (dead: "
                     f"{', '.join(d.split(':', 1)[-1] for d in dead[:4])}{', …' if len(dead) > 4 else ''})")
    if ctx.run is None:
        notes.append("no run-time probe record of the kept state: live and dead sites are not known, values come "
                     "from the source text")
    why_none = _why_none(ctx, knobs, group, excluded, considered, refusals) if knob is not None and not out else ""
    if why_none:
        notes.insert(0, why_none)
    return Proposal(stage=group, kept_hash=kept_hash, candidates=out, needs_algorithm_stage=_algorithm_notes(ctx),
                    why_none=why_none, exhausted=checked_all and not out, considered=considered, excluded=excluded,
                    refusals=refusals, notes=notes, ranking_flat=flat, dead_sites=dead, known_outcomes=known)


def _feeders(ctx: _Context, chosen: list[Knob], live: list[Knob]) -> list[Knob]:
    """The live tiling sources whose literal an asked knob written as an expression runs with (``unroll_list=
    cfg.unroll_list`` and the test's ``Cfg(unroll_list=[4, 2, 1])``): asking for the site asks for them too, so that
    a suggestion that names the site (``unroll_list``) can be followed with ``propose_candidates(knob=…)``."""
    ids = {k.id for k in chosen}
    out: list[Knob] = []
    for k in chosen:
        if not _has_expr(k.value) or k.kind == "tile_source":
            continue
        for o in live:
            if o.id in ids or o.kind != "tile_source":
                continue
            # the source feeds the call the asked site sits in (a keyword of a multi-line call: below the call's line)
            if any(f == k.file and line <= k.line and _span_holds(ctx, f, line, k.line) for f, line in linked.feeds(o)):
                ids.add(o.id)
                out.append(o)
    return out


def _span_holds(ctx: _Context, file: str, start: int, line: int) -> bool:
    """Does the call that starts at ``file:start`` span ``line``?"""
    from pypto_tune.tools.patching.runmap import _calls

    text = ctx.kept.get(file) or (ctx.context or {}).get(file, "")
    return start == line or any(start <= line <= end for end, _ in _calls(text).get(start, []))


def _why_none(ctx: _Context, knobs: list[Knob], group: StageGroup, excluded: dict[str, int], considered: int,
              refusals: list[str]) -> str:
    """Why a knob that was asked for got no candidate, in words the agent can act on: no value to generate (and which
    knob carries its value instead), none for this stage, every value measured or failed already, or refused (the
    first refusal)."""
    k = knobs[0]
    name = k.id
    if not considered:
        if k.kind == "valid_shape":
            return (f"{name}: the valid part of a view is how much of the view is computed, not a speed knob: its "
                    "legal values are the view's extent as it ran or the loop's tail expression, so the search "
                    "proposes none — the block that sizes the view is the knob to tune (list_knobs)")
        if _is_unroll(k) and (trip := _unroll_trip(ctx, k)) is not None and trip <= 1:
            return (f"{name}: the loop ran {trip} time(s) at the test's shapes (its bound as the run evaluated it), "
                    "so no unroll factor above 1 can change what runs")
        if _has_expr(k.value):
            feeders = [o.id for o in ctx.knobs if o.tunable and o.kind == "tile_source"
                       and any(f == k.file and line <= k.line for f, line in linked.feeds(o))
                       and ctx.live(o) is not False]
            return (f"{name}: its value is written as an expression ({k.value}); no literal to change at this site"
                    + (f" — the value it runs with comes from {', '.join(feeders[:3])}: propose_candidates(knob=…) "
                       "with that id" if feeders else " — list_knobs shows the knob whose literal it reads"))
        return (f"{name}: no candidate value for a {k.kind} knob written as {k.value!r} (the search generates values "
                "for tiles, blocks, unroll lists, buffer counts and the catalogue's options)")
    if excluded.get("not-this-stage", 0) == considered:
        ids = ", ".join(k.catalog_ids) or "none"
        return (f"{name}: none of its catalogue items ({ids}) belongs to the {group} stage; it is proposed in the "
                "stage that has one")
    parts = [f"{n} {why}" for why, n in sorted(excluded.items()) if n]
    if refusals and excluded.get("illegal"):
        parts.append(f"first refusal: {refusals[0]}")
    measured = sum(excluded.get(k, 0) for k in ("tried", "failed-code", "failed-larger", "known", "no-effect-here"))
    head = "every value was already measured or failed from this kept state" if measured == considered else \
        "no value is left"
    return f"{name}: {head} ({considered} considered; " + "; ".join(parts) + ")"


def _candidate(raw: _Raw, kept_hash: str, ranking: Ranking, priors: Priors, group: StageGroup, rank: int,
               diff: str, *, admitted: bool = True) -> Candidate:
    return Candidate(id=_candidate_id(kept_hash, raw.knob.id, raw.value), knob=raw.knob.id, value=raw.value,
                     catalog_id=raw.catalog_id, why=_why(raw, ranking), evidence=_evidence(raw, priors),
                     knob_name=raw.knob.name, before=raw.knob.value, rank=rank, score=round(raw.score, 4),
                     stage=group, diff=diff, admitted=admitted)


def _pair_score(ctx: _Context) -> pairs.Scorer:
    """The ranking's hook for a linked pair (``pairs.Scorer``): the shape model's reading of the joint picture,
    the same terms a single change gets from the picture after it."""
    def score(block: Knob, bv: Any, tile: Knob, tv: Any) -> list[R.Term]:
        after = ctx.after_many([(block, bv), (tile, tv)])
        return kernel_terms(ctx, after)[0] if after is not None else []
    return score


def _with_pairs(ctx: _Context, out: list[Candidate], plans: dict[str, linked.PairPlan], history: list[TriedChange],
                knob: str | None, only: Callable[[str, Any], bool] | None, limit: int | None,
                cache: AdmissionCache, skey: str, budget_s: float | None, excluded: dict[str, int],
                refusals: list[str], running: set[str]) -> list[Candidate]:
    """The linked pairs (:mod:`.pairs`) among the candidates, by score; each is admitted like a single change, as
    one change of two knobs (rule ``linked-pair``). A pair the plateau or the prediction calls for keeps a place
    within ``limit``: it is what the single changes cannot reach."""
    def allowed(k: Knob, v: Any) -> bool:
        # the same fast legality a single change passes before it is planned: a pair past the answer budget goes
        # out unadmitted, and its tile must still fit what ran (a tensor's axis of 1 is no room a block opens)
        return (only is None or only(k.id, v)) and not _prescreen(ctx, k, v)[1]

    by_id = {k.id: ctx.as_ran(k) for k in ctx.knobs}
    now = {i: k.value for i, k in by_id.items()}
    measured = _measured_configs(ctx, by_id, now, [t for t in history if t.pair_with is not None])
    found: list[Candidate] = []
    for p in pairs.points(plans, history, ctx.kept_hash, _pair_score(ctx), knob=knob, allowed=allowed):
        b, t = p.link.block, p.link.tile
        # a pair is one configuration as much as a single change is: none whose effective configuration was
        # measured, nor one a single or another pair of this answer already runs (PyPTO's GLM gate: two pairs of
        # one 16-row block, their cube tiles' m of 16 and 32 clipped alike, ran the same configuration in one batch)
        effective = _effective_key(ctx, by_id, now, {**now, b.id: norm_value(p.block_value),
                                                     t.id: norm_value(p.tile_value)})
        if effective in measured or effective in running:
            excluded["known"] = excluded.get("known", 0) + 1
            continue
        cid = (choose_catalog_id(t, ctx.stage, p.tile_value, ctx.kernel_of(t), ctx.facts)
               or choose_catalog_id(b, ctx.stage, p.block_value, ctx.kernel_of(b), ctx.facts))
        if cid is None:
            excluded["not-this-stage"] = excluded.get("not-this-stage", 0) + 1
            continue
        known = cache.entries.get(cache.key(skey, *p.id_key))
        admitted, diff = budget_s is None or budget_s > 0 or known is not None, ""
        if admitted:
            entry = _admit_pair(cache, skey, ctx, p)
            if not entry["ok"]:
                excluded["illegal"] = excluded.get("illegal", 0) + 1
                if len(refusals) < MAX_REFUSALS_SHOWN:
                    refusals.append(f"{p.describe()}: {entry['refusal']}")
                continue
            if entry["semantic_hash"] in ctx.bad_code:
                excluded["failed-code"] = excluded.get("failed-code", 0) + 1
                continue
            diff = entry["diff"]
        why = (f"score {p.score:+.2f} for {cid} ({_catalog_title(cid)}), linked pair {p.describe()}: {p.reason}"
               + "".join(f"; {t.source}: {t.text} ({t.score:+.2f})" for t in p.terms[:3] if t.text))
        found.append(Candidate(
            id=_candidate_id(ctx.kept_hash, *p.id_key), knob=b.id, value=p.block_value, catalog_id=cid, why=why,
            evidence={"pair": {"trigger": p.trigger, "link": p.link.describe(), **p.evidence},
                      "model": {tt.name: tt.evidence for tt in p.terms if tt.evidence} or {}},
            knob_name=b.name, before=b.value, score=round(p.score, 4), stage=ctx.stage, diff=diff,
            admitted=admitted, kind="pair", pair_with=p.second()))
        running.add(effective)
    if not found:
        return out
    merged = list(out)  # the singles keep their order (the spread included); a pair goes before the first it beats
    for c in found:
        merged.insert(next((i for i, o in enumerate(merged) if o.score < c.score), len(merged)), c)
    if limit is not None and len(merged) > limit:
        cut = merged[:limit]
        if not any(c.kind == "pair" for c in cut):
            cut = cut[:limit - 1] + [found[0]]
        merged = cut
    return [c.model_copy(update={"rank": i + 1}) for i, c in enumerate(merged)]


#: refusals that hold for every value of the knob from the same kept state (the reason is the knob's, not the value's)
VALUE_BLIND_RULES = ("rule C/derive",)
ANY_VALUE = {"$any": True}


def remember_refusal(cache: AdmissionCache, kept: dict[str, str], context: dict[str, str] | None,
                     run: dict[str, Any] | None, knob_id: str, value: Any, pair_with: dict[str, Any] | None,
                     refusal: str) -> None:
    """The server's admission refused this change of ``kept`` when it was run (a proposal past the answer budget
    goes out unadmitted): kept under the key the search's own admission uses, so it is not proposed again from
    this state — a single change and a linked pair alike."""
    skey = admission_state_key(kept, context, _reported(run))
    if pair_with:
        key = cache.key(skey, *pairs.pair_key(knob_id, value, str(pair_with.get("knob")), pair_with.get("value")))
    else:
        key = cache.key(skey, knob_id, value)
    cache.put(key, {"ok": False, "refusal": refusal})
    if not pair_with and any(rule in refusal for rule in VALUE_BLIND_RULES):
        # the server cannot derive what the knob gives at a tile call that ran (PyPTO's arctic LSTM: its hidden tile
        # feeds a call whose other dimension is the unroll factor): every value is refused alike — one trial each,
        # three in a row, before this
        cache.put(cache.key(skey, knob_id, ANY_VALUE), {"ok": False, "refusal": refusal})


def _admit_pair(cache: AdmissionCache, skey: str, ctx: _Context, p: pairs.PairPoint) -> dict[str, Any]:
    """A pair's admission, remembered like a single change's (:func:`_admit`): admitted only as that pair."""
    ids, values = p.id_key
    b, t = p.link.block, p.link.tile

    def plan() -> EditPlan:
        return pairs.plan_edit(ctx.kept, (b.id, p.block_value), (t.id, p.tile_value), context=ctx.context)

    def wrong(adm: Any) -> str | None:
        if adm.kind != "pair" or {c.knob_id for c in adm.changes} != {b.id, t.id}:
            return f"admitted as {adm.describe()}, not as the linked pair"
        return None

    return _admitted(cache, cache.key(skey, ids, values), ctx.kept, ctx.context, ctx.run, plan, wrong)


def _flat(out: list[Candidate]) -> bool:
    """The ranking cannot tell the leaders apart: no candidate has a score at all, or the first half of them (at
    least two) share the top score."""
    if len(out) < 2:
        return False
    if all(abs(c.score) <= FLAT_SCORE for c in out):
        return True
    ties = sum(1 for c in out if abs(c.score - out[0].score) <= FLAT_SCORE)
    return ties >= max(2, (len(out) + 1) // 2)


def _spread(raws: list[_Raw]) -> list[_Raw]:
    """Values the model predicts to do exactly the same work (a tile clipped to the same block, two blocks with the
    same tasks) go behind every different proposal: the first of each such group stays in place (the best scored,
    which the headroom tie-break makes the one that leaves most room for the next change). A batch of parallel
    trials then spends its slots on different predictions instead of one prediction several times."""
    seen: set[str] = set()
    first, later = [], []
    for r in raws:
        # the same work predicted for this knob, or exactly the same kernels after the change whatever knob makes it
        # (a tile pinned at its call and the config field that feeds the call, set to the same value)
        sigs = [x for x in (_signature(r), r.after_sig) if x is not None]
        if not any(x in seen for x in sigs):
            seen.update(sigs)
            first.append(r)
        else:
            later.append(r)
    return first + later


def _signature(raw: _Raw) -> str | None:
    if not raw.model or "note" in raw.model:
        return None

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("tile", "block")}
        return x
    return raw.knob.id + json.dumps(strip(raw.model), sort_keys=True, default=str)


def _reported(run: dict[str, Any] | None) -> dict[str, Any] | None:
    """A probe record counts only when the probe reported (any other status says nothing about what ran)."""
    return run if run and run.get("status") == "reported" else None


def _admit(cache: AdmissionCache, skey: str, kept: dict[str, str], context: dict[str, str] | None,
           raw: _Raw, run: dict[str, Any] | None = None) -> dict[str, Any]:
    def wrong(adm: Any) -> str | None:
        if adm.kind != "knob" or adm.change is None or adm.change.knob_id != raw.knob.id:
            return f"admitted as {adm.describe()}, not as a change of {raw.knob.id}"
        return None

    return _admitted(cache, cache.key(skey, raw.knob.id, raw.value), kept, context, run,
                     lambda: plan_knob_edit(kept, raw.knob.id, raw.value, context=context), wrong)


def _admitted(cache: AdmissionCache, key: str, kept: dict[str, str], context: dict[str, str] | None,
              run: dict[str, Any] | None, plan: Callable[[], EditPlan], wrong: Callable[[Any], str | None]
              ) -> dict[str, Any]:
    """The server's own admission of one planned edit, remembered by ``key``: refused when planning or admission
    refuses it, or when it is admitted as something else than asked for (``wrong`` says what)."""
    entry = cache.get(key)
    if entry is not None:
        return entry
    t0 = time.monotonic()
    try:
        planned = plan()
        adm = admit(kept, planned.new_sources, context=context, run=run)
        why = wrong(adm)
        entry = {"ok": False, "refusal": why} if why else {
            "ok": True, "sources": planned.new_sources, "diff": planned.diff,
            "semantic_hash": semantic_hash(planned.new_sources)}
    except (GateRefusal, KnobValueError, InputError, PatchError) as exc:
        entry = {"ok": False, "refusal": exc.message if isinstance(exc, PyptoTuneError) else str(exc)}
    cache.timed(time.monotonic() - t0)
    cache.put(key, entry)
    return entry


@dataclass
class ChangeView:
    """What the ranking sees of one knob change (:func:`change_view`)."""

    knob: Knob
    base: list[dict[str, Any]]
    after: list[dict[str, Any]] | None
    reached: dict[str, Any] | None
    model_score: float | None = None  # the model's and the seed rules' score, when priors were given


def change_view(kept: dict[str, str], knob_id: str, value: Any, *, context: dict[str, str] | None = None,
                run: dict[str, Any] | None = None, priors: Priors | None = None, stage: str = "frontend",
                ) -> ChangeView | None:
    """What the ranking sees of one knob change from ``kept``: the knob (an expression-valued tile with the value it
    ran with), every kernel's features before and with the change (None: the model cannot see it), and the kernel
    the knob reaches — from the probe record's picture when ``run`` reported, else the static shape model. The
    knowledge store distils its observations through this same view (``tools/knowledge/distill.py``), so that a
    stored situation and a ranked candidate's are computed alike. With ``priors``, also the score the ranking's
    model family gives the change (the shape model's terms and the seed rules', without an analysis, as in a
    session's first ranking): what the change's measured gain is later compared with. None when ``knob_id`` is not
    a knob of ``kept``."""
    # no history: only the kernels' picture (and, with priors, the model's score) is asked for
    group: StageGroup = next((g for g in ("frontend", "swimlane", "incore") if stage.lower().startswith(g)),
                             "frontend")  # an ALGORITHM round's change is scored as a first ranking would
    ctx = _Context(kept, context, group, None, [], priors or Priors(), code_hash(kept), run)
    knob = next((k for k in ctx.knobs if k.id == knob_id), None)
    if knob is None:
        return None
    knob = ctx.as_ran(knob)
    value = norm_value(value)
    score = sum(t.score for t in _model_terms(ctx, knob, value)[0]) if priors is not None else None
    return ChangeView(knob, ctx.base, ctx.after(knob, value), ctx.kernel_of(knob), score)


def propose(kept: dict[str, str], **kwargs: Any) -> list[Candidate]:
    """The candidates of :func:`search` (same arguments), best first."""
    return search(kept, **kwargs).candidates


def edited_sources(kept: dict[str, str], candidate: Candidate, *, context: dict[str, str] | None = None,
                   cache: AdmissionCache | None = None, run: dict[str, Any] | None = None) -> dict[str, str]:
    """The operator sources with ``candidate`` applied (what ``run_candidates`` writes); re-planned if not cached.
    ``run``: the probe record the search was given (part of the cache key). The session's own admission still
    judges them when the round is opened."""
    second = candidate.pair_with
    if cache is not None:
        ids, values = (candidate.knob, candidate.value) if second is None else (
            f"{candidate.knob}+{second.knob}", value_key([candidate.value, second.value]))
        e = cache.entries.get(cache.key(admission_state_key(kept, context, _reported(run)), ids, values))
        if e and e.get("ok"):
            return dict(e["sources"])
    if second is not None:
        return pairs.plan_edit(kept, (candidate.knob, candidate.value), (second.knob, second.value),
                               context=context).new_sources
    return plan_knob_edit(kept, candidate.knob, candidate.value, context=context).new_sources


def find(candidates: Iterable[Candidate], ids: Iterable[str]) -> list[Candidate]:
    """The candidates with these ids, in the order asked; raises InputError naming an id that is not among them
    (a stale id: the kept state changed since it was proposed)."""
    by_id = {c.id: c for c in candidates}
    out = []
    for i in ids:
        if i not in by_id:
            raise InputError(f"candidate {i!r} is not a current candidate (ids depend on the kept state)",
                             hint="call propose_candidates again and pick from its answer")
        out.append(by_id[i])
    return out


__all__ = ["change_view", "choose_catalog_id", "edited_sources", "find", "propose", "search"]
