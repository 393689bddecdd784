"""What a changed knob gives at a tile call that ran: the reading the admission gate and the search share.

A tile call's arguments are an expression (``*tile_list``, ``[t[0], t[0]]`` with ``t = config.cube_tile_shape``);
the changed knob is a literal somewhere upstream (a comprehension element, a config field, a name bound to a
literal: tools/patching/flows.py and roles.py). :func:`derive` evaluates the call's arguments with the knob at its
old value first — that must give exactly what the run recorded there, or the server's reading of the flow is wrong
and nothing is derived — and then at the new value. The evaluator knows literals, the names the role analysis
found literal, the names the function binds (each binding a branch may take is tried), tuple unpacking,
subscripts and slices, ``tuple()`` / ``list()``, integer arithmetic, and ``[v for _ in …]`` (v, as often as the
run shows the call took).
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from typing import Any

from . import roles
from .extract import Site
from pypto_tune.tools.code import pysource


class Repeat:
    """The value of ``[v for _ in …]``: v, as often as the call it reaches takes (the run says how often)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Repeat) and other.value == self.value


class NoValue(Exception):
    """The value at a tile call cannot be derived (the message says why)."""


class _Deriver:
    """Evaluates a tile call's arguments with a tiling source set to a given value (see :func:`derive`)."""

    def __init__(self, files: dict[str, str], program: roles.Program, source: Any, value: Any,
                 choice: dict[str, int] | None = None, file: str | None = None) -> None:
        self.files = files
        self.program = program
        self.source = source  # flows.Source
        self.value = value
        self.choice = choice or {}  # name bound several times → which binding the run took
        self.file = file  # the file of the call being derived: where a helper it calls is looked up
        self.siblings: dict[str, Any] = {}
        if source.kind in ("field", "attribute"):  # read with the source (flows.py), not by parsing the file again
            self.siblings = {k: _listify(v) for k, v in source.siblings.items()}
        self.aliases = set(getattr(source, "aliases", None) or ()) | {getattr(source, "owner", None)} - {None}

    def eval(self, node: ast.AST, env: dict[str, Any], locals_: dict[str, list[ast.AST]], depth: int = 0) -> Any:
        if depth > 20:
            raise NoValue("too deep")
        if isinstance(node, _Rebound):  # an inlined helper's return expression, under its own parameters
            return self.eval(node.expr, env, node.bound, depth + 1)
        ev = functools.partial(self.eval, env=env, locals_=locals_, depth=depth + 1)
        src = self.source
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and src.kind == "comprehension" \
                and node.elt.lineno == src.line and node.elt.col_offset == src.col:
            return Repeat(self.value)
        if isinstance(node, ast.Attribute) and src.kind in ("field", "attribute"):
            if node.attr == src.field:
                return self.value
            if node.attr in self.siblings:
                return self.siblings[node.attr]
        if isinstance(node, ast.Constant) and src.kind == "element" and (node.lineno, node.col_offset) == \
                (src.line, src.col):
            return self.value
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if src.kind == "name" and node.id == src.label:
                return self.value
            if node.id in locals_:
                bound = locals_[node.id]
                value_node = bound[self.choice.get(node.id, 0)] if len(bound) > 1 else bound[0]
                if value_node is _OPAQUE:
                    raise NoValue(f"{node.id} is rebound in a loop")
                if value_node is _PARAM:
                    raise NoValue(f"{node.id} is a parameter")
                return ev(value_node)
            if node.id in env:
                return env[node.id]
            raise NoValue(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            out: list[Any] = []
            for el in node.elts:
                if isinstance(el, ast.Starred):
                    v = ev(el.value)
                    if isinstance(v, Repeat):
                        raise NoValue("repeat inside a list")
                    out.extend(list(v))
                else:
                    out.append(ev(el))
            return out
        if isinstance(node, ast.Subscript) and src.kind in ("entry", "element") and isinstance(node.value, ast.Name) \
                and node.value.id in self.aliases and isinstance(node.slice, ast.Constant):
            # the dict, read where it was bound or through a parameter it was passed to (flows._entry_uses)
            if node.slice.value == src.field:
                return self.value
            if node.slice.value in src.siblings:
                return _listify(src.siblings[node.slice.value])
        if isinstance(node, _Value):
            return node.v
        if isinstance(node, ast.Subscript):
            base = ev(node.value)
            if isinstance(base, Repeat):
                if isinstance(node.slice, ast.Slice):
                    raise NoValue("slice of a repeat")
                return base.value
            idx = ev(node.slice) if not isinstance(node.slice, ast.Slice) else slice(
                *(ev(p) if p is not None else None for p in (node.slice.lower, node.slice.upper, node.slice.step)))
            try:
                return list(base[idx]) if isinstance(idx, slice) else base[idx]
            except (TypeError, IndexError, KeyError):
                raise NoValue("subscript") from None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = ev(node.left), ev(node.right)
            if not (isinstance(a, int) and isinstance(b, int)):
                raise NoValue("binop")
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b,
                    ast.FloorDiv: a // b if b else 0}[type(node.op)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("tuple", "list") \
                and len(node.args) == 1:
            return ev(node.args[0])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return ev(self._inlined(node, ev))
        raise NoValue(type(node).__name__)

    def _inlined(self, call: ast.Call, ev: Any) -> ast.AST:
        """A call of a helper of the same file whose body is one ``return <expr>`` (``pool_vec_tile(tiling)``):
        the expression, its parameters bound to the arguments' values (a parameter whose argument has no value
        here — the tiling dict itself, read through its alias — stays unknown). Anything else: no value."""
        fn = _helper(self.files.get(self.file or "", ""), call.func.id)  # type: ignore[attr-defined]
        if fn is None:
            raise NoValue(f"call of {call.func.id}()")  # type: ignore[attr-defined]
        body = [st for st in fn.body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            raise NoValue(f"{fn.name}() is more than one return")
        names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(names) or fn.args.vararg:
            raise NoValue(f"arguments of {fn.name}()")
        bound: dict[str, list[ast.AST]] = {n: [_PARAM] for n in names}
        for name, arg in zip(names, call.args):
            try:
                bound[name] = [_Value(ev(arg))]
            except NoValue:
                pass
        return _Rebound(body[0].value, bound)

    def call_value(self, call: ast.Call, kind: str, env: dict[str, Any], locals_: dict[str, list[ast.AST]],
                   ran: Any) -> Any:
        args: list[Any] = []
        repeats: list[int] = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value, env, locals_)
                if isinstance(v, Repeat):
                    repeats.append(len(args))
                    args.append(v)
                else:
                    args.extend(list(v))
            else:
                args.append(self.eval(a, env, locals_))
        if repeats:
            # a *[v for _ in range(n)] fills what the run shows the call had: only one, and n from the run
            if len(repeats) > 1 or not isinstance(ran, list):
                raise NoValue("repeat length")
            n = len(ran) - (len(args) - 1)
            if n < 0:
                raise NoValue("repeat length")
            i = repeats[0]
            args = args[:i] + [args[i].value] * n + args[i + 1:]
        kwargs = {kw.arg: self.eval(kw.value, env, locals_) for kw in call.keywords if kw.arg}
        if kind == "vec_tile":
            return list(args[0]) if len(args) == 1 and isinstance(args[0], list) else args
        out = dict(zip(("m", "k", "n", "enable_split_k"), args))
        out.update({k: v for k, v in kwargs.items() if k in ("m", "k", "n", "enable_split_k")})
        return out


def _listify(v: Any) -> Any:
    return [_listify(x) for x in v] if isinstance(v, (tuple, list)) else v


_OPAQUE = ast.Constant(value=None)  # a binding the deriver cannot follow (loop target, augmented assignment)


class _Value(ast.expr):
    """A value already computed (an inlined helper's argument)."""

    def __init__(self, v: Any) -> None:
        super().__init__()
        self.v = v


class _Rebound(ast.expr):
    """An expression to evaluate under other bindings (an inlined helper's return value under its parameters)."""

    def __init__(self, expr: ast.AST, bound: dict[str, list[ast.AST]]) -> None:
        super().__init__()
        self.expr, self.bound = expr, bound


def _helper(text: str, name: str) -> ast.FunctionDef | None:
    """The one function of that name in the file (None: none, or several — which one runs is not known here)."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return None
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return found[0] if len(found) == 1 else None
_PARAM = ast.Constant(value=None)  # a function's parameter: its value is the caller's, unknown here


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, without the bodies of the functions and classes defined inside it (a
    nested function's parameters and bindings are its own; their names shadow the outer ones only inside it)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


def _assignments(fn: ast.AST, *, own_only: bool = False) -> dict[str, list[ast.AST]]:
    """Every value a name is bound to in a function body (``t = config.cube_tile_shape``; ``a, b = cfg.shape``
    binds ``a`` to ``cfg.shape[0]``); a branch may bind it twice (``if …: tiles = […] else: tiles = [4096]``).
    ``own_only``: not the bindings of functions defined inside it (their names are theirs, not its)."""
    out: dict[str, list[ast.AST]] = {}
    for n in (_own_nodes(fn) if own_only else ast.walk(fn)):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if isinstance(t, ast.Name):
                out.setdefault(t.id, []).append(n.value)
            elif isinstance(t, (ast.Tuple, ast.List)):
                for i, el in enumerate(t.elts):
                    if isinstance(el, ast.Name):
                        out.setdefault(el.id, []).append(
                            ast.Subscript(value=n.value, slice=ast.Constant(value=i), ctx=ast.Load()))
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr)):
            t = getattr(n, "target", None)
            if isinstance(t, ast.Name):
                out.setdefault(t.id, []).append(_OPAQUE)
    return out


def _call_and_function(text: str, line: int, callee: str) -> tuple[ast.Call | None, list[ast.AST], str]:
    """The tile call at ``line``, the functions around it (innermost first: a jit kernel defined inside a builder
    sees the builder's names as a closure) and its scope."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return None, [], roles.MODULE
    found: list[tuple[ast.Call, list[ast.AST], str]] = []

    def visit(node: ast.AST, fns: list[ast.AST], scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [child, *fns], child.name if scope == roles.MODULE else f"{scope}.{child.name}")
                continue
            if isinstance(child, ast.Call) and child.lineno == line and \
                    roles.dotted(child.func).rsplit(".", 1)[-1] == callee:
                found.append((child, fns, scope))
            visit(child, fns, scope)

    visit(tree, [], roles.MODULE)
    return found[0] if found else (None, [], roles.MODULE)


def _visible_assignments(fns: list[ast.AST]) -> dict[str, list[ast.AST]]:
    """The bindings the call's function sees: its own, then each enclosing function's for names it does not bind
    itself (Python's closure rule). A kernel defined inside ``build_linear_bias`` reads ``out_dim`` from
    ``in_dim, out_dim = IN_DIM, OUT_DIM`` in the builder: before 2026-12-05 that name was unknown here, so no
    change of the tiling config's other field could be derived and the gate refused every one."""
    seen: dict[str, list[ast.AST]] = {}
    for fn in fns:
        # a parameter is a binding too: it hides an outer name of the same spelling, and its value is the caller's
        a = fn.args  # type: ignore[attr-defined]
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]:
            seen.setdefault(arg.arg, [_PARAM])
        for name, bound in _assignments(fn, own_only=True).items():
            seen.setdefault(name, bound)
    return seen


def derive(files: dict[str, str], program: roles.Program, source: Any, site: Site, old: Any, new: Any,
           ran: Any) -> Any:
    """What the tile call at ``site`` gets when ``source`` changes from ``old`` to ``new``.

    The call's arguments are evaluated with the source at ``old`` first: that must give exactly ``ran`` (the value
    the run recorded), or the server's model of how the value flows is wrong and nothing is derived (raises
    ``NoValue``). Then with ``new``."""
    callee = "set_vec_tile_shapes" if site.knob.kind == "vec_tile" else "set_cube_tile_shapes"
    call, fns, scope = _call_and_function(files.get(site.file, ""), site.knob.line, callee)
    if call is None:
        raise NoValue("call not found")
    env = program.env(site.file, scope)
    locals_ = _visible_assignments(fns)
    several = sorted(n for n, b in locals_.items() if len(b) > 1)[:4]
    last: NoValue | None = None
    for picks in itertools.product(*(range(len(locals_[n])) for n in several)):
        choice = dict(zip(several, picks))
        try:
            before = _Deriver(files, program, source, old, choice, site.file).call_value(call, site.knob.kind, env,
                                                                                      locals_, ran)
        except NoValue as exc:
            last = exc
            continue
        if _norm(before) != _norm(ran):
            last = NoValue(f"the server's reading gives {before!r} where the run had {ran!r}")
            continue
        return _Deriver(files, program, source, new, choice, site.file).call_value(call, site.knob.kind, env,
                                                                                   locals_, ran)
    raise last or NoValue("no reading reproduces what ran")


def _norm(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items() if not (k == "enable_split_k" and x is False)}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


@dataclass
class _NameFeed:
    """A name bound to a literal (roles.Binding) seen as a source of the tile calls it feeds."""

    label: str
    consumer_sites: set[tuple[str, str, int]]
    kind: str = "name"
    field: str | None = None
    line: int = 0
    col: int = 0


def source_of(program: roles.Program, site: Site) -> Any:
    """The flows.Source behind a ``tile_source`` knob site (matched by file and position)."""
    at = site.knob.context.get("at") or [site.knob.line, -1]
    return next((s for s in program.sources if s.file == site.file and [s.line, s.col] == list(at)), None)


def feeder(program: roles.Program, site: Site | None) -> Any:
    """The changed knob as a source of tile calls: a tiling source, a name bound to a literal, or None."""
    if site is None:
        return None
    k = site.knob
    if site.extra.get("source"):
        return source_of(program, site)
    if site.extra.get("binding"):
        b = program.binding(k.file, k.function or roles.MODULE, k.name)
        return _NameFeed(k.name, set(b.consumer_sites)) if b is not None else None
    return None
