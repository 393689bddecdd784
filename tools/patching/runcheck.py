"""Legality on what ran: the values a change gives at the tile calls and loops the run-time probe saw run.

The admission gate (tools/code/admission.py) calls :func:`overlay` before its domain-C check and
:func:`loop_checks` after it: every tile call that ran is judged, per kernel that ran it, on the value the change
gives it there (a pinned literal, or what a changed source gives, tools/patching/derive.py) and on that kernel's
shapes; a block size on the axis the run blocked. A tile call that ran whose new value cannot be derived is
refused, never passed as "unchecked".
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from ..code import pysource
from ..errors import KnobValueError
from . import roles
from .derive import NoValue, _call_and_function, _Deriver, _visible_assignments, derive, feeder
from ._cst import EXPR_KEY, is_expr
from .effective import UNKNOWN, SiteValue
from .extract import Site
from .legality import VALID_SHAPE_LEGAL, loop_trips
from .runmap import KIND_APIS, RunMap, call_around

VIEW_APIS = KIND_APIS["valid_shape"]  # the calls a valid_shape is written in: view and reshape, both forms


def overlay(files_before: dict[str, str], program_before: roles.Program, run: RunMap, sites_b: list[Site],
            sites_a: list[Site], values_b: dict[str, SiteValue], values_a: dict[str, SiteValue],
            change: Any, changed_site: Site | None, more: list[tuple[Any, Site | None]] | tuple = ()
            ) -> tuple[dict[str, SiteValue], dict[str, SiteValue]]:
    """Replace the static values of every tile call that ran by its per-kernel run values (see module doc).

    ``change``: the one KnobChange being admitted (or None); ``changed_site``: its site in the before state.
    ``more``: the other (change, site) of a linked pair admitted as one change point (rule ``linked-pair``): a tile
    call is derived from the one change whose source feeds it; one that both feed is refused (the reader derives
    one changed source at a time). Raises KnobValueError when a tile call that ran would get a value the server
    cannot derive."""
    if not run.reported:
        return values_b, values_a
    vb, va = dict(values_b), dict(values_a)
    after_by_id = {s.knob.id: s for s in sites_a}
    sources = [(feeder(program_before, s), c) for c, s in [(change, changed_site), *more]]
    sources = [(src, c) for src, c in sources if src is not None]
    for site in sites_b:
        k = site.knob
        if k.kind not in ("vec_tile", "cube_tile") or not k.present:
            continue
        execs = run.executions(site)
        if not execs:
            continue  # never ran in this test: the static check (if any) stands
        before = vb.get(k.id)
        after = va.get(k.id)
        if after is None or k.id not in after_by_id:
            continue
        static_after = after.value
        static_before = before.value if before is not None else UNKNOWN
        fed_by = [(src, c) for src, c in sources
                  if any(f == site.file and line == k.line for _, f, line in src.consumer_sites)]
        fed = bool(fed_by)
        unchanged = static_before is not UNKNOWN and static_after is not UNKNOWN and static_before == static_after
        if unchanged or (static_after is UNKNOWN and not fed and after_by_id[k.id].knob.value == k.value):
            after_values = [e.value for e in execs]
            if unchanged and static_before is not UNKNOWN:
                after_values = [static_after for _ in execs]
        elif static_after is not UNKNOWN:
            after_values = [static_after for _ in execs]
        elif fed:
            if len(fed_by) > 1:
                raise KnobValueError(
                    f"{k.id} ran with {execs[0].value!r}; it is fed by both changed knobs "
                    f"({', '.join(c.knob_id for _, c in fed_by)}), and the server derives a tile from one changed "
                    "source at a time", rule="C/derive",
                    legal="a change whose value at every tile call that ran the server can compute",
                    hint=f"pin the call instead: apply_tuning_patch(knob='{k.id}', value=<literals>)")
            source, by = fed_by[0]
            after_values = []
            for e in execs:
                try:
                    after_values.append(derive(files_before, program_before, source, site, by.before, by.after,
                                               e.value))
                except NoValue as exc:
                    raise KnobValueError(
                        f"{k.id} ran with {e.value!r} (kernel {e.kernel}); the server cannot tell what "
                        f"{by.knob_id} = {by.after!r} gives there ({exc})", rule="C/derive",
                        legal="a change whose value at every tile call that ran the server can compute",
                        hint=f"pin the call instead: apply_tuning_patch(knob='{k.id}', value=<literals>)") from None
        else:
            # the call's own new value names something the server cannot evaluate (``RUN_MODE.value * 8``): the
            # static check records it unchecked with the value, as domain C has it for named values
            continue
        vb.pop(k.id, None)
        va.pop(k.id, None)
        for i, (e, new) in enumerate(zip(execs, after_values)):
            key = f"{k.id}@{e.kernel}#{i + 1}"
            ctx = dict(k.context, tensor_shapes=e.shapes or k.context.get("tensor_shapes", []),
                       dtypes=e.dtypes or k.context.get("dtypes", []), reductions=e.reductions,
                       cast_dtypes=sorted(set(e.cast_dtypes) | set(k.context.get("cast_dtypes", []))),
                       current=e.value, ran=e.describe())
            vb[key] = SiteValue(k.id, k.kind, k.line, e.value, ctx)
            va[key] = SiteValue(k.id, k.kind, k.line, new, ctx)
    return vb, va


def _kernel_dims(run: RunMap, key: str | None) -> list[int]:
    """Every tensor dimension of every call the run made of the kernel (the probe keeps each distinct argument list):
    a test that calls it on two shapes may have run a loop's trip count on either."""
    k = run.kernels.get(key or "")
    dims: list[int] = []
    for call in (k.get("inputs") or []) if k else []:
        for a in call:
            if isinstance(a, dict) and "$tensor" in a:
                dims.extend(d for d in a["$tensor"] if isinstance(d, int))
    return sorted(set(dims))


