"""Linked pairs as one change point (rule ``linked-pair``): which joint points the search proposes as one round.

A loop's block sets the view a vector tile tiles, and PyPTO clips the tile to that view. From a state where the tile
already fills its view, more tile rows alone run exactly as before and a larger block alone can be slower (H.1: 0.3 %
on one operator); both together gave 2.45× there. The single-step walk of :mod:`.linked` crosses such a plateau
where one of its steps gains on its own (the tile first, clipped to the view of now). Where none does, the pair is
proposed as one candidate — one round, both knobs — which the server admits under the rule ``linked-pair`` only
when the kept state's run links the two (the links of :mod:`.linked` are the kernel picture's, read from the run).

:func:`points` decides where a pair is called for:

* **prediction** — the plan's best point needs both knobs, the tile it wants does not fit the view of now, and the
  tile set first would not gain on its own (``PairPlan.needs_pair`` and not ``tile_first``): the one-knob walk has
  only a block step it predicts to gain less than the pair;
* **plateau** — measured: from this kept state the block and the tile were each tried alone and neither gained (no
  gain or slower). The joint points of the values tried, and the plan's best tile through each tried block, are the
  corner the single steps cannot reach.

A pair tried from this kept state is not proposed again, nor any pair of its link once ``PAIR_TRIES_HERE`` of them
tried from it did not gain. Scoring is a hook: ``score(block, block_value, tile,
tile_value)`` returns the terms the ranking adds up, as it does for a single change (the search passes the shape
model's reading of the joint picture); a ranking that learns from the session scores the pair through the same
hook. Pure: it plans and scores; admission is the server's (:func:`plan_edit` + ``admission.admit``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pypto_tune.tools.code.admission import moves_capped_dims
from pypto_tune.tools.patching import plan_knob_edit
from pypto_tune.tools.patching.diffs import unified_diff
from pypto_tune.tools.patching.models import EditPlan, Knob
from pypto_tune.tools.search import linked
from pypto_tune.tools.search import rank as R
from pypto_tune.tools.search.cache import value_key
from pypto_tune.tools.search.models import PairPart, TriedChange, norm_value

#: Outcomes of a single change tried from the kept state that make its knob part of a plateau: it ran and did not
#: gain. A gain another trial beat (not-chosen) is no plateau; a failure is not retried through a pair (no-retry).
PLATEAU_OUTCOMES = ("no-gain", "regression")
#: Joint points proposed per link: the pair is a way past a plateau, not a grid over two knobs.
MAX_POINTS_PER_LINK = 2
#: Pairs of one link tried from one kept state without a gain, after which the link is not paired from it again: two
#: crossings that failed say the plateau is this state's optimum for the two knobs (PyPTO's GLM gate: five pairs of
#: one 16-row block with the cube tiles that had each regressed alone, every one slower, over three answers).
PAIR_TRIES_HERE = 2

Scorer = Callable[[Knob, Any, Knob, Any], list[R.Term]]


@dataclass
class PairPoint:
    """One joint point of a linked pair: the block and the tile at new values, proposed as one round."""

    link: linked.Link
    block_value: Any
    tile_value: Any
    trigger: Literal["prediction", "plateau"]
    reason: str
    terms: list[R.Term] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(t.score for t in self.terms)

    @property
    def id_key(self) -> tuple[str, str]:
        """(ids, values) as the candidate id hashes them: both knobs, both values (:func:`pair_key`)."""
        return pair_key(self.link.block.id, self.block_value, self.link.tile.id, self.tile_value)

    def second(self) -> PairPart:
        t = self.link.tile
        return PairPart(knob=t.id, value=self.tile_value, before=t.value, knob_name=t.name)

    def describe(self) -> str:
        b, t = self.link.block, self.link.tile
        return (f"{b.name} {b.value!r} → {self.block_value!r} + {t.name} {t.value!r} → {self.tile_value!r}")


def pair_key(block_id: str, block_value: Any, tile_id: str, tile_value: Any) -> tuple[str, str]:
    """A linked pair's identity, (ids, values): what its candidate id, its admission and its history are keyed by."""
    return f"{block_id}+{tile_id}", value_key([norm_value(block_value), norm_value(tile_value)])


def tried_pairs(history: Iterable[TriedChange], kept_hash: str) -> set[tuple[str, str]]:
    """The pairs (:attr:`PairPoint.id_key`) tried from this kept state (any outcome: a kept one left the state)."""
    out = set()
    for t in history:
        if t.pair_with is None or t.from_kept_hash != kept_hash:
            continue
        out.add(pair_key(t.knob_id, t.value, t.pair_with.knob, t.pair_with.value))
    return out


def _spent(link: linked.Link, history: list[TriedChange], kept_hash: str) -> list[TriedChange]:
    """The link's pairs tried from this kept state that did not gain (ran slower, no better, or failed)."""
    return [t for t in history if t.pair_with is not None and t.from_kept_hash == kept_hash
            and t.knob_id == link.block.id and t.pair_with.knob == link.tile.id
            and t.outcome in (*PLATEAU_OUTCOMES, "failed")]


