"""Report strings in zh and en, loaded once from package data (prompts/templates/i18n.json)."""

from __future__ import annotations

import re
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


# How the server words a session's end (tools/session/gates.py::global_stop_reason, tools/operations/stages.py). The
# ledger keeps the English text; a report in another language says it in its own words and keeps what a person
# typed (a stop reason) as typed. An unknown wording is shown as recorded, never dropped.
_FINISH = [
    ("fr_target", re.compile(r"^target reached \((?P<best>[\d.]+) µs ≤ (?P<target>[\d.]+) µs\)$")),
    ("fr_limit", re.compile(r"^theoretical limit: utilisation (?P<platform>[\d.]+) % of the platform's cores of the "
                            r"types the kernel uses and (?P<util>[\d.]+) % of its active cores \(> (?P<thr>[\d.]+) %\), "
                            r"bubble (?P<bubble>[\d.]+) % < (?P<bthr>[\d.]+) %$")),
    ("fr_time", re.compile(r"^time limit of (?P<hours>[\d.]+) h reached$")),
    ("fr_user", re.compile(r"^user stop: (?P<reason>.*)$", re.DOTALL)),
    ("fr_early", re.compile(r"^(?P<stage>\S+) left early \((?P<reason>.*)\); the configuration stages did not converge "
                            r"by measurement, so no algorithm stage \(R23\)$", re.DOTALL)),
    ("fr_algorithm", re.compile(r"^algorithm stage done \((?P<reason>.*)\)$", re.DOTALL)),
]


def finish_reason_text(s: dict[str, str], reason: str | None) -> str:
    """Why the session ended, in the report's language."""
    if not reason:
        return "—"
    for key, pattern in _FINISH:
        m = pattern.match(reason)
        if m:
            return s[key].format(**m.groupdict())
    return reason


# Fixed sentences the server records as reasons (tools/operations/setup.py: corrections).
_PHRASES = {
    "corrected before the baseline precision passed": "cr_test_command",
    "verdict patterns corrected before the baseline precision passed": "cr_verdict_patterns",
}


def phrase_text(s: dict[str, str], text: str) -> str:
    """A fixed sentence the server recorded, in the report's language; any other text as recorded."""
    key = _PHRASES.get(text.strip())
    return s[key] if key else text
