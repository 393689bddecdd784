"""Legality on what the kernel will actually get: the effective value of every tiling call, loop and view.

A knob can be written in many places — the call's own arguments, a module tuple splatted into it (``*VEC_TILE``),
a local block size that a loop bound divides by. Checking the edited node alone would judge the same change
differently depending on how it was written (issue #10, attack 3). So legality is judged here on the *sources after
the change*, whatever path produced them: each consumer site is evaluated with the literal names visible to it, and
every site whose effective value differs from before is checked against domain C. A value that cannot be evaluated
(it depends on a runtime shape) is reported as unchecked, never guessed.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, KnobValueError
from . import legality, roles
from ._cst import is_expr
from .extract import Site
from .models import DTYPE_BYTES, EXPR_KEY
from .roles import dotted
from pypto_tune.tools.code import pysource

UNKNOWN = object()
# F-10 recommends 16–64 KB per vector tile. The unified buffer is 192 KiB (pypto 0.2.0's log: "OP SUB ... 262144
# exceeds MEM_UB 196608") and a binary op holds two operand tiles, so a tile may take at most 96 KiB: measured on
# the fixtures, (3, 32, 256) fp32 = 96 KiB compiles, 128 KiB tiles fail with "Run pass failed" (softmax (4, 32, 256),
# rmsnorm (64, 512), multi_stage (32, 1024), layer_norm (64, 512)).
UB_TILE_MAX_BYTES = 96 * 1024
TRANSPOSE_TAIL_BYTES = 64  # a transposed tile's new tail is held in whole 64-byte runs (see _transposed_bytes)
TAIL_MIN_BYTES = 32  # F-10: tail ≥ 32 B, and whole 32-byte blocks (512 B-aligned splits are advice, not a rule)


class _Unknown(Exception):
    pass


def evaluate(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a pure expression over literals and ``env`` names; raises _Unknown otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unknown(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        out: list[Any] = []
        for el in node.elts:
            if isinstance(el, ast.Starred):
                out.extend(list(evaluate(el.value, env)))
            else:
                out.append(evaluate(el, env))
        return out
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unknown("**")
        return {evaluate(k, env): evaluate(v, env) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = evaluate(node.operand, env)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Unknown("unary")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = evaluate(node.left, env), evaluate(node.right, env)
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
                or not isinstance(b, (int, float)):
            raise _Unknown("binop")
        op = node.op
        try:
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, ast.FloorDiv):
                return a // b
            if isinstance(op, ast.Mod):
                return a % b
            if isinstance(op, ast.Div):
                return a / b
        except ZeroDivisionError:
            raise _Unknown("division by zero") from None
        raise _Unknown("operator")
    if isinstance(node, ast.Subscript):
        base = evaluate(node.value, env)
        idx = evaluate(node.slice, env)
        try:
            return base[idx]
        except (TypeError, IndexError, KeyError):
            raise _Unknown("subscript") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max", "int") \
            and not node.keywords:
        args = [evaluate(a, env) for a in node.args]
        return {"min": min, "max": max, "int": int}[node.func.id](*args)
    raise _Unknown(type(node).__name__)


def value_of(value: Any, env: dict[str, Any]) -> Any:
    """A knob's JSON-ish value (``{"$expr": code}`` parts allowed) made concrete with ``env``; UNKNOWN if not."""
    try:
        return _concrete(value, env)
    except (_Unknown, SyntaxError, ValueError, TypeError):
        return UNKNOWN