def _bound_once(node: ast.AST | None, locals_: dict[str, list[ast.AST]]) -> ast.AST | None:
    """A name bound once in the function stands for the expression it was bound to (``b_loop = b // tile_b``)."""
    if isinstance(node, ast.Name) and len(locals_.get(node.id, [])) == 1:
        return locals_[node.id][0]
    return node


def _input_axis(node: ast.AST, locals_: dict[str, list[ast.AST]], fns: list[ast.AST], run: RunMap,
                key: str | None) -> list[int] | None:
    """``P.shape[i]`` (directly, or through a name bound once to it) where ``P`` is a parameter of the kernel: that
    dimension of the tensor each recorded call passed as ``P`` — every length it took, for a test that calls the
    kernel at several shapes (PyPTO's ``dynamic.py::test_dynamic_partial``: batches of 8 and 32) —; None when it is
    anything else or a call did not pass it as a tensor with that dimension."""
    node = _bound_once(node, locals_)
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)):
        return None
    fn = fns[0] if fns else None
    params = [a.arg for a in fn.args.args] if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    if node.value.value.id not in params:
        return None
    at, dim = params.index(node.value.value.id), node.slice.value
    k = run.kernels.get(key or "")
    seen = set()
    for call in (k.get("inputs") or []) if k else []:
        a = call[at] if at < len(call) else None
        shape = a.get("$tensor") if isinstance(a, dict) else None
        if not isinstance(shape, list) or not -len(shape) <= dim < len(shape) or not isinstance(shape[dim], int):
            return None
        seen.add(shape[dim])
    return sorted(seen) or None


