"""Structured knob edits, diff edits, knob deltas and the runtime-debug toggle (text → text, nothing written).

The knob delta is what makes "one change per round" (domain D.2 R9) checkable: both source states are reduced to
their knob vectors (``extract_knobs``) and compared by knob id. ``debug_options.runtime_debug_mode`` is left out on
purpose: collecting a swimlane needs it (R7) and it does not change timing (domain C), so toggling it must never count
as a tuning change.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import libcst as cst

from ..errors import InputError, KnobValueError, PatchError
from ..snapshot import KnobChange
from . import legality
from ._cst import (
    append_arg, apply_replacements, dict_append, dict_remove, is_dict_call, is_expr, literal, make_kwarg, parse_value,
    quote_of, remove_arg, replace_minimal, same,
)
from .diffs import apply_diff, unified_diff
from .extract import JitSite, ParsedFile, Site, parse_file, sites_of
from .models import EditPlan, Knob

DEBUG_KEY = "runtime_debug_mode"
DEBUG_GROUP = "debug_options"

Mapping = dict[int, Callable[[cst.CSTNode], cst.CSTNode]]


# -------------------------------------------------------------------------------------------------- the delta


def _delta_knobs(sources: dict[str, str], context: dict[str, str] | None = None) -> dict[str, Knob]:
    out: dict[str, Knob] = {}
    for site in sites_of(sources, context)[1]:
        k = site.knob
        if not k.present or (k.kind == "debug_option" and k.name == DEBUG_KEY):
            continue
        out[k.id] = k
    return out


def knob_delta(before: dict[str, str], after: dict[str, str],
               context: dict[str, str] | None = None) -> list[KnobChange]:
    """Knobs whose value differs between two source states, by knob id (added: before=None, removed: after=None).

    ``runtime_debug_mode`` never appears. The line is the knob's line in ``after`` (in ``before`` when removed).
    Raises InputError if either state does not parse.
    """
    a, b = _delta_knobs(before, context), _delta_knobs(after, context)
    changes: list[KnobChange] = []
    for kid in sorted(set(a) | set(b), key=lambda k: ((b.get(k) or a[k]).file, (b.get(k) or a[k]).line, k)):
        ka, kb = a.get(kid), b.get(kid)
        va = ka.value if ka else None
        vb = kb.value if kb else None
        if ka is not None and kb is not None and same(va, vb):
            continue
        ref = kb or ka
        assert ref is not None
        changes.append(KnobChange(knob_id=kid, file=ref.file, line=ref.line, before=va, after=vb))
    return changes


# ---------------------------------------------------------------------------------------------- resolve a knob


def _matches_target(knob: Knob, target: str) -> bool:
    t = target.strip()
    if t in (knob.id, knob.target, str(knob.line), knob.function or "", knob.context.get("loop_name", "")):
        return True
    if t == f"{knob.file}:{knob.line}" or t == f"line {knob.line}":
        return True
    # A suffix of the id at a segment boundary: "set_vec_tile_shapes#2", "softmax.loop[LOOP_B]".
    return knob.id.endswith(t) and knob.id[: -len(t)][-1:] in (":", ".", "")


def resolve(sites: list[Site], knob_id: str, target: str | None) -> Site:
    exact = [s for s in sites if s.knob.id == knob_id]
    if exact:
        site = exact[0]
        if target and not _matches_target(site.knob, target):
            raise InputError(f"knob {knob_id} does not match target {target!r} (it is at {site.knob.target})",
                             hint="drop target or pass the knob's own target")
        return site
    # A knob name ("TILE_B", "vec_nbuffer_setting") first; only without one, an id suffix at a segment boundary
    # ("set_vec_tile_shapes#2", "loop[LOOP_B].unroll_list"), so that "N" never also matches "TILE_N".
    by_name = [s for s in sites if knob_id in (s.knob.name, s.knob.kind)]
    if not by_name:
        by_name = [s for s in sites if s.knob.id.endswith(knob_id) and s.knob.id[: -len(knob_id)][-1:] in (":", ".")]
    if target:
        by_name = [s for s in by_name if _matches_target(s.knob, target)]
    if len(by_name) > 1:
        present = [s for s in by_name if s.knob.present]
        if len(present) == 1:  # one written site beats absent ones with the same name
            by_name = present
    if len(by_name) == 1:
        return by_name[0]
    if not by_name:
        names = sorted({s.knob.name for s in sites if s.knob.tunable})
        raise InputError(f"no knob {knob_id!r}" + (f" at {target!r}" if target else ""),
                         hint="call list_knobs; known knob names: " + ", ".join(names))
    listing = "; ".join(f"{s.knob.id} ({s.knob.target})" for s in by_name[:12])
    raise InputError(f"{knob_id!r} matches {len(by_name)} knobs: {listing}",
                     hint="pass the full knob id, or target='<file>:<line>' to pick one call site")


# ----------------------------------------------------------------------------------------- structured edit


def _edit_mapping(pf: ParsedFile, site: Site, value: Any) -> Mapping:
    module = pf.module
    knob = site.knob
    if knob.kind == "vec_tile":
        return _vec_tile_mapping(module, site, value)
    if knob.kind == "cube_tile":
        return _cube_tile_mapping(module, site, value)
    if "members" in site.extra:  # a per-function group (sg_set_scope list, set_cache_policy map)
        current = knob.value
        keyed = value if isinstance(value, dict) else dict(enumerate(value))
        old = current if isinstance(current, dict) else dict(enumerate(current))
        mapping: Mapping = {}
        for key, node in site.extra["members"]:
            if same(old.get(key), keyed.get(key)):
                continue
            if node is None:
                raise InputError(f"{knob.id}: the call for {key!r} has no value argument to edit", hint="use a diff")
            mapping[id(node)] = lambda upd, v=keyed[key]: replace_minimal(upd, v, module)  # type: ignore[misc]
        return mapping
    if site.node is not None:
        return {id(site.node): lambda upd: replace_minimal(upd, value, module)}  # type: ignore[arg-type]
    if knob.kind == "jit_option":
        jit: JitSite = site.extra["jit"]
        return _add_option(module, jit, site.extra["group"], knob.name, value)
    if knob.kind == "loop_option":
        call: cst.Call = site.extra["call"]
        quote = quote_of(call)
        return {id(call): lambda upd: upd.with_changes(  # type: ignore[attr-defined]
            args=append_arg(upd.args, make_kwarg(knob.name, parse_value(value, quote=quote)),  # type: ignore[attr-defined]
                            first_ws=upd.whitespace_before_args))}  # type: ignore[attr-defined]
    raise InputError(f"knob {knob.id} cannot be added automatically", hint="use a diff")


def _add_option(module: cst.Module, jit: JitSite, group: str, key: str, value: Any) -> Mapping:
    container = jit.groups.get(group)
    if container is not None:
        quote = quote_of(container)
        if isinstance(container, cst.Dict):
            element = cst.DictElement(key=parse_value(key, quote=quote), value=parse_value(value, quote=quote))
            return {id(container): lambda upd: dict_append(upd, element)}  # type: ignore[arg-type]
        return {id(container): lambda upd: upd.with_changes(  # type: ignore[attr-defined]
            args=append_arg(upd.args, make_kwarg(key, parse_value(value, quote=quote)),  # type: ignore[attr-defined]
                            first_ws=upd.whitespace_before_args))}  # type: ignore[attr-defined]
    quote = quote_of(jit.decorator)
    new_arg = make_kwarg(group, parse_value({key: value}, quote=quote))
    if jit.call is not None:
        return {id(jit.call): lambda upd: upd.with_changes(  # type: ignore[attr-defined]
            args=append_arg(upd.args, new_arg, first_ws=upd.whitespace_before_args))}  # type: ignore[attr-defined]
    # Bare ``@pypto.frontend.jit``: it becomes a call (the docstring says both forms are the same decorator).
    return {id(jit.decorator): lambda upd: upd.with_changes(  # type: ignore[attr-defined]
        decorator=cst.Call(func=upd.decorator, args=[new_arg]))}  # type: ignore[attr-defined]


def _vec_tile_mapping(module: cst.Module, site: Site, value: list) -> Mapping:
    call = site.node
    assert isinstance(call, cst.Call)
    form = site.extra["form"]

    def edit(upd: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(upd, cst.Call)
        args = list(upd.args)
        if form == "list":
            return upd.with_changes(args=[args[0].with_changes(value=replace_minimal(args[0].value, value, module))])
        if form == "args" and len(args) == len(value):
            return upd.with_changes(args=[a.with_changes(value=replace_minimal(a.value, v, module))
                                          for a, v in zip(args, value)])
        fresh = cst.parse_expression(f"f({', '.join(map(str, value))})")
        assert isinstance(fresh, cst.Call)
        return upd.with_changes(args=fresh.args)

    return {id(call): edit}


def _cube_tile_mapping(module: cst.Module, site: Site, value: dict) -> Mapping:
    call = site.node
    assert isinstance(call, cst.Call)
    slots: dict[str, cst.Arg] = site.extra["slots"]

    def edit(upd: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(upd, cst.Call)
        args = list(upd.args)
        index = {id(a): i for i, a in enumerate(call.args)}
        for name, new in value.items():
            slot = slots.get(name)
            if slot is not None:
                i = index[id(slot)]
                args[i] = args[i].with_changes(value=replace_minimal(args[i].value, new, module))
            else:
                args = append_arg(args, make_kwarg(name, parse_value(new)), first_ws=upd.whitespace_before_args)
        return upd.with_changes(args=args)

    return {id(call): edit}


def _plan(before: dict[str, str], after: dict[str, str]) -> EditPlan:
    return EditPlan(
        new_sources=after,
        changes=knob_delta(before, after),
        diff=unified_diff(before, after),
        changed_files=sorted(p for p in after if before.get(p) != after[p]),
    )


def _has_expr(value: Any) -> bool:
    if isinstance(value, dict):
        return is_expr(value) or any(_has_expr(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_expr(v) for v in value)
    return False


def violations(sources: dict[str, str]) -> dict[str, str]:
    """Knob id -> why its current (literal) value breaks its rule, for every present tunable knob."""
    out: dict[str, str] = {}
    for site in sites_of(sources)[1]:
        k = site.knob
        if True:
            if not (k.present and k.tunable) or k.value is None or _has_expr(k.value):
                continue
            try:
                legality.validate(k.kind, site.extra.get("key") or k.name, site.extra.get("group"), k.value,
                                  dict(k.context, current=k.value))
            except (KnobValueError, InputError) as exc:
                out[k.id] = exc.message
    return out


def _new_violations(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    old = violations(before)
    return {kid: why for kid, why in violations(after).items() if kid not in old}


def plan_knob_edit(sources: dict[str, str], knob_id: str, value: Any, target: str | None = None,
                   context: dict[str, str] | None = None) -> EditPlan:
    """Plan setting one knob to ``value``: validate, then the minimal edit (formatting and comments kept).

    ``knob_id`` is a full id from :func:`extract_knobs` or a knob name (``"vec_nbuffer_setting"``,
    ``"set_vec_tile_shapes"``, ``"TILE_B"``); ``target`` (``"<file>:<line>"``, a function or loop name, an id
    suffix) picks one site when the name is ambiguous. Absent knobs (``present=False``) are added.
    Raises KnobValueError for an illegal value (rule + legal range), InputError for an unknown/ambiguous knob, a
    non-tuning knob or a value equal to the current one. Nothing is written.
    """
    parsed, sites = sites_of(sources, context)
    site = resolve(sites, knob_id, target)
    knob = site.knob
    if not knob.tunable and knob.kind in ("local_constant", "shape_constant"):
        uses = "; ".join(knob.context.get("problem_uses", [])) or "it is not used for tiling or blocking"
        raise InputError(f"{knob.id} is not a tuning knob but a problem size: it also reaches the problem itself "
                         f"({uses})",
                         hint="a change to it changes what the operator computes; only an algorithm-level change "
                         "(ALGORITHM stage) may touch it")
    ctx = dict(knob.context, current=knob.value)
    new_value = legality.validate(knob.kind, site.extra.get("key") or knob.name, site.extra.get("group"), value, ctx)
    if knob.present and same(knob.value, new_value):
        raise InputError(f"{knob.id} already is {new_value!r}", hint="choose a different value or another knob")
    if knob.kind == "cube_tile":
        # Only the fields that change are written, so an unchanged enable_split_k stays absent.
        new_value = {k: v for k, v in new_value.items() if not same(knob.value.get(k), v)}
    pf = parsed[knob.file]
    new_module = apply_replacements(pf.module, _edit_mapping(pf, site, new_value))
    after = dict(sources)
    after[knob.file] = pf.bom + new_module.code
    plan = _plan(sources, after)
    if not plan.changes:
        raise PatchError(f"editing {knob.id} produced no knob change", hint="report this; use a diff meanwhile")
    # A knob can make another one illegal (TILE_B sets the trip count an unroll_list must fit into).
    broken = {kid: why for kid, why in _new_violations(sources, after).items() if kid != knob.id}
    if broken:
        kid, why = next(iter(broken.items()))
        raise KnobValueError(
            f"setting {knob.id} to {new_value!r} makes {kid} illegal: {why}", rule="C/dependent",
            legal=f"a value of {knob.name} that keeps every dependent knob legal",
            hint="choose a value that keeps the dependent knob legal; changing both is two rounds",
        )
    return plan


def plan_diff_edit(sources: dict[str, str], diff: str) -> EditPlan:
    """Apply a unified diff strictly (see :mod:`.diffs`) and report the knob delta; the caller judges it.

    Raises PatchError (mismatching hunk, file outside ``sources``) or InputError (the result does not parse).
    """
    after = apply_diff(sources, diff)
    for path in sorted(after):
        if after[path] != sources[path]:
            parse_file(path, after[path])  # InputError names the syntax error
    plan = _plan(sources, after)
    plan.warnings = [f"{kid}: {why}" for kid, why in _new_violations(sources, after).items()]
    return plan


# ---------------------------------------------------------------------------------------------- runtime debug


def _debug_on(pf: ParsedFile) -> str:
    mapping: Mapping = {}
    for jit in pf.jits:
        container = jit.groups.get(DEBUG_GROUP)
        if container is not None:
            if id(container) in mapping:
                continue  # a module-level dict shared by several jits
            keys = _container_items(container, pf.module)
            if DEBUG_KEY in keys:
                node = keys[DEBUG_KEY]
                if not same(literal(node, pf.module), 1):
                    mapping[id(node)] = lambda upd, m=pf.module: replace_minimal(upd, 1, m)  # type: ignore[misc]
            else:
                mapping.update(_add_option(pf.module, jit, DEBUG_GROUP, DEBUG_KEY, 1))
        elif DEBUG_GROUP in jit.group_args:
            raise PatchError(
                f"{pf.path}: debug_options of {jit.function} is an expression the server cannot edit",
                hint="write debug_options as a dict literal or a module-level dict",
            )
        elif jit.opaque:
            raise PatchError(
                f"{pf.path}: the jit of {jit.function} passes **options; debug_options cannot be added safely",
                hint="write the option dicts as keyword arguments (debug_options={...}) or add "
                     "debug_options={'runtime_debug_mode': 1} by hand with a diff",
            )
        else:
            mapping.update(_add_option(pf.module, jit, DEBUG_GROUP, DEBUG_KEY, 1))
    return _rewritten(pf, mapping)


def _container_items(container: cst.BaseExpression, module: cst.Module) -> dict[str, cst.BaseExpression]:
    if isinstance(container, cst.Dict):
        out = {}
        for el in container.elements:
            if isinstance(el, cst.DictElement):
                k = literal(el.key, module)
                if isinstance(k, str):
                    out[k] = el.value
        return out
    if is_dict_call(container):
        return {a.keyword.value: a.value for a in container.args if a.keyword is not None}  # type: ignore[union-attr]
    return {}


def _jit_key(jit: JitSite) -> tuple[str, int]:
    return (jit.function, jit.ordinal)


def _debug_off(pf: ParsedFile, base: ParsedFile | None, *, bare_empty_calls: bool) -> str:
    """Remove runtime_debug_mode from every jit; restore the baseline's own value/shape where it had one."""
    base_jits = {_jit_key(j): j for j in base.jits} if base is not None else {}
    mapping: Mapping = {}
    handled: set[int] = set()
    for jit in pf.jits:
        bj = base_jits.get(_jit_key(jit))
        base_container = bj.groups.get(DEBUG_GROUP) if bj is not None else None
        base_items = _container_items(base_container, base.module) if base_container is not None and base else {}
        container = jit.groups.get(DEBUG_GROUP)
        if container is None or id(container) in handled:
            continue
        handled.add(id(container))
        items = _container_items(container, pf.module)
        if DEBUG_KEY not in items:
            continue
        if DEBUG_KEY in base_items:  # the baseline had its own value: put it back
            old = literal(base_items[DEBUG_KEY], base.module)  # type: ignore[union-attr]
            mapping[id(items[DEBUG_KEY])] = lambda upd, v=old, m=pf.module: replace_minimal(upd, v, m)  # type: ignore[misc]
            continue
        only_key = len(items) == 1
        drop_group = only_key and base_container is None and DEBUG_GROUP in jit.group_args and jit.call is not None \
            and DEBUG_GROUP not in jit.group_var
        if drop_group:
            call = jit.call
            assert call is not None
            make_bare = len(call.args) == 1 and (bare_empty_calls or (bj is not None and bj.call is None))
            if make_bare:
                mapping[id(jit.decorator)] = lambda upd: upd.with_changes(decorator=upd.decorator.func)  # type: ignore[attr-defined]
            else:
                arg = jit.group_args[DEBUG_GROUP]
                idx = list(call.args).index(arg)
                mapping[id(call)] = lambda upd, i=idx: upd.with_changes(args=remove_arg(upd.args, i))  # type: ignore[attr-defined]
            continue
        mapping[id(container)] = _remove_key_fn(container, pf.module)
    return _rewritten(pf, mapping)