def _concrete(value: Any, env: dict[str, Any]) -> Any:
    if is_expr(value):
        return evaluate(pysource.parse(value[EXPR_KEY].strip(), mode="eval").body, env)
    if isinstance(value, list):
        return [_concrete(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _concrete(v, env) for k, v in value.items()}
    return value


def call_args(code: str, env: dict[str, Any]) -> list[Any] | object:
    """Positional arguments of a call written as code (``pypto.set_vec_tile_shapes(*VEC_TILE)``), star-args
    expanded; UNKNOWN if any cannot be evaluated."""
    try:
        node = pysource.parse(code.strip(), mode="eval").body
        if not isinstance(node, ast.Call):
            return UNKNOWN
        out: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                out.extend(list(evaluate(a.value, env)))
            else:
                out.append(evaluate(a, env))
        return out
    except (_Unknown, SyntaxError, TypeError):
        return UNKNOWN


# --------------------------------------------------------------------------------------------------- sites


@dataclass
class SiteValue:
    site_id: str
    kind: str
    line: int
    value: Any  # concrete value, or UNKNOWN
    context: dict[str, Any] = field(default_factory=dict)


def _env(program: roles.Program, site: Site) -> dict[str, Any]:
    return program.env(site.file, site.knob.function or roles.MODULE)


def site_values(sites: list[Site], program: roles.Program) -> dict[str, SiteValue]:
    """Effective values of the consumer sites: vector and cube tiles, loop trip counts and unroll lists."""
    out: dict[str, SiteValue] = {}
    for site in sites:
        k = site.knob
        if not k.present or site.extra.get("binding"):
            continue
        env = _env(program, site)
        if k.kind == "vec_tile":
            if is_expr(k.value):
                v = call_args(k.value[EXPR_KEY], env)
            else:
                v = value_of(k.value, env)
            out[k.id] = SiteValue(k.id, k.kind, k.line, v, dict(k.context))
        elif k.kind == "cube_tile":
            out[k.id] = SiteValue(k.id, k.kind, k.line, value_of(k.value, env), dict(k.context))
        elif k.kind == "loop_option" and k.name == "unroll_list":
            out[k.id] = SiteValue(k.id, k.kind, k.line, value_of(k.value, env), dict(k.context))
    return out


def loop_values(sources: dict[str, str], program: roles.Program) -> dict[str, SiteValue]:
    """Trip counts of ``pypto.loop`` / ``range`` bounds written as ``X // K``, keyed by file:line:col."""
    out: dict[str, SiteValue] = {}
    for path, text in sources.items():
        try:
            tree = pysource.parse(text)
        except SyntaxError:
            continue
        scopes = _scope_map(tree)
        _coverage(path, tree, scopes, program, out)
        _fixed_views(path, tree, scopes, program, out)
        _fixed_writes(path, tree, scopes, program, out)
        for node in ast.walk(tree):
            if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.FloorDiv):
                continue
            env = program.env(path, scopes.get(id(node), roles.MODULE))
            try:
                x, k = evaluate(node.left, env), evaluate(node.right, env)
            except _Unknown:
                if isinstance(node.right, ast.Name):
                    out[f"{path}:{node.lineno}:{node.col_offset}"] = SiteValue(
                        f"{path}:{node.lineno}", "floordiv-unknown", node.lineno, UNKNOWN,
                        {"code": ast.unparse(node), "file": path, "divisor": node.right.id})
                continue
            if isinstance(x, int) and isinstance(k, int) and not isinstance(x, bool) and not isinstance(k, bool):
                out[f"{path}:{node.lineno}:{node.col_offset}"] = SiteValue(
                    f"{path}:{node.lineno}", "floordiv", node.lineno, (x, k),
                    {"code": ast.unparse(node), "file": path})
    return out


def _loop_trips(call: ast.Call, env: dict[str, Any]) -> int | None:
    pos = [a for a in call.args if not isinstance(a, ast.Starred)]
    if not 1 <= len(pos) <= 3:
        return None
    try:
        return legality.loop_trips([evaluate(a, env) for a in pos])
    except _Unknown:
        return None


