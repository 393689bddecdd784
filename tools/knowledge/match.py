"""From observations to a prior for one candidate: the measured outcome of similar changes on other kernels.

Similar means: the same class of change (:mod:`.situation`), then close in its situation — what the change does to
the tasks (the ``d_`` quantities, weighed fully), how far a task overshoots the buffers (fully: those limits do not
move), the option's number (fully), the regime around it (waves and parallel tasks on the cores, tiles per
iteration: a quarter) — with a penalty for another kind of kernel (vector / cube / mixed) or another stage. Each
observation weighs ``exp(-d²/2σ²)`` for a weighted Euclidean distance ``d`` in log2 steps (σ = 1.5); those under
``MIN_WEIGHT`` do not count.

The prediction is the weighted mean of the measured gains (log2 of before/after; a regression counts negative, no
gain zero) and the weighted share of failures (compile failure, runtime error...), with a confidence
``n_eff / (n_eff + PRIOR_COUNT)`` where ``n_eff`` is the neighbours' total weight (an exact match counts one, a
distant one a fraction: six distant observations do not make a confident prediction). An operator counts once: its
neighbours share the weight of its closest one (:func:`_per_operator`), so confidence grows with the number of
operators that measured a move, not with how often one session tried it.

The ranker turns it into one term (:func:`experience_score`). Where the hand-written model ranks too, the term is the
model's *error* on the neighbours — each one's measured gain minus what the model predicted for it when it was
distilled (``Observation.model_log2``) — so the store corrects the model where it was wrong on changes like this one
and leaves its order alone where it was right. Until 2026-12-05 the term moved the score toward the neighbours' mean
gain whatever the model said: with a confident store the model's own reading of *this* kernel was replaced by how
similar moves did on other kernels, and on multi_stage, bmm_scale and mean_pool (leave-one-out) the seed alone had
needed fewer trials than seed and store together. Without the model (the store alone ranks), or for a neighbour
distilled before the model's prediction was kept, the term is the measured gain itself, as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.knowledge.store import Observation

MIN_WEIGHT = 0.1
SIGMA = 1.5  # log2 steps: two changes 1.5 steps apart weigh 0.61, 3 steps 0.14
PRIOR_COUNT = 2.0  # pseudo-observations: one exact neighbour gives confidence 1/3, four give 2/3
KIND_PENALTY = 1.0
STAGE_PENALTY = 0.5
MIN_SCALE = 0.05  # a calibration never turns the model's predictions around, nor to nothing
FAIL_SCORE = -3.0  # the score of a predicted failure (priors.json: cube-l0c-budget, a predicted compile failure)
#: how much each quantity counts in the distance: what the change does (d_), the option's number (n_) and how far a
#: task overshoots the buffers (a_over, a_l0c_over) fully; the regime around it (waves, parallel tasks, tiles per
#: iteration) a quarter; absolute sizes not at all (operators differ in size; what transfers is the relative move)
FULL = {"d_iters", "d_tasks", "d_tpi", "d_bytes", "d_waves", "d_par", "d_ctasks", "d_cwaves", "d_cpar", "d_l0c",
        "d_m0", "d_m1", "d_k0", "d_k1", "d_n0", "d_n1", "n_b", "n_a", "a_over", "a_l0c_over"}
STATE = {"b_waves", "a_waves", "b_par", "a_par", "b_tpi", "a_tpi", "b_cwaves", "a_cwaves", "b_cpar", "a_cpar"}
STATE_WEIGHT = 0.25
MISSING = 1.0  # a quantity only one side has: one log2 step apart


@dataclass
class Prediction:
    gain_log2: float | None  # weighted mean over the measured neighbours (None: all failed)
    p_fail: float
    n: int
    n_eff: float
    confidence: float
    neighbours: list[tuple[float, Observation]] = field(default_factory=list)  # (weight, obs), heaviest first

    def model_error(self, model_score: float, scale: float = 1.0) -> float | None:
        """The weighted mean over the measured neighbours of (measured gain − the model's prediction for it, scaled
        by the class's calibration ``scale``), a neighbour without a stored prediction compared with
        ``model_score`` (the model's score here, scaled alike); None when no neighbour was measured."""
        measured = [(w, o) for w, o in self.neighbours if o.gain_log2 is not None]
        if not measured:
            return None
        total = sum(w for w, _ in measured)
        return sum(w * (float(o.gain_log2) - scale * (model_score if o.model_log2 is None else o.model_log2))
                   for w, o in measured) / total

    @property
    def operators(self) -> list[str]:
        seen: list[str] = []
        for _, o in self.neighbours:
            if o.operator not in seen:
                seen.append(o.operator)
        return seen


def _key_weight(k: str) -> float:
    return 1.0 if k in FULL else STATE_WEIGHT if k in STATE else 0.0


def distance(q: dict[str, float], o: dict[str, float]) -> float:
    """Weighted Euclidean distance over the quantities either side has (see FULL / STATE), in log2 steps."""
    total = 0.0
    for k in set(q) | set(o):
        w = _key_weight(k)
        if w:
            delta = (q[k] - o[k]) if k in q and k in o else MISSING
            total += w * delta * delta
    return math.sqrt(total)


def _per_operator(scored: list[tuple[float, Observation]]) -> list[tuple[float, Observation]]:
    """Each operator's neighbours share the weight of its closest one: twelve rounds of one operator are one
    operator's experience, not twelve. Without this, a session that spent its trials on one kind of move (on
    2026-12-05, upstream_bmm_scale's 12 regressions of an epilogue tile on a kernel the cube side dominates) outweighed
    every other operator's measurements of that move, and its mean became the store's word for vector tiles on pure
    vector kernels. Within an operator the weights keep their proportions."""
    total: dict[str, float] = {}
    best: dict[str, float] = {}
    for w, o in scored:
        total[o.operator] = total.get(o.operator, 0.0) + w
        best[o.operator] = max(best.get(o.operator, 0.0), w)
    return [(w * best[o.operator] / total[o.operator], o) for w, o in scored]


def predict(observations: Iterable[Observation], *, change_class: str, kernel_kind: str, group: str,
            situation: dict[str, float], exclude_operator: str | None = None) -> Prediction | None:
    if not situation or change_class == "other":
        return None
    scored: list[tuple[float, Observation]] = []
    for o in observations:
        if o.change_class != change_class or not o.situation or o.operator == exclude_operator:
            continue
        d = distance(situation, o.situation)
        if o.kernel_kind != kernel_kind:
            d += KIND_PENALTY
        if o.group != group:
            d += STAGE_PENALTY
        w = math.exp(-d * d / (2.0 * SIGMA * SIGMA))
        if w >= MIN_WEIGHT:
            scored.append((w, o))
    if not scored:
        return None
    scored = _per_operator(scored)
    scored.sort(key=lambda x: (-x[0], x[1].key))
    total = sum(w for w, _ in scored)
    n_eff = total  # the neighbours' weight: an exact match counts one, a distant one a fraction
    measured = [(w, o) for w, o in scored if o.gain_log2 is not None]
    gain = (sum(w * float(o.gain_log2) for w, o in measured) / sum(w for w, _ in measured)) if measured else None
    p_fail = sum(w for w, o in scored if o.outcome == "failed") / total
    return Prediction(gain_log2=gain, p_fail=p_fail, n=len(scored), n_eff=n_eff,
                      confidence=n_eff / (n_eff + PRIOR_COUNT), neighbours=scored)


@dataclass
class Calibration:
    """How the model's scores of one class of change compare with what such changes measured, over the whole
    store: ``measured ≈ scale × model``, fitted through the origin, each operator weighing one, shrunk toward 1 by
    ``PRIOR_COUNT`` operators' worth (a store of one operator barely moves it)."""

    scale: float = 1.0
    operators: int = 0
    observations: int = 0


def calibrate(observations: Iterable[Observation], change_class: str) -> Calibration:
    """The model's scale for ``change_class`` (see :class:`Calibration`); 1 where nothing was measured."""
    by_op: dict[str, list[Observation]] = {}
    for o in observations:
        if o.change_class == change_class and o.gain_log2 is not None and o.model_log2 is not None:
            by_op.setdefault(o.operator, []).append(o)
    num = den = 0.0
    for obs in by_op.values():
        w = 1.0 / len(obs)
        num += sum(w * float(o.model_log2) * float(o.gain_log2) for o in obs)  # type: ignore[arg-type]
        den += sum(w * float(o.model_log2) ** 2 for o in obs)  # type: ignore[arg-type]
    if not by_op or den <= 0:
        return Calibration()
    n = len(by_op)
    fitted = max(num / den, MIN_SCALE)
    return Calibration(scale=(n * fitted + PRIOR_COUNT) / (n + PRIOR_COUNT), operators=n,
                       observations=sum(len(v) for v in by_op.values()))


def experience_score(pred: Prediction | None, model_score: float, *, with_model: bool = True,
                     scale: float = 1.0) -> float:
    """How far the store moves the candidate's score. With the model ranking too: the model's score rescaled by
    the class's calibration ``scale`` (every candidate of the class alike, neighbours or not — a correction only
    where neighbours happen to exist would favour the moves nobody measured), then, as far as the confidence goes,
    by the model's mean error on the measured neighbours (:meth:`Prediction.model_error`). Without the model: to the
    mean measured gain (``model_score`` is then 0). Failed neighbours pull toward ``FAIL_SCORE`` in proportion to
    their weight, in both cases."""
    base = (scale - 1.0) * model_score if with_model else 0.0
    if pred is None:
        return base
    here = scale * model_score if with_model else model_score
    if with_model:
        error = pred.model_error(model_score, scale)
        measured = 0.0 if error is None else error
    else:
        measured = (pred.gain_log2 or 0.0) - model_score
    return base + pred.confidence * ((1.0 - pred.p_fail) * measured + pred.p_fail * (FAIL_SCORE - here))


def describe_calibration(cal: Calibration, change_class: str, model_score: float) -> tuple[str, dict[str, Any]]:
    """The ``why`` text and evidence of the calibration alone (a candidate without measured neighbours)."""
    text = (f"the store's {cal.observations} measured {change_class} change(s) on {cal.operators} operator(s) gained "
            f"{cal.scale:.2f}× what the model predicted for them: its {model_score:+.2f} here counts "
            f"{cal.scale * model_score:+.2f}")
    return text, {"kind": "knowledge (other sessions' measurements, not this operator's)",
                  "calibration": {"class": change_class, "scale": round(cal.scale, 4), "operators": cal.operators,
                                  "observations": cal.observations}, "model_score": round(model_score, 4)}


def describe(pred: Prediction, model_score: float, score: float, *, with_model: bool = True,
             cal: Calibration | None = None) -> tuple[str, dict[str, Any]]:
    """The ``why`` text and the evidence of a knowledge term: the neighbours are named, with their numbers."""
    scale = cal.scale if cal is not None and with_model else 1.0
    ops = ", ".join(pred.operators[:4]) + (f" +{len(pred.operators) - 4}" if len(pred.operators) > 4 else "")
    gain = "all failed" if pred.gain_log2 is None else f"{pred.gain_log2:+.2f} log2 measured"
    fail = f", {pred.p_fail * 100:.0f} % failed" if pred.p_fail > 0 else ""
    error = pred.model_error(model_score, scale) if with_model else None
    scaled = f" × {scale:.2f} calibration" if scale != 1.0 else ""
    against = (f"the model's error on them {error:+.2f}, model here {model_score:+.2f}{scaled}" if error is not None
               else f"model {model_score:+.2f}")
    first = pred.neighbours[0][1].cite()
    text = (f"{pred.n} similar change(s) on {ops}: {gain}{fail} ({against}, confidence "
            f"{pred.confidence:.2f}); e.g. {first}")
    evidence = {"kind": "knowledge (other sessions' measurements, not this operator's)",
                "predicted_gain_log2": None if pred.gain_log2 is None else round(pred.gain_log2, 4),
                "model_error_log2": None if error is None else round(error, 4),
                "calibration": None if cal is None or not with_model else {
                    "scale": round(cal.scale, 4), "operators": cal.operators, "observations": cal.observations},
                "failed_share": round(pred.p_fail, 4), "neighbours": pred.n, "effective_neighbours":
                round(pred.n_eff, 3), "confidence": round(pred.confidence, 4), "model_score": round(model_score, 4),
                "supported_by": [{"weight": round(w, 3), "measured": o.cite(), "operator": o.operator,
                                  "session": o.session_id, "round": o.round, "outcome": o.outcome,
                                  "gain_log2": None if o.gain_log2 is None else round(o.gain_log2, 4),
                                  "model_log2": o.model_log2}
                                 for w, o in pred.neighbours[:5]]}
    return text, evidence
