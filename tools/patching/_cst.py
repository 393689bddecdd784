"""libcst helpers shared by extraction and editing: literal values, rendering, minimal replacement, list surgery.

Why libcst and not ``ast``: libcst keeps every byte (comments, tabs, CRLF, odd spacing), so an untouched node
prints exactly as it was read and an edit changes only the node it replaces. All edits here build new nodes from
old ones with ``with_changes`` so that the whitespace around them survives.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from typing import Any, Callable, Iterator, Sequence

import libcst as cst

from ..errors import InputError
from .models import EXPR_KEY
from pypto_tune.tools.code import pysource

# ----------------------------------------------------------------------------------------------------- values


def expr(code: str) -> dict[str, str]:
    return {EXPR_KEY: code}


def is_expr(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and EXPR_KEY in value


def literal(node: cst.BaseExpression, module: cst.Module) -> Any:
    """The JSON-able value of ``node``: a Python literal where it is one, ``{"$expr": code}`` where it is not.

    Lists/tuples/dicts are evaluated element by element, so ``[1, TILE_B, 256]`` becomes
    ``[1, {"$expr": "TILE_B"}, 256]`` and a change of one element stays visible as a change of that element.
    ``dict(a=1)`` calls are read like ``{"a": 1}`` because the jit option dicts are written both ways.
    """
    if isinstance(node, cst.Integer):
        return int(node.value.replace("_", ""), 0)
    if isinstance(node, cst.Float):
        return float(node.value.replace("_", ""))
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        if isinstance(value, str):
            return value
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal(node.expression, module)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    if isinstance(node, (cst.List, cst.Tuple)):
        if all(isinstance(el, cst.Element) for el in node.elements):
            # JSON has no tuples: both become lists; the editor keeps the node's own brackets.
            return [literal(el.value, module) for el in node.elements]
    if isinstance(node, cst.Dict):
        out: dict[Any, Any] = {}
        for el in node.elements:
            if not isinstance(el, cst.DictElement):
                return expr(code_of(node, module))
            key = literal(el.key, module)
            if is_expr(key) or isinstance(key, (list, dict)):
                return expr(code_of(node, module))
            out[key] = literal(el.value, module)
        return out
    if is_dict_call(node):
        assert isinstance(node, cst.Call)
        return {arg.keyword.value: literal(arg.value, module) for arg in node.args if arg.keyword is not None}
    return expr(code_of(node, module))


def is_dict_call(node: cst.BaseExpression) -> bool:
    """``dict(k=v, ...)`` with keywords only (the form the option dicts use)."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "dict"
        and all(arg.keyword is not None and not arg.star for arg in node.args)
    )


def code_of(node: cst.CSTNode, module: cst.Module) -> str:
    return module.code_for_node(node).strip()


def canon(value: Any) -> Any:
    """A comparison key that tells ``True`` from ``1`` and ``1`` from ``1.0`` (Python's ``==`` does not)."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value)
    if isinstance(value, float):
        return ("f", value)
    if isinstance(value, (list, tuple)):
        return ("l", tuple(canon(v) for v in value))
    if isinstance(value, dict):
        if is_expr(value):
            return ("e", _expr_key(str(value[EXPR_KEY])))
        return ("d", tuple((canon(k), canon(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def _expr_key(code: str) -> str:
    """Layout-free form of an expression: spacing, line breaks, comments and redundant parentheses are not changes."""
    try:
        return ast.dump(pysource.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return " ".join(code.split())


def same(a: Any, b: Any) -> bool:
    return canon(a) == canon(b)


def render(value: Any, *, quote: str = '"') -> str:
    """Python source for a JSON-able value (inverse of :func:`literal`)."""
    if is_expr(value):
        return str(value[EXPR_KEY])
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        if quote == "'" and '"' not in value and "'" not in value:
            text = "'" + text[1:-1] + "'"
        return text
    if isinstance(value, tuple):
        inner = ", ".join(render(v, quote=quote) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(render(v, quote=quote) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render(k, quote=quote)}: {render(v, quote=quote)}" for k, v in value.items()) + "}"
    raise InputError(f"cannot write a value of type {type(value).__name__} into Python source: {value!r}")


def parse_value(value: Any, *, quote: str = '"') -> cst.BaseExpression:
    code = render(value, quote=quote)
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError as exc:
        raise InputError(f"value {code!r} is not a Python expression: {exc}") from exc


def quote_of(node: cst.CSTNode) -> str:
    """Quote style used in a node, so new strings look like their neighbours."""
    for child in _walk(node):
        if isinstance(child, cst.SimpleString):
            return "'" if child.value.lstrip("rbuRBU").startswith("'") else '"'
    return '"'


def kids(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The node's children, read from its dataclass fields, in field order: the nodes ``children`` gives, though not
    always in source order (an ``Arg``'s value comes before its keyword, a function's body before its decorators),
    so only for walks that collect. libcst's ``children`` builds its list by running a visitor over the node, which
    made the tree walks most of a large file's parse (an upstream example of 1300 lines)."""
    for name in _node_fields(type(node)):
        v = getattr(node, name)
        t = type(v)
        if t is tuple or t is list:
            for x in v:
                if _is_node(type(x)):
                    yield x
        elif _is_node(t):
            yield v


