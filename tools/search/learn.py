"""The session's own model of this operator's response: what the next trial should be, learnt from every decided trial.

The ranking's other parts — the shape model with its priors (:mod:`.rank`), the knowledge store (:mod:`.priors`),
the hand-written reading of the history (:mod:`.history`) — are predictions made before this operator ran. Here they
are the **prior mean** of a small Gaussian process fitted to this session's measurements, and the search ranks by an
upper confidence bound of its posterior:

* **observations** — every decided trial of the session: its change as a point (below) and the move's effect
  ``y = log2(before / after)`` (a gain is positive, "no effect" 0); a trial that failed (compile failure, invalid
  run) counts as ``FAILED_Y``; a run whose configuration is one knob away from the kept state's is also read as that
  knob's move from here, its effect the ratio of the kept time to its time (``fit``'s ``here``);
* **points** — a change seen the same way whatever its knob: the knob (tile calls sharing a site count as one), the
  kind of knob (vector tile, cube tile, block size, unroll list, buffer count, one kind per option), the log2 of the
  *effective* extents before and after the change (a tile clamped to the view it tiles, a cube tile to the
  matmul's M, K, N), and the stage group;
* **kernel** — a move is the **difference of a function of the knob's settings**, ``g(after) − g(before)``
  (``_difference``): ``g`` is half a joint RBF over the extents and half one RBF per component, so a move of one
  component answers alike whatever the others are; the function is the knob's own (two cube tiles of one matmul
  shape share half of it), a part of it belongs to the kept state the move is made from (what a state changes in
  the knob's response), and a small part is the kind's. Two runs measured alike from one state then say that the
  move between their settings has no effect wherever the search stands (PyPTO's tiling_config runtime test,
  de-tuned: the move from a kept cube tile to another one measured alike was ranked first on that one's −84 % from
  the state before), a move back the way a gain came is its opposite, and a run made from another kept state is
  read where it was made with no extra noise. Other kinds share nothing (a measured vector tile says nothing about
  the cube tile: PyPTO's FFN example, where eight vector tiles measured exactly the same time and the cube tile held
  a 4.5× gain). A change whose settings are not known (an option) keeps the older reading: closeness of the
  extents after the change, a signed part for the direction of the move, a noisier reading from another state;
* **prior** — the prior score of the candidate, squashed to a plausible log2 speed-up (``PRIOR_SCALE``), weighs by
  the share of variance the measurements leave unexplained at that point: with nothing measured nearby the prior
  decides (the first ranking is the prior's order, each candidate lifted by its own uncertainty), after two flat
  trials of a knob its other values are ranked by what was measured;
* **acquisition** — posterior mean + ``BETA`` × posterior sd (UCB): a kind nobody has tried keeps its whole prior
  variance, so it gets its turn before a knob already measured flat is tried a third time, and a larger move, whose
  effect can be larger either way, gets more of a bonus than a small one. The sd is sized to the effects the session
  measured (``_scale``): a session that measures effects of a few per cent stops paying an untried value a 15 %
  bonus over a sure small gain;
* **batch** — the places after the first are chosen as if each earlier pick had measured no effect
  (:class:`BatchPicker`), so parallel trials spread over knobs the model cannot tell apart.

Two rules bound the model where a wrong guess would cost a run: a knob (or tile site) measured with **no effect
twice from the same kept state** is not proposed from it again (:meth:`SessionModel.exhausted_here`); and while a
candidate of an **untried kind** is left, a knob whose every measured trial had no effect — one is enough — or a
kind whose every trial had none — at least two — goes behind it (:meth:`SessionModel.unresponsive`); a cube tile
move of one level (L1 alone, or L0 alone) waits once two such moves had no effect and none had one
(:meth:`SessionModel.flat_level`). "No effect" is the keep rule's own judgement (no-gain: in SIM exactly the same
time, on the NPU within its noise margin) or ``|Δ| <= NO_EFFECT_PCT``.

Why a GP with UCB, and these settings. It is deterministic for a ledger (tests and the benchmark replay repeat
without a seed, which Thompson sampling would need), it keeps the prior as its mean (a per-knob bandit would drop the
shape model's order of values within a knob, which is what reaches 90 % in 1–2 trials on most grids), and a session's
tens of trials are a small solve (numpy; no new dependency: scikit-learn's GP would add a library for a 40×40
Cholesky). Measured with ``benchmarks/search_offline.py`` (model ranking, batch 1; trials to 90 % / 99 % of each
grid's speed-up, and trials run before the replay stopped), against the hand-written ranking it replaces as the
decision: equal on the five fixture grids (layer_norm_multi never/never — its one-knob walk reaches 72 % —,
matmul_act 1/1 with 9 trials run instead of 11, multi_stage 8/8, rmsnorm_grid 2/2, split_harness 1/1) and on the
upstream-style grids with the probe (activation 1/3 with 10 trials run instead of 18, ffn 2/2, layernorm 2/2,
attention never — its walk reaches 58 % —, mean_pool 7/9, rope 2/2), one fewer on bmm_scale (7 → 6) and
linear_bias (4 → 3), one more on upstream_softmax (2 → 3: the tile's kept 15× gain lifted its neighbour
[1, 32, 256], which regressed, above the block size that gave the rest). These grids are fixtures written here in
upstream style, not PyPTO's own examples. A first version whose targets were measured against the kept state's time
lost multi_stage's 8 (9); one that spread a kept gain to every value of its kind through a large kind part (0.2)
spent a trial walking back. β and the kernel weights were set once from these
considerations, not tuned per grid; Thompson sampling and scikit-learn's GP were not measured.

The difference reading (a move as ``g(after) − g(before)``, every run read where it was made and, one knob away from
the kept state, from here too) and the fitted amplitude, measured on PyPTO's own examples (``search_upstream.py``,
batches of 2) against the reading they replace (a move from a kept state, a run one knob away read from here
instead): ``tiling_config.py``'s runtime test de-tuned 99 % of its grid at trial 11 → 6; de-tuned ``basic_ops``
matmul 6 → 5, ``sequential_functions`` 4 → 3, ``activation.py``'s swiglu 2 → 1; as shipped ``kernel_input``'s
attention 3 → 1 and ``ffn_static_relu`` 4 → 3; ``ffn_static_gelu`` unchanged (1). Worse: as shipped, ``basic_ops``'
matmul 7 → 9 (its last 2 % is one k step on top of a kept n; a 3.2× cliff of an L0 n of 16 lowers every move from
its state through the joint part) and ``tiling_config``'s runtime test 7 → 13 on the grid its first ranking now
builds (2.35×; on the earlier 2.32× grid this model reaches 98.9 % at trial 10). Offline: upstream_softmax 3 → 2,
the rest unchanged. Measured and not kept: no joint part or a quarter of one (``basic_ops`` shipped never in 16;
offline multi_stage 8 → 9), a regression read no lower than ``FAILED_Y`` (``basic_ops`` shipped 9 → 8 but de-tuned
5 → 11, ``tiling_config`` de-tuned 6 → 7), and as the bonus the share of the prior sd left rather than the sd
(offline upstream_bmm_scale 6 → 9, linear_bias 3 → 4). Measured on one fixed grid per row (the benchmark keeps each
row's grid) and not kept either: a linear trend per component added to ``g`` (so that k 16 < 32 < 64 says something
of 128; covariance ``c·Σ Δp·Δq / n``) — at c = 0.1 ``tiling_config`` as shipped 13 → 9 and de-tuned 6 → 3, but
``basic_ops`` as shipped 9 → 10 and offline upstream_layernorm 2 → 5 (its variance grows with the square of a move,
so the first rankings pay the largest moves most; the shipped ``tiling_config`` gain came from such a first pick),
at c = 0.2 ``tiling_config`` 13 and 12; the same trend bounded (tanh of half a move) at 0.1: ``tiling_config`` 13
and 7, ``basic_ops`` as shipped 10 and de-tuned 5; and β = 0.2 (less exploration): ``tiling_config`` 15 and 7,
``basic_ops`` as shipped never in 16, offline bmm_scale 6 → 9.

Measured and not kept before, with the move-from-here reading: the direction part at any distance (not damped by
the extents' closeness) with a run read from here as the same move where another ran beside it with the knob at its
kept value (``tiling_config`` de-tuned 11 → 7 but shipped 7 → 9, ``basic_ops`` shipped 7 → never in 16, offline
upstream_bmm_scale 6 → 7); an anchor that read the kept state itself as "no move, no effect" (it stopped the walk
on upstream_activation after three trials).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pypto_tune.tools.search.history import components
from pypto_tune.tools.search.models import TriedChange, norm_value

NO_EFFECT_PCT = 0.05  # history.FLAT_PCT: a change within ±0.05 % left the time as it was
NO_EFFECT_LIMIT = 2  # no-effect trials of one knob from one kept state after which it is not proposed there again
UNRESPONSIVE_KNOB = 1  # no-effect trials (and nothing else) of one knob after which it waits for the untried kinds
FAILED_Y = -0.5  # a failed trial, in log2 speed-up units: a regression for its neighbours, not a cliff
PRIOR_SCALE = 1.0  # the prior's largest claim, in log2 speed-up units (a hand-written score of +13.7 is not 2^13)
PRIOR_SPAN = 4.0  # prior scores are squashed by tanh(score / PRIOR_SPAN): +0.4 → +0.1, +4.6 → +0.82, +8.5 → +0.97
BETA = 0.3  # UCB: mean + BETA × sd
SCALE_PRIOR_READINGS = 2.0  # the prior's amplitude (1) counts as this many readings in the session's own (``scale``)
NOISE = 0.01  # observation variance (log2 units²): SIM is exact, the kernel is not
# kernel weights (they sum to the prior variance, 1): same knob, same kind, same knob and kept state, same direction
W_KNOB = 0.5
W_KIND = 0.1
W_STATE = 0.2
W_DIRECTION = 0.2
SAME_PROBLEM = 0.5  # of a cube tile's knob part, what two tile calls of one matmul shape share (one call: all of it)
NOISE_ELSEWHERE = 0.5  # an unsettled move measured from another kept state: a noisy reading of the same move here
# ... unless it changed nothing: a move that left the time as it was (a tile already clipped, a buffer count the
# kernel ignores) does so after a kept change elsewhere too, and is read as made from here (``_readings``); a tile the
# kept change gave room differs in its effective extents, so it is another point. Measured on PyPTO's FFN (dynamic
# GELU): the kernel's vector tile measured +0.0 % and was tried again, unchanged, from the next kept state, ahead of
# the unroll list that held 1.76×. The rule "twice from this kept state" still counts where a trial was made.
PART = "part:"  # Point.space of a knob that sets one part of a tile (a row count): its own axis
SITES = "sites:"  # a group of knobs that set the same tile calls that ran (propose._site_group): "sites:f:line,…"
LENGTH_LOG2 = 1.0  # one doubling of an effective extent is one length scale
JOINT = 0.5  # of a knob's function of its settings, the part read jointly (the rest: one function per component)
OTHER_STAGE = 0.8  # correlation kept across stage groups
MOVED_BY_SHOWN = 3
BATCH_LIE = 0.0  # what a batch's earlier pick is taken to measure while the later places are chosen: no effect
BATCH_SAME_SITE = 0.25  # what a later place of a batch pays per earlier place on its knob (log2 units: ~19 %)


def kind_of(kind: str, name: str, consumers: Iterable[str] | None = None) -> str:
    """The kind of knob a change belongs to, for exploration: a kind not yet tried gets its turn."""
    uses = set(consumers or [])
    if name == "unroll_list" or "unroll" in uses:
        return "unroll-list"
    if "nbuffer" in name:
        return "buffer-count"
    if kind == "vec_tile":
        return "vector-tile"
    if kind == "cube_tile":
        return "cube-tile"
    if kind in ("tile_source", "tile_constant", "local_constant"):
        if uses & {"loop", "slice", "view"}:
            return "block-size"
        if "cube_tile" in uses:
            return "cube-tile"
        if "vec_tile" in uses:
            return "vector-tile"
        return "option" if "jit_options" in uses else f"value:{name}"
    if kind in ("jit_option", "pass_option", "loop_option"):
        return f"option:{name}"
    return f"other:{name}"


def no_effect(t: TriedChange) -> bool:
    """The trial left the time as it was: the keep rule's own no-gain (SIM: exactly the same time; NPU: within its
    noise margin), or a measured |Δ| within ``NO_EFFECT_PCT``."""
    if t.outcome == "failed" or t.after_us is None:
        return False
    if t.outcome == "no-gain":
        return True
    return t.delta_pct is not None and abs(t.delta_pct) <= NO_EFFECT_PCT


@dataclass(frozen=True)
class Point:
    """One change in the model's feature space."""

    group: str  # the knob, or the tile site group several knobs set
    kind: str
    extents: tuple[float, ...] | None  # log2 of the effective extents after the change
    direction: tuple[int, ...] | None  # sign of the move per component, from its kept state
    state: str  # the kept state it was (or would be) tried from
    stage: str
    # a cube tile's matmul as it ran ("mkn:M×K×N"): two tile calls of one problem answer a move alike (PyPTO's
    # tiling_config runtime test: two kernels, one matmul each, of the same shape, each with its own cube tile)
    problem: str | None = None
    start: tuple[float, ...] | None = None  # log2 of the effective extents before the change (its kept state's)
    # what ``start`` and ``extents`` measure: the tile calls of ``group`` for a value that is a whole tile, the knob
    # itself (``PART`` + its id) for a part of one (a config's row count and its column count feed one call, and are
    # not one axis); None for a change read the old way (no start known)
    space: str | None = None


