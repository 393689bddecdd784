"""Legal values of every knob (domain.md C), checked before any file is touched.

Each knob kind (and each option key) has a :class:`Spec`: the catalogue ids it serves, a human sentence of what is
legal, whether the tuning loop may edit it at all, and a validator. A validator returns the value to write
(normalised: JSON string keys "-2" become int -2, tuples become lists) or raises KnobValueError naming the rule.
Rules marked "when known" use the knob's ``context`` (trip count, tensor dims, dtypes) and are skipped without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import InputError, KnobValueError
from ._cst import is_expr
from .models import DTYPE_BYTES

Validator = Callable[[Any, dict[str, Any]], Any]


@dataclass(frozen=True)
class Spec:
    catalog_ids: tuple[str, ...] = ()
    legal: str = ""
    tunable: bool = True
    validate: Validator = field(default=lambda v, ctx: v)


def _fail(message: str, rule: str, legal: str, hint: str = "") -> KnobValueError:
    return KnobValueError(message, rule=rule, legal=legal, hint=hint or "call again with a value inside the legal range")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_in(lo: int, hi: int, rule: str, what: str) -> Validator:
    legal = f"integer {lo}–{hi}"

    def check(v: Any, ctx: dict[str, Any]) -> Any:
        if not _is_int(v) or not lo <= v <= hi:
            raise _fail(f"{what} = {v!r} is out of range", rule, legal)
        return v

    return check


def _bool(rule: str, what: str) -> Validator:
    def check(v: Any, ctx: dict[str, Any]) -> Any:
        if not isinstance(v, bool):
            raise _fail(f"{what} must be True or False, got {v!r}", rule, "True / False")
        return v

    return check


def _int_key_dict(v: Any, rule: str, legal: str, what: str) -> dict[int, int]:
    """JSON cannot carry int keys; numeric strings are turned back into ints. Non-numeric keys are 0.2.0-illegal."""
    if not isinstance(v, dict) or is_expr(v):
        raise _fail(f"{what} must be a dict {{group: value}}, got {v!r}", rule, legal)
    out: dict[int, int] = {}
    for k, val in v.items():
        key = k
        if isinstance(k, str):
            try:
                key = int(k.strip())
            except ValueError:
                raise _fail(
                    f"{what} key {k!r} is not an integer: pypto 0.2.0 rejects string keys ('Unable to cast')",
                    rule, legal,
                ) from None
        if not _is_int(key):
            raise _fail(f"{what} key {k!r} is not an integer", rule, legal)
        if not _is_int(val):
            raise _fail(f"{what}[{key}] = {val!r} is not an integer", rule, legal)
        out[key] = val
    return out


# ----------------------------------------------------------------------------------------- option validators

VEC_NBUF_LEGAL = "dict with int keys that contains -2: 1 plus at least one more entry (e.g. {-2: 1, -1: 2}); values ≥ 0, N in 1/2/4/8/16 recommended"


def _vec_nbuffer(v: Any, ctx: dict[str, Any]) -> Any:
    d = _int_key_dict(v, "C/S-5", VEC_NBUF_LEGAL, "vec_nbuffer_setting")
    if d.get(-2) != 1:
        raise _fail("vec_nbuffer_setting without -2: 1 merges nothing in pypto 0.2.0 ({-2: 0, ...} fails to compile)",
                    "C/S-5", VEC_NBUF_LEGAL)
    if len(d) == 1:
        raise _fail("vec_nbuffer_setting {-2: 1} alone fails with 'Run pass failed' in pypto 0.2.0", "C/S-5", VEC_NBUF_LEGAL,
                    hint="add a group entry, e.g. {-2: 1, -1: 2}")
    if any(val < 0 for val in d.values()):
        raise _fail("vec_nbuffer_setting values must be ≥ 0", "C/S-5", VEC_NBUF_LEGAL)
    return d


L1_REUSE_LEGAL = "dict with int keys (-1 = all groups, k ≥ 0 = group k), values ≥ 0; {} means auto (avoid)"


def _l1_reuse(v: Any, ctx: dict[str, Any]) -> Any:
    d = _int_key_dict(v, "C/S-6", L1_REUSE_LEGAL, "cube_l1_reuse_setting")
    if any(val < 0 for val in d.values()):
        raise _fail("cube_l1_reuse_setting values must be ≥ 0", "C/S-6", L1_REUSE_LEGAL)
    return d


CUBE_NBUF_LEGAL = "non-empty dict with int keys, values ≥ 1 (default {-1: 1}); never {}"


def _cube_nbuffer(v: Any, ctx: dict[str, Any]) -> Any:
    d = _int_key_dict(v, "C/S-7", CUBE_NBUF_LEGAL, "cube_nbuffer_setting")
    if not d:
        raise _fail("cube_nbuffer_setting {} is not allowed", "C/S-7", CUBE_NBUF_LEGAL)
    if any(val < 1 for val in d.values()):
        raise _fail("cube_nbuffer_setting values must be ≥ 1 ({-1: 0} is rejected with F21004)", "C/S-7", CUBE_NBUF_LEGAL)
    return d


def _not_tunable(reason: str) -> Validator:
    def check(v: Any, ctx: dict[str, Any]) -> Any:
        raise InputError(reason)

    return check


UNDECLARED = "no catalogue item names it and it has no declared legal domain (domain C): not a tuning knob"
UNCATALOGUED = "no catalogue item names it (R10): not tuned"


def uncatalogued(legal: str) -> bool:
    """True for the legal text of an option that is never admitted because no catalogue item names it."""
    return legal.endswith((UNDECLARED, UNCATALOGUED))


OPTION_SPECS: dict[str, Spec] = {
    "vec_nbuffer_setting": Spec(("S-5", "S-8"), VEC_NBUF_LEGAL, True, _vec_nbuffer),
    "cube_l1_reuse_setting": Spec(("S-6", "S-8"), L1_REUSE_LEGAL, True, _l1_reuse),
    "cube_nbuffer_setting": Spec(("S-7", "S-8"), CUBE_NBUF_LEGAL, True, _cube_nbuffer),
    "stitch_function_max_num": Spec(("S-9",), "integer 1–1024 (SIM: keep ≥ the number of root-function instances, B.9.3)",
                                    True, _int_in(1, 1024, "C/S-9", "stitch_function_max_num")),
    "device_sched_mode": Spec(("S-10",), "integer 0–3 (0 FIFO, 1 L2-affinity, 2 fair, 3 = 1+2)", True,
                              _int_in(0, 3, "C/S-10", "device_sched_mode")),
    # in pypto 0.2.0's schema with a known range, but no catalogue item names them: tracked, never tuned (R10)
    "stitch_function_num_initial": Spec((), "integer 1–1024; " + UNCATALOGUED, False,
                                        _not_tunable("no catalogue item names stitch_function_num_initial (R10)")),
    "mg_vec_parallel_lb": Spec((), "integer 1–48; " + UNCATALOGUED, False,
                               _not_tunable("no catalogue item names mg_vec_parallel_lb (R10)")),
    "valid_shape_optimize": Spec((), "0 or 1; " + UNCATALOGUED, False,
                                 _not_tunable("no catalogue item names valid_shape_optimize (R10)")),
    "run_mode": Spec((), "pypto.RunMode.SIM / NPU — fixed by the session, not a tuning knob", False,
                     _not_tunable("run_mode is fixed by the session (run_mode sim/npu at start_session), not tuned")),
    "runtime_debug_mode": Spec((), "0–3; owned by enable_runtime_debug, not a tuning knob", False,
                               _not_tunable("runtime_debug_mode is owned by enable_runtime_debug, not a tuning knob")),
}

# ------------------------------------------------------------------------------------------ call-site validators

VEC_TILE_LEGAL = ("one int ≥ 1 per tensor dim (same count as now), each ≤ the tensor dim; at most 96 KB per tile "
                  "(16–64 KB recommended); the tail axis in whole 32-byte blocks; never split the reduce axis")


def _vec_tile(v: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(v, tuple):
        v = list(v)
    if not isinstance(v, list) or not v or not all(_is_int(x) for x in v):
        raise _fail(f"vec tile shape must be a non-empty list of ints, got {v!r}", "C/F-10", VEC_TILE_LEGAL)
    if any(x < 1 for x in v):
        raise _fail(f"vec tile dims must be ≥ 1, got {v}", "C/F-10", VEC_TILE_LEGAL)
    current = ctx.get("current")
    if isinstance(current, list) and current and len(current) != len(v):
        raise _fail(f"vec tile has {len(current)} dims here, got {len(v)}", "C/F-10", VEC_TILE_LEGAL,
                    hint="give one int per tensor dim; changing the rank is a structural edit (use a diff)")
    shapes = [s for s in ctx.get("tensor_shapes", []) if len(s) == len(v) and all(isinstance(d, int) for d in s)]
    if shapes:
        limit = [max(s[i] for s in shapes) for i in range(len(v))]
        for i, (x, lim) in enumerate(zip(v, limit)):
            if x > lim:
                raise _fail(f"vec tile dim {i} = {x} exceeds the tensor dim {lim}", "C/F-10", VEC_TILE_LEGAL)
    return v


L0C_BYTES = 128 * 1024  # cube output buffer (pypto 0.2.0's MEM_L0C)
L0AB_BYTES = 64 * 1024  # each cube input buffer (pypto 0.2.0's MEM_L0A, MEM_L0B)
CUBE_KN_MIN_ELEMS = 16  # k and n tiles step by whole 16 elements, whatever the dtype (see _cube_tile)
CUBE_LEGAL = ("m=[mL0, mL1], k=[kL0, kL1] or [kL0, kAL1, kBL1], n=[nL0, nL1]; ints ≥ 1; L0 ≤ L1 and L1 % L0 == 0; "
              "FP16/BF16: L0 multiples of 16; kL0, kL1, nL0, nL1 32-byte aligned and multiples of 16; "
              "mL0·nL0·4 B ≤ 128 KB (L0C); mL0·kL0 and kL0·nL0 operand bytes ≤ 64 KB each (L0A, L0B); "
              "enable_split_k bool")


def l0_operand_overflow(m: int, k: int, n: int, elem_bytes: int) -> str:
    """Which cube input buffer an (mL0, kL0, nL0) tile overflows with operands of ``elem_bytes``, or ''.

    The A operand's mL0 × kL0 tile sits in L0A and the B operand's kL0 × nL0 tile in L0B, 64 KiB each. Measured on
    PyPTO's FFN example in SIM: FP16 (m, k, n) = (16, 128, 512) fails to compile with "Alloc tensor size [131072]
    exceeds MEM_L0B size [65536]" (128 × 512 × 2 B), while (16, 128, 256) compiles."""
    if m * k * elem_bytes > L0AB_BYTES:
        return f"mL0 {m} × kL0 {k} × {elem_bytes} B = {m * k * elem_bytes // 1024} KB exceeds the 64 KB L0A buffer"
    if k * n * elem_bytes > L0AB_BYTES:
        return f"kL0 {k} × nL0 {n} × {elem_bytes} B = {k * n * elem_bytes // 1024} KB exceeds the 64 KB L0B buffer"
    return ""


