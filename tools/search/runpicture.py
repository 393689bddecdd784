"""The kernels as they ran (issue #17): the search's picture of each kernel built from the run-time probe's record.

The static picture (:mod:`.kernel`) reads the kernel from its text, and upstream-style code defeats it: tiles set in
a helper from a comprehension, a block size carried in a config dataclass built in the test, tensor shapes that only
the test's inputs decide. The probe recorded what ran (``tools/running/probe/``, joined with the text by
``tools/patching/runmap.py``): every kernel's input tensors, every loop with its trip count, every view with its
shape, every tile call with the value it got. This module turns that into the same per-kernel features the ranking
reads (``KernelModel.features()``'s format), and evaluates a trial value of one or more knobs on it:

* a tile call's own knob (pinned literals): the call gets the value;
* a tiling source (a comprehension literal, a config field, a name bound to a literal) that feeds tile calls: what
  each call gets is *derived* by the knob map's own reader (``runmap.derive``: the old value must reproduce what ran,
  or nothing is derived and the picture says "cannot tell");
* a block size that feeds a loop bound and the views of one iteration: the loop's trip count follows
  ``axis // block`` (the axis is what ran: trips × old block), and every view dimension that the block fed and that
  had the old block's extent takes the new one.

Only kernels that ran are pictured: a dead kernel costs nothing and gains nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.patching import runmap
from pypto_tune.tools.patching.legality import loop_trips
from pypto_tune.tools.patching.extract import Site
from pypto_tune.tools.patching.models import DTYPE_BYTES, Knob
from pypto_tune.tools.search.cache import value_key
from pypto_tune.tools.search import view_dims
from pypto_tune.tools.search.kernel import KernelModel

_VIEW_APIS = {"view", "Tensor.view"}
_CANNOT = object()
_DERIVED: dict[str, dict[tuple, Any]] = {}  # sources → (knob, value, tile call, ran) → derived tile value
_LOOP_APIS = {"loop", "loop_unroll"}


def _positive_ints(xs: Any) -> bool:
    return isinstance(xs, (list, tuple)) and bool(xs) and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                                for x in xs)


def _ints(v: Any) -> list[int] | None:
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def _unrolled_trips(calls: list[dict[str, Any]], call: dict[str, Any], whole: int | None) -> int | None:
    """How often a loop_unroll's body runs: the iterations of each variant's loop (pypto opens one per factor,
    ``<name>_LoopUnroll<p>``), summed; the loop's own trip count when no variant's bounds are concrete."""
    n, known = 0, False
    for c in calls:
        name = str((c.get("kwargs") or {}).get("name", ""))
        if c.get("api") == "loop" and c.get("origin") != "direct" and "_LoopUnroll" in name and \
                (c.get("file"), c.get("line"), c.get("kernel")) == (call.get("file"), call.get("line"), call.get("kernel")):
            t = loop_trips(c.get("args"))
            if t is None:
                return whole
            n, known = n + t, True
    return n if known else whole


@dataclass
class _Loop:
    file: str
    line: int
    trips: int | None
    ceil: bool = False


@dataclass
class _View:
    file: str
    line: int
    shape: list[int]


@dataclass
class _Tile:
    file: str
    line: int
    kind: str  # "vec" / "cube"
    value: Any
    # a vector tile: the largest tensor its operations worked on, when they all had the tile's rank (the probe's
    # ``extent``); a tile dimension at or past it is clamped to the data
    extent: list[int | None] | None = None


def _op_extent(raw: Any, tile: list[int] | None) -> list[int | None] | None:
    if not tile or not isinstance(raw, dict) or set(raw) != {str(len(tile))}:
        return None
    return list(raw[str(len(tile))])


@dataclass
class _Kernel:
    key: str
    file: str
    scope: str
    tensors: list[tuple[list[int], str]]  # (dims, DT_*) of the inputs, in call order
    loops: list[_Loop] = field(default_factory=list)
    views: list[_View] = field(default_factory=list)
    tiles: list[_Tile] = field(default_factory=list)
    operands: dict[str, Any] | None = None  # the first matmul under a cube tile: its A and B shapes, transposes


class RunPicture:
    """Per-kernel features of a probed run, and of the same run with knobs at trial values."""

    def __init__(self, rm: runmap.RunMap) -> None:
        self.rm = rm
        self.sites = {s.knob.id: s for s in rm.sites}
        self.kernels: list[_Kernel] = []
        # derive() parses the file on every call (~0.1 s): one answer per question, kept across searches of the
        # same sources (the pair planner asks the same questions on every propose_candidates of a kept state)
        files_key = value_key(sorted(rm.files.items()))
        self._derived = _DERIVED.setdefault(files_key, {})
        if len(_DERIVED) > 32:
            _DERIVED.pop(next(iter(_DERIVED)))
        if not rm.reported:
            return
        for key, k in rm.kernels.items():
            if not k.get("ran"):
                continue
            tensors: list[tuple[list[int], str]] = []
            for call in (k.get("inputs") or [])[:1]:
                for a in call:
                    if isinstance(a, dict) and "$tensor" in a and _ints(a["$tensor"]):
                        dt = runmap.TORCH_DTYPES.get(str(a.get("dtype")), "")
                        tensors.append((list(a["$tensor"]), dt))
            kern = _Kernel(key, k["file"], runmap._scope_of_qualname(k["qualname"]), tensors)
            for c in rm.calls:
                if c.get("kernel") != key or not runmap.executes(c) or c.get("ops") == 0:
                    # a loop_unroll variant the test's shapes never execute is no part of what ran, nor a tile a
                    # later tile call replaced before any operation used it
                    continue
                api = c["api"]
                if api in _LOOP_APIS and c.get("origin") == "direct":
                    trips = loop_trips(c.get("args"))
                    if api == "loop_unroll":
                        trips = _unrolled_trips(rm.calls, c, trips)
                    kern.loops.append(_Loop(c["file"], c["line"], trips))
                elif api in _VIEW_APIS and _ints(c.get("result_shape")):
                    kern.views.append(_View(c["file"], c["line"], list(c["result_shape"])))
                elif api == "set_vec_tile_shapes":
                    tile = _ints(runmap.effective_value(_KindOnly("vec_tile"), c))
                    kern.tiles.append(_Tile(c["file"], c["line"], "vec", tile, _op_extent(c.get("extent"), tile)))
                elif api == "set_cube_tile_shapes":
                    kern.tiles.append(_Tile(c["file"], c["line"], "cube", runmap.effective_value(
                        _KindOnly("cube_tile"), c)))
                    kern.operands = kern.operands or c.get("operands")
            self.kernels.append(kern)

    @property
    def reported(self) -> bool:
        return bool(self.kernels)

    # ----------------------------------------------------------------------------------------------- features
    def features(self, changes: list[tuple[Knob, Any]] | None = None) -> list[dict[str, Any]] | None:
        """Features of every kernel that ran, with ``changes`` applied; None when a change's effect cannot be
        derived from what ran (the ranking then says it cannot tell)."""
        out = []
        for kern in self.kernels:
            trial = _Trial(kern)
            for knob, value in changes or []:
                if not self._apply(trial, knob, value):
                    return None
            out.append(trial.features())
        return out

    def kernel_keys_of(self, knob: Knob) -> set[str]:
        """The kernels (keys) whose tile calls, loops or views the knob reaches in this run."""
        lines = self._lines(knob)
        out = set()
        for kern in self.kernels:
            if knob.kind in ("jit_option", "debug_option"):
                if kern.file == knob.file and knob.function and kern.scope == knob.function:
                    out.add(kern.key)
                continue
            if any((t.file, t.line) in lines for t in kern.tiles) or any((lp.file, lp.line) in lines
                                                                           for lp in kern.loops) \
                    or any((v.file, v.line) in lines for v in kern.views):
                out.add(kern.key)
        return out

    def scope_of(self, key: str) -> str:
        return next((k.scope for k in self.kernels if k.key == key), "")

    def _lines(self, knob: Knob) -> set[tuple[str, int]]:
        site = self.sites.get(knob.id)
        if knob.kind in ("vec_tile", "cube_tile"):
            return {(knob.file, knob.line)}
        feeder = runmap._feeder(self.rm.program, site) if site is not None else None
        if feeder is None:
            return set()
        return {(f, line) for _, f, line in feeder.consumer_sites}

    def _apply(self, trial: "_Trial", knob: Knob, value: Any) -> bool:
        kern = trial.kern
        if knob.kind in ("vec_tile", "cube_tile"):
            for t in kern.tiles:
                if (t.file, t.line) == (knob.file, knob.line):
                    trial.tiles[id(t)] = value if t.kind == "vec" else {**(t.value or {}), **(value or {})}
            return True
        site = self.sites.get(knob.id)
        feeder = runmap._feeder(self.rm.program, site) if site is not None else None
        if feeder is None:
            return knob.kind not in ("tile_source", "tile_constant", "local_constant")
        fed = {(kind, f, line) for kind, f, line in feeder.consumer_sites}
        # tile calls the source feeds: derived with the knob map's reader (old value must reproduce what ran)
        for t in kern.tiles:
            if not any(f == t.file and line == t.line and kind in ("vec_tile", "cube_tile") for kind, f, line in fed):
                continue
            tile_site = next((s for s in self.rm.sites if s.knob.kind == ("vec_tile" if t.kind == "vec" else
                                                                           "cube_tile")
                              and s.file == t.file and s.knob.line == t.line), None)
            if tile_site is None:
                return False
            key = (knob.id, value_key(value), t.file, t.line, value_key(t.value))
            if key not in self._derived:
                try:
                    self._derived[key] = runmap.derive(self.rm.files, self.rm.program, feeder, tile_site,
                                                       knob.value, value, t.value)
                except runmap._NoValue:
                    self._derived[key] = _CANNOT
            if self._derived[key] is _CANNOT:
                return False
            trial.tiles[id(t)] = self._derived[key]
        # a block size: loops divide their axis by it, the views of one iteration take its extent
        old, new = knob.value, value
        if isinstance(old, int) and isinstance(new, int) and not isinstance(old, bool) and old > 0 and new > 0:
            for lp in kern.loops:
                if ("loop", lp.file, lp.line) in fed and lp.trips is not None:
                    axis = lp.trips * old
                    trial.trips[id(lp)] = -(-axis // new) if lp.ceil else axis // new
            for v in kern.views:
                if any(f == v.file and line == v.line and kind in ("slice", "view") for kind, f, line in fed):
                    # only the dims the block's expressions set: a singleton axis is no block of 1
                    dims = view_dims.fed_dims(self.rm.files.get(v.file, ""), v.line, len(v.shape),
                                              _block_names(knob))
                    trial.views[id(v)] = [new if d == old and (dims is None or i in dims) else d
                                          for i, d in enumerate(v.shape)]
        return True


def _block_names(knob: Knob) -> set[str]:
    """The names code reads a block knob by: ``tile_b``, a config field ``cfg.tile_b`` (read as ``.tile_b``)."""
    tail = knob.name.replace("(", ".").replace(")", "").split(".")[-1].strip()
    return {tail} if tail.isidentifier() else set()


@dataclass
class _KindOnly:
    kind: str


class _Trial:
    """One kernel's recorded facts with trial values laid over them."""

    def __init__(self, kern: _Kernel) -> None:
        self.kern = kern
        self.tiles: dict[int, Any] = {}
        self.trips: dict[int, int] = {}
        self.views: dict[int, list[int]] = {}

    def features(self) -> dict[str, Any]:
        k = self.kern
        trips = [self.trips.get(id(lp), lp.trips) for lp in k.loops]
        iterations = math.prod(trips) if trips and all(t is not None for t in trips) else (1 if not trips else None)
        elem = max((DTYPE_BYTES.get(d, 0) for _, d in k.tensors), default=0) or 4
        tensors = {f"in{i}": (dims, dt) for i, (dims, dt) in enumerate(k.tensors)}
        views = [self.views.get(id(v), v.shape) for v in k.views]
        # the data one iteration tiles: the views the kernel built inside its loops (the whole tensors without one)
        blocks = [list(v) for v in views] if k.loops else []
        has_cube = any(t.kind == "cube" for t in k.tiles)
        # the matmul's shape, read once for the vector blocks and the cube features alike
        lead = (self._recorded_product() or self._batched(views)) if has_cube else None
        mkn = self._mkn(views, lead) if has_cube else None
        if blocks and has_cube:
            # a matmul's output of one iteration is data too: the vector work after it (a softmax, an activation)
            # tiles [M, N] ([batch…, M, N] for a batched one), which no view shows — the views are the matmul's
            # operands ([M, K] of a query block)
            if mkn and isinstance(mkn[0], int) and isinstance(mkn[2], int):
                blocks.append([*(lead[0] if lead else []), mkn[0], mkn[2]])
        # a cube operand's element: the smallest input dtype (an FP32 output must not size FP16 operand tiles)
        operand = min((DTYPE_BYTES[d] for _, d in k.tensors if d in DTYPE_BYTES), default=elem)
        feats: dict[str, Any] = {"scope": k.scope, "file": k.file, "kernel_key": k.key, "trips": trips,
                                 "iterations": iterations, "elem_bytes": elem, "operand_bytes": operand,
                                 "source": "run",
                                 "tensor_dims": [d for d, _ in k.tensors], "has_cube": has_cube}
        vec = []
        cube = None
        for t in k.tiles:
            value = self.tiles.get(id(t), t.value)
            if t.kind == "vec":
                # the operations' extent bounds the tile where nothing a knob moves (a loop's views) sizes the data,
                # and in a loop as long as this trial moves no block (its views and trips are the ones recorded):
                # the arctic LSTM's gate tile [1, 16384] runs on [*, 4096] operations as [1, 4096] does
                moved = bool(self.views) or bool(self.trips)
                extent = t.extent if not (k.loops or k.views) or not moved else None
                vec.append(KernelModel._vec_features(t.line, _ints(value), blocks, tensors, elem, extent))
            else:
                cube = (t.line, value)
        feats["vec"] = vec
        if cube is not None:
            feats["cube"] = self._cube(cube[1], mkn, lead)
            feats["cube"]["line"] = cube[0]
        return feats

    @staticmethod
    def _cube(tile: Any, mkn: tuple[int, int, int] | None,
              lead: tuple[list[int], tuple[int, int, int]] | None) -> dict[str, Any]:
        f: dict[str, Any] = {"tile": tile}
        f["mkn"] = mkn
        batch = math.prod(lead[0]) if lead else 1
        if lead:
            f["batch"] = batch
        # only a tile and a matmul read as numbers are modelled: a value the reader could not evaluate (a config
        # field's expression, a matmul whose shape the probe did not record) keeps its raw tile and no prediction
        if isinstance(tile, dict) and mkn and _positive_ints([mkn[0], mkn[2]]) and _positive_ints(tile.get("m")) \
                and _positive_ints(tile.get("n")):
            M, _, N = mkn
            m, n = tile["m"], tile["n"]
            # a batched matmul is one [M, N] product per batch entry: each entry has its own cube tasks
            f["tasks_per_iter"] = batch * -(-M // min(m[-1], M)) * -(-N // min(n[-1], N))
            f["l0c_bytes"] = m[0] * n[0] * 4  # the FP32 accumulator of one L0 tile (see priors.json)
            f["eff_out_elems"] = min(m[0], M) * min(n[0], N)
        return f

    def _mkn(self, views: list[list[int]], lead: tuple[list[int], tuple[int, int, int]] | None
             ) -> tuple[int, int, int] | None:
        """M, K, N of the kernel's (first) matmul: ``lead``'s, read from the operands the probe recorded under the
        cube tile (:meth:`_recorded_product`) or from a batched matmul's views (:meth:`_batched`); else read from the
        views and inputs — the rows of the largest 2-D view inside the loop (one iteration's A), K its last dim, N the
        other input's dim that is not K. A guess, said so in the features ('mkn_source')."""
        k = self.kern
        if lead is not None:
            return lead[1]
        two_d = [v for v in views if len(v) == 2] if k.loops else []
        tens = [d for d, _ in k.tensors if len(d) == 2]
        a = max(two_d, key=lambda v: v[0] * v[1]) if two_d else (tens[0] if tens else None)
        if a is None:
            return None
        kdim = a[-1]
        others = [d for d in tens[1:] if kdim in d]
        if not others:
            return None
        b = others[0]
        n = b[1] if b[0] == kdim else b[0]
        return (a[0], kdim, n)

    def _recorded_product(self) -> tuple[list[int], tuple[int, int, int]] | None:
        """The batch dims and M, K, N of the matmul the probe saw under the cube tile, transposes read (PyPTO's
        tiling_config runtime test: [4, 64, 512] @ [4, 128, 512] with b_trans is four 64 × 512 × 128 products, which
        no view shows). Only in a kernel without loops: there the operands are its inputs, which no knob changes;
        inside a loop they are one iteration's blocks, which a trial's block size changes (read from the views)."""
        ops = self.kern.operands
        if not ops or self.kern.loops:
            return None
        a, b = ops.get("a") or [], ops.get("b") or []
        if len(a) < 2 or len(b) < 2:
            return None
        m, k = (a[-1], a[-2]) if ops.get("a_trans") else (a[-2], a[-1])
        n = b[-2] if ops.get("b_trans") else b[-1]
        lead = a[:-2]
        if not all(isinstance(x, int) for x in (m, k, n, *lead)):
            return None
        return list(lead), (m, k, n)

    def _batched(self, views: list[list[int]]) -> tuple[list[int], tuple[int, int, int]] | None:
        """The batch dims and M, K, N of a batched matmul read from one iteration's views: the one pair of views of
        three or more dims with the same leading (batch) dims where A's last dim is B's second-to-last (K), as
        ``pypto.matmul`` takes [b, M, K] @ [b, K, N] (upstream_bmm_scale). None when the kernel has no loop, no such
        pair, or several (the probe does not record the matmul's own operands, so an ambiguous pair is not
        guessed); 2-D matmuls are read by :meth:`_mkn` as before."""
        if not self.kern.loops:
            return None
        nd = [v for v in views if len(v) >= 3 and all(isinstance(x, int) for x in v)]
        pairs = {(tuple(a[:-2]), (a[-2], a[-1], b[-1])) for a in nd for b in nd
                 if a is not b and a[:-2] == b[:-2] and a[-1] == b[-2]}
        if len(pairs) != 1:
            return None
        lead, mkn = next(iter(pairs))
        return list(lead), mkn


def build(sources: dict[str, str], context: dict[str, str] | None, record: dict[str, Any] | None
          ) -> tuple[runmap.RunMap, RunPicture] | None:
    """The knob map and the run picture of a kept state from its probe record; None without a reported record."""
    if not record or record.get("status") != "reported":
        return None
    rm = runmap.knob_map(sources, context, record)
    if not rm.reported:
        return None
    return rm, RunPicture(rm)


def site_of(rm: runmap.RunMap, knob_id: str) -> Site | None:
    return next((s for s in rm.sites if s.knob.id == knob_id), None)


__all__ = ["RunPicture", "build", "site_of"]