@dataclass
class Observation:
    point: Point
    y: float
    trial: TriedChange
    # the same run read as a move from the kept state (``fit``'s ``here``): where it was made, and its effect, stay
    # the rules' business (``point``, ``trial``); the model reads this
    here: Point | None = None
    y_here: float | None = None


@dataclass
class Moved:
    """One measurement's part in a prediction."""

    round: int | None
    knob: str
    delta_pct: float | None
    outcome: str
    part: float  # its contribution to the posterior mean (log2 units)

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "knob": self.knob.split(":", 1)[-1],
                "delta_pct": None if self.delta_pct is None else round(self.delta_pct, 2),
                "outcome": self.outcome, "part": round(self.part, 3)}


@dataclass
class Prediction:
    mean: float
    sd: float
    score: float  # the acquisition: mean + BETA × sd
    prior: float  # the prior's part of the mean (squashed prior × its remaining weight)
    prior_weight: float
    moved_by: list[Moved] = field(default_factory=list)

    def evidence(self, prior_parts: dict[str, float]) -> dict[str, Any]:
        """Compact, for the candidate's evidence: what moved it, and the prior's part by family."""
        return {"mean": round(self.mean, 3), "sd": round(self.sd, 3), "ucb": round(self.score, 3),
                "prior": {"part": round(self.prior, 3), "weight": round(self.prior_weight, 2),
                          **{k: round(v, 3) for k, v in prior_parts.items() if abs(v) >= 1e-6}},
                "moved_by": [m.as_dict() for m in self.moved_by]}

    def text(self) -> str:
        """One line: the prediction, then the measurements that moved it most."""
        moved = ", ".join(f"r{m.round} {m.knob.split(':', 1)[-1].rsplit('.', 1)[-1]} "
                          + ("failed" if m.delta_pct is None else f"{m.delta_pct:+.1f} %")
                          + (" ↑" if m.part > 0 else " ↓") for m in self.moved_by)
        return (f"session model {self.mean:+.2f} ±{self.sd:.2f} (prior {self.prior:+.2f} at weight "
                f"{self.prior_weight:.2f}" + (f"; moved by {moved}" if moved else "; nothing measured near it") + ")")