def _plateau(link: linked.Link, history: list[TriedChange], kept_hash: str
             ) -> tuple[list[TriedChange], list[TriedChange]]:
    """The block's and the tile's single trials from this kept state that ran and did not gain."""
    here = [t for t in history if t.pair_with is None and t.from_kept_hash == kept_hash
            and t.outcome in PLATEAU_OUTCOMES]
    return ([t for t in here if t.knob_id == link.block.id], [t for t in here if t.knob_id == link.tile.id])


def _fmt(t: TriedChange) -> str:
    pct = f" ({t.delta_pct:+.2f} %)" if t.delta_pct is not None else ""
    return f"{t.value!r}: {t.outcome}{pct}" + (f", round {t.round}" if t.round is not None else "")


def points(plans: dict[str, linked.PairPlan], history: Iterable[TriedChange], kept_hash: str, score: Scorer,
           *, knob: str | None = None, allowed: Callable[[Knob, Any], bool] | None = None) -> list[PairPoint]:
    """The joint points worth one round each (see the module doc), best scored first, at most
    ``MAX_POINTS_PER_LINK`` per link. ``knob``: only pairs of this knob (id); ``allowed(knob, value)``: the
    search's own filters on a value (this stage, asked for, legal by the cheap checks)."""
    hist = list(history)
    done = tried_pairs(hist, kept_hash)
    out: list[PairPoint] = []
    for pl in plans.values():
        link = pl.link
        b, t = link.block, link.tile
        if knob is not None and knob not in (b.id, t.id):
            continue
        if len(_spent(link, hist, kept_hash)) >= PAIR_TRIES_HERE:
            continue
        found: dict[tuple[str, str], PairPoint] = {}

        def add(bv: Any, tv: Any, trigger: Literal["prediction", "plateau"], reason: str,
                evidence: dict[str, Any]) -> None:
            bv, tv = norm_value(bv), norm_value(tv)
            if bv is None or tv is None or bv == norm_value(b.value) or tv == norm_value(t.value):
                return  # a pair moves both knobs; one that moves one is a single change
            if allowed is not None and not (allowed(b, bv) and allowed(t, tv)):
                return
            if not moves_capped_dims(link, t.value, tv):
                return  # the rule linked-pair admits only a tile change in the dims the block caps
            p = PairPoint(link, bv, tv, trigger, reason, evidence=evidence)
            if p.id_key in done or p.id_key in found:
                return
            p.terms = score(b, bv, t, tv)
            found[p.id_key] = p

        blocks, tiles = _plateau(link, hist, kept_hash)
        if blocks and tiles:
            why = (f"a plateau measured from this kept state: {b.name} alone ({'; '.join(_fmt(x) for x in blocks[:2])})"
                   f" and {t.name} alone ({'; '.join(_fmt(x) for x in tiles[:2])}) did not gain; {link.describe()}, "
                   "so the two are one tiling decision, tried together in one round (rule linked-pair)")
            ev = {"plateau": {"block": [x.model_dump(mode="json", include={"value", "outcome", "round", "after_us"})
                                        for x in blocks[:3]],
                              "tile": [x.model_dump(mode="json", include={"value", "outcome", "round", "after_us"})
                                       for x in tiles[:3]]}}
            for x in blocks:
                add(x.value, pl.tile_for.get(value_key(x.value)), "plateau", why, ev)
                for y in tiles:
                    add(x.value, y.value, "plateau", why, ev)
        if pl.needs_pair and not pl.tile_first:
            add(pl.best_block, pl.best_tile, "prediction",
                f"the best point the {'model' if pl.by == 'model' else 'store'} sees needs {b.name} = "
                f"{pl.best_block!r} and {t.name} = {pl.best_tile!r} together (predicted {pl.best_score:+.2f}, "
                f"against {max(pl.tile_alone, pl.block_alone):+.2f} for either alone), and neither step gains on "
                f"its own first: {link.describe()}; one round, both knobs (rule linked-pair)",
                {"linked_pair": pl.summary()})
        # a measured plateau first: it is what this session saw, the prediction is the model's
        out.extend(sorted(found.values(), key=lambda p: (p.trigger != "plateau", -p.score))[:MAX_POINTS_PER_LINK])
    return sorted(out, key=lambda p: -p.score)


def plan_edit(kept: dict[str, str], first: tuple[str, Any], second: tuple[str, Any],
              context: dict[str, str] | None = None) -> EditPlan:
    """Both knobs set, each by the one-knob edit (its checks included), as one plan against ``kept``: what a pair
    candidate writes. Raises what ``plan_knob_edit`` raises for either."""
    a = plan_knob_edit(kept, first[0], first[1], context=context)
    b = plan_knob_edit(a.new_sources, second[0], second[1], context=context)
    changed = sorted(p for p in b.new_sources if b.new_sources[p] != kept.get(p))
    return EditPlan(new_sources=b.new_sources, changes=[*a.changes, *b.changes],
                    diff=unified_diff(kept, b.new_sources), changed_files=changed)


__all__ = ["PairPoint", "pair_key", "plan_edit", "points", "tried_pairs"]
