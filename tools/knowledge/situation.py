"""What one knob change does to a kernel, in a few numbers that mean the same on every operator.

Knowledge carries over between operators only through quantities that do not depend on the operator's names: a
block constant is ``TILE_B`` here and ``ROWS_PER_BLOCK`` there, but both set the loop's trip count; a vector tile is
``(1, 4, 256)`` here and ``(8, 512)`` there, but both set the tasks per loop iteration and the bytes of a task. So a
change is described by the static shape model of its kernel (``tools/search/kernel.py`` features, before and after)
as log2 quantities — loop iterations, vector tasks, tiles per iteration, effective task bytes, waves and parallel
tasks on the vector cores, cube tasks and the L0C footprint — plus the option's value for options. Pure functions
over those feature dicts: the ranker (``tools/search``) and the distiller (:mod:`.distill`) compute a situation the
same way, here, and nothing else decides what "similar" means.

Classes of change (only changes of one class are compared):

* ``vector-work`` — a vector tile, or a named value (a constant, a config field set in the test) that sets a loop's
  block or a vector tile (what the vector tasks are);
* ``cube-tile`` — a cube tile, or a named value that feeds only cube tiles;
* ``option:<name>`` — an option (``vec_nbuffer_setting``, ``cube_l1_reuse_setting``, ``unroll_list``...), whose
  situation is the kernel it reaches plus the option's number (N of a merge setting, the first unroll factor);
* ``other`` — anything the model cannot see: no situation, never matched.
"""

from __future__ import annotations

import math
from typing import Any

VECTOR_CORES = 48  # the platform layout the priors use (domain A.3); a situation is compared under one layout
CUBE_CORES = 24
#: log2 of the vector task size the catalogue recommends at most (F-10: 16–64 KB); beyond it the unified buffer
#: overflows sooner or later (domain C: a 128 KB softmax tile fails to compile)
UB_COMFORT_LOG2 = 16.0
L0C_LOG2 = 17.0  # 128 KB of FP32 accumulators (priors.json cube-l0c-budget)
KernelKind = str  # "vector" | "cube" | "mixed" | "unknown"


def _l2(x: float | int | None) -> float | None:
    return math.log2(x) if isinstance(x, (int, float)) and x > 0 else None