def squash(prior_score: float) -> float:
    """A prior score (hand-written units) as a prior mean in log2 speed-up units, order kept."""
    return PRIOR_SCALE * math.tanh(prior_score / PRIOR_SPAN)


def log2_extents(value: Any, clamp: list[int | None] | None = None) -> tuple[float, ...] | None:
    """log2 of a value's components, each clamped to ``clamp`` (the view or axis it tiles) where known."""
    c = components(value)
    if c is None:
        return None
    out = []
    for i, x in enumerate(c):
        lim = clamp[i] if clamp is not None and i < len(clamp) else None
        if lim:
            x = min(x, float(lim))
        out.append(math.log2(max(x, 0.5)))
    return tuple(out)


def direction(a: tuple[float, ...] | None, b: tuple[float, ...] | None) -> tuple[int, ...] | None:
    """Sign of the move per component from ``a`` to ``b`` (None: not comparable)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple((y > x) - (y < x) for x, y in zip(a, b))


def levels_moved(p: Point) -> frozenset[str] | None:
    """The levels of a cube tile a move changed: its m, k and n pairs are (L0, L1); None for other kinds."""
    if p.kind != "cube-tile" or p.direction is None or len(p.direction) != 6:
        return None
    return frozenset(level for level, i in (("L0", 0), ("L1", 1)) if any(p.direction[i::2]))


def _cos(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> float:
    """Cosine of two moves' directions (0 when either has none or they are not comparable)."""
    if a is None or b is None or len(a) != len(b):
        return 0.0
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b)) / (na * nb) if na and nb else 0.0