def _remove_key_fn(container: cst.BaseExpression, module: cst.Module) -> Callable[[cst.CSTNode], cst.CSTNode]:
    if isinstance(container, cst.Dict):
        idx = next(i for i, el in enumerate(container.elements)
                   if isinstance(el, cst.DictElement) and literal(el.key, module) == DEBUG_KEY)
        return lambda upd: dict_remove(upd, idx)  # type: ignore[arg-type]
    assert isinstance(container, cst.Call)
    idx = next(i for i, a in enumerate(container.args) if a.keyword is not None and a.keyword.value == DEBUG_KEY)
    return lambda upd: upd.with_changes(args=remove_arg(upd.args, idx))  # type: ignore[attr-defined]


def _reverse_diff(base_text: str, toggled_text: str, current_text: str, path: str) -> str | None:
    """Undo exactly the toggle's own lines when the file was edited elsewhere since; None if they were touched."""
    diff = unified_diff({path: toggled_text}, {path: base_text})
    if not diff:
        return current_text
    try:
        return apply_diff({path: current_text}, diff)[path]
    except PatchError:
        return None


def set_runtime_debug(sources: dict[str, str], enabled: bool, baseline: dict[str, str] | None = None) -> dict[str, str]:
    """Turn ``debug_options={"runtime_debug_mode": 1}`` on in every jit of every file, or take it off again.

    On: merges with existing ``debug_options`` (dict literal, ``dict(...)`` or module-level variable), sets an
    existing mode to 1, turns a bare ``@jit`` into a call. Off: removes only what "on" adds. With ``baseline`` (the
    sources before "on"), a file that was not edited since gives back the baseline bytes exactly; a file edited
    elsewhere since keeps those edits (the toggle's own lines are reverse-applied, else it is removed
    structurally and the baseline's own ``runtime_debug_mode`` value, if it had one, is put back).
    Returns the new sources (all files); raises PatchError when a jit's debug_options cannot be edited.
    """
    out = dict(sources)
    for path in sorted(sources):
        text = sources[path]
        pf = parse_file(path, text)
        if not pf.jits:
            continue
        if enabled:
            out[path] = _debug_on(pf)
            continue
        base_text = baseline.get(path) if baseline is not None else None
        if base_text is not None:
            toggled = _debug_on(parse_file(path, base_text))
            if toggled == text:
                out[path] = base_text
                continue
            reversed_text = _reverse_diff(base_text, toggled, text, path)
            if reversed_text is not None and _no_debug(path, reversed_text, base_text):
                out[path] = reversed_text
                continue
        base_pf = parse_file(path, base_text) if base_text is not None else None
        out[path] = _debug_off(pf, base_pf, bare_empty_calls=False)
    return out