def _block_of(expr: ast.AST, var: str, env: dict[str, Any]) -> int | None:
    """B for an offset written ``var * B`` or ``B * var`` (B evaluable), else None."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        for a, b in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(a, ast.Name) and a.id == var:
                try:
                    v = evaluate(b, env)
                except _Unknown:
                    return None
                return v if isinstance(v, int) and not isinstance(v, bool) else None
    return None


def _coverage(path: str, tree: ast.Module, scopes: dict[int, str], program: roles.Program,
              out: dict[str, SiteValue]) -> None:
    """For every kernel loop ``for i in pypto.loop(T)`` whose body views a tensor at ``i * B`` along an axis of known
    length X: (T, B, X) — the loop must cover the axis (red team: 1 of 8 blocks, or 8 blocks of half the rows, were
    admitted as legal knob changes). Also constant ``valid_shape``s against their view's shape."""
    params: dict[str, dict[str, list[Any]]] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope = scopes.get(id(fn.body[0]), roles.MODULE) if fn.body else roles.MODULE
            env = program.env(path, scope)
            dims: dict[str, list[Any]] = {}
            for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
                ann = a.annotation
                if isinstance(ann, ast.Call) and dotted(ann.func).endswith("Tensor") and ann.args and isinstance(
                        ann.args[0], (ast.List, ast.Tuple)):
                    vals = []
                    for el in ann.args[0].elts:
                        try:
                            vals.append(evaluate(el, env))
                        except _Unknown:
                            vals.append(None)
                    dims[a.arg] = vals
            params[scope] = dims
    for node in ast.walk(tree):
        if not (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call)):
            continue
        callee = dotted(node.iter.func).rsplit(".", 1)[-1]
        if callee not in ("loop", "range"):
            continue
        scope = scopes.get(id(node), roles.MODULE)
        if (path, scope) not in program.kernel_scopes:
            continue
        env = program.env(path, scope)
        trips = _loop_trips(node.iter, env)
        var = node.target.id
        tensors = {}
        for sc, dims in params.items():
            if scope == sc or scope.startswith(sc + "."):
                tensors.update(dims)
        for inner in ast.walk(node):
            targets: list[tuple[str, list[ast.AST], int]] = []
            if isinstance(inner, ast.Call) and dotted(inner.func).rsplit(".", 1)[-1] == "view" and len(inner.args) >= 3:
                t = inner.args[0]
                offsets = inner.args[2]
                if isinstance(t, ast.Name) and isinstance(offsets, (ast.List, ast.Tuple)):
                    targets.append((t.id, list(offsets.elts), inner.lineno))
                vs = next((k.value for k in inner.keywords if k.arg == "valid_shape"), None)
                shape_node = inner.args[1]
                if isinstance(vs, (ast.List, ast.Tuple)) and isinstance(shape_node, (ast.List, ast.Tuple)):
                    try:
                        shape = [evaluate(e, env) for e in shape_node.elts]
                        valid = [evaluate(e, env) for e in vs.elts]
                        out[f"{path}:{inner.lineno}:{inner.col_offset}:valid"] = SiteValue(
                            f"{path}:{inner.lineno}", "valid_shape", inner.lineno, (shape, valid),
                            {"file": path})
                    except _Unknown:
                        pass
            elif isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
                sl = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
                targets.append((inner.value.id, [e.lower if isinstance(e, ast.Slice) else e for e in sl],
                                inner.lineno))
            for tensor, offs, line in targets:
                dims = tensors.get(tensor)
                if trips is None or not dims:
                    continue
                for axis, off in enumerate(offs):
                    if off is None or axis >= len(dims) or not isinstance(dims[axis], int):
                        continue
                    block = _block_of(off, var, env)
                    if block is None:
                        continue
                    out[f"{path}:{node.lineno}:{tensor}:{axis}"] = SiteValue(
                        f"{path}:{node.lineno}", "coverage", node.lineno, (trips, block, dims[axis]),
                        {"file": path, "tensor": tensor, "axis": axis})