def _sites(group: str) -> frozenset[str] | None:
    return frozenset(group[len(SITES):].split(",")) if group.startswith(SITES) else None


@functools.lru_cache(maxsize=4096)  # asked for every pair of points the kernel compares: a session has few groups
def overlap(a: str, b: str) -> float:
    """How much two knobs are one: 1 for the same knob (or the same tile calls), for two knobs that set tile calls
    the cosine of their call sets — a config field that feeds two kernels' tile calls and the pinned call of one of
    them are the same knob at 1/√2 (PyPTO's FFN example: ``FFNConfig.cube_tile_shape`` feeds the dynamic GELU
    kernel's cube tile and another kernel's; its trial and the pinned call's measured −22.9 % and −26.0 %) —, else 0.
    The cosine of indicator vectors is an inner product, so the kernel stays positive semi-definite."""
    if a == b:
        return 1.0
    sa, sb = _sites(a), _sites(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / math.sqrt(len(sa) * len(sb))


def _shared(p: Point, q: Point) -> float:
    """How much two changes are moves of one knob: ``overlap`` of their knobs; for cube tiles also whether their
    matmuls are one problem (``SAME_PROBLEM``). Within the cube-tile kind every point has a problem key (a tile of
    an unknown matmul has its own knob's), so the part is a sum of two positive semi-definite kernels; other kinds
    share nothing with cube tiles, so the block stays apart."""
    shared = overlap(p.group, q.group)
    if p.problem is None or q.problem is None:
        return shared
    return (1 - SAME_PROBLEM) * shared + SAME_PROBLEM * (p.problem == q.problem)


def _level(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Covariance of the knob's time at two settings (log2 effective extents): half a joint RBF, half the mean of
    one RBF per component — so a move of one component answers alike whatever the others are (PyPTO's basic_ops
    matmul: a cube tile's k that gained beside an n gains on top of it too)."""
    sq = [(x - y) ** 2 / (2 * LENGTH_LOG2 ** 2) for x, y in zip(a, b)]
    return JOINT * math.exp(-sum(sq)) + (1 - JOINT) * sum(math.exp(-d) for d in sq) / len(sq)


def _difference(p: Point, q: Point) -> float:
    """Covariance of two moves' effects when each is the difference of one function's values at its two settings
    (``_level``): ``g(end) − g(start)``; 0 where their extents are not of one length (another function). Halved, so
    the largest move's variance is 1."""
    ps, pe, qs, qe = p.start, p.extents, q.start, q.extents
    if ps is None or pe is None or qs is None or qe is None or len({len(ps), len(pe), len(qs), len(qe)}) != 1 or not pe:
        return 0.0
    return _difference_of(ps, pe, qs, qe)


@functools.lru_cache(maxsize=1 << 16)  # a session's moves share few settings; a ranking asks for every pair
def _difference_of(ps: tuple[float, ...], pe: tuple[float, ...], qs: tuple[float, ...],
                   qe: tuple[float, ...]) -> float:
    return 0.5 * (_level(pe, qe) - _level(pe, qs) - _level(ps, qe) + _level(ps, qs))


def _settled(p: Point) -> bool:
    """The move is read as the difference of two settings (``Point.space``: where it was made is known)."""
    return p.space is not None and p.start is not None and p.extents is not None


def _axis(p: Point) -> str:
    """What a kind's shared function reads a settled move on: the extents of a whole tile by their number, a part
    of a tile (a config's row count) only against the same knob."""
    return p.space if p.space.startswith(PART) else f"tile:{len(p.extents or ())}"


def kernel(p: Point, q: Point) -> float:
    """Prior covariance of two changes' log2 speed-ups (see the module docstring). Two kinds of point, each a PSD
    kernel, and none between them (so the sum stays one):

    * **settled moves** (start and end known): each move is the difference of a function of its settings
      (``_difference``) — the knob's own (shared by knobs of one tile call, ``_shared``), a part of it only from
      the same kept state (what a state changes in the knob's response), and the kind's (a tile shape good for one
      cube tile tends to be for another). Two runs measured alike from one state then say that a move between their
      settings has no effect wherever the search stands now (PyPTO's tiling_config runtime test: two cube tiles of
      one kernel measured 43.369 µs each; the move from the kept one to the other, tried from a state another knob
      had left, was ranked first on the other's −84 %); a move back the way a gain came is its opposite;
    * **other changes** (an option, a knob of an earlier state): closeness of the effective extents after the
      change (RBF), times a part for the same kept state and a signed part for the direction of the move (cosine),
      and a constant the kind shares."""
    if p.kind != q.kind or _settled(p) != _settled(q):
        return 0.0
    stage = 1.0 if p.stage == q.stage else OTHER_STAGE
    if _settled(p):
        diff = _difference(p, q)
        k = W_KIND * diff if _axis(p) == _axis(q) else 0.0
        if p.space == q.space and (shared := _shared(p, q)):
            k += shared * diff * (W_KNOB + W_DIRECTION + (W_STATE if p.state == q.state else 0))
        return k * stage
    k = W_KIND
    shared = _shared(p, q)
    if shared:
        if p.extents is not None and q.extents is not None and len(p.extents) == len(q.extents):
            d2 = sum((a - b) ** 2 for a, b in zip(p.extents, q.extents))
            near = math.exp(-d2 / (2 * LENGTH_LOG2 ** 2))
        else:
            near = 1.0 if p.extents == q.extents else 0.5
        cos = _cos(p.direction, q.direction)
        if p == q and not any(p.direction or ()):
            cos = 1.0  # a move without a direction is still fully correlated with itself (identity kernel: PSD)
        k += shared * near * (W_KNOB + W_DIRECTION * cos + (W_STATE if p.state == q.state else 0))
    return k * stage


def _readings(obs: Observation, state: str) -> list[tuple[Point, float, float]]:
    """Where the model places an observation, as (point, target, variance) readings. A run one knob away from the kept
    state is that knob's move from here, its effect the two times' ratio (``fit``'s ``here``), known exactly. Where the
    move is the difference of two settings (``Point.space``), the run is also its own move from where it was made: the
    two are two differences of one run's time, and together they say what a move between two measured settings does
    from here. Where it is not, the reading from here replaces it (read from where they were made, the first large
    gains of a session lifted every value near them long after they were banked). A move that changed nothing,
    measured from another kept state, reads as made from this one (see ``NOISE_ELSEWHERE``); any other unsettled move
    from another state is a noisy reading of the same move from here."""
    here = [(obs.here, obs.y_here, NOISE)] if obs.here is not None and obs.y_here is not None else []
    if here and not _settled(obs.point):
        return here
    point = obs.point
    if point.state != state and no_effect(obs.trial):
        point = dataclasses.replace(point, state=state)
    # a settled move from another state needs no extra noise: what the state changes is the kernel's own part
    exact = point.state == state or _settled(point)
    return [(point, obs.y, NOISE if exact else NOISE_ELSEWHERE), *here]


def _solve(points: list[Point], ys: list[float], noise: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The Cholesky factor of the observations' covariance and the weights of their targets."""
    cov = np.array([[kernel(a, b) for b in points] for a in points]) + np.diag(noise)
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        # points whose extents cannot be compared (a config's [m, k, n] and a pinned call's m, k, n pairs) are
        # correlated by a constant, which need not keep the matrix positive definite: lift its smallest eigenvalue
        lift = max(0.0, -float(np.linalg.eigvalsh(cov).min())) + min(noise)
        chol = np.linalg.cholesky(cov + lift * np.eye(len(points)))
    return chol, np.linalg.solve(chol.T, np.linalg.solve(chol, np.array(ys)))


def _scale(ys: list[float], alpha: np.ndarray) -> float:
    """How large this operator's effects are, as the amplitude of the model's sd (at most the prior's, 1): the
    maximum-likelihood amplitude of the readings, ``yᵀK⁻¹y / n``, with the prior's 1 counted as
    ``SCALE_PRIOR_READINGS`` readings. The posterior mean does not depend on it; the exploration bonus does: where a
    session has measured only effects of a few per cent (an operator shipped near its best: PyPTO's basic_ops
    matmul, whose last 2 % was one k step on top of a kept n), an untried value is not worth a 15 % bonus."""
    fit = float(np.dot(ys, alpha))
    return math.sqrt(min(1.0, max(0.0, fit + SCALE_PRIOR_READINGS) / (len(ys) + SCALE_PRIOR_READINGS)))


def _posterior(m0: np.ndarray, prior_var: np.ndarray, kx: np.ndarray, chol: np.ndarray,
               alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means and variances of points with prior means ``m0`` and prior variances ``prior_var`` (> 0),
    ``kx`` their covariances with the observations (a row each): the prior mean weighs by the share of its variance
    the observations leave."""
    v = np.linalg.solve(chol, kx.T)
    var = np.maximum(prior_var - (v * v).sum(axis=0), 1e-9)
    return m0 * (var / prior_var) + kx @ alpha, var


class SessionModel:
    """A GP over this session's decided trials (``fit``), asked for each candidate (``predict``)."""

    def __init__(self, observations: list[Observation], state: str = "") -> None:
        self.obs = observations
        self._state = state
        # each observation's readings (``_readings``), flat; ``_of`` maps a reading back to its observation
        read = [(i, r) for i, o in enumerate(observations) for r in _readings(o, state)]
        self._of = [i for i, _ in read]
        self.points, self.ys, self.noise = ([r[j] for _, r in read] for j in range(3))
        self._alpha = np.zeros(len(read))
        self._chol: np.ndarray | None = None
        self.scale = 1.0
        if read:
            self._chol, self._alpha = _solve(self.points, self.ys, self.noise)
            self.scale = _scale(self.ys, self._alpha)

    def predict(self, point: Point, prior_score: float) -> Prediction:
        m0 = squash(prior_score)
        prior_var = kernel(point, point)
        if not self.obs or prior_var <= 0:
            sd = self.scale * math.sqrt(max(prior_var, 0.0))
            return Prediction(m0, sd, m0 + BETA * sd, m0, 1.0)
        kx = np.array([kernel(point, q) for q in self.points])
        means, variances = _posterior(np.array([m0]), np.array([prior_var]), kx[None, :], self._chol, self._alpha)
        mean, var = float(means[0]), float(variances[0])
        weight = var / prior_var  # the share of the prior's variance the measurements leave at this point
        sd = self.scale * math.sqrt(var)
        # each measurement's part in moving the mean from the prior: its own term of the GP mean, plus its share
        # (by squared covariance) of the prior it displaced — a no-effect trial (y = 0) moves a candidate only that
        # way. The parts sum to mean − prior mean.
        share = kx ** 2 / float((kx ** 2).sum()) if float((kx ** 2).sum()) > 0 else np.zeros(len(kx))
        parts = np.bincount(self._of, weights=kx * self._alpha - m0 * (1.0 - weight) * share,
                            minlength=len(self.obs))
        order = sorted(range(len(self.obs)), key=lambda i: -abs(parts[i]))
        moved = [Moved(self.obs[i].trial.round, self.obs[i].trial.knob_id, self.obs[i].trial.delta_pct,
                       self.obs[i].trial.outcome, float(parts[i])) for i in order[:MOVED_BY_SHOWN]
                 if abs(parts[i]) >= 1e-3]
        return Prediction(mean, sd, mean + BETA * sd, m0 * weight, weight, moved)

    # ------------------------------------------------------------------------------------------ the two rules
    def exhausted_here(self, group: str, state: str) -> list[TriedChange]:
        """The no-effect trials of this knob (site group) from this kept state, when there are enough of them that
        it is not proposed from this state again (``NO_EFFECT_LIMIT``); else empty."""
        here = [o.trial for o in self.obs if o.point.group == group and o.point.state == state
                and no_effect(o.trial)]
        return here if len(here) >= NO_EFFECT_LIMIT else []

    def unresponsive(self, group: str, kind: str) -> bool:
        """Every measured trial of this knob had no effect (``UNRESPONSIVE_KNOB`` of them), or every trial of its
        whole kind (``NO_EFFECT_LIMIT``): its next try waits for the kinds nobody has tried. Each kind once before a
        knob that showed nothing is tried again, as a bandit plays every arm once: a move of a tile that left a SIM
        run identical to the last digit says the tile is off the critical path, and its other values mostly are too
        (PyPTO's FFN, dynamic GELU: the activation kernel's vector tile at [16, 1024] and at [16, 256] both exactly
        +0.0 %, tried ahead of the loop's unroll list that held 1.76×). A kind is only demoted after two: one
        knob's silence says little about another knob of its kind (the GELU tile of the same FFN holds a gain)."""
        for same, least in (([o for o in self.obs if o.point.group == group], UNRESPONSIVE_KNOB),
                            ([o for o in self.obs if o.point.kind == kind], NO_EFFECT_LIMIT)):
            measured = [o for o in same if o.trial.outcome != "failed"]
            if len(measured) >= least and all(no_effect(o.trial) for o in measured):
                return True
        return False

    def flat_level(self, point: Point) -> list[TriedChange]:
        """The trials that moved only the same level of a cube tile as ``point`` does (L1 only, or L0 only; any cube
        tile of the session, from any state), when there are ``NO_EFFECT_LIMIT`` of them and every one measured no
        effect; else empty. Such a move then waits behind every other candidate. PyPTO's tiling_config runtime test,
        de-tuned: five moves of a cube tile's L1 alone (its L0 kept) measured the kept time to the last digit, on
        both kernels and for k and n alike, while the L0 moves held a 12× grid. It is learnt, not assumed: an L1 can
        matter (a 3-element k that keeps A resident in L1, domain F-9), and one such move with an effect keeps the
        level in play."""
        levels = levels_moved(point)
        if levels is None or len(levels) != 1:
            return []
        same = [o for o in self.obs if o.point.kind == point.kind and levels_moved(o.point) == levels
                and o.trial.outcome != "failed"]
        return [o.trial for o in same] if len(same) >= NO_EFFECT_LIMIT and all(no_effect(o.trial) for o in same) \
            else []

    def tried_kinds(self) -> set[str]:
        return {o.point.kind for o in self.obs}


class BatchPicker:
    """The places of a batch, each the best given the picks before it (a *constant liar*): each pick that stands
    joins the observations as if it had measured no effect — the outcome most trials have, and the pessimistic one
    for a pick the model ranks first — which takes most of the promise and the uncertainty out of its own knob's other
    values and little out of another knob's. A batch of parallel trials then spreads over the knobs the model cannot
    tell apart instead of betting twice on one (PyPTO's ``sequential_functions``, de-tuned: both trials of the first
    batch went to the GELU tile while the layer norm's tile held the gain); a value far better than every other
    knob's keeps its place. Believing the model's own prediction instead (the kriging believer) lifts the pick's
    neighbours as much as it narrows them, and with ``BETA`` = 0.3 left the batch on one knob. The lie hardly
    reaches a value of the same knob two doublings away (the kernel's length scale is one), so each earlier place on
    the same knob also costs ``BATCH_SAME_SITE``: at the de-tuned ``sequential_functions`` baseline the GELU tile's
    values scored 0.60-0.69 and the layer norm's best 0.46.

    ``candidates``: (point, prior score, tier) in rank order; the tier still comes first, and equal scores keep
    the rank order (the first place is the model's best). A pick the caller drops (refused at admission) adds no
    lie. After ``depth`` picks stood, the rest follow in rank order."""

    def __init__(self, model: SessionModel, candidates: list[tuple[Point, float, int]], depth: int) -> None:
        self._cands = candidates
        self._depth = depth
        self.left = list(range(len(candidates)))
        self._points, self._ys, self._noise = list(model.points), list(model.ys), list(model.noise)
        self._scale = model.scale
        self._lie_groups: list[str] = []
        self.stood = 0
        # each candidate's prior and its covariance with every observation, once (a lie adds one column): the scores
        # of all candidates are then one solve per pick
        self._m0 = np.array([squash(c[1]) for c in candidates])
        self._prior_var = np.array([kernel(c[0], c[0]) for c in candidates])
        self._kx = np.array([[kernel(c[0], q) for q in self._points] for c in candidates]).reshape(
            len(candidates), len(self._points))
        self._fit()

    def _fit(self) -> None:
        mean, var = self._m0.copy(), np.maximum(self._prior_var, 0.0)
        has = self._prior_var > 0  # a point without prior variance keeps its prior (as SessionModel.predict)
        if self._points and has.any():
            chol, alpha = _solve(self._points, self._ys, self._noise)
            mean[has], var[has] = _posterior(self._m0[has], self._prior_var[has], self._kx[has], chol, alpha)
        self._scores = mean + BETA * self._scale * np.sqrt(var)

    def next(self) -> int | None:
        """The index of the next place (None: no candidate left)."""
        if not self.left:
            return None
        if self.stood >= self._depth:
            return self.left[0]
        # rounded as the ranking's sort key rounds: float noise must not reorder equal scores
        return min(self.left, key=lambda i: (self._cands[i][2], -round(float(self._scores[i]) - self._crowding(i), 9),
                                             i))

    def _crowding(self, i: int) -> float:
        """``BATCH_SAME_SITE`` for each place that stood on the same knob (tile site): the lie alone hardly touches a
        value two doublings away from the pick, which is still the same knob's bet."""
        return BATCH_SAME_SITE * sum(overlap(g, self._cands[i][0].group) for g in self._lie_groups)

    def accept(self, i: int) -> None:
        """The pick stands: it is taken as no effect for the places after it."""
        self.left.remove(i)
        if self.stood < self._depth:
            pick = self._cands[i][0]
            self._points.append(pick)
            self._ys.append(BATCH_LIE)
            self._noise.append(NOISE)
            self._lie_groups.append(pick.group)
            self._kx = np.column_stack([self._kx, [kernel(c[0], pick) for c in self._cands]])
            self._fit()
        self.stood += 1

    def drop(self, i: int) -> None:
        """The pick does not stand (refused): it leaves without a lie."""
        self.left.remove(i)


def observation_y(t: TriedChange) -> float | None:
    """A decided trial as the model's target: the move's effect, log2(before / after) against the state it was tried
    from; ``FAILED_Y`` for a failure; None when it says nothing (no times)."""
    if t.outcome == "failed" or t.after_us is None:
        return FAILED_Y if t.outcome == "failed" else None
    if not t.before_us or t.after_us <= 0:
        return None
    return math.log2(t.before_us / t.after_us)


def fit(history: Iterable[TriedChange], point_of: Callable[[TriedChange], Point | None],
        state: str = "", here: Callable[[TriedChange], tuple[Point, float] | None] | None = None) -> SessionModel:
    """The model of this session: every decided trial the caller can place (``point_of``) with its target; a trial
    tried from another kept state than ``state`` (the kept one) counts with more noise — unless ``here`` reads it
    as a move from the kept state: a run whose configuration is one knob away from the kept state's is that knob's
    move from here, and its effect from here is the two times' ratio, known exactly (a run's time is its
    configuration's). Read from where they were made, the first large gains of a session (a cube tile's −39 % from
    the shipped state on PyPTO's basic_ops matmul) lifted every value near them long after they were banked, and
    the search explored around a state it had already left instead of following the 2 % steps that remained."""
    obs = []
    for t in history:
        y = observation_y(t)
        if y is None:
            continue
        p = point_of(t)
        if p is not None:
            moved = here(t) if here is not None and t.outcome != "failed" else None
            obs.append(Observation(p, y, t, *(moved or (None, None))))
    return SessionModel(obs, state)


def state_configs(history: list[TriedChange], now: dict[str, Any], kept_hash: str) -> dict[str, dict[str, Any]]:
    """The knob values of every kept state this session went through, keyed by its hash: the kept state's values
    (``now``) with the kept changes undone one by one, latest first. A state left after a revert (its changes are
    not on the way here) is not reconstructed; a knob that is not a knob of the kept state any more is carried as
    the value the ledger recorded."""
    kept = sorted((t for t in history if t.outcome == "kept" and t.round is not None), key=lambda t: t.round)
    left_here = next((i for i, u in enumerate(kept) if u.from_kept_hash == kept_hash), None)
    if left_here is not None:  # back here by a revert: the changes kept after this state are not on the way
        kept = kept[:left_here]
    out = {kept_hash: dict(now)}
    cur = dict(now)
    for u in reversed(kept):
        cur = {**cur, u.knob_id: norm_value(u.before_value)}
        out.setdefault(u.from_kept_hash, dict(cur))
    return out


__all__ = ["Point", "Prediction", "SessionModel", "direction", "fit", "kind_of", "log2_extents", "no_effect",
           "levels_moved", "observation_y", "squash", "state_configs"]