@functools.cache
def _node_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _is_node(cls: type) -> bool:  # isinstance against libcst's abstract base is most of a walk's time
    return issubclass(cls, cst.CSTNode)


def nodes_under(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node under it, each before its children (in field order, see ``kids``)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(tuple(kids(n))))


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)


# ------------------------------------------------------------------------------------------- minimal replacement


def replace_minimal(node: cst.BaseExpression, new_value: Any, module: cst.Module) -> cst.BaseExpression:
    """Return ``node`` rewritten to hold ``new_value``, touching as little as possible.

    Equal sub-values keep their original nodes (and so their comments and spacing); lists of the same length and
    dicts are edited element by element; anything else is replaced by freshly rendered code.
    """
    old_value = literal(node, module)
    if same(old_value, new_value):
        return node
    quote = quote_of(node)
    if isinstance(node, (cst.List, cst.Tuple)) and isinstance(new_value, (list, tuple)) and not is_expr(new_value):
        elements = list(node.elements)
        if len(elements) == len(new_value) and all(isinstance(el, cst.Element) for el in elements):
            new_elements = [
                el.with_changes(value=replace_minimal(el.value, v, module)) for el, v in zip(elements, new_value)
            ]
            return node.with_changes(elements=new_elements)
    if isinstance(node, cst.Dict) and isinstance(new_value, dict) and not is_expr(new_value):
        if all(isinstance(el, cst.DictElement) for el in node.elements):
            return _edit_dict(node, new_value, module, quote)
    if is_dict_call(node) and isinstance(new_value, dict) and all(isinstance(k, str) for k in new_value):
        assert isinstance(node, cst.Call)
        return _edit_dict_call(node, new_value, module, quote)
    fresh = parse_value(new_value, quote=quote)
    # Keep the parentheses that wrapped the old expression (they may carry comments or line breaks).
    if getattr(node, "lpar", None) and hasattr(fresh, "lpar"):
        fresh = fresh.with_changes(lpar=node.lpar, rpar=node.rpar)
    return fresh


def _edit_dict(node: cst.Dict, new_value: dict, module: cst.Module, quote: str) -> cst.Dict:
    elements: list[cst.DictElement] = list(node.elements)  # type: ignore[arg-type]
    keyed = {canon(literal(el.key, module)): i for i, el in enumerate(elements)}
    wanted = {canon(k): (k, v) for k, v in new_value.items()}
    # 1. change values of keys kept, 2. remove keys dropped, 3. append keys added, in the order given.
    for ck, i in keyed.items():
        if ck in wanted:
            elements[i] = elements[i].with_changes(value=replace_minimal(elements[i].value, wanted[ck][1], module))
    node = node.with_changes(elements=elements)
    for ck, i in sorted(keyed.items(), key=lambda kv: -kv[1]):
        if ck not in wanted:
            node = dict_remove(node, i)
    for ck, (k, v) in wanted.items():
        if ck not in keyed:
            node = dict_append(node, cst.DictElement(key=parse_value(k, quote=quote), value=parse_value(v, quote=quote)))
    return node