def _cube_tile(v: Any, ctx: dict[str, Any]) -> Any:
    rule = "C/F-9"
    if isinstance(v, (list, tuple)):
        if len(v) not in (3, 4):
            raise _fail(f"cube tile needs [m, k, n] (+ enable_split_k), got {v!r}", rule, CUBE_LEGAL)
        v = dict(zip(("m", "k", "n", "enable_split_k"), v))
    if not isinstance(v, dict) or is_expr(v):
        raise _fail(f"cube tile must be {{'m': [..], 'k': [..], 'n': [..]}}, got {v!r}", rule, CUBE_LEGAL)
    unknown = set(v) - {"m", "k", "n", "enable_split_k"}
    if unknown:
        raise _fail(f"unknown cube tile fields {sorted(unknown)}", rule, CUBE_LEGAL)
    current = ctx.get("current") if isinstance(ctx.get("current"), dict) else {}
    merged = {**current, **v}
    out: dict[str, Any] = {}
    for axis, sizes in (("m", (2,)), ("k", (2, 3)), ("n", (2,))):
        t = merged.get(axis)
        if isinstance(t, tuple):
            t = list(t)
        if not isinstance(t, list) or len(t) not in sizes or not all(_is_int(x) for x in t):
            raise _fail(f"{axis} must be {' or '.join(map(str, sizes))} ints, got {t!r}", rule, CUBE_LEGAL)
        if any(x < 1 for x in t):
            raise _fail(f"{axis} tiles must be ≥ 1, got {t}", rule, CUBE_LEGAL)
        l0 = t[0]
        for l1 in t[1:]:
            if not (l0 <= l1 and l1 % l0 == 0):
                raise _fail(f"{axis}: L0 {l0} / L1 {l1} breaks L0 ≤ L1 and L1 % L0 == 0 (FC4000 'Invalid L1/L0 relation')",
                            rule, CUBE_LEGAL)
        out[axis] = t
    dtypes = set(ctx.get("dtypes", []))
    half = dtypes & {"DT_FP16", "DT_BF16"}
    if half:
        for axis in ("m", "k", "n"):
            if out[axis][0] % 16:
                raise _fail(f"{axis}L0 = {out[axis][0]} is not a multiple of 16 ({'/'.join(sorted(half))} operands)",
                            rule, CUBE_LEGAL)
    if dtypes:
        # 32-byte alignment applies to the operand element size; with several dtypes use the smallest element
        # (the strictest element count is what the input operands need; the FP32 output is not tiled by K).
        sizes_b = [DTYPE_BYTES[d] for d in dtypes if d in DTYPE_BYTES]
        if sizes_b:
            # ... and never fewer than 16 elements: measured on PyPTO's basic_ops matmul with FP32 operands, k or n
            # of 8 or 24 fail with FC4001 while 16, 32 and 48 compile (m of 8 compiles)
            elems = max(CUBE_KN_MIN_ELEMS, 32 // min(sizes_b))
            for axis in ("k", "n"):
                for x in out[axis]:
                    if x % elems:
                        raise _fail(f"{axis} tile {x} is not a multiple of {elems} elements (32-byte aligned, and at "
                                    f"least {CUBE_KN_MIN_ELEMS} elements a step: FC4001)", rule, CUBE_LEGAL)
    # The L0C buffer holds the mL0 × nL0 output tile in FP32 (4 bytes) and is 128 KiB: measured on the matmul_act
    # grid, m (128, 128) with n (512, 512) fails with "Alloc tensor size 262144 exceeds MEM_L0C 131072".
    l0c = out["m"][0] * out["n"][0] * 4
    if l0c > L0C_BYTES:
        raise _fail(f"mL0 {out['m'][0]} × nL0 {out['n'][0]} × 4 B = {l0c // 1024} KB exceeds the 128 KB L0C buffer",
                    rule, CUBE_LEGAL)
    if dtypes:
        # the operands' element size: the smallest of the kernel's dtypes, so that an FP32 output never makes an
        # FP16 operand tile look larger than it is (the check stays one that only refuses what cannot compile)
        sizes_b = [DTYPE_BYTES[d] for d in dtypes if d in DTYPE_BYTES]
        overflow = l0_operand_overflow(out["m"][0], out["k"][0], out["n"][0], min(sizes_b)) if sizes_b else ""
        if overflow:
            raise _fail(overflow, rule, CUBE_LEGAL)
    split = merged.get("enable_split_k")
    if split is not None:
        if not isinstance(split, bool):
            raise _fail(f"enable_split_k must be True/False, got {split!r}", rule, CUBE_LEGAL)
        out["enable_split_k"] = split
    return out


def loop_trips(bounds: Any) -> int | None:
    """How often ``pypto.loop(stop)`` / ``loop(start, stop[, step])`` (or ``loop_unroll``'s same bounds) iterates with
    these bound values: None unless they are one to three ints and the step is positive. The one reading of a loop's
    trip count, for the bounds the run recorded, the bounds read from the code and the symbolic bounds evaluated on the
    shapes that ran."""
    vals = list(bounds) if isinstance(bounds, (list, tuple)) else []
    if not 1 <= len(vals) <= 3 or not all(_is_int(v) for v in vals):
        return None
    start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (vals[0], vals[1], vals[2] if len(vals) == 3 else 1)
    return max(0, -(-(stop - start) // step)) if step > 0 else None


UNROLL_LEGAL = "non-empty list of ints ≥ 1 (e.g. [8, 4, 2, 1]); innermost loop only; max ≤ the trip count"


def _unroll(v: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(v, tuple):
        v = list(v)
    if not isinstance(v, list) or not v or not all(_is_int(x) and x >= 1 for x in v):
        raise _fail(f"unroll_list must be a non-empty list of ints ≥ 1, got {v!r}", "C/F-8", UNROLL_LEGAL)
    trip = ctx.get("trip_count")
    if isinstance(trip, int) and trip >= 1 and max(v) > trip:
        raise _fail(f"unroll factor {max(v)} exceeds the loop's trip count {trip}", "C/F-8", UNROLL_LEGAL)
    return v


SCOPE_LEGAL = ("list of the function's sg_set_scope values in source order, one per call (same count as now): "
               "−1 closes a scope, an id 1 … 2³¹−1 opens one, distinct per scope (pypto 0.2.0; tuples are newer builds)")


def _scope(v: Any, ctx: dict[str, Any]) -> Any:
    if _is_int(v):
        v = [v]
    if isinstance(v, tuple):
        v = list(v)
    if not isinstance(v, list) or not v:
        raise _fail(f"sg_set_scope must be a list of ints, got {v!r}", "C/S-4", SCOPE_LEGAL)
    current = ctx.get("current")
    if isinstance(current, list) and len(current) != len(v):
        raise _fail(f"this function has {len(current)} sg_set_scope calls, got {len(v)} values", "C/S-4", SCOPE_LEGAL,
                    hint="adding or removing scope calls is structural: send a diff")
    for x in v:
        if not _is_int(x) or not (-1 <= x <= 2**31 - 1) or x == 0:
            raise _fail(f"sg_set_scope = {x!r} is not legal", "C/S-4", SCOPE_LEGAL)
    opened = [x for x in v if x != -1]
    if len(opened) != len(set(opened)):
        raise _fail(f"scope ids must be distinct per scope, got {v}", "C/S-4", SCOPE_LEGAL)
    return v


TILE_CONST_LEGAL = ("same shape as now (an int ≥ 1, or a tuple/list of as many ints ≥ 1, or a dict); ≤ the axis it "
                    "blocks and dividing it when known; every tile call, loop and view it feeds must stay legal")


def _tile_constant(v: Any, ctx: dict[str, Any]) -> Any:
    """A name bound to a literal: the new value keeps the current one's shape; what it feeds is checked by the
    admission gate on the effective values of every consumer (tools/code/admission.py)."""
    current = ctx.get("current")
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(current, list) and "unroll" in ctx.get("consumers", ()):
        # an unroll list may grow or shrink; the loop it feeds bounds it (checked on the effective value)
        if not isinstance(v, list) or not v or not all(_is_int(x) and x >= 1 for x in v):
            raise _fail(f"value must be a non-empty list of ints ≥ 1, got {v!r}", "C/F-8", UNROLL_LEGAL)
        return v
    if isinstance(current, list):
        if not isinstance(v, list) or len(v) != len(current) or not all(_is_int(x) and x >= 1 for x in v):
            raise _fail(f"value must be a list of {len(current)} ints ≥ 1 like {current!r}, got {v!r}", "C/F-11",
                        TILE_CONST_LEGAL)
        return v
    if isinstance(current, dict) and not is_expr(current):
        if not isinstance(v, dict) or is_expr(v):
            raise _fail(f"value must be a dict like {current!r}, got {v!r}", "C/F-11", TILE_CONST_LEGAL)
        return v
    if not _is_int(v) or v < 1:
        raise _fail(f"value must be an int ≥ 1, got {v!r}", "C/F-11", TILE_CONST_LEGAL)
    bound = ctx.get("max_value")
    if isinstance(bound, int) and v > bound:
        raise _fail(f"block {v} exceeds the axis length {bound} it divides", "C/F-1", TILE_CONST_LEGAL)
    return v


VALID_SHAPE_LEGAL = ("one entry per dim: the view's extent there (as it ran, or its own code), or the recorded tail "
                     "expression; it says how much of the view is computed, and only the last block is shorter")


def _valid_shape(v: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(v, tuple):
        v = list(v)
    if not isinstance(v, list) or not v:
        raise _fail(f"valid_shape must be a list, got {v!r}", "C/I-9", VALID_SHAPE_LEGAL)
    for x in v:
        if not (is_expr(x) or (_is_int(x) and x >= 1)):
            raise _fail(f"valid_shape entry {x!r} must be an int ≥ 1 or {{'$expr': code}}", "C/I-9", VALID_SHAPE_LEGAL)
    current = ctx.get("current")
    if isinstance(current, list) and len(current) != len(v):
        raise _fail(f"valid_shape has {len(current)} dims here, got {len(v)}", "C/I-9", VALID_SHAPE_LEGAL)
    return v


CACHE_LEGAL = ("{tensor: True/False} for the function's set_cache_policy calls (same tensors as now); only "
               "pypto.CachePolicy.NONE_CACHEABLE exists; large read-once weights only, never inputs/outputs")


def _cache(v: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(v, bool):  # a single call: the flag alone
        current = ctx.get("current")
        if isinstance(current, dict) and len(current) == 1:
            v = {next(iter(current)): v}
    if not isinstance(v, dict) or is_expr(v):
        raise _fail(f"set_cache_policy value must be {{tensor: bool}}, got {v!r}", "C/I-2", CACHE_LEGAL)
    current = ctx.get("current") if isinstance(ctx.get("current"), dict) else None
    if current is not None and set(v) - set(current):
        raise _fail(f"no set_cache_policy call for {sorted(set(v) - set(current))} in this function", "C/I-2",
                    CACHE_LEGAL, hint="adding a set_cache_policy call is structural: send a diff")
    for key, flag in v.items():
        if not isinstance(flag, bool):
            raise _fail(f"set_cache_policy flag for {key} must be True/False, got {flag!r}", "C/I-2", CACHE_LEGAL)
    for key, policy in (ctx.get("policies") or {}).items():
        if policy is not None and not str(policy).endswith("NONE_CACHEABLE"):
            raise _fail(f"cache policy {policy!r} of {key} does not exist in pypto 0.2.0", "C/I-2", CACHE_LEGAL)
    return {**(current or {}), **v}


KIND_SPECS: dict[str, Spec] = {
    "vec_tile": Spec(("F-10", "S-12", "S-3"), VEC_TILE_LEGAL, True, _vec_tile),
    "cube_tile": Spec(("F-9", "S-2", "S-11", "S-3", "I-7"), CUBE_LEGAL, True, _cube_tile),
    "tile_constant": Spec(("F-11", "F-3", "F-1", "F-2", "F-7", "F-10", "F-9", "S-2", "S-3", "S-12"), TILE_CONST_LEGAL,
                          True, _tile_constant),
    "local_constant": Spec(("F-11", "F-3", "F-1", "F-2", "F-7", "F-10", "F-9", "S-2", "S-3", "S-12"),
                           TILE_CONST_LEGAL, True, _tile_constant),
    "shape_constant": Spec((), "problem size (used by tensor signatures or the test harness); changing it changes "
                               "what the operator computes — not a tuning knob", False,
                           _not_tunable("this constant is a problem size, not a tuning knob; a change to it must be "
                                        "declared as an algorithm-level change (diff)")),
    "sg_set_scope": Spec(("S-4",), SCOPE_LEGAL, True, _scope),
    "cache_policy": Spec(("I-2",), CACHE_LEGAL, True, _cache),
    "valid_shape": Spec(("I-9", "F-7"), VALID_SHAPE_LEGAL, True, _valid_shape),
    # the literal a tiling call's value flows from (tools/patching/flows.py); the calls it feeds are checked on the
    # values the run gave them, with this literal replaced (tools/patching/runmap.py)
    "tile_source": Spec(("F-10", "F-9", "F-11", "F-3", "F-1", "F-7", "S-2", "S-3", "S-12"), TILE_CONST_LEGAL, True,
                        _tile_constant),
}

LOOP_SPECS = {
    "unroll_list": Spec(("F-8", "F-2"), UNROLL_LEGAL, True, _unroll),
    "submit_before_loop": Spec(("I-8",), "True / False (0.2.0: adds a barrier before the loop)", True,
                               _bool("C/I-8", "submit_before_loop")),
}

COMBINE_SPECS = {
    "combine_axis": Spec(("F-15",), "True / False; first statement of the jit body; broadcast input tail contiguous",
                         True, _bool("C/F-15", "combine_axis")),
    "force_combine_axis": Spec((), "keep the default (not recommended by pypto)", False,
                               _not_tunable("force_combine_axis should stay at its default (domain C F-15)")),
}


def undeclared(what: str) -> Spec:
    """An option no catalogue item names and whose legal values nobody declared (issue #16: pass_options keys the
    catalogue never mentions, one with a negative bound, were admitted in FRONTEND with no legality record). It is
    tracked (a change to it is a knob change, so it cannot ride along with another) but never admitted (R10)."""
    return Spec((), f"{what}: {UNDECLARED}", False, _not_tunable(f"{what}: {UNDECLARED}"))


def spec_for(kind: str, key: str | None, group: str | None = None) -> Spec:
    """The spec of a knob kind, refined by its option key where the key matters."""
    if kind in ("jit_option", "pass_option", "debug_option"):
        if key in OPTION_SPECS:
            return OPTION_SPECS[key]
        if kind == "debug_option":
            return Spec((), "debug options are not tuning knobs", False,
                        _not_tunable("debug_options are owned by enable_runtime_debug, not tuned"))
        if key == "*":
            return Spec((), f"{group} built by an expression the server cannot edit safely; use a diff", False,
                        _not_tunable(f"{group} is built by an expression; edit it with a diff"))
        return undeclared(f"{group or kind} key {key!r}")
    if kind == "loop_option":
        return LOOP_SPECS.get(key or "", undeclared(f"loop option {key!r}"))
    if kind == "combine_axis":
        return COMBINE_SPECS.get(key or "", Spec((), "", False, _not_tunable(f"{key} is not a tuning knob")))
    return KIND_SPECS.get(kind, undeclared(f"knob kind {kind!r}"))


def validate(kind: str, key: str | None, group: str | None, value: Any, ctx: dict[str, Any]) -> Any:
    """Check ``value`` against the knob's rule; return the value to write. Raises KnobValueError / InputError."""
    return spec_for(kind, key, group).validate(value, ctx)


def check_knob_value(knob: Any, value: Any) -> Any:
    """Validate ``value`` for a :class:`Knob` from :func:`extract_knobs` (its kind, name and context).

    Returns the normalised value that would be written; raises KnobValueError (rule + legal range) or InputError
    (not a tuning knob). ``plan_knob_edit`` calls the same rule, plus the dependent-knob check.
    """
    group = None
    if knob.kind in ("jit_option", "debug_option") and "." in knob.id:
        parts = knob.id.split(".")
        group = next((p for p in parts if p.endswith("_options")), None)
    return validate(knob.kind, knob.name, group, value, dict(knob.context, current=knob.value))