def _fixed_views(path: str, tree: ast.Module, scopes: dict[int, str], program: roles.Program,
                 out: dict[str, SiteValue]) -> None:
    """The offset and extent of every view of a kernel's input along each axis its offset leaves fixed (a constant,
    not a loop's index): they say which part of the input the kernel computes, a problem size and never a tile.
    PyPTO's kernel_input and dynamic attention examples view ``[tile, head, q_len, dim]`` at ``[b_offset, 0, 0, 0]``
    with ``head = 8`` a local: set to 1 it computed one head of eight, 2.5× "faster", and SIM checks no values."""
    inputs = {scopes.get(id(fn.body[0]), roles.MODULE): {a.arg for a in [*fn.args.posonlyargs, *fn.args.args,
                                                                      *fn.args.kwonlyargs]}
              for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.body}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "view" and len(node.args) >= 3):
            continue
        scope = scopes.get(id(node), roles.MODULE)
        shape, offsets, tensor = node.args[1], node.args[2], node.args[0]
        # a view of a tensor the jit kernel was given: a sub-view of a block the kernel cut spans that block at 0
        # and changes with it
        given = (path, scope) in program.jit_scopes and isinstance(tensor, ast.Name) and tensor.id in inputs.get(
            scope, ())
        listed = isinstance(shape, (ast.List, ast.Tuple)) and isinstance(offsets, (ast.List, ast.Tuple))
        if not given or not listed or len(shape.elts) != len(offsets.elts):
            continue
        env = program.env(path, scope)
        valid = next((k.value for k in node.keywords if k.arg == "valid_shape"), None)
        valid_elts = valid.elts if isinstance(valid, (ast.List, ast.Tuple)) and len(valid.elts) == len(
            shape.elts) else None
        for axis, (extent, offset) in enumerate(zip(shape.elts, offsets.elts)):
            try:
                fixed = evaluate(offset, env)
            except _Unknown:
                continue  # a loop's index moves the view along this axis: its extent is a block
            if not isinstance(fixed, int) or isinstance(fixed, bool):
                continue
            ctx = {"file": path, "axis": axis, "offset": fixed, "code": ast.unparse(extent)}
            try:
                n = evaluate(extent, env)
                if isinstance(n, int) and not isinstance(n, bool):
                    out[f"{path}:{node.lineno}:{node.col_offset}:fixed:{axis}"] = SiteValue(
                        f"{path}:{node.lineno}", "fixed-view", node.lineno, (fixed, n), ctx)
            except _Unknown:
                pass
            if valid_elts is not None:
                # the valid part of a view no loop moves along this axis is the whole view there (a smaller one
                # is only a loop's tail block): judged on the code when the extent is a run-time value
                # (PyPTO's dynamic attention: head = config.num_heads, and a valid_shape of 2 heads was admitted
                # "unchecked")
                out[f"{path}:{node.lineno}:{node.col_offset}:fixed-valid:{axis}"] = SiteValue(
                    f"{path}:{node.lineno}", "fixed-valid", node.lineno,
                    _same_extent(extent, valid_elts[axis], env), dict(ctx, valid=ast.unparse(valid_elts[axis])))


