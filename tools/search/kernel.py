"""A static picture of each jit kernel: its loops, the block of data one loop iteration works on, its tiles.

The ranking needs to know what a knob change does to the work of one task *before* anything runs: a vector tile
larger than the loop's block changes nothing (the tile is clipped to the data it tiles), a block size sets the
loop's trip count, and the trip count decides how many iterations can run side by side on the vector cores. So the
kernel is read once (``ast``), and :meth:`KernelModel.features` evaluates it under a trial value of one knob —
a name's value (``ROWS_PER_BLOCK = 32``) or a call site's value (``set_vec_tile_shapes(16, 1024)``) — with the
literal names the role analysis found visible in each scope (``tools/patching/roles.py``).

Read-only over the sources; nothing here decides legality (the admission path does). What cannot be evaluated
(a runtime shape, a factory parameter) is None, and the ranking then says it could not reason about it.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

from pypto_tune.tools.patching import effective, roles
from pypto_tune.tools.patching.models import DTYPE_BYTES
from pypto_tune.tools.code import pysource

LOOP_CALLS = {"loop", "loop_unroll"}


def _dotted(node: ast.AST) -> str:
    return roles.dotted(node)


def _callee(node: ast.Call) -> str:
    """Last part of the called name: 'view' for pypto.view, 'set_vec_tile_shapes', ..."""
    d = _dotted(node.func)
    return d.rsplit(".", 1)[-1] if d else ""


def _eval(node: ast.AST | None, env: dict[str, Any]) -> Any:
    if node is None:
        return None
    try:
        return effective.evaluate(node, env)
    except (effective._Unknown, ArithmeticError, LookupError, TypeError, ValueError, RecursionError):
        return None  # a value that depends on what only the run knows: unknown, never guessed


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _ints(v: Any) -> list[int | None] | None:
    if isinstance(v, (list, tuple)):
        return [_int(x) for x in v]
    return None


@dataclass
class _Tile:
    line: int
    kind: str  # "vec" / "cube"
    node: ast.Call


@dataclass
class _Loop:
    line: int
    node: ast.For
    depth: int
    var_names: list[str]


@dataclass
class _Kernel:
    file: str
    scope: str
    node: ast.FunctionDef
    params: dict[str, tuple[ast.AST | None, str | None]] = field(default_factory=dict)  # name -> (dims node, dtype)
    loops: list[_Loop] = field(default_factory=list)
    tiles: list[_Tile] = field(default_factory=list)
    matmuls: list[ast.Call] = field(default_factory=list)
    views: list[tuple[ast.AST, list[str], ast.stmt | None]] = field(default_factory=list)  # (shape/slice node, loop vars, stmt)
    assigns: list[tuple[str, ast.AST, int]] = field(default_factory=list)  # name = expr inside loops, in order


class KernelModel:
    """The jit kernels of a set of operator files, ready to be evaluated under trial knob values."""

    def __init__(self, sources: dict[str, str], context: dict[str, str] | None = None) -> None:
        self.sources = dict(sources)
        self.program = roles.analyze({**(context or {}), **sources})
        self.kernels: list[_Kernel] = []
        self.trees: dict[str, ast.Module] = {}
        for path, text in sorted({**(context or {}), **sources}.items()):
            try:
                self.trees[path] = pysource.parse(text.removeprefix("\ufeff"))
            except SyntaxError:
                continue
        for path in sorted(sources):
            if path in self.trees:
                self._find(path, self.trees[path], roles.MODULE)
        self._factory_envs: dict[tuple[str, str], dict[str, Any]] = {}

    # ------------------------------------------------------------------------------------------------- reading

    def _find(self, path: str, node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name if scope == roles.MODULE else f"{scope}.{child.name}"
                if any(self._is_jit(d) for d in child.decorator_list):
                    self.kernels.append(self._read(path, inner, child))  # type: ignore[arg-type]
                self._find(path, child, inner)
            elif isinstance(child, ast.ClassDef):
                continue
            else:
                self._find(path, child, scope)

    @staticmethod
    def _is_jit(dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        return _dotted(target).rsplit(".", 1)[-1] == "jit"

    def _read(self, path: str, scope: str, fn: ast.FunctionDef) -> _Kernel:
        k = _Kernel(path, scope, fn)
        for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            ann = a.annotation
            if isinstance(ann, ast.Call) and _dotted(ann.func).endswith("Tensor") and ann.args:
                dtype = _dotted(ann.args[1]).rsplit(".", 1)[-1] if len(ann.args) > 1 else None
                k.params[a.arg] = (ann.args[0], dtype or None)

        def walk(stmts: list[ast.stmt], depth: int, loop_vars: list[str]) -> None:
            for st in stmts:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if isinstance(st, ast.For) and isinstance(st.iter, ast.Call) and _callee(st.iter) in LOOP_CALLS:
                    names = [n.id for n in ast.walk(st.target) if isinstance(n, ast.Name)]
                    k.loops.append(_Loop(st.lineno, st, depth, names))
                    self._scan_expr(k, st.iter, loop_vars, st)
                    walk(st.body, depth + 1, loop_vars + names)
                    walk(st.orelse, depth, loop_vars)
                    continue
                if depth > 0 and isinstance(st, ast.Assign) and len(st.targets) == 1 \
                        and isinstance(st.targets[0], ast.Name):
                    k.assigns.append((st.targets[0].id, st.value, st.lineno))
                self._scan_expr(k, st, loop_vars, st, depth=depth)
                for block in ("body", "orelse", "finalbody"):
                    inner = getattr(st, block, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        walk(inner, depth, loop_vars)

        walk(fn.body, 0, [])
        return k

    def _scan_expr(self, k: _Kernel, node: ast.AST, loop_vars: list[str], st: ast.stmt | None, depth: int = 1) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) or (
                    isinstance(n, ast.stmt) and n is not node):
                continue  # nested statements are walked by _read with the right loop context
            if isinstance(n, ast.Call):
                c = _callee(n)
                if c == "set_vec_tile_shapes":
                    k.tiles.append(_Tile(n.lineno, "vec", n))
                elif c == "set_cube_tile_shapes":
                    k.tiles.append(_Tile(n.lineno, "cube", n))
                elif c == "matmul":
                    k.matmuls.append(n)
                elif c == "view" and len(n.args) >= 2 and loop_vars:
                    k.views.append((n.args[1], list(loop_vars), st))
            elif isinstance(n, ast.Subscript) and loop_vars and isinstance(n.value, ast.Name) \
                    and n.value.id in k.params:
                k.views.append((n, list(loop_vars), st))
            stack.extend(ast.iter_child_nodes(n))

    def cast_dtypes(self, file: str, scope: str) -> list[str]:
        """The dtypes the kernel's ``pypto.cast(x, pypto.DT_…)`` calls name as their target, read from its text."""
        k = next((k for k in self.kernels if k.file == file and k.scope == scope), None)
        out: set[str] = set()
        for n in ast.walk(k.node) if k is not None else []:
            if isinstance(n, ast.Call) and _callee(n) == "cast":
                arg = next((kw.value for kw in n.keywords if kw.arg == "dtype"), n.args[1] if len(n.args) > 1 else None)
                name = _dotted(arg).rsplit(".", 1)[-1] if arg is not None else ""
                if name in DTYPE_BYTES:
                    out.add(name)
        return sorted(out)

    # ---------------------------------------------------------------------------------------------- evaluating

    def features(self, env_override: dict[str, Any] | None = None,
                 site_override: dict[tuple[str, int], Any] | None = None,
                 scopes: set[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """Per kernel: loops and trip counts, the per-iteration block, the effective tiles and task counts.

        ``env_override``: a name's trial value (``{"ROWS_PER_BLOCK": 32}``), applied in every scope that sees the
        name. ``site_override``: a call site's trial value, keyed by (file, line) of the call: a vector tile as a
        list, a cube tile as ``{"m": [..], "k": [..], "n": [..]}`` (missing axes keep their current value).
        ``scopes``: apply the overrides only to these kernels, given as (file, scope).
        """
        out = []
        for k in self.kernels:
            env = {**self._factory_env(k), **self.program.env(k.file, k.scope)}
            if env_override and (scopes is None or (k.file, k.scope) in scopes):
                env.update(env_override)
            sites = site_override or {}
            if scopes is not None and (k.file, k.scope) not in scopes:
                sites = {}
            out.append(self._features(k, env, sites))
        return out

    def _features(self, k: _Kernel, env: dict[str, Any], sites: dict[tuple[str, int], Any]) -> dict[str, Any]:
        tensors = {name: (_ints(_eval(dims, env)), dtype) for name, (dims, dtype) in k.params.items()}
        elem = max((DTYPE_BYTES.get(d or "", 0) for _, d in tensors.values()), default=0) or 4
        trips: list[int | None] = []
        for lp in sorted(k.loops, key=lambda x: (x.depth, x.line)):
            trips.append(self._trip(lp, env))
        iterations = math.prod(trips) if trips and all(t is not None for t in trips) else None  # type: ignore[arg-type]
        # locals of the loop body, with every loop variable at 0: what one iteration's first instance looks like
        local = dict(env)
        for lp in k.loops:
            for v in lp.var_names:
                local[v] = 0
        for name, value, _ in k.assigns:
            v = _eval(value, local)
            if v is not None:
                local[name] = v
            else:
                local.pop(name, None)
        blocks = []
        for node, _, _ in k.views:
            shape = self._block_shape(node, local, tensors)
            if shape and any(x is not None for x in shape):
                blocks.append(shape)
        vec_tiles, cube, cube_line = [], None, None
        for t in k.tiles:
            key = (k.file, t.line)
            if t.kind == "vec":
                v = sites.get(key)
                if v is None:
                    v = self._call_values(t.node, env)
                vec_tiles.append((t.line, _ints(v)))
            else:
                cur = self._cube_value(t.node, env)
                ov = sites.get(key)
                if isinstance(ov, dict):
                    cur = {**(cur or {}), **{a: ov[a] for a in ("m", "k", "n") if a in ov}}
                cube, cube_line = cur, t.line
        feats: dict[str, Any] = {"scope": k.scope, "file": k.file, "trips": trips, "iterations": iterations,
                                 "elem_bytes": elem, "has_cube": bool(k.matmuls) or cube is not None,
                                 "tensor_dims": [d for d, _ in tensors.values()]}
        feats["vec"] = [self._vec_features(line, tile, blocks, tensors, elem) for line, tile in vec_tiles]
        if cube is not None or k.matmuls:
            feats["cube"] = self._cube_features(k, cube, local, tensors)
            feats["cube"]["line"] = cube_line
        return feats

    def _factory_env(self, k: _Kernel) -> dict[str, Any]:
        """Names of the function that builds the jit (PyPTO's example layout: ``build_softmax(shape, run_mode)``
        defines the kernel inside), when every call of that function in the workspace passes the same evaluable
        value: the kernel's tensor shapes are then known (``x: pypto.Tensor((batch, seq, dim), ...)``)."""
        if "." not in k.scope:
            return {}
        factory_scope = k.scope.rsplit(".", 1)[0]
        key = (k.file, factory_scope)
        if key in self._factory_envs:
            return self._factory_envs[key]
        env: dict[str, Any] = {}
        factory = self._function(k.file, factory_scope)
        if factory is not None and "." not in factory_scope:
            names = [a.arg for a in [*factory.args.posonlyargs, *factory.args.args]]
            seen: dict[str, list[Any]] = {}
            for path, tree in self.trees.items():
                for call, caller in self._calls_of(tree, factory.name):
                    if path != k.file and not self._imports_name(tree, factory.name):
                        continue
                    caller_env = self.program.env(path, caller)
                    for name, arg in zip(names, call.args):
                        seen.setdefault(name, []).append(_eval(arg, caller_env))
                    for kw in call.keywords:
                        if kw.arg in names:
                            seen.setdefault(kw.arg, []).append(_eval(kw.value, caller_env))
            for name, values in seen.items():
                if values and all(v is not None and v == values[0] for v in values):
                    env[name] = values[0]
            # straight-line assignments of the factory body (``batch, seq, dim = shape``)
            scope_env = {**self.program.env(k.file, factory_scope), **env}
            for st in factory.body:
                if isinstance(st, ast.Assign) and len(st.targets) == 1:
                    t, v = st.targets[0], _eval(st.value, scope_env)
                    if isinstance(t, ast.Name) and v is not None:
                        env[t.id] = scope_env[t.id] = v
                    elif isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (list, tuple)) \
                            and len(v) == len(t.elts) and all(isinstance(e, ast.Name) for e in t.elts):
                        for e, x in zip(t.elts, v):
                            env[e.id] = scope_env[e.id] = x  # type: ignore[attr-defined]
        self._factory_envs[key] = env
        return env

    def _function(self, file: str, scope: str) -> ast.FunctionDef | None:
        tree = self.trees.get(file)
        if tree is None:
            return None
        node: ast.AST = tree
        for part in scope.split("."):
            node = next((c for c in ast.iter_child_nodes(node)
                         if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)) and c.name == part), None)
            if node is None:
                return None
        return node  # type: ignore[return-value]

    @staticmethod
    def _calls_of(tree: ast.Module, name: str):
        """(call, caller scope) for every call ``name(...)`` in ``tree``."""
        def walk(node: ast.AST, scope: str):
            for c in ast.iter_child_nodes(node):
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield from walk(c, c.name if scope == roles.MODULE else f"{scope}.{c.name}")
                    continue
                if isinstance(c, ast.Call) and _dotted(c.func).rsplit(".", 1)[-1] == name:
                    yield c, scope
                yield from walk(c, scope)
        yield from walk(tree, roles.MODULE)

    @staticmethod
    def _imports_name(tree: ast.Module, name: str) -> bool:
        return any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name).split(".")[-1] == name or a.name == "*" for a in n.names) for n in ast.walk(tree)) \
            or any(isinstance(n, ast.Attribute) and n.attr == name for n in ast.walk(tree))

    def _trip(self, lp: _Loop, env: dict[str, Any]) -> int | None:
        pos = [a for a in lp.node.iter.args if not isinstance(a, ast.Starred)]  # type: ignore[attr-defined]
        vals = [_int(_eval(a, env)) for a in pos]
        if len(vals) == 1:
            start, stop, step = 0, vals[0], 1
        elif len(vals) in (2, 3):
            start, stop = vals[0], vals[1]
            step = vals[2] if len(vals) == 3 else 1
        else:
            return None
        if start is None or stop is None or not step:
            return None
        return max(0, -(-(stop - start) // step))

    def _block_shape(self, node: ast.AST, local: dict[str, Any], tensors: dict[str, Any]) -> list[int | None] | None:
        if isinstance(node, ast.Subscript):
            dims = tensors.get(node.value.id, (None, None))[0]  # type: ignore[attr-defined]
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            shape: list[int | None] = []
            for i, p in enumerate(parts):
                full = dims[i] if dims and i < len(dims) else None
                if isinstance(p, ast.Slice):
                    lo = _int(_eval(p.lower, local)) if p.lower is not None else 0
                    hi = _int(_eval(p.upper, local)) if p.upper is not None else full
                    shape.append(hi - lo if lo is not None and hi is not None else None)
                else:
                    return None  # an index drops a dimension: not a block of the same rank
            if dims and len(shape) < len(dims):
                shape.extend(dims[len(shape):])
            return shape
        return _ints(_eval(node, local))

    @staticmethod
    def _call_values(call: ast.Call, env: dict[str, Any]) -> Any:
        if len(call.args) == 1 and isinstance(call.args[0], (ast.List, ast.Tuple)):
            return _eval(call.args[0], env)
        out: list[Any] = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                v = _eval(a.value, env)
                if not isinstance(v, (list, tuple)):
                    return None
                out.extend(v)
            else:
                out.append(_eval(a, env))
        return out

    @staticmethod
    def _cube_value(call: ast.Call, env: dict[str, Any]) -> dict[str, Any] | None:
        names = ("m", "k", "n")
        slots: dict[str, ast.AST] = {}
        for name, a in zip(names, [a for a in call.args if not isinstance(a, ast.Starred)]):
            slots[name] = a
        for kw in call.keywords:
            if kw.arg in names:
                slots[kw.arg] = kw.value
        out = {name: _ints(_eval(node, env)) for name, node in slots.items()}
        return out if all(out.get(a) for a in names) else None

    @staticmethod
    def _vec_features(line: int, tile: list[int | None] | None, blocks: list[list[int | None]],
                      tensors: dict[str, Any], elem: int, extent: list[int | None] | None = None) -> dict[str, Any]:
        f: dict[str, Any] = {"line": line, "tile": tile}
        if not tile or any(x is None for x in tile):
            return f
        same_rank = [b for b in blocks if len(b) == len(tile)]
        if same_rank:
            # the largest block of the tile's rank: what one iteration tiles (its other views are operands of it),
            # narrowed by what the tile's own operations took where the run recorded it
            block = max(same_rank, key=lambda b: math.prod(x or 1 for x in b))
            if extent is not None and len(extent) == len(tile):
                block = [e if e is not None and (b is None or e < b) else b for b, e in zip(block, extent)]
        elif extent is not None and len(extent) == len(tile):
            # the largest tensor the tile's operations worked on, as the run recorded it (the kernel's inputs are a
            # looser bound: PyPTO's FFN tiles a [16, 1024] matmul output while its weights are [1024, 128])
            block = list(extent)
        else:
            dims = [d for d, _ in tensors.values() if d and len(d) == len(tile)]
            block = [max((d[i] for d in dims if d[i] is not None), default=None) for i in range(len(tile))] \
                if dims else None
        f["block"] = block
        eff = [min(t, b) if b is not None else t for t, b in zip(tile, block or [None] * len(tile))]
        f["eff_tile"] = eff
        f["tile_bytes"] = math.prod(tile) * elem  # type: ignore[arg-type]
        f["eff_bytes"] = math.prod(eff) * elem  # type: ignore[arg-type]
        if block is not None and all(b is not None for b in block):
            f["tasks_per_block"] = math.prod(-(-b // t) for t, b in zip(tile, block))  # type: ignore[operator]
            f["covers_block"] = all(t >= b for t, b in zip(tile, block))  # type: ignore[operator]
        return f

    def _cube_features(self, k: _Kernel, cube: dict[str, Any] | None, local: dict[str, Any],
                       tensors: dict[str, Any]) -> dict[str, Any]:
        f: dict[str, Any] = {"tile": cube}
        mkn = self._matmul_dims(k, local, tensors)
        f["mkn"] = mkn
        if cube and mkn and all(x is not None for x in mkn):
            M, _, N = mkn
            m, n = cube["m"], cube["n"]
            if m and n and m[-1] and n[-1]:
                f["tasks_per_iter"] = -(-M // min(m[-1], M)) * -(-N // min(n[-1], N))
                # the accumulator of one L0 tile is FP32: mL0 x nL0 x 4 bytes (L0C, see priors.json)
                f["l0c_bytes"] = m[0] * n[0] * 4
                f["eff_out_elems"] = min(m[0], M) * min(n[0], N)
        return f

    def _matmul_dims(self, k: _Kernel, local: dict[str, Any], tensors: dict[str, Any]) -> tuple | None:
        if not k.matmuls:
            return None
        call = k.matmuls[0]
        if len(call.args) < 2:
            return None
        shapes = []
        for arg in call.args[:2]:
            shapes.append(self._operand_shape(k, arg, local, tensors))
        a, b = shapes
        if not a or not b or len(a) < 2 or len(b) < 2:
            return None
        kw = {x.arg: _eval(x.value, local) for x in call.keywords}
        M, Ka = (a[-1], a[-2]) if kw.get("a_trans") else (a[-2], a[-1])
        Kb, N = (b[-1], b[-2]) if kw.get("b_trans") else (b[-2], b[-1])
        return (M, Ka if Ka is not None else Kb, N)

    def _operand_shape(self, k: _Kernel, arg: ast.AST, local: dict[str, Any], tensors: dict[str, Any]):
        if isinstance(arg, ast.Name):
            if arg.id in tensors:
                return tensors[arg.id][0]
            for name, value, _ in k.assigns:
                if name == arg.id and isinstance(value, ast.Call) and _callee(value) == "view" and len(value.args) >= 2:
                    return _ints(_eval(value.args[1], local))
                if name == arg.id and isinstance(value, ast.Subscript):
                    return self._block_shape(value, local, tensors)
        if isinstance(arg, ast.Call) and _callee(arg) == "view" and len(arg.args) >= 2:
            return _ints(_eval(arg.args[1], local))
        if isinstance(arg, ast.Subscript):
            return self._block_shape(arg, local, tensors)
        return None
