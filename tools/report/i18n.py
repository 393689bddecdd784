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


# How the server words a session's end (tools/rules/gates.py::global_stop_reason, tools/operations/stages.py). The
# ledger keeps the English text; a report in another language says it in its own words and keeps what a person
# typed (a stop reason) as typed. An unknown wording is shown as recorded, never dropped.
_FINISH = [
    ("fr_target", re.compile(r"^target reached \((?P<best>[\d.]+) µs ≤ (?P<target>[\d.]+) µs\)$")),
    ("fr_limit", re.compile(r"^theoretical limit: utilisation (?P<platform>[\d.]+) % of the platform's cores of the "
                            r"types the kernel uses and (?P<util>[\d.]+) % of its active cores \(> (?P<thr>[\d.]+) %\), "
                            r"bubble (?P<bubble>[\d.]+) % < (?P<bthr>[\d.]+) %$")),
    ("fr_time", re.compile(r"^time limit of (?P<hours>[\d.]+) h reached$")),
    # A campaign ends a session through stop_session (tools/campaign/driver.py): a budget end is not a person's stop.
    ("fr_budget_op", re.compile(r"^user stop: campaign budget: (?P<n>\d+) trial\(s\) of this operator used$")),
    ("fr_budget_all", re.compile(r"^user stop: campaign budget: the campaign's overall trial budget is used$")),
    ("fr_campaign_stop", re.compile(r"^user stop: campaign stopped: (?P<reason>.*)$", re.DOTALL)),
    ("fr_converged", re.compile(r"^user stop: campaign: the configuration stages converged without reaching the "
                                r"target; algorithm-level changes \(R23\) are a person's call$")),
    ("fr_campaign", re.compile(r"^user stop: campaign: (?P<reason>.*)$", re.DOTALL)),
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


# Fragments of the server's English wording that recur in a report's details (tools/patching/effective.py's legality
# lines, tools/operations/rounds.py's flags): said in the report's language; the code they quote stays as written.
_FRAGMENTS = [
    ("flag_kernel_slower", re.compile(r"^FLAG: kernel (?P<kernel>\S+) got slower (?P<rise>[+-][\d.]+ %) "
                                      r"\((?P<detail>[^)]*)\)$")),
    ("flag_e2e_rose", re.compile(r"^FLAG: AICore end-to-end time rose (?P<rise>[+-][\d.]+ %) \((?P<detail>[^)]*)\)$")),
    ("lg_per_tile", re.compile(r"(?P<n>[\d.]+ [KM]i?B) per tile")),
    ("lg_iterations", re.compile(r"= (?P<n>\d+) iterations")),
    ("lg_not_evaluable", re.compile(r": not evaluable")),
    ("lg_domain", re.compile(r" within its domain \(")),
    ("lg_ran_with", re.compile(r"\(kernel (?P<kernel>\S+) ran it with (?P<value>.+?) on (?P<shapes>\[.*?\]\]?)")),
    ("lg_covers", re.compile(r" (?P<a>\d+) × (?P<b>\d+) covers (?P<n>\d+)")),
    ("lg_blocks", re.compile(r"axis (?P<n>\d+) \(from the run\) in (?P<k>\d+) block\(s\) of (?P<b>\S+)")),
]


def server_text(s: dict[str, str], text: str) -> str:
    """A line the server recorded in English, with its recurring phrases in the report's language."""
    for key, pattern in _FRAGMENTS:
        text = pattern.sub(lambda m, key=key: s[key].format(**m.groupdict()), text)
    return text