def _no_debug(path: str, text: str, base_text: str) -> bool:
    """The reverse-applied result has the baseline's runtime_debug_mode state (guards against a stale diff)."""
    try:
        return _debug_values(parse_file(path, text)) == _debug_values(parse_file(path, base_text))
    except InputError:
        return False


def _debug_values(pf: ParsedFile) -> list[Any]:
    values = []
    for jit in pf.jits:
        container = jit.groups.get(DEBUG_GROUP)
        items = _container_items(container, pf.module) if container is not None else {}
        values.append(literal(items[DEBUG_KEY], pf.module) if DEBUG_KEY in items else None)
    return values


def functional_sources(sources: dict[str, str]) -> dict[str, str]:
    """The sources with runtime_debug_mode removed everywhere, in one canonical form (for hashing).

    A precision verdict is bound to the functional hash, so it survives toggling runtime debug (which does not
    change results or timing, domain C). Canonical: the key is removed, an emptied ``debug_options=`` is removed,
    and a jit call left with no arguments is written bare (``@jit`` and ``@jit()`` are the same decorator). Files
    that do not parse are returned unchanged (their hash still changes with every byte).

    Cached by content: a session hashes the same texts on nearly every tool call (kept code, expected code, each
    candidate's code); the libcst rewrite stood out in a server's profile.
    """
    return dict(_functional_sources(tuple(sorted(sources.items()))))


@functools.lru_cache(maxsize=128)
def _functional_sources(items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    sources = dict(items)
    out = dict(sources)
    for path in sorted(sources):
        try:
            pf = parse_file(path, sources[path])
        except InputError:
            continue
        if not pf.jits:
            continue
        text = _debug_off(pf, None, bare_empty_calls=True)
        out[path] = _bare_empty_jits(parse_file(path, text))
    return tuple(sorted(out.items()))


def _rewritten(pf: ParsedFile, mapping: Mapping) -> str:
    """The file's text with ``mapping``'s replacements; its own text when there are none (libcst prints an untouched
    tree byte for byte, and printing a large file costs as much as parsing it: every candidate a search admits is
    hashed this way)."""
    return pf.bom + apply_replacements(pf.module, mapping).code if mapping else pf.text


def _bare_empty_jits(pf: ParsedFile) -> str:
    mapping: Mapping = {}
    for jit in pf.jits:
        if jit.call is not None and not jit.call.args:
            mapping[id(jit.decorator)] = lambda upd: upd.with_changes(decorator=upd.decorator.func)  # type: ignore[attr-defined]
    return _rewritten(pf, mapping)