def _fixed_writes(path: str, tree: ast.Module, scopes: dict[int, str], program: roles.Program,
                  out: dict[str, SiteValue]) -> None:
    """Every offset of a ``pypto.assemble`` that no loop's index moves, as the code evaluates it: where a result is
    written, never a tile. The knob map keeps a literal written into such an offset, through copies, out of the
    knobs (roles); this catches the arithmetic forms (``[lo, 1 * W]``, ``[lo, head * W]``) where the literal is also
    an extent the agent may change, so that moving it cannot move the write (SIM checks no values)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "assemble"):
            continue
        offsets = node.args[1] if len(node.args) >= 2 else next(
            (k.value for k in node.keywords if k.arg == "offsets"), None)
        if not isinstance(offsets, (ast.List, ast.Tuple)):
            continue
        env = program.env(path, scopes.get(id(node), roles.MODULE))
        for axis, offset in enumerate(offsets.elts):
            try:
                fixed = evaluate(offset, env)
            except _Unknown:
                continue  # a loop's index (or a run-time value) moves it
            if isinstance(fixed, int) and not isinstance(fixed, bool):
                out[f"{path}:{node.lineno}:{node.col_offset}:write:{axis}"] = SiteValue(
                    f"{path}:{node.lineno}", "fixed-write", node.lineno, fixed,
                    {"file": path, "axis": axis, "code": ast.unparse(offset)})


def _same_extent(a: ast.AST, b: ast.AST, env: dict[str, Any]) -> bool:
    """Whether two extents are one: the same code, or the same number."""
    if ast.dump(a) == ast.dump(b):
        return True
    try:
        return evaluate(a, env) == evaluate(b, env)
    except _Unknown:
        return False


def _scope_map(tree: ast.Module) -> dict[int, str]:
    out: dict[int, str] = {}

    def visit(node: ast.AST, scope: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # a def nested in a function's body is met here as a statement: its own body is its own scope (the
            # kernel built inside a factory used to be read in the factory's scope, so its locals were unknown)
            out[id(node)] = scope
            inner = node.name if scope == roles.MODULE else f"{scope}.{node.name}"
            for d in node.decorator_list:
                visit(d, scope)
            for stmt in node.body:
                visit(stmt, inner)
            return
        out[id(node)] = scope
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    for top in tree.body:
        visit(top, roles.MODULE)
    return out


# --------------------------------------------------------------------------------------------------- checks


@dataclass
class LegalityReport:
    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)


def _fail(message: str, rule: str, legal: str) -> KnobValueError:
    return KnobValueError(message, rule=rule, legal=legal,
                          hint="choose a value inside the legal range (list_knobs shows it for this operator)")


def ub_dtypes_of(context: dict[str, Any]) -> tuple[list[str], int]:
    """The dtypes a tile's operations hold in the unified buffer, and the largest element size among them: the
    kernel's tensors' and every dtype a ``pypto.cast`` in what the kernel runs produces (``cast_dtypes``: read from
    the text of the kernel the run names and the helpers it calls, or of the kernel around the tile call). Sizing a tile by the dtype before a cast let tiles through that did not compile (an FP16 input
    cast to FP32 takes twice the bytes: ``Errcode: FFFFFF``). The tail rule keeps the tensors' own dtypes: a cast to a
    wider type does not make a narrow tensor's short tail whole."""
    names = list(dict.fromkeys([*context.get("dtypes", []), *context.get("cast_dtypes", [])]))
    return names, max((DTYPE_BYTES.get(d, 0) for d in names), default=0)


