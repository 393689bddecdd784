"""Report strings in zh and en, loaded once from package data (prompts/templates/i18n.json)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import orjson


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, str]]:
    raw = resources.files("pypto_tune.prompts").joinpath("templates", "i18n.json").read_bytes()
    return orjson.loads(raw)


def strings(lang: str) -> dict[str, str]:
    table = _table()
    if lang not in table:
        raise ValueError(f"lang must be one of {sorted(table)}, got {lang!r}")
    return table[lang]


def term(s: dict[str, str], kind: str, value: str | None) -> str:
    """A ledger enum value (result type ``rt``, verdict ``v``, stage status ``st``) in the report's language.

    The ledger stores English identifiers; a zh reader must not meet ``precision-failure`` in a table. An unknown
    value is shown as stored rather than hidden, so a new enum member is visible instead of silently blank.
    """
    if value is None:
        return "—"
    return s.get(f"{kind}_{value}", value)
