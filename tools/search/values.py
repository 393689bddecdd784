"""Candidate values for one knob, from this operator's shapes, dtypes and loops (domain C).

Generation only proposes; it never decides legality — every value that survives the ranking goes through the
server's own admission (``tools/code/admission.admit``). What generation does decide is which values are *worth*
considering: powers of two and the full axis for tiles and blocks, the reduce axis kept whole (splitting it is never
proposed: F-10), unroll lists up to the trip count (F-8), ``stitch_function_max_num`` at least the number of
root-function instances (SIM B.9.3: fewer corrupt the measurement), the vec_nbuffer granularities of S-5, the
cube L0/L1 pairs of F-9 (L1 a multiple of L0, at most the axis).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.patching.models import EXPR_KEY, Knob
from pypto_tune.tools.patching.legality import l0_operand_overflow

NBUF_VALUES = (1, 2, 4, 8, 16)  # S-5: N in {1, 2, 4, 8, 16}
L1_REUSE_VALUES = (1, 2, 4, 8)
CUBE_NBUF_VALUES = (1, 2, 4)
STITCH_VALUES = (128, 256, 512, 1024)
MAX_DIM = 4096  # when an axis length is unknown: the largest tile or block considered
MAX_COMBOS = 4000  # vector tiles of rank 3+: the per-dim options are thinned until the product fits
MAX_VEC_TILE_BYTES = 64 * 1024  # F-10: vector tiles of 16–64 KB


@dataclass
class Value:
    value: Any
    note: str = ""  # what the generator knows about it ("reduce axis kept whole", "≥ 32 root instances")
    meta: dict[str, Any] = field(default_factory=dict)


def _pow2_upto(n: int) -> list[int]:
    out, x = [], 1
    while x <= n:
        out.append(x)
        x *= 2
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_expr(v: Any) -> bool:
    return isinstance(v, dict) and EXPR_KEY in v


def vec_tile_values(current: list[int], dims: list[int | None] | None, reduce_axes: set[int], *,
                    elem_bytes: int = 4, max_bytes: int | None = MAX_VEC_TILE_BYTES) -> list[Value]:
    """Vector tiles of the same rank: per dim the powers of two up to the view the tile covers (``dims``: the data
    one loop iteration tiles, or the tensor when there is no loop), that view dim itself and the current value —
    never a tile larger than the view it tiles (issue #17: a larger one is clipped to it and only looks like a
    change; the one exception, a linked pair's tile set before its block, is added by ``propose``); a reduce axis
    only whole or at its current size or larger (splitting it is never proposed, F-10); at most ``max_bytes`` per
    tile (F-10's 16–64 KB: every measured grid failed to compile above 64 KB)."""
    rank = len(current)
    opts: list[list[int]] = []
    for i in range(rank):
        full = dims[i] if dims and i < len(dims) and dims[i] else None
        hi = full or max(MAX_DIM // 8, current[i] * 8)
        o = set(_pow2_upto(hi)) | ({current[i]} if full is None or current[i] <= full else set())
        if full:
            o.add(full)
            o = {x for x in o if x <= full}
        if i in reduce_axes or (i - rank) in reduce_axes:
            o = {x for x in o if x >= min(current[i], full or current[i])}
        opts.append(sorted(o))
    # thin the widest dims (keep the current value, the ends and every other power of two) until the product fits
    while math.prod(len(o) for o in opts) > MAX_COMBOS:
        i = max(range(rank), key=lambda j: len(opts[j]))
        keep = set(opts[i][::2]) | {opts[i][-1], current[i]}
        if len(keep) >= len(opts[i]):
            break
        opts[i] = sorted(keep)
    out = []
    for combo in itertools.product(*opts):
        v = list(combo)
        if v == current:
            continue
        if max_bytes is not None and math.prod(v) * elem_bytes > max_bytes and math.prod(v) > math.prod(current):
            continue  # the unified buffer: larger than the budget (and larger than what runs now)
        out.append(Value(v, note="within the view it tiles" if dims else ""))
    return out


def block_values(current: int, axis: int | None) -> list[Value]:
    """Block sizes (rows per loop iteration): powers of two up to the axis, the axis, and the divisors of the axis
    among the multiples/fractions of the current value; the admission keeps only those that divide the axis."""
    hi = axis or max(current * 16, 64)
    vals = set(_pow2_upto(min(hi, MAX_DIM)))
    if axis:
        vals.add(axis)
    for f in (2, 4, 8):
        vals.add(current * f)
        if current % f == 0:
            vals.add(current // f)
    vals = {v for v in vals if v >= 1 and (axis is None or v <= axis)}
    vals.discard(current)
    return [Value(v) for v in sorted(vals)]


def unroll_factors(value: Any) -> tuple[int, ...] | None:
    """The factors ``pypto.loop_unroll`` runs with for an ``unroll_list``: distinct, descending, 1 appended (what
    pypto 0.2.0's ``loop_unroll`` does with the list); None for a value that is no list of ints. ``[1, 2, 4]`` and
    ``[4, 2, 1]`` are the same loop."""
    if not isinstance(value, (list, tuple)) or not value or not all(_is_int(x) and x >= 1 for x in value):
        return None
    out = sorted(set(value), reverse=True)
    return tuple(out if 1 in out else [*out, 1])


def unroll_values(current: Any, trip: int | None) -> list[Value]:
    """Descending power-of-two chains ending in 1 ([2, 1], [4, 2, 1], ...), largest factor ≤ the trip count; [1]
    (no unrolling) when the loop unrolls now. A chain that runs the same factors as the current list (written in
    another order, or without its trailing 1) is the same loop and is not proposed."""
    hi = trip if trip and trip >= 1 else 64
    out = []
    for top in _pow2_upto(min(hi, 64))[1:]:
        chain = [x for x in reversed(_pow2_upto(top))]
        out.append(Value(chain, note=f"largest factor {top} ≤ trip count {trip}" if trip else ""))
    if current not in (None, [1]) and not _is_expr(current):
        out.append(Value([1], note="no unrolling"))
    now = unroll_factors(current) if current is not None else (1,)
    return [v for v in out if v.value != current and unroll_factors(v.value) != now]


def _pairs(axis: int | None, lo: int, ratios: tuple[int, ...]) -> list[list[int]]:
    hi = axis or 1024
    out = []
    for l0 in _pow2_upto(min(hi, 512)):
        if l0 < lo:
            continue
        for r in ratios:
            l1 = l0 * r
            if l1 <= max(hi, l0):
                out.append([l0, l1])
    return out


def cube_tile_values(current: dict[str, Any], mkn: tuple | None, tensor_dims: list | None,
                     half: bool) -> list[Value]:
    """Cube tiles m=[mL0, mL1], k=[kL0, kL1], n=[nL0, nL1]: L0 a power of two (≥ 16 for FP16/BF16), L1 = L0 · 1/2/4
    (k also · 8), L1 at most the axis (the matmul's M, K, N of one loop iteration, or of the whole tensor when the
    per-iteration size is unknown). Each axis also keeps its current pair."""
    M = K = N = None
    if mkn:
        M, K, N = mkn
    lo = 16 if half else 8  # FP16/BF16 L0 tiles are multiples of 16 (F-9); 8 FP32 elements are 32 bytes
    axes = {"m": _pairs(_whole(M, tensor_dims, 0), lo, (1, 2)), "k": _pairs(K, lo, (1, 2, 4, 8)),
            "n": _pairs(N, lo, (1, 2))}
    for a in ("m", "k", "n"):
        cur = current.get(a)
        if isinstance(cur, list) and cur not in axes[a]:
            axes[a].append(list(cur))
    out = []
    cur = {a: current.get(a) for a in ("m", "k", "n")}
    for m, k, n in itertools.product(axes["m"], axes["k"], axes["n"]):
        v = {"m": m, "k": k, "n": n}
        if v != cur:
            out.append(Value(v))
    return out


def _whole(axis: int | None, tensor_dims: list | None, idx: int) -> int | None:
    """The m axis: a tile may cover more rows than one iteration holds (it is then clipped); allow up to the
    largest first dim of the kernel's tensors, so the clipped and unclipped variants are both considered."""
    dims = [d[idx] for d in (tensor_dims or []) if d and len(d) > idx and d[idx]]
    return max([axis or 0, *dims]) or None


def nbuffer_values(current: Any) -> list[Value]:
    out = []
    for n in NBUF_VALUES:
        v = {-2: 1, -1: n}
        if current != v:
            out.append(Value(v, meta={"n": n}))
    return out


def int_dict_values(current: Any, values: tuple[int, ...]) -> list[Value]:
    return [Value({-1: n}, meta={"n": n}) for n in values if current != {-1: n}]


def stitch_values(current: Any, root_instances: int | None) -> list[Value]:
    floor = root_instances or 1
    vals = sorted({v for v in STITCH_VALUES if v >= floor} | ({root_instances} if root_instances else set()))
    note = f"≥ {root_instances} root-function instances (SIM B.9.3)" if root_instances else \
        "root-function instances unknown: only large values"
    return [Value(v, note=note) for v in vals if v != current and 1 <= v <= 1024]


def values_for(knob: Knob, *, kernel: dict[str, Any] | None, reduce_axes: set[int], has_cube: bool,
               has_vector: bool, view: list[int | None] | None = None) -> list[Value]:
    """Every value worth considering for ``knob`` (current value excluded). Empty for knobs the search does not
    tune (problem sizes, run mode, debug options, sg_set_scope ids, valid_shape expressions). ``view``: for a
    vector tile, the shape of the data it tiles as it ran (one loop iteration's view); tiles never exceed it."""
    if not knob.tunable:
        return []
    cur = knob.value
    kind, name = knob.kind, knob.name
    if kind == "vec_tile":
        if not isinstance(cur, list) or not all(_is_int(x) for x in cur):
            return []  # written as an expression (*VEC_TILE): the name it reads is the knob
        dims = _view_dims(view, len(cur)) or _dims_for(kernel, len(cur))
        return vec_tile_values(cur, dims, reduce_axes, elem_bytes=_ub_elem(kernel))
    if kind == "cube_tile":
        if not isinstance(cur, dict) or not all(isinstance(cur.get(a), list) for a in ("m", "k", "n")):
            return []
        cube = (kernel or {}).get("cube") or {}
        half = _half(knob, kernel)
        return cube_tile_values(cur, cube.get("mkn"), (kernel or {}).get("tensor_dims"), half)
    if kind == "tile_source":
        return _source_values(knob, kernel, reduce_axes, view)
    if kind in ("tile_constant", "local_constant"):
        consumers = set(knob.context.get("consumers", []))
        if _is_int(cur) and consumers & {"loop", "slice", "view"}:
            axis = knob.context.get("max_value")
            if axis is None and kernel is not None:
                axis = kernel.get("_axis_for_block")
            return block_values(cur, axis)
        if isinstance(cur, list) and all(_is_int(x) for x in cur) and "vec_tile" in consumers:
            dims = _view_dims(view, len(cur)) or _dims_for(kernel, len(cur))
            return vec_tile_values(cur, dims, reduce_axes, elem_bytes=_ub_elem(kernel))
        if isinstance(cur, list) and consumers <= {"unroll", "loop"} and "unroll" in consumers:
            trip = (kernel or {}).get("trips", [None])[-1] if kernel and kernel.get("trips") else None
            return unroll_values(cur, trip)
        return []
    if kind == "loop_option":
        if name == "unroll_list":
            if _is_expr(cur):
                return []  # the list lives in a name: that name is the knob
            return unroll_values(cur, knob.context.get("trip_count"))
        if name == "submit_before_loop":
            return [Value(v) for v in (True, False) if v != cur and not (cur is None and v is False)]
        return []
    if kind == "jit_option":
        if name == "vec_nbuffer_setting" and has_vector:
            return nbuffer_values(cur)
        if name == "cube_l1_reuse_setting" and has_cube:
            return int_dict_values(cur, L1_REUSE_VALUES)
        if name == "cube_nbuffer_setting" and has_cube:
            return int_dict_values(cur, CUBE_NBUF_VALUES)
        if name == "stitch_function_max_num":
            roots = (kernel or {}).get("iterations")
            return stitch_values(cur, roots)
        if name == "device_sched_mode":
            return [Value(v) for v in (0, 1, 2, 3) if v != cur and not (cur is None and v == 0)]
        return []
    if kind == "combine_axis" and name == "combine_axis":
        return [Value(v) for v in (True, False) if v != cur]
    if kind == "cache_policy" and isinstance(cur, dict):
        return [Value({**cur, t: not flag}) for t, flag in cur.items() if isinstance(flag, bool)]
    return []


def _source_values(knob: Knob, kernel: dict[str, Any] | None, reduce_axes: set[int],
                   view: list[int | None] | None) -> list[Value]:
    """A tiling source (issue #17: a comprehension literal, a config field, as ``tools/patching/flows.py`` finds
    them): values in the form the source is written in, bounded by what the tiles it feeds cover as they ran."""
    cur = knob.value
    consumers = set(knob.context.get("consumers", []))
    if "vec_tile" in consumers and isinstance(cur, list) and all(_is_int(x) for x in cur):
        dims = _view_dims(view, len(cur)) or _dims_for(kernel, len(cur))
        return vec_tile_values(cur, dims, reduce_axes, elem_bytes=_ub_elem(kernel))
    if consumers & {"vec_tile", "cube_tile"} and _is_int(cur) and knob.context.get("source") != "comprehension":
        # one number of a tile, named in the author's form (a config field ``cfg.vec_rows``, a dict entry): powers of
        # two up to the longest axis it could size; the kernel picture under each value (the model) and the
        # admission then judge the tile it makes. Until 2026-12-05 such a field got no value at all, so the search
        # pinned the call instead (upstream_linear_bias, upstream_bmm_scale: the author's knobs never moved)
        if "cube_tile" in consumers:
            mkn = [a for a in ((kernel or {}).get("cube") or {}).get("mkn") or [] if a]
            half = _half(knob, kernel)
            lo, hi = (16 if half else 8), min(max(mkn, default=512), 512)
        else:
            dims = [d for d in (view or []) if d] or next((d for d in (kernel or {}).get("tensor_dims", []) if d), None)
            lo, hi = 1, max(dims) if dims else MAX_DIM
        return [Value(v, note="one number of the tile, in the form the author wrote it")
                for v in sorted(set(_pow2_upto(hi)) | {hi}) if v >= lo and v != cur]
    if "vec_tile" in consumers and _is_int(cur):
        # the element of [v for _ in range(rank)]: the tile is v on every axis of the view it covers
        dims = [d for d in (view or []) if d] or None
        if dims is None:
            dims = next((d for d in (kernel or {}).get("tensor_dims", []) if d), None)
        rank = len(dims) if dims else 2
        hi = min(dims) if dims else MAX_DIM
        reduce = bool(reduce_axes)
        out = []
        for v in sorted(set(_pow2_upto(hi)) | ({hi} if dims else set())):
            if v == cur or (reduce and v < cur) or v ** rank * _ub_elem(kernel) > MAX_VEC_TILE_BYTES:
                continue
            out.append(Value(v, note=f"every axis of the tile: {[v] * rank}"))
        return out
    if "cube_tile" in consumers and isinstance(cur, list) and len(cur) == 3 and all(_is_int(x) for x in cur):
        mkn = ((kernel or {}).get("cube") or {}).get("mkn") or (None, None, None)
        half = _half(knob, kernel)
        lo = 16 if half else 8
        axes = [sorted({x for x in _pow2_upto(min(a or 512, 512)) if x >= lo} | {c}) for a, c in zip(mkn, cur)]
        out = []
        for combo in itertools.product(*axes):
            v = list(combo)
            if v == cur or v[0] * v[2] * 4 > 128 * 1024:  # mL0 x nL0 x 4 B within the 128 KB L0C (F-9)
                continue
            if l0_operand_overflow(v[0], v[1], v[2], 2 if half else 4):  # operand tiles within L0A / L0B
                continue
            out.append(Value(v, note="(m, k, n) within the matmul as it ran"))
        return out
    if consumers & {"loop", "slice", "view"} and _is_int(cur):
        axis = (kernel or {}).get("_axis_for_block")
        return block_values(cur, axis)
    if consumers == {"unroll"} and unroll_factors(cur) is not None:
        # the unroll_list of a pypto.loop_unroll, carried by a config (``Cfg(unroll_list=[4, 2, 1])`` read as
        # ``unroll_list=cfg.unroll_list``): the chains the loop's trip count allows, in the author's form (a list)
        return unroll_values(cur, (kernel or {}).get("_unroll_trip"))
    if consumers == {"jit_options"} and _is_int(cur) and cur >= 1:
        # a number the jit's options take from the config (``{-1: tiling["vec_nbuffer"]}``): the merge / buffer
        # counts the catalogue's options use, in the author's form (the admission judges the option it makes)
        return [Value(v, note="a jit option's number, in the form the author wrote it")
                for v in sorted({1, 2, 4, 8, 16, cur * 2} - {cur})]
    return []


def _view_dims(view: list[int | None] | None, rank: int) -> list[int | None] | None:
    return list(view) if view and len(view) == rank and any(x for x in view) else None


def _half(knob: Knob, kernel: dict[str, Any] | None) -> bool:
    """Cube operands of two bytes (FP16 / BF16): L0 tiles in multiples of 16, operand tiles sized at 2 B. Read from
    the knob's own dtypes, else from what ran: the kernel's smallest input dtype (``operand_bytes``; its largest, an
    FP32 output, must not size the operands — upstream_ffn's best cube tile (32, 128, 256) was never generated)."""
    return any(d in ("DT_FP16", "DT_BF16") for d in knob.context.get("dtypes", [])) or _elem(kernel) == 2 \
        or (kernel or {}).get("operand_bytes") == 2


def _elem(kernel: dict[str, Any] | None) -> int:
    return int((kernel or {}).get("elem_bytes") or 4)


def _ub_elem(kernel: dict[str, Any] | None) -> int:
    """The element size the tile's data takes in the unified buffer: after the kernel's casts (``ub_elem_bytes``,
    set by the search from what ran) when known, else the tensors' own."""
    return int((kernel or {}).get("ub_elem_bytes") or _elem(kernel))


def _dims_for(kernel: dict[str, Any] | None, rank: int) -> list[int | None] | None:
    """Per dim, the largest length among the kernel's tensors of that rank (the tile may not exceed it)."""
    if kernel is None:
        return None
    dims = [d for d in kernel.get("tensor_dims", []) if d and len(d) == rank]
    if not dims:
        return None
    return [max((d[i] for d in dims if d[i] is not None), default=None) for i in range(rank)]
