"""Which dimensions of a view a block size sets, read from the code that builds the view.

The probe records a view's shape, not where each extent came from. A block size of 1 (``tile_b = 1``, one batch row
per iteration) and a singleton axis of the tensor (PyPTO's examples carry ``(32, 32, 1, 256)`` shapes) look the same
in ``[1, 32, 1, 256]``: a trial block of 8 must widen dim 0 only. The slice or ``view`` call on the view's line says
which: a dimension whose bound or extent is computed from the block (directly, or through a local the kernel function
computes from it: ``b_offset = idx * tile_b``) is the block's. Pure: it reads text.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable

from pypto_tune.tools.code import pysource


@functools.lru_cache(maxsize=64)
def _tree(text: str) -> ast.AST | None:
    try:
        return pysource.parse(text)
    except SyntaxError:
        return None


def _enclosing_function(tree: ast.AST, line: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is tree or node.lineno >= best.lineno:  # type: ignore[attr-defined]
                best = node
    return best


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any((isinstance(n, ast.Name) and n.id in names) or (isinstance(n, ast.Attribute) and n.attr in names)
               for n in ast.walk(node))


def _tainted(scope: ast.AST, names: set[str]) -> set[str]:
    """``names`` and every local of ``scope`` assigned from an expression over them (to a fixpoint). A loop variable
    is not: ``for idx in loop(n // block)`` counts iterations, it is no extent."""
    out = set(names)
    assigns = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    changed = True
    while changed:
        changed = False
        for a in assigns:
            if a.value is None or not _mentions(a.value, out):
                continue
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id not in out:
                        out.add(n.id)
                        changed = True
    return out


def _subscript_dims(node: ast.Subscript, rank: int, names: set[str]) -> set[int] | None:
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if not any(isinstance(p, ast.Slice) for p in parts):
        return None
    ellipsis = [i for i, p in enumerate(parts) if isinstance(p, ast.Constant) and p.value is Ellipsis]
    if len(ellipsis) > 1 or any(not isinstance(p, ast.Slice) for i, p in enumerate(parts) if i not in ellipsis):
        return None  # an index drops a dimension: the positions no longer match the view's
    cut = ellipsis[0] if ellipsis else len(parts)
    out = set()
    for i, p in enumerate(parts):
        if i == cut:
            continue
        dim = i if i < cut else rank - (len(parts) - i)
        if 0 <= dim < rank and _mentions(p, names):
            out.add(dim)
    return out


def _view_call_dims(node: ast.Call, rank: int, names: set[str]) -> set[int] | None:
    """``pypto.view(t, shape, offsets)`` or ``t.view(shape, offsets)``: the shape is the first list argument."""
    shape = next((kw.value for kw in node.keywords if kw.arg == "shape"), None)
    if shape is None:
        shape = next((a for a in node.args if isinstance(a, (ast.List, ast.Tuple))), None)
    if not isinstance(shape, (ast.List, ast.Tuple)) or len(shape.elts) != rank:
        return None
    return {i for i, e in enumerate(shape.elts) if _mentions(e, names)}


def fed_dims(text: str, line: int, rank: int, block_names: Iterable[str]) -> frozenset[int] | None:
    """The dimensions of the view built at ``line`` (a slice, or a ``view`` call's shape) whose extent the block
    sets; None when the line holds no view this reader can map onto ``rank`` dimensions."""
    return _fed_dims(text, line, rank, frozenset(block_names))


@functools.lru_cache(maxsize=256)
def _fed_dims(text: str, line: int, rank: int, block_names: frozenset[str]) -> frozenset[int] | None:
    # asked for every trial value of a block (the run picture under each candidate, the pair planner's grid): the
    # answer depends only on the text and the question
    tree = _tree(text)
    if tree is None or not block_names:
        return None
    names = _tainted(_enclosing_function(tree, line), block_names)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != line:
            continue
        if isinstance(node, ast.Subscript):
            dims = _subscript_dims(node, rank, names)
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) and \
                (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "view":
            dims = _view_call_dims(node, rank, names)
        else:
            continue
        if dims:
            return frozenset(dims)
    return None


__all__ = ["fed_dims"]