def _edit_dict_call(node: cst.Call, new_value: dict, module: cst.Module, quote: str) -> cst.Call:
    args = list(node.args)
    keyed = {arg.keyword.value: i for i, arg in enumerate(args) if arg.keyword is not None}
    for k, i in keyed.items():
        if k in new_value:
            args[i] = args[i].with_changes(value=replace_minimal(args[i].value, new_value[k], module))
    for k, i in sorted(keyed.items(), key=lambda kv: -kv[1]):
        if k not in new_value:
            args = remove_arg(args, i)
    for k, v in new_value.items():
        if k not in keyed:
            args = append_arg(args, make_kwarg(k, parse_value(v, quote=quote)), first_ws=node.whitespace_before_args)
    return node.with_changes(args=args)


# ---------------------------------------------------------------------------------- list surgery, exact inverses
#
# append_* and remove_* of the last element are exact inverses: append moves the old last element's trailing comma
# and closing whitespace onto the new element and gives the old one a fresh separator; remove moves them back.
# That is what makes "toggle runtime debug on, then off" give back the original bytes.


def _pw(ws: Any) -> cst.ParenthesizedWhitespace | None:
    return ws if isinstance(ws, cst.ParenthesizedWhitespace) else None


def _comma_pw(item: Any) -> cst.ParenthesizedWhitespace | None:
    comma = getattr(item, "comma", None)
    return _pw(comma.whitespace_after) if isinstance(comma, cst.Comma) else None


def _clean_break(ws: cst.ParenthesizedWhitespace, last_line: cst.SimpleWhitespace) -> cst.ParenthesizedWhitespace:
    """A bare line break (no comment, no blank lines) followed by ``last_line``."""
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), empty_lines=[], indent=ws.indent, last_line=last_line
    )


def _item_indent(items: Sequence[Any], first_ws: Any) -> cst.SimpleWhitespace | None:
    """Indent of the items when the container is laid out one item per line, else None."""
    if len(items) >= 2 and _comma_pw(items[-2]) is not None:
        return _comma_pw(items[-2]).last_line  # type: ignore[union-attr]
    if _pw(first_ws) is not None:
        return first_ws.last_line
    return None


def _separator(first_ws: Any, indent: cst.SimpleWhitespace | None) -> Any:
    if indent is None:
        return cst.SimpleWhitespace(" ")
    # Never copy the comment that may follow the opening bracket: only its line break and indent.
    return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), empty_lines=[], indent=True, last_line=indent)


def append_arg(args: Sequence[cst.Arg], new: cst.Arg, *, first_ws: Any) -> list[cst.Arg]:
    """Append a call argument in the call's own layout. Exact inverse: :func:`remove_arg` of the last argument."""
    items = list(args)
    if not items:
        return [new]
    last = items[-1]
    indent = _item_indent(items, first_ws)
    trailing = _comma_pw(last)
    closing = _pw(last.whitespace_after_arg)
    if indent is not None and trailing is not None:
        # `a=1,  # c\n)`: a keeps its comma and comment; the new argument gets a clean break before `)`.
        items[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=trailing.with_changes(last_line=indent)))
        items.append(new.with_changes(comma=cst.Comma(whitespace_after=_clean_break(trailing, trailing.last_line)),
                                      whitespace_after_arg=cst.SimpleWhitespace("")))
        return items
    if indent is not None and last.comma is cst.MaybeSentinel.DEFAULT and closing is not None:
        # `a=1  # c\n)`: same, without a trailing comma.
        items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=closing.with_changes(last_line=indent)),
                                      whitespace_after_arg=cst.SimpleWhitespace(""))
        items.append(new.with_changes(comma=cst.MaybeSentinel.DEFAULT,
                                      whitespace_after_arg=_clean_break(closing, closing.last_line)))
        return items
    # One line: the new argument takes over the old last one's comma state and closing whitespace.
    items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=_separator(first_ws, indent)),
                                  whitespace_after_arg=cst.SimpleWhitespace(""))
    items.append(new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg))
    return items


