"""Knobs the shapes link (issue #17): a loop's block and the tile that covers the block's view.

A tile can use no more rows than the view it tiles has, and a loop's block size sets that view. So the tile's best
value depends on the block. From a state where the tile already fills its view, a larger tile is the same tile
(clipped) and a larger block alone often changes nothing: a one-knob walk that widens the tile to the view first can
be stuck far from the best point (issue #17 measured 40 % of a grid's speed-up). Only a model that knows the shapes
can see the way out, and the order matters, because every step must be kept on its own (a strict gain):

* **tile first** (:attr:`PairPlan.tile_first`): the pair's best tile, set now, is clipped to the current view and
  runs as the tile that fills it — a gain of its own — and the block step after it uncovers the rest. This is the
  one tile larger than its view the search proposes. It goes first whenever that clipped step is predicted to gain
  more than the block alone (measured 2026-12-05: a block step alone ran exactly as before on upstream_rope and
  multi_stage, so "block first" stalled at its first step on both);
* **block first**: when the tile can gain nothing yet (it already fills its view), a block step that opens room
  gets the best score reachable in two steps through it (discounted).

This module finds such pairs on the kernel picture (:mod:`.kernel`, evaluated under trial values: a block knob is
linked to a tile when changing the block changes that tile's view) and plans each one: for every value of the
block it evaluates the best tile the new view allows, and the best tile clipped to the view of now. Pure: it reads
and scores, it never admits or runs anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pypto_tune.tools.patching.models import Knob
from pypto_tune.tools.search.cache import value_key
from pypto_tune.tools.search.models import norm_value

#: A two-step plan is worth this much of its predicted gain now: the second step is not measured yet, and the first
#: must itself be kept (a strict gain) for the second to build on it.
LOOKAHEAD_DISCOUNT = 0.9
#: Joint points whose predicted score beats the best single step by less than this are not worth a pair.
MIN_PAIR_ADVANTAGE = 0.25

Features = list[dict[str, Any]]
AfterFn = Callable[[list[tuple[Knob, Any]]], "Features | None"]


@dataclass(frozen=True)
class Link:
    """``block`` sets dims ``dims`` of the view that ``tile`` tiles in kernel ``scope`` (``kind``: a vector tile's
    view, or the M / N of a cube tile's matmul)."""

    block: Knob
    tile: Knob
    scope: str
    kind: Literal["vec", "cube"]
    dims: tuple[int, ...]

    def describe(self) -> str:
        what = "rows" if self.dims == (0,) else f"dims {list(self.dims)}" if self.kind == "vec" else "M"
        return f"{self.tile.name} ({self.tile.id}) can use no more {what} than the view {self.block.name} sets"


@dataclass
class PairPlan:
    link: Link
    by: Literal["model", "knowledge"] = "model"  # who scored the points: the shape model, or the store alone
    through: dict[str, float] = field(default_factory=dict)  # value_key(block value) -> best joint score through it
    tile_for: dict[str, Any] = field(default_factory=dict)  # value_key(block value) -> the tile of that best
    view_for: dict[str, Any] = field(default_factory=dict)  # value_key(block value) -> the tile's view there
    block_alone_for: dict[str, float] = field(default_factory=dict)  # value_key(block value) -> its score alone
    best_block: Any = None
    best_tile: Any = None
    best_score: float = 0.0
    tile_alone: float = 0.0  # the best the tile alone reaches from here (within the current view)
    block_alone: float = 0.0  # the best the block alone reaches from here (tile as it is)
    view_now: Any = None  # the tile's view as it ran (vec: its shape; cube: the matmul's M, K, N)
    clipped_now: float | None = None  # the best tile set now, clipped to the current view (None: not evaluable)

    @property
    def needs_room(self) -> bool:
        """The best tile uses more of a linked dim than the current view has: it cannot be set before the block."""
        best = norm_value(self.best_tile)
        view = self.view_now
        if not view:
            return False
        if self.link.kind == "vec" and isinstance(best, list):
            return any(i < len(best) and i < len(view) and view[i] and best[i] > view[i] for i in self.link.dims)
        if self.link.kind == "cube" and isinstance(best, dict):
            m = best.get("m")
            return bool(isinstance(m, list) and m and view[0] and m[0] > view[0])
        if self.link.kind == "cube" and isinstance(best, list) and len(best) == 3:  # (m, k, n) tiling source
            return bool(view[0] and best[0] > view[0])
        return False

    @property
    def free_first(self) -> bool:
        """The pair's tile set now, clipped to the current view, is predicted to gain, and as much as the best tile
        alone: going the pair's way costs nothing now. Typically it *is* the best lone tile, clipped
        (upstream_layernorm's [4, 512] under a one-row view runs as [1, 512]), and only the pair's tile leaves the
        block step something to uncover: once [1, 512] is kept, the pair's tile set later is the same run and cannot
        be kept."""
        first = self.clipped_now
        return first is not None and first > 0.0 and first >= self.tile_alone - 1e-9

    @property
    def needs_pair(self) -> bool:
        """The best point the predictor sees changes both knobs, needs the block first (the tile it wants does not
        fit the current view) and beats every single step by a clear margin — or by any margin when its first step
        is free (:attr:`free_first`): then the pair risks nothing the best single step does not."""
        single = max(self.tile_alone, self.block_alone, 0.0)
        return (self.best_block is not None and norm_value(self.best_block) != norm_value(self.link.block.value)
                and norm_value(self.best_tile) != norm_value(self.link.tile.value) and self.needs_room
                and (self.best_score > single + MIN_PAIR_ADVANTAGE or (self.free_first and self.best_score > single)))

    @property
    def tile_first_worth(self) -> float:
        """What the pair's tile, set first, is worth now: its own step as predicted, and the block step after it
        discounted by ``LOOKAHEAD_DISCOUNT`` (not measured yet, and it builds on the first step being kept)."""
        first = self.clipped_now or 0.0
        return first + LOOKAHEAD_DISCOUNT * (self.best_score - first)

    @property
    def tile_first(self) -> bool:
        """Which half of the pair goes first. Each step must be kept on its own (a strict gain), and a block step
        alone often runs exactly as before (measured: upstream_rope's block 2 → 4 with a (2, 64) tile, multi_stage's
        8 → 32 with (2, 1024); the model predicted +0.4 for both). The pair's best tile set *now* is clipped to the
        current view — it runs as the tile that fills the view, a gain of its own — and the block step that follows
        uncovers it. So the tile goes first whenever its clipped step is predicted to gain more than the block
        step alone; the block first only when the tile can gain nothing yet."""
        if not self.needs_pair or self.clipped_now is None:
            return False
        block_alone = self.block_alone_for.get(value_key(self.best_block), self.block_alone)
        return self.clipped_now > max(block_alone, 0.0)

    def summary(self) -> dict[str, Any]:
        b, t = self.link.block, self.link.tile
        order = (f"set {t.name} = {self.best_tile!r} first (clipped to the view now), then raise {b.name}"
                 if self.tile_first else f"raise {b.name} first, then {t.name}")
        return {"block_knob": b.id, "tile_knob": t.id, "best_point": {b.name: self.best_block, t.name: self.best_tile},
                "predicted_score": round(self.best_score, 3), "tile_alone": round(self.tile_alone, 3),
                "block_alone": round(self.block_alone, 3), "order": order, "why": self.link.describe(),
                "predicted_by": self.by}


def _is_block(k: Knob) -> bool:
    return (k.kind in ("tile_constant", "local_constant", "tile_source") and isinstance(k.value, int)
            and not isinstance(k.value, bool) and bool(set(k.context.get("consumers", [])) & {"loop", "slice", "view"}))


def feeds(k: Knob) -> set[tuple[str, int]]:
    """The (file, line) of every call a tiling source feeds (its ``feeds`` context)."""
    out = set()
    for x in k.context.get("feeds", []):
        f, _, line = str(x).rpartition(":")
        if line.isdigit():
            out.add((f, int(line)))
    return out


def _tile_of(knobs: list[Knob], f: dict[str, Any], kind: str, entry: dict[str, Any]) -> Knob | None:
    """The knob that sets this tile: a tiling source that feeds it (the form the author wrote), else the call's
    own knob (pinning)."""
    for k in knobs:
        if k.tunable and k.kind == "tile_source" and (f["file"], entry.get("line")) in feeds(k):
            return k
    for k in knobs:
        if k.tunable and k.kind == ("vec_tile" if kind == "vec" else "cube_tile") and k.file == f["file"] \
                and k.line == entry.get("line"):
            return k
    for k in knobs:
        if not k.tunable or k.file != f["file"]:
            continue
        if kind == "vec":
            if k.kind == "vec_tile" and k.line == entry.get("line"):
                return k
            if k.kind in ("tile_constant", "local_constant") and "vec_tile" in k.context.get("consumers", []) \
                    and norm_value(k.value) == norm_value(entry.get("tile")):
                return k
        elif k.kind == "cube_tile" and k.line == entry.get("line"):
            return k
    return None


def find_links(knobs: list[Knob], base: Features, after: AfterFn) -> list[Link]:
    """Every (block, tile) pair where changing the block changes the view of that tile: doubling the block is
    evaluated on the kernel picture and the views compared."""
    out: list[Link] = []
    for b in knobs:
        if not b.tunable or not _is_block(b) or b.value <= 0:
            continue
        trial = after([(b, b.value * 2)])
        if trial is None:
            continue
        for fb, fa in zip(base, trial):
            for eb, ea in zip(fb.get("vec", []), fa.get("vec", [])):
                vb, va = eb.get("block"), ea.get("block")
                if not vb or not va or len(vb) != len(va):
                    continue
                dims = tuple(i for i, (x, y) in enumerate(zip(vb, va)) if x is not None and y is not None and y > x)
                tile = _tile_of(knobs, fb, "vec", eb) if dims else None
                if tile is not None and tile.id != b.id:
                    out.append(Link(b, tile, fb["scope"], "vec", dims))
            cb, ca = fb.get("cube") or {}, fa.get("cube") or {}
            mb, ma = cb.get("mkn"), ca.get("mkn")
            if mb and ma and mb[0] and ma[0] and ma[0] > mb[0]:
                tile = _tile_of(knobs, fb, "cube", cb)
                if tile is not None:
                    out.append(Link(b, tile, fb["scope"], "cube", (0,)))
    return out


def _kernel(feats: Features, scope: str) -> dict[str, Any] | None:
    return next((f for f in feats if f["scope"] == scope), None)


def _view(link: Link, kernel: dict[str, Any]) -> Any:
    """The tile's view in a kernel picture: the shape it tiles (vec), or the matmul's M, K, N (cube)."""
    if link.kind == "cube":
        return (kernel.get("cube") or {}).get("mkn")
    lines = {link.tile.line} | {line for _, line in feeds(link.tile)}
    entry = next((e for e in kernel.get("vec", []) if e.get("line") in lines), None)
    return entry.get("block") if entry else None


def _free_part(link: Link, value: Any) -> Any:
    """The part of a tile value the block does not cap (compared to keep the pair search small), as a hashable key.
    Called for every tile value at every block value: plain tuples, no normalisation (generated values are plain)."""
    if link.kind == "vec" and isinstance(value, (list, tuple)):
        return tuple(x for i, x in enumerate(value) if i not in link.dims)
    if link.kind == "cube" and isinstance(value, dict):
        return tuple(tuple(value.get(a) or ()) for a in ("k", "n"))
    if isinstance(value, (list, tuple)):
        return tuple(value[1:]) if link.kind == "cube" else tuple(value)
    if isinstance(value, dict):  # an expression the model cannot split: compared whole
        return json.dumps(value, sort_keys=True, default=str)
    return value


def plan(link: Link, *, base: Features, after: AfterFn, block_values: list[Any],
         tile_values: Callable[[dict[str, Any]], list[Any]], by: Literal["model", "knowledge"] = "model",
         score: Callable[[Features], float] | None = None,
         step: Callable[[Features, Features], float] | None = None) -> PairPlan:
    """Evaluate the pair: the tile alone, the block alone, and for every block value the best tile its view allows.

    ``tile_values(kernel_features)`` generates the tile's candidate values for a kernel picture (the same generator
    the search uses: within the view, within the buffer budget); only values whose uncapped part equals the current
    tile's or the best lone tile's are tried at each block (a pair changes the capped dims).

    Either ``score`` rates a point against ``base`` in one go (the shape model adds up what the point does to every
    quantity), or ``step(from, to)`` rates one step: a single change is then ``step(base, point)``, and a joint
    point the better of its two paths — the tile first (clipped now), then the block; or the block first, then the
    tile — summed step by step.
    The store needs that: it predicts a change by the measured outcome of similar *single* changes, so a joint point
    rated in one go is a move larger than most it has seen, and its prediction is no larger than a single step's
    (upstream_layernorm, 2026-12-05: +1.25 for the pair against +1.35 for the tile alone, so no pair was planned).
    """
    if score is None:
        if step is None:
            raise ValueError("plan needs score or step")
        rate = step
        score = lambda feats: rate(base, feats)  # noqa: E731
    p = PairPlan(link, by=by)
    b, t = link.block, link.tile
    base_k = _kernel(base, link.scope)
    if base_k is None:
        return p
    p.view_now = _view(link, base_k)
    alone: list[tuple[float, Any]] = []
    for v in tile_values(base_k):
        feats = after([(t, v)])
        if feats is not None:
            alone.append((score(feats), v))
    best_alone = max(alone, key=lambda x: x[0]) if alone else None
    p.tile_alone = best_alone[0] if best_alone else 0.0
    templates = {_free_part(link, norm_value(t.value))} | ({_free_part(link, best_alone[1])} if best_alone else set())
    firsts: dict[str, tuple[Features | None, float]] = {}

    def tile_step(v: Any) -> tuple[Features | None, float]:
        """The tile set now (clipped to the current view) and its step from ``base``, once per tile value: every
        block value tries the same tiles first (a step rating is a store prediction over every observation)."""
        key = value_key(v)
        if key not in firsts:
            first = after([(t, v)])
            firsts[key] = (first, step(base, first) if step is not None and first is not None else 0.0)
        return firsts[key]

    p.best_score = float("-inf")
    for bv in block_values:
        only_b = after([(b, bv)])
        if only_b is None:
            continue
        s_b = score(only_b)
        p.block_alone = max(p.block_alone, s_b)
        p.block_alone_for[value_key(bv)] = s_b
        kb = _kernel(only_b, link.scope)
        best_here, tile_here = s_b, t.value
        for v in tile_values(kb) if kb is not None else []:
            if _free_part(link, v) not in templates:
                continue
            feats = after([(b, bv), (t, v)])
            if feats is None:
                continue
            sc = score(feats) if step is None else _by_steps(step, base, tile_step(v), only_b, s_b, feats)
            if sc > best_here:
                best_here, tile_here = sc, v
        key = value_key(bv)
        p.through[key], p.tile_for[key] = best_here, tile_here
        if kb is not None:
            p.view_for[key] = _view(link, kb)
        if best_here > p.best_score:
            p.best_score, p.best_block, p.best_tile = best_here, bv, tile_here
    if p.best_score == float("-inf"):
        p.best_score = 0.0
    elif p.best_tile is not None and norm_value(p.best_tile) != norm_value(t.value):
        clipped = after([(t, p.best_tile)])  # the kernel picture clips a tile to the view it tiles
        p.clipped_now = score(clipped) if clipped is not None else None
    return p


def _by_steps(step: Callable[[Features, Features], float], base: Features,
              tile_first: tuple[Features | None, float], block_first: Features, block_score: float,
              joint: Features) -> float:
    """A joint point rated as two steps, the better of its two orders (see :func:`plan`). The first steps come
    rated already: the block's (``block_score``, its lone step from ``base``) and the tile's (``tile_first``: its
    features and step)."""
    paths = [block_score + step(block_first, joint)]
    first, first_score = tile_first
    if first is not None:
        paths.append(first_score + step(first, joint))
    return max(paths)


def run_links(sources: dict[str, str], context: dict[str, str] | None, record: dict[str, Any] | None) -> list[Link]:
    """The links a state's run shows: the (block, tile) pairs of :func:`find_links` on the kernels as they ran
    (the run-time probe's ``record`` of that state, :mod:`.runpicture`). Only what ran can be linked: a block or a
    tile of a branch, helper or kernel the test never runs is in no picture. Empty without a reported record. The
    admission's ``linked-pair`` rule reads its links here, so a pair is linked by the server's reading of the run,
    never by anyone's say-so."""
    from pypto_tune.tools.search import runpicture

    built = runpicture.build(sources, context, record)
    if built is None:
        return []
    rm, picture = built
    base = picture.features()
    if not base:
        return []
    knobs = [s.knob for s in rm.sites]
    out = []
    for link in find_links(knobs, base, picture.features):
        out.append(link)
        if link.tile.kind == "tile_source":  # the tile call the source feeds sets the same tile, pinned
            out.extend(Link(link.block, k, link.scope, link.kind, link.dims) for k in knobs
                       if k.tunable and k.kind in ("vec_tile", "cube_tile") and (k.file, k.line) in feeds(link.tile))
    return out