def _transposed_bytes(tile: list[int], tr: roles.Transpose, elem: int) -> int:
    """What the transposed tile takes in the unified buffer: the tile permuted, its new tail rounded up to whole
    ``TRANSPOSE_TAIL_BYTES``. Measured on PyPTO's attention examples (``pypto.transpose(k, 2, 3)`` under a
    [b, h, s, d] tile, FP32): [8, 8, 4, 64] allocated 262144 B (= 8·8·64·16·4: the tail of 4 held as 16) and did not
    compile, [4, 8, 4 | 8 | 2, 64] (128 KB so counted) failed, [2, 8, 2 | 4 | 8 | 16, 64] and [1, 8, 32, 64] (64 KB)
    compiled. A transpose that leaves the tail in place costs no more than the tile. Only FP32 was measured; the
    64-byte run is taken for every dtype (for 2-byte data, 32 elements: the larger of the two readings)."""
    t = tr.permute(list(tile))
    if t is None or t[-1] == tile[-1]:
        return 0
    step = max(1, TRANSPOSE_TAIL_BYTES // elem)
    return math.prod(t[:-1]) * (-(-t[-1] // step) * step) * elem


def check_vec_tile(sv: SiteValue, reductions: list[roles.Reduction], before: Any, *, structural: bool = False,
                   transposes: Sequence[roles.Transpose] = ()) -> bool:
    """``structural``: an algorithm-level change may change the tile's rank (a reshape needs a new tile, F-4), so
    the rank of the old value is not imposed; everything else is. ``transposes``: the kernel's ``pypto.transpose``
    calls, each of whose tiles must fit the unified buffer as transposed (``_transposed_bytes``)."""
    v = sv.value
    current = None if structural else (before if isinstance(before, list) else sv.context.get("current"))
    legality.validate("vec_tile", None, None, v, dict(sv.context, current=current))
    if structural and isinstance(before, list) and len(before) != len(v):
        before = None  # a new rank: the reduce-axis rule judges the new tile on its own
    shapes = [s for s in sv.context.get("tensor_shapes", []) if len(s) == len(v)
              and all(isinstance(d, int) for d in s)]
    dtypes = sv.context.get("dtypes", [])
    elem = max((DTYPE_BYTES.get(d, 0) for d in dtypes), default=0)
    ub_dtypes, ub_elem = ub_dtypes_of(sv.context)
    if ub_elem:
        size = math.prod(v) * ub_elem
        if size > UB_TILE_MAX_BYTES:
            raise _fail(f"vec tile {v} is {size // 1024} KB of {'/'.join(ub_dtypes)}: a tile may take at most "
                        f"{UB_TILE_MAX_BYTES // 1024} KB, half the 192 KB unified buffer (a binary op holds two; "
                        "measured: 96 KB compiles, 128 KB fails with 'Run pass failed'; 16–64 KB is the recommended "
                        "size)", "C/F-10", legality.VEC_TILE_LEGAL)
        # as it runs: PyPTO clamps each dimension to the tensor's (the largest of the shapes that ran at this rank)
        ran = [min(d, max(s[i] for s in shapes)) for i, d in enumerate(v)] if shapes else v
        for tr in transposes:
            t_size = _transposed_bytes(ran, tr, ub_elem)
            if t_size > UB_TILE_MAX_BYTES:
                raise _fail(f"vec tile {v} transposed by pypto.transpose at line {tr.line} is {t_size // 1024} KB "
                            f"of {'/'.join(ub_dtypes)} in the unified buffer (its new tail padded to "
                            f"{TRANSPOSE_TAIL_BYTES} B): a tile may take at most {UB_TILE_MAX_BYTES // 1024} KB",
                            "C/F-10", legality.VEC_TILE_LEGAL)
    if elem:
        tail = v[-1] * elem
        if tail < TAIL_MIN_BYTES or tail % TAIL_MIN_BYTES:
            raise _fail(f"vec tile tail {v[-1]} × {elem} B = {tail} B is not a multiple of {TAIL_MIN_BYTES} B (the "
                        "vector unit moves 32-byte blocks)", "C/F-10", legality.VEC_TILE_LEGAL)
    if shapes:
        rank = len(v)
        for red in reductions:
            for axis in red.axes:
                a = axis + rank if axis < 0 else axis
                if not 0 <= a < rank:
                    continue
                full = max(s[a] for s in shapes)
                splits = v[a] < full
                known = isinstance(before, list) and len(before) == rank
                # an operator that already splits it may keep its split, or shrink it, never cut it finer
                if splits and (not known or before[a] >= full or v[a] < before[a]):
                    raise _fail(f"vec tile dim {a} = {v[a]} splits the reduce axis (length {full}, reduced at line "
                                f"{red.line})", "C/F-10", legality.VEC_TILE_LEGAL)
    return bool(shapes)


def check_after(before_sites: dict[str, SiteValue], after_sites: dict[str, SiteValue],
                before_loops: dict[str, SiteValue], after_loops: dict[str, SiteValue],
                program_after: roles.Program, *, structural: bool = False,
                changed_names: set[str] | None = None) -> LegalityReport:
    """Refuse (KnobValueError) any consumer site whose effective value changed to something illegal.

    ``changed_names``: the names the change gave a new value; a floor division by one of them whose axis the server
    cannot evaluate is listed as unchecked rather than passed silently."""
    report = LegalityReport()
    for sid, sv in after_sites.items():
        try:
            _check_site(sid, sv, before_sites, program_after, report, structural)
        except (InputError, KnobValueError) as exc:
            ran = sv.context.get("ran")
            if ran:  # a run value (tools/patching/runmap.py): name what ran, so the refusal is about real shapes
                exc.message = f"{exc.message} — {ran}"
            raise
    _check_loops(before_loops, after_loops, report, changed_names)
    return report


def _check_site(sid: str, sv: SiteValue, before_sites: dict[str, SiteValue], program_after: roles.Program,
                report: LegalityReport, structural: bool) -> None:
    old = before_sites.get(sid)
    old_value = old.value if old is not None else UNKNOWN
    if old is not None and old_value is not UNKNOWN and sv.value is not UNKNOWN and old_value == sv.value:
        return
    if old is not None and old_value is UNKNOWN and sv.value is UNKNOWN:
        return
    if sv.value is UNKNOWN:
        report.unchecked.append(f"{sid} (line {sv.line}): its value depends on names the server cannot evaluate")
        return
    file = sid.split(":", 1)[0]
    label = sid
    if sv.kind == "vec_tile":
        reds = sv.context["reductions"] if "reductions" in sv.context else program_after.reductions.get(file, [])
        if not check_vec_tile(sv, reds, None if old_value is UNKNOWN else old_value, structural=structural,
                              transposes=program_after.transposes.get(file, [])):
            # factory-built kernels: the tensor dims are run-time values here; say what was not checked
            report.unchecked.append(f"{label} = {sv.value!r} (line {sv.line}): the tensor dims are not known "
                                    "statically, so 'tile ≤ dim' and 'never split the reduce axis' were not "
                                    "checked")
            return
    elif sv.kind == "cube_tile":
        legality.validate("cube_tile", None, None, sv.value, dict(sv.context, current=sv.value))
    elif sv.kind == "loop_option":
        legality.validate("loop_option", "unroll_list", None, sv.value, dict(sv.context))
    report.checked.append(f"{label} = {sv.value!r}" + (f" ({sv.context['ran']})" if sv.context.get("ran")
                                                        else ""))


def _check_loops(before_loops: dict[str, SiteValue], after_loops: dict[str, SiteValue], report: LegalityReport,
                 changed_names: set[str] | None) -> None:
    for key, sv in after_loops.items():
        old = before_loops.get(key)
        if sv.kind == "floordiv-unknown":
            if changed_names and sv.context.get("divisor") in changed_names:
                report.unchecked.append(f"{sv.context['file']}:{sv.line} {sv.context['code']}: the axis length is a "
                                        f"run-time value here, so whether {sv.context['divisor']} divides it (and "
                                        "leaves no row uncomputed) was not checked")
            continue
        if old is not None and old.value == sv.value:
            continue
        if sv.kind == "fixed-valid":
            if old is not None and old.value and not sv.value:
                raise _fail(f"the view at {sv.context['file']}:{sv.line} spans axis {sv.context['axis']} from the "
                            f"fixed offset {sv.context['offset']}, and its valid_shape there ({sv.context['valid']}) "
                            f"is no longer its extent ({sv.context['code']}): part of the tensor would never be "
                            "computed",
                            "C/I-9", "a valid_shape equal to the view on every axis no loop moves (a smaller one "
                            "only for a loop's tail block)")
            continue
        if sv.kind == "fixed-write":
            if old is not None:
                raise _fail(f"pypto.assemble at {sv.context['file']}:{sv.line} writes axis {sv.context['axis']} at a "
                            f"fixed offset ({sv.context['code']}: {old.value} → {sv.value}): where the result is "
                            "written, not a tile", "C/F-3",
                            "an assemble no loop moves keeps its offsets; a block's offset is moved by a loop's index "
                            "(i × B)")
            continue
        if sv.kind == "fixed-view":
            if old is not None:
                (o0, n0), (o1, n1) = old.value, sv.value
                moved = (f"offset {o0} → {o1}" if o0 != o1 else "") + (", " if o0 != o1 and n0 != n1 else "") + (
                    f"extent {sv.context['code']} {n0} → {n1}" if n0 != n1 else "")
                raise _fail(f"the view at {sv.context['file']}:{sv.line} spans axis {sv.context['axis']} from a fixed "
                            f"offset ({moved}): which part of the tensor the kernel computes, not a tile", "C/F-3",
                            "a view no loop moves keeps its offset and extent; a block is a view whose offset a "
                            "loop's index moves (i × B)")
            continue
        if sv.kind == "coverage":
            trips, block, axis = sv.value
            if trips * block < axis:
                raise _fail(f"the loop at {sv.context['file']}:{sv.line} runs {trips} iteration(s) of {block} along "
                            f"axis {sv.context['axis']} of {sv.context['tensor']} (length {axis}): only "
                            f"{trips * block} of {axis} would be computed, the rest would never be computed", "C/F-3",
                            "trips × block must cover the axis")
            report.checked.append(f"{sv.context['file']}:{sv.line} {trips} × {block} covers {axis}")
            continue
        if sv.kind == "valid_shape":
            shape, valid = sv.value
            short = [i for i, (a, b) in enumerate(zip(shape, valid)) if b < a]
            if short:
                raise _fail(f"valid_shape {valid} at {sv.context['file']}:{sv.line} is smaller than its view {shape} "
                            f"in dim {short[0]} on every block: that part would never be computed", "C/I-9",
                            "a constant valid_shape equal to the view (a smaller one only for the tail block, written "
                            "as an expression of the loop index)")
            continue
        x, k = sv.value
        if k < 1:
            raise _fail(f"{sv.context['code']} at {sv.context['file']}:{sv.line} divides by {k}", "C/F-3",
                        "a block size ≥ 1")
        if k > x:
            raise _fail(f"{sv.context['code']} at {sv.context['file']}:{sv.line}: block {k} exceeds the axis length {x}",
                        "C/F-1", "block ≤ the axis it blocks")
        if x % k:
            raise _fail(f"{sv.context['code']} at {sv.context['file']}:{sv.line}: {x} is not a multiple of {k}, so "
                        f"the last {x % k} rows would never be computed (floor division drops them)", "C/F-3",
                        "a block size that divides the axis (or a ceil-div loop with valid_shape for the tail)")
        report.checked.append(f"{sv.context['file']}:{sv.line} {sv.context['code']} = {x // k} iterations")
    return report


def reduced_axes(reductions: list[roles.Reduction], rank: int) -> list[int]:
    """The axes of a rank-``rank`` tile that the file's reductions sum over, counted from 0 (a vector tile keeps
    them whole)."""
    return sorted({a + rank if a < 0 else a for r in reductions for a in r.axes if -rank <= a < rank})


def describe_legal(knob: Any, program: roles.Program, sources: dict[str, str]) -> str:
    """The legal values of ``knob`` for THIS operator's shapes and dtypes, in words (list_knobs).

    Block sizes: the divisors of every axis they divide (floor division would drop the remainder); vector tiles:
    the tensor dims, the reduced axis that must stay whole, the unified-buffer budget in elements. Empty when
    nothing operator-specific is known (the generic ``legal`` text then stands)."""
    parts: list[str] = []
    if knob.kind in ("tile_constant", "local_constant") and isinstance(knob.value, int):
        axes = set()
        for sv in loop_values(sources, program).values():
            code = sv.context.get("code", "")
            # only sites whose dividend is known (a "floordiv-unknown" site has no axis to list divisors of)
            if sv.kind == "floordiv" and code.rstrip().endswith(f"// {knob.name}"):
                axes.add(sv.value[0])
        for x in sorted(axes):
            divisors = [d for d in range(1, x + 1) if x % d == 0]
            parts.append(f"divides {x}: one of {divisors}")
    if knob.kind == "vec_tile":
        shapes = [s for s in knob.context.get("tensor_shapes", []) if all(isinstance(d, int) for d in s)]
        value = knob.value if isinstance(knob.value, list) else None
        rank = len(value) if value else (len(shapes[0]) if shapes else 0)
        same = [s for s in shapes if len(s) == rank]
        if same:
            dims = [max(s[i] for s in same) for i in range(rank)]
            parts.append(f"dim i ≤ {dims}")
            reduced = reduced_axes(program.reductions.get(knob.file, []), rank)
            if reduced:
                parts.append("whole along the reduced axis " + ", ".join(f"{a} (= {dims[a]})" for a in reduced))
        elem = max((DTYPE_BYTES.get(d, 0) for d in knob.context.get("dtypes", [])), default=0)
        ub_elem = ub_dtypes_of(knob.context)[1]
        if elem:
            parts.append(f"at most {UB_TILE_MAX_BYTES // ub_elem} elements ({UB_TILE_MAX_BYTES // 1024} KB of "
                         f"{ub_elem}-byte data"
                         + (" after the kernel's casts" if ub_elem > elem else "")
                         + f"); the last dim a multiple of {TAIL_MIN_BYTES // elem}")
    return "; ".join(parts)