def trips_as_ran(run: RunMap, rec: dict[str, Any]) -> list[int] | None:
    """Every trip count the recorded loop call ``rec`` ran at the test's shapes, where its bound is a run-time value:
    pypto hands the probe the bound as its symbolic expression over the kernel's inputs
    (``(((RUNTIME_GetInputShapeDim(ARG_q,0)+8)-1)/8)``), evaluated here on each call's input shapes. PyPTO's
    ``kernel_input.py`` loops over a batch of 8 in blocks of 8: once, so no unroll list can change it. None when a
    bound is anything else."""
    args = rec.get("args") or []
    if not 1 <= len(args) <= 3 or not any(isinstance(a, dict) and "$sym" in a for a in args):
        return None
    kernel = run.kernels.get(rec.get("kernel") or "") or {}
    params = _kernel_params(run, kernel)
    out = []
    for call in kernel.get("inputs") or []:
        trips = loop_trips([_sym_value(a, params, call) for a in args])
        if trips is None:
            return None
        out.append(trips)
    return out or None


_SHAPE_DIM = re.compile(r"RUNTIME_GetInputShapeDim\(ARG_(\w+),\s*(-?\d+)\)")
_ARITHMETIC = re.compile(r"[0-9+\-*/() ]+")


def _sym_value(arg: Any, params: list[str], call: list[Any]) -> int | None:
    """A loop bound as it ran: an int, or a symbolic expression of input dimensions and integer arithmetic."""
    if isinstance(arg, int) and not isinstance(arg, bool):
        return arg
    sym = arg.get("$sym") if isinstance(arg, dict) else None
    if not isinstance(sym, str):
        return None

    def dim(m: re.Match) -> str:
        name, i = m.group(1), int(m.group(2))
        t = call[params.index(name)] if name in params and params.index(name) < len(call) else None
        shape = t.get("$tensor") if isinstance(t, dict) else None
        if not isinstance(shape, list) or not -len(shape) <= i < len(shape) or not isinstance(shape[i], int):
            raise ValueError(name)
        return str(shape[i])

    try:
        text = _SHAPE_DIM.sub(dim, sym)
        if not _ARITHMETIC.fullmatch(text) or len(text) > 400:
            return None
        return _arithmetic(pysource.parse(text, mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
        return None


def _arithmetic(node: ast.AST) -> int:
    """An int expression of + - * / (pypto's scalar division of non-negative ints truncates: floor division here),
    bounded: the record is an output of the run, so nothing in it may cost the server more than it reads."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arithmetic(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _arithmetic(node.left), _arithmetic(node.right)
        value = a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else \
            a * b if isinstance(node.op, ast.Mult) else a // b
        if abs(value) > 1 << 40:
            raise ValueError("bound out of range")
        return value
    raise ValueError(type(node).__name__)


def _kernel_params(run: RunMap, kernel: dict[str, Any]) -> list[str]:
    """The jit kernel's parameter names, in order (what ``ARG_<name>`` in a symbolic bound refers to)."""
    try:
        tree = pysource.parse(run.files.get(kernel.get("file", ""), ""))
    except SyntaxError:
        return []
    line = kernel.get("line")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == kernel.get("name") and \
                line in {node.lineno, *(d.lineno for d in node.decorator_list)}:
            return [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    return []


def loop_checks(files_before: dict[str, str], program_before: roles.Program, run: RunMap, change: Any,
                changed_site: Site | None) -> tuple[list[str], list[str]]:
    """Domain C (F-1, F-3) on the loops a changed block size feeds, with the axis taken from what ran.

    A loop ``pypto.loop(…, X // B, …)`` whose block ``B`` comes from the changed knob: the run recorded its trip
    count S with the old block b, so the axis X lies in [S·b, S·b + b − 1]; the kernel's input tensors name the
    one dimension in that range. The new block must be ≥ 1, ≤ X and divide X (floor division drops the rest); a
    ceil-division loop ``(X + B − 1) // B`` only needs 1 ≤ B ≤ X. A loop whose axis the run does not pin to one
    dimension, or whose block the server cannot evaluate, is listed unchecked. Returns (checked, unchecked) lines;
    raises KnobValueError for an illegal block."""
    feed = feeder(program_before, changed_site)
    if feed is None or not run.reported or change is None:
        return [], []
    checked: list[str] = []
    unchecked: list[str] = []
    for kind, file, line in sorted(feed.consumer_sites):
        if kind != "loop":
            continue
        for rec in run.calls_at(file, line, {"loop", "loop_unroll"}):
            call, fns, scope = _call_and_function(files_before.get(file, ""), line, rec["api"])
            if call is None:
                continue
            pos = [a for a in call.args if not isinstance(a, ast.Starred)]
            stop_node = pos[0] if len(pos) == 1 else (pos[1] if len(pos) >= 2 else None)
            args = rec.get("args") or []
            stop_ran = args[0] if len(args) == 1 else (args[1] if len(args) >= 2 else None)
            locals_ = _visible_assignments(fns)
            named = stop_node.id if isinstance(stop_node, ast.Name) else None
            stop_node = _bound_once(stop_node, locals_)  # ``pypto.loop(b_loop)``: the same division
            if not (isinstance(stop_node, ast.BinOp) and isinstance(stop_node.op, ast.FloorDiv)):
                continue
            # a dynamic axis ran as a symbol: the axis is then read where the code takes it, a dimension of one of
            # the kernel's inputs (``b = input0.shape[0]``), at the shape the test called the kernel with
            left = stop_node.left
            ceil = (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub)
                    and isinstance(left.left, ast.BinOp) and isinstance(left.left.op, ast.Add))
            # ``(X + B - 1) // B`` (PyPTO's GLM gate over a dynamic batch): the axis is X
            axis_node = left.left.left if ceil else left
            shape_axes = None if isinstance(stop_ran, int) else _input_axis(axis_node, locals_, fns, run,
                                                                             rec.get("kernel"))
            if not isinstance(stop_ran, int) and shape_axes is None:
                continue
            where = f"the loop at {file}:{line} ({named + ' = ' if named else ''}{ast.unparse(stop_node)})"
            env = program_before.env(file, scope)
            try:
                b_old = _Deriver(files_before, program_before, feed, change.before, file=file).eval(
                    stop_node.right, env, locals_)
                b_new = _Deriver(files_before, program_before, feed, change.after, file=file).eval(
                    stop_node.right, env, locals_)
            except NoValue as exc:
                # a divisor the server cannot evaluate (``n // max(BLOCK, 1)``) may still be the changed block: say
                # the loop was not checked rather than pass it in silence
                unchecked.append(f"{where} ran {stop_ran} iteration(s); the server cannot evaluate its block ({exc}), "
                                 "so whether the new block divides the axis it blocks was not checked")
                continue
            if b_old == b_new or not isinstance(b_old, int) or not isinstance(b_new, int) or b_old < 1:
                continue
            if shape_axes is not None:
                # the block must hold at every length the test passed: each is a run of the loop
                runs = [(x, -(-x // b_old) if ceil else x // b_old) for x in shape_axes]
            else:
                lo, hi = ((stop_ran - 1) * b_old + 1, stop_ran * b_old) if ceil else \
                    (stop_ran * b_old, stop_ran * b_old + b_old - 1)
                axes = [d for d in _kernel_dims(run, rec.get("kernel")) if lo <= d <= hi]
                if len(axes) != 1:
                    unchecked.append(f"{where} ran {stop_ran} iteration(s) of {b_old}; the server cannot tell which "
                                     "axis it blocks, so whether the new block divides it was not checked")
                    continue
                runs = [(axes[0], stop_ran)]
            lengths = f"; the test ran it at axis lengths {[x for x, _ in runs]}" if len(runs) > 1 else ""
            for x, trips_ran in runs:
                if b_new < 1 or b_new > x or (not ceil and x % b_new):
                    why = ("a block must be ≥ 1" if b_new < 1 else f"block {b_new} exceeds the axis length {x}"
                           if b_new > x else f"{x} is not a multiple of {b_new}: the last {x % b_new} rows would "
                           "never be computed (floor division drops them)")
                    raise KnobValueError(f"{change.knob_id} = {change.after!r} makes {where} block {b_new}: {why} "
                                         f"— the run blocked an axis of {x} ({trips_ran} × {b_old}, kernel "
                                         f"{run.kernel_name(rec.get('kernel'))}){lengths}", rule="C/F-3",
                                         legal="a block size that divides the axis it blocks",
                                         hint=f"choose a divisor of {math.gcd(*[x for x, _ in runs])}" if not ceil
                                         else f"choose a block ≤ {min(x for x, _ in runs)}")
                trips = -(-x // b_new) if ceil else x // b_new
                checked.append(f"{where}: axis {x} (from the run) in {trips} block(s) of {b_new}")
    return checked, unchecked


def valid_checks(files_before: dict[str, str], run: RunMap, change: Any, changed_site: Site | None
                 ) -> tuple[list[str], list[str]]:
    """Domain C (I-9) on a changed ``valid_shape``: what part of each view the kernel computes, never a tile.

    * An entry written as an expression must stay the one recorded there, or be the view's own extent (the same
      code): any other expression may compute less of every view (``pypto.min(1, hi - lo)``), and the server
      cannot evaluate it before the run.
    * A constant entry must be the view's extent as it ran: shorter computes part of every block a loop cuts,
      longer claims data past the view (and past the tensor on a tail block). PyPTO's dynamic_mul views
      ``[tile_b, 128]`` with ``tile_b`` a kernel argument, so only the run knows the block (8 and 16 at the test's
      shapes), and ``valid_shape=[1, 128]`` was admitted unchecked.

    Returns (checked, unchecked); raises KnobValueError."""
    if changed_site is None or change is None or changed_site.knob.kind != "valid_shape":
        return [], []
    k = changed_site.knob
    text = files_before.get(k.file, "")
    around = call_around(text, k.line, {a.rsplit(".", 1)[-1] for a in VIEW_APIS})
    call = _call_and_function(text, around[0], around[2])[0] if around else None
    if call is None:
        return [], []
    new, old = change.after, change.before
    if new == old:
        return [], []
    if not isinstance(new, (list, tuple)):
        raise KnobValueError(f"{k.id} = {new!r}: a valid_shape spelled as one expression the server cannot "
                             "evaluate before the run; it says how much of the view is computed", rule="C/I-9",
                             legal=VALID_SHAPE_LEGAL, hint="keep the recorded valid_shape, or list the view's extents")
    shape = _shape_arg(call)
    olds = list(old) if isinstance(old, (list, tuple)) and len(old) == len(new) else [None] * len(new)
    checked: list[str] = []
    for axis, (want, was) in enumerate(zip(new, olds)):
        if not is_expr(want) or want == was:
            continue
        extent = shape.elts[axis] if shape is not None and axis < len(shape.elts) else None
        if extent is not None and _same_code(want[EXPR_KEY], extent):
            checked.append(f"{k.file}:{call.lineno} valid extent along axis {axis} is the view's own "
                           f"({ast.unparse(extent)})")
            continue
        raise KnobValueError(
            f"{k.id} = {new!r}: along axis {axis} the valid extent becomes {want[EXPR_KEY]!r}, an expression the "
            f"server cannot evaluate before the run, neither the recorded one ({_code(was)}) nor the view's extent "
            f"({ast.unparse(extent) if extent is not None else '?'}): it could compute part of every view",
            rule="C/I-9", legal=VALID_SHAPE_LEGAL, hint="keep the recorded expression, or write the view's extent")
    if not run.reported:
        return checked, []
    unchecked: list[str] = []
    for rec in run.calls_at(k.file, k.line, VIEW_APIS):
        args = rec.get("args") or []
        ran_shape = args[1] if len(args) > 1 and isinstance(args[1], list) else None
        if ran_shape is None or len(ran_shape) != len(new):
            continue
        for axis, (want, ran) in enumerate(zip(new, ran_shape)):
            if not isinstance(want, int) or isinstance(want, bool):
                continue  # an expression: judged above
            if not isinstance(ran, int):
                unchecked.append(f"{k.id} = {new!r}: the view ran with extent {ran!r} along axis {axis}, a run-time "
                                 f"value, so whether {want} is that extent was not checked")
                continue
            why = _short_or_past(want, ran)
            if why:
                raise KnobValueError(
                    f"{k.id} = {new!r}: the view at {k.file}:{call.lineno} ran with shape {ran_shape} (kernel "
                    f"{run.kernel_name(rec.get('kernel'))}); a constant valid extent of {want} along axis {axis} "
                    f"{why}", rule="C/I-9", legal=VALID_SHAPE_LEGAL,
                    hint=f"keep axis {axis} at the view's extent ({ran}), or the recorded tail expression")
            line = (f"{k.file}:{call.lineno} valid extent {want} is the view's along axis {axis} (kernel "
                    f"{run.kernel_name(rec.get('kernel'))}, from the run)")
            if line not in checked:
                checked.append(line)
    return checked, unchecked


def block_valid_checks(files_before: dict[str, str], program_before: roles.Program, run: RunMap, change: Any,
                       changed_site: Site | None) -> tuple[list[str], list[str]]:
    """Domain C (I-9) on the views a changed knob feeds: their valid part must still be the view's extent (or a tail
    expression of the loop index).

    * A name the view's ``valid_shape`` is read from (``vs = [8, 64]`` … ``valid_shape=vs``), whole or as one
      entry: its new value there is judged as a changed ``valid_shape`` is (:func:`valid_checks`) — ``vs = [1, 64]``
      computed one row of each block of 8, and ``[8, 32]`` half the columns, both admitted as a local's change.
    * A block whose view's valid part ran as a constant covering the whole block must still cover it: a config's
      ``block`` of 8 feeds ``pypto.view(x, [tile_b, 64], …, valid_shape=[8, 64])`` through the kernel's argument;
      set to 16, every block of 16 rows computed 8. The view's extent is taken to follow the block where it ran at
      the block's old value; elsewhere the view is listed unchecked.

    Returns (checked, unchecked); raises KnobValueError."""
    feed = feeder(program_before, changed_site)
    if feed is None or change is None or not run.reported:
        return [], []
    old, new = change.before, change.after
    label = getattr(feed, "label", None) if getattr(feed, "kind", None) == "name" else None
    checked: list[str] = []
    unchecked: list[str] = []
    for kind, file, line in sorted(feed.consumer_sites):
        if kind != "view":
            continue
        call = next((c for c in (_call_and_function(files_before.get(file, ""), line, name)[0]
                                 for name in ("view", "reshape")) if c is not None), None)
        written = next((kw.value for kw in call.keywords if kw.arg == "valid_shape"), None) if call else None
        shape_code = _shape_arg(call) if call is not None else None
        for rec in run.calls_at(file, line, VIEW_APIS):
            args, valid = rec.get("args") or [], (rec.get("kwargs") or {}).get("valid_shape")
            shape = args[1] if len(args) > 1 and isinstance(args[1], list) else None
            if shape is None:
                continue
            where = f"the view at {file}:{line} (kernel {run.kernel_name(rec.get('kernel'))})"
            if label is not None and written is not None:
                # the name is the valid part, or one entry of it: its new value is that part there
                entries: dict[int, Any] = {}
                if isinstance(written, ast.Name) and written.id == label and isinstance(new, (list, tuple)):
                    entries = dict(enumerate(new))
                elif isinstance(written, (ast.List, ast.Tuple)):
                    for axis, e in enumerate(written.elts):
                        same_as_shape = (shape_code is not None and axis < len(shape_code.elts)
                                         and ast.dump(shape_code.elts[axis]) == ast.dump(e))
                        if isinstance(e, ast.Name) and e.id == label and not same_as_shape:
                            entries[axis] = new
                for axis, want in entries.items():
                    ran = shape[axis] if axis < len(shape) else None
                    if not isinstance(want, int) or isinstance(want, bool) or not isinstance(ran, int):
                        unchecked.append(f"{where}: its valid part along axis {axis} becomes {want!r} and the view "
                                         f"ran {ran!r} long there; not checked")
                        continue
                    why = _short_or_past(want, ran)
                    if why:
                        raise KnobValueError(
                            f"{change.knob_id} = {new!r} is the valid part of {where} along axis {axis}: it {why}",
                            rule="C/I-9", legal=VALID_SHAPE_LEGAL,
                            hint=f"keep {change.knob_id} at {old!r}: the valid part is how much of the view is "
                                 "computed, never a tile")
                    checked.append(f"{where}: valid part {want} along axis {axis} is the view's (from the run)")
                continue
            if not (isinstance(old, int) and isinstance(new, int)) or isinstance(old, bool) or old == new:
                continue
            if not isinstance(valid, list) or len(valid) != len(shape):
                continue
            for axis, (ran, v) in enumerate(zip(shape, valid)):
                if not isinstance(v, int) or isinstance(v, bool) or v != ran:
                    continue  # a tail expression follows the block; a valid part short of its view is the code's
                if ran != old:
                    unchecked.append(f"{where} ran with extent {ran} along axis {axis} and a constant valid part "
                                     f"of {v}; whether {change.knob_id} = {new!r} moves that extent was not checked")
                    continue
                raise KnobValueError(
                    f"{change.knob_id} = {new!r} makes {where} {new} long along axis {axis}, and its valid part is "
                    + (f"the constant {v}: {v} of every {new} would be computed" if new > v else
                       f"the constant {v}, past the view"), rule="C/I-9",
                    legal="a block the view's valid part follows (write it as the tail expression of the loop index)",
                    hint=f"keep {change.knob_id} at {old}, or make the valid part follow the block")
            checked.append(f"the view at {file}:{line}: its valid part follows the block (from the run)")
    return checked, unchecked


def _short_or_past(want: int, ran: int) -> str:
    """Why a constant valid extent ``want`` cannot stand for a view that ran ``ran`` long along an axis ('' when it
    is that extent): the valid part is how much of the view is computed, never a tile."""
    if want < ran:
        return f"computes {want} of its {ran} on every block, the rest would never be computed"
    if want > ran:
        return f"claims {want} valid of a view of {ran}: past the view (and past the tensor on a tail block)"
    return ""


def _shape_arg(call: ast.Call) -> ast.List | ast.Tuple | None:
    """The view's shape as written: ``pypto.view(x, shape, …)``, or ``x.view(shape, …)`` (the probe records the
    method with the tensor first, so a record's shape is its second argument either way)."""
    lists = (ast.List, ast.Tuple)
    if call.args and isinstance(call.args[0], lists):  # the method form: a tensor is never a list display
        return call.args[0]
    arg = call.args[1] if len(call.args) > 1 else None
    return arg if isinstance(arg, lists) else None


def _same_code(code: str, node: ast.AST) -> bool:
    try:
        return ast.dump(pysource.parse(code.strip(), mode="eval").body) == ast.dump(node)
    except SyntaxError:
        return False


def _code(value: Any) -> str:
    return repr(value[EXPR_KEY]) if is_expr(value) else repr(value)


def annotate_unchecked(run: RunMap, unchecked: list[str], checked: list[str]) -> list[str]:
    """The static 'not checked' notes, less the loops the run check covered, and with the loops that never ran in
    this test said so (their value changes nothing this test measures)."""
    covered = {c.removeprefix("the loop at ").split(" ", 1)[0] for c in checked if c.startswith("the loop at ")}
    out = []
    for note in unchecked:
        head = note.split(" ", 1)[0]
        file, _, line = head.partition(":")
        if head in covered:
            continue
        if run.reported and line.isdigit() and file in run.files and not run.executed(file, int(line)):
            note += " (this line never ran in this test)"
        out.append(note)
    return out
