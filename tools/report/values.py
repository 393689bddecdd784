"""Values as a reader of the operator's source writes them, never as Python prints them.

A knob value reaches the report in its JSON form: literals, ``{"$expr": code}`` for code (``RUN_MODE``,
``TILE_B * 2``), dict keys that JSON turned into strings (``{"-2": 1}`` for ``{-2: 1}``). The report shows the
source text (``RUN_MODE``, ``{-2: 1}``), one formatter for every table, so the same value reads the same everywhere
(dict keys in one order: integer keys by value, then the others).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pypto_tune.tools.snapshot import KnobChange, RoundRecord

EXPR_KEY = "$expr"  # tools/patching/models.py: a value that is code, not a literal
_INT = re.compile(r"^-?\d+$")


def source_text(value: Any, default: str = "None") -> str:
    """Python source text of a knob value; ``default`` for None (a knob not written: the default applies)."""
    if value is None:
        return default
    if isinstance(value, dict):
        if set(value) == {EXPR_KEY}:
            return str(value[EXPR_KEY])
        return "{" + ", ".join(f"{_key(k)}: {source_text(v)}" for k, v in sorted(value.items(), key=_order)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(source_text(v) for v in value) + "]"
    return repr(value)


def _order(item: tuple[Any, Any]) -> tuple[int, float, str]:
    """One key order in every table, however the value was typed: integer keys by value, then the others."""
    k = item[0]
    if isinstance(k, int) or (isinstance(k, str) and _INT.match(k)):
        return 0, float(k), ""
    return 1, 0.0, str(k)


def _key(k: Any) -> str:
    # 0.2.0 takes only int keys for the nbuffer/reuse settings (domain C S-5); JSON stored them as strings.
    if isinstance(k, str) and _INT.match(k):
        return k
    return source_text(k)


def _joiner(changes: list[KnobChange]) -> str:
    """Two knob changes in one round are a linked pair (rule linked-pair): one change, ``a + b``."""
    return " + " if len(changes) == 2 else "; "


def change_text(changes: list[KnobChange], default: str) -> str:
    """``knob: before → after`` for each changed knob, values in source text."""
    return _joiner(changes).join(f"{c.knob_id}: {source_text(c.before, default)} → {source_text(c.after, default)}"
                                 for c in changes)


def round_change(r: RoundRecord, s: dict[str, str]) -> str:
    """What a round changed: its knob changes in source text, else the recorded description (a structural change)."""
    return change_text(r.knob_changes, s["knob_default"]) if r.knob_changes else r.change


def knob_value(r: RoundRecord, s: dict[str, str]) -> str:
    """A batch candidate's ``knob = value``."""
    if r.knob_changes:
        return _joiner(r.knob_changes).join(f"{c.knob_id} = {source_text(c.after, s['knob_default'])}"
                                            for c in r.knob_changes)
    return r.change


def plain_text(value: Any) -> str:
    """A recorded setting as a person would type it: a command line for a list, ``key = value`` pairs for a dict."""
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return shlex.join(str(x) for x in value)
    if isinstance(value, dict):
        return "; ".join(f"{k} = {plain_text(v) if isinstance(v, (list, dict)) else v}" for k, v in value.items()) or "—"
    return str(value)