def _waves(n: int, cores: int) -> int:
    return max(1, -(-n // max(cores, 1)))


def kernel_kind(feat: dict[str, Any] | None) -> KernelKind:
    if not feat:
        return "unknown"
    vec = bool(feat.get("vec"))
    cube = bool(feat.get("has_cube"))
    return "mixed" if vec and cube else "cube" if cube else "vector" if vec else "unknown"


def change_class(kind: str, name: str, consumers: list[str] | set[str] | None = None) -> str:
    """The class a knob's changes belong to (see the module docstring)."""
    uses = set(consumers or [])
    if kind == "vec_tile":
        return "vector-work"
    if kind == "cube_tile":
        return "cube-tile"
    if kind in ("tile_constant", "local_constant", "tile_source"):
        # a named value is classed by what it feeds: a loop's block or a vector tile is vector work, a value that
        # feeds only cube tiles is a cube tile. A tile_source is a literal the tiling flows from (a config field
        # set in the test, a comprehension's element): until 2026-12-04 it was "other", so the store neither
        # learnt from nor advised on the upstream examples' config-dataclass style
        if uses & {"vec_tile", "loop", "slice", "view"}:
            return "vector-work"
        return "cube-tile" if uses & {"cube_tile"} else "other"
    if kind in ("jit_option", "pass_option", "loop_option"):
        return f"option:{name}"
    return "other"


def _vector(feat: dict[str, Any]) -> dict[str, float]:
    """Vector work of one kernel, as log2 quantities (only what the model could evaluate)."""
    out: dict[str, float] = {}
    iters = (feat.get("iterations") or 1) if feat.get("trips") else 1
    tiles = [v for v in feat.get("vec", []) if v.get("tasks_per_block") is not None]
    if not tiles:
        return out
    tpi = sum(int(v["tasks_per_block"]) for v in tiles)
    tasks = iters * tpi
    task_bytes = max(int(v.get("eff_bytes") or 0) for v in tiles)
    out["iters"] = math.log2(max(iters, 1))
    out["tpi"] = math.log2(max(tpi, 1))
    out["tasks"] = math.log2(max(tasks, 1))
    out["waves"] = math.log2(_waves(tasks, VECTOR_CORES))
    out["par"] = math.log2(min(tasks, VECTOR_CORES))
    if task_bytes > 0:
        out["bytes"] = math.log2(task_bytes)
        out["over"] = max(0.0, math.log2(task_bytes) - UB_COMFORT_LOG2)
    return out


def _cube(feat: dict[str, Any]) -> dict[str, float]:
    cube = feat.get("cube") or {}
    out: dict[str, float] = {}
    iters = (feat.get("iterations") or 1) if feat.get("trips") else 1
    tpi = cube.get("tasks_per_iter")
    if tpi:
        tasks = iters * int(tpi)
        out["ctasks"] = math.log2(max(tasks, 1))
        out["cwaves"] = math.log2(_waves(tasks, CUBE_CORES))
        out["cpar"] = math.log2(min(tasks, CUBE_CORES))
    if cube.get("l0c_bytes"):
        out["l0c"] = math.log2(int(cube["l0c_bytes"]))
        out["l0c_over"] = max(0.0, out["l0c"] - L0C_LOG2)
    tile = cube.get("tile") or {}
    for axis in ("m", "k", "n"):
        vals = tile.get(axis) or []
        for i, v in enumerate(vals[:2]):
            lv = _l2(v)
            if lv is not None:
                out[f"{axis}{i}"] = lv
    return out


def _option_number(value: Any) -> float | None:
    """The number an option's value turns on: N of ``{-2: 1, -1: N}`` / ``{-1: N}``, an int, the first unroll
    factor, a bool as 0/1."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for key in (-1, "-1"):
            if key in value and isinstance(value[key], (int, float)):
                return float(value[key])
        nums = [v for v in value.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return float(max(nums)) if nums else None
    if isinstance(value, list) and value and isinstance(value[0], (int, float)):
        return float(value[0])
    return None


def describe(cls: str, before_feat: dict[str, Any] | None, after_feat: dict[str, Any] | None,
             before_value: Any = None, after_value: Any = None) -> dict[str, float]:
    """The situation of a change: ``b_<q>`` / ``a_<q>`` for each quantity before and after, ``d_<q>`` = after −
    before (log2), and for options ``n_b`` / ``n_a`` (the option's number, log2 of 1 + n). Empty: nothing the
    model could see."""
    if cls == "other" or before_feat is None:
        return {}
    out: dict[str, float] = {}
    if cls.startswith("option:"):
        base = {**_vector(before_feat), **_cube(before_feat)}
        out.update({f"b_{k}": round(v, 4) for k, v in base.items()})
        for tag, value in (("n_b", before_value), ("n_a", after_value)):
            n = _option_number(value)
            if n is not None:
                out[tag] = round(math.log2(1.0 + max(n, 0.0)), 4)
        return out
    if after_feat is None:
        return {}
    pick = _vector if cls == "vector-work" else _cube
    b, a = pick(before_feat), pick(after_feat)
    for k in sorted(set(b) | set(a)):
        if k in b:
            out[f"b_{k}"] = round(b[k], 4)
        if k in a:
            out[f"a_{k}"] = round(a[k], 4)
        if k in a and k in b:
            out[f"d_{k}"] = round(a[k] - b[k], 4)
    return out


def changed_kernel(base: list[dict[str, Any]], after: list[dict[str, Any]] | None,
                   reached: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The (before, after) features of the kernel a change reaches: the first whose features differ; else the
    kernel the knob reaches (``reached``, one of ``base``: an option, or a change the model sees doing nothing);
    else the only kernel. (None, None) when it cannot be told."""
    if after is not None:
        for fb, fa in zip(base, after):
            if fb != fa:
                return fb, fa
    if reached is None and len(base) == 1:
        reached = base[0]
    if reached is None:
        return None, None
    idx = next((i for i, fb in enumerate(base) if fb is reached or fb == reached), None)
    if idx is None:
        return reached, reached
    return base[idx], (after[idx] if after is not None and idx < len(after) else base[idx])