def remove_arg(args: Sequence[cst.Arg], index: int) -> list[cst.Arg]:
    """Remove an argument; for the last one, the exact inverse of :func:`append_arg`."""
    items = list(args)
    if index == len(items) - 1 and index > 0:
        removed, prev = items[index], items[index - 1]
        rp, pp = _comma_pw(removed), _comma_pw(prev)
        if rp is not None and pp is not None:
            items[index - 1] = prev.with_changes(
                comma=prev.comma.with_changes(whitespace_after=pp.with_changes(last_line=rp.last_line)))
        elif pp is not None and removed.comma is cst.MaybeSentinel.DEFAULT and _pw(removed.whitespace_after_arg):
            items[index - 1] = prev.with_changes(
                comma=cst.MaybeSentinel.DEFAULT,
                whitespace_after_arg=pp.with_changes(last_line=removed.whitespace_after_arg.last_line))
        else:
            items[index - 1] = prev.with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    del items[index]
    return items


def dict_append(node: cst.Dict, new: cst.DictElement) -> cst.Dict:
    """Append an entry in the dict's own layout. In a dict, the break before `}` belongs to the brace.
    Exact inverse: :func:`dict_remove` of the last entry."""
    items = list(node.elements)
    new = new.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    if not items:
        return node.with_changes(elements=[new])
    last = items[-1]
    indent = _item_indent(items, node.lbrace.whitespace_after)
    rb = _pw(node.rbrace.whitespace_before)
    if indent is not None and rb is not None and last.comma is not cst.MaybeSentinel.DEFAULT and _comma_pw(last) is None:
        # `"a": 1,  # c\n}`: a keeps its comma + comment, the new entry copies the trailing-comma style.
        items[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=rb.with_changes(last_line=indent)))
        items.append(new.with_changes(comma=last.comma))
        return node.with_changes(elements=items,
                                 rbrace=node.rbrace.with_changes(whitespace_before=_clean_break(rb, rb.last_line)))
    if indent is not None and rb is not None and last.comma is cst.MaybeSentinel.DEFAULT:
        items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=rb.with_changes(last_line=indent)))
        items.append(new)
        return node.with_changes(elements=items,
                                 rbrace=node.rbrace.with_changes(whitespace_before=_clean_break(rb, rb.last_line)))
    trailing = _comma_pw(last)
    if indent is not None and trailing is not None:
        items[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=trailing.with_changes(last_line=indent)))
        items.append(new.with_changes(comma=cst.Comma(whitespace_after=_clean_break(trailing, trailing.last_line))))
        return node.with_changes(elements=items)
    items[-1] = last.with_changes(comma=cst.Comma(whitespace_after=_separator(node.lbrace.whitespace_after, indent)))
    items.append(new.with_changes(comma=last.comma))
    return node.with_changes(elements=items)


def dict_remove(node: cst.Dict, index: int) -> cst.Dict:
    """Remove an entry; for the last one, the exact inverse of :func:`dict_append`."""
    items = list(node.elements)
    rbrace = node.rbrace
    if index == len(items) - 1 and index > 0:
        removed, prev = items[index], items[index - 1]
        pp, rb, rp = _comma_pw(prev), _pw(rbrace.whitespace_before), _comma_pw(removed)
        if pp is not None and rb is not None and rp is None:
            # covers both a removed entry with a plain trailing comma and one without a comma
            items[index - 1] = prev.with_changes(comma=removed.comma)
            rbrace = rbrace.with_changes(whitespace_before=pp.with_changes(last_line=rb.last_line))
        elif rp is not None and pp is not None:
            items[index - 1] = prev.with_changes(
                comma=prev.comma.with_changes(whitespace_after=pp.with_changes(last_line=rp.last_line)))
        else:
            items[index - 1] = prev.with_changes(comma=removed.comma)
    del items[index]
    return node.with_changes(elements=items, rbrace=rbrace)


def make_kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


# ------------------------------------------------------------------------------------------------ transformers


class ReplaceNodes(cst.CSTTransformer):
    """Swap original nodes (by identity) for new ones in one pass."""

    def __init__(self, mapping: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> None:
        super().__init__()
        self.mapping = mapping
        self.hits = 0

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        fn = self.mapping.get(id(original_node))
        if fn is None:
            return updated_node
        self.hits += 1
        return fn(updated_node)


def apply_replacements(module: cst.Module, mapping: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> cst.Module:
    if not mapping:
        return module
    transformer = ReplaceNodes(mapping)
    new = module.visit(transformer)
    assert transformer.hits == len(mapping), "a planned replacement did not find its node"
    return new  # type: ignore[return-value]
