"""Comparing two ledgers of the same work row by row: what may differ between them, and why, in one place.

Two campaigns over copies of the same operators — one on the local pool, one on a Ray cluster that lost a node and
its driver — must leave each operator's session with the same ledger, up to:

* what differs between *any* two sessions doing the same work: row ids, the session id, seals (each ledger has its
  own key), wall-clock times and durations, ids of rows of other tables, the console length, paths of the private
  copies and of the workspace, pypto's run-folder names, time stamps in file names, code addresses in backtraces —
  exactly the columns and masks of ``tests/executors/test_ray_ledger_over_stdio.py`` (imported, not restated),
  plus the candidate batch ids;
* what a killed driver leaves behind, which the ledger keeps on purpose (README: "a candidate batch that was
  cancelled or cut off by a crash leaves runs under numbers that never got a round row"; nothing is half-recorded,
  but the runs happened): the complete rows of runs, precision records and measurements the killed driver made
  for work it never decided (:func:`undecided`), the admission verdicts it asked for that batch (asked again on
  resume, the same verdicts: admissions are compared as a set), and therefore the round numbers: a resumed batch is
  numbered after the numbers the killed one used, so rounds are compared by their order (``round``/``number``
  columns and ``round N``/``rN`` in text renumbered 1, 2, 3 … over the decided rounds).

Everything else is compared as recorded.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executors"))  # the Ray ledger test's own helpers

from tests.executors.test_ray_ledger_over_stdio import MASKS, VARYING  # noqa: E402

SET_TABLES = ("admissions",)
UNDECIDED_TABLES = ("runs", "precision_records", "measurements")  # asked again after a resume: the same verdicts, compared as a set
ROUND_COLUMNS = ("round", "number")
_ROUND_TEXT = [re.compile(r"(\bround )(\d+)"), re.compile(r"(\bround)(\d+)(?=-)"), re.compile(r"(-r)(\d+)(?=\b)"),
               re.compile(r"(\br)(\d+)(?=[ :)])")]


def decided_rounds(tables: dict[str, list[dict[str, Any]]]) -> list[int]:
    return sorted(int(r["number"]) for r in tables.get("rounds", []))


def undecided(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Rows of work a killed driver never decided: runs, precision records and measurements numbered under a round
    that has no round row, and runs no precision record or measurement refers to."""
    decided = set(decided_rounds(tables))
    used_runs = {int(p["run_id"]) for p in tables.get("precision_records", []) if p.get("run_id") is not None}
    for m in tables.get("measurements", []):
        used_runs |= {int(x) for x in (m.get("run_ids") or [])}
    out: dict[str, list[dict[str, Any]]] = {}
    for table in UNDECIDED_TABLES:
        for r in tables.get(table, []):
            n = r.get("round")
            orphan_round = n is not None and int(n) > 0 and int(n) not in decided
            orphan_run = table == "runs" and int(r["id"]) not in used_runs
            if orphan_round or orphan_run:
                out.setdefault(table, []).append(r)
    return out


def _renumber_text(value: str, mapping: dict[int, int]) -> str:
    for pattern in _ROUND_TEXT:
        value = pattern.sub(lambda m: m.group(1) + str(mapping.get(int(m.group(2)), f"?{m.group(2)}")), value)
    return value


def normalised(tables: dict[str, list[dict[str, Any]]], workspace: Path, session_id: str,
               ) -> dict[str, list[dict[str, Any]]]:
    """Every table without the undecided rows, masked and renumbered, each in a stable order."""
    drop = {(t, int(r["id"])) for t, rows in undecided(tables).items() for r in rows}
    mapping = {n: i for i, n in enumerate(decided_rounds(tables), 1)}
    batches: list[str] = []
    for t in sorted(tables.get("trials", []), key=lambda r: int(r["round"])):
        if t["batch"] not in batches:
            batches.append(t["batch"])
    marks = [(str(workspace), "<ws>"), (session_id, "<sid>")] + [(b, f"<batch{i}>") for i, b in enumerate(batches)]

    def mask(value: Any, key: str | None = None) -> Any:
        if key in ROUND_COLUMNS and isinstance(value, int) and value > 0:
            return mapping.get(value, f"?{value}")
        if isinstance(value, str):
            for pattern, mark in MASKS:
                value = pattern.sub(mark, value)
            for text, mark in marks:
                value = value.replace(text, mark)
            return _renumber_text(value, mapping)
        if isinstance(value, list):
            return [mask(v) for v in value]
        if isinstance(value, dict):
            return {k: mask(v, k) for k, v in value.items() if k not in VARYING and k != "started_epoch"}
        return value

    out: dict[str, list[dict[str, Any]]] = {}
    for table, rows in tables.items():
        kept = [mask(r) for r in rows if table not in UNDECIDED_TABLES or (table, int(r["id"])) not in drop]
        keys = sorted({json.dumps(r, sort_keys=True, default=str) for r in kept}) if table in SET_TABLES else \
            sorted(json.dumps(r, sort_keys=True, default=str) for r in kept)
        out[table] = [json.loads(k) for k in keys]
    return out


def difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    """Which columns differ, with one example each (pytest's diff of long rows is truncated)."""
    if len(a) != len(b):
        return f"{len(a)} rows vs {len(b)}: " + json.dumps([r for r in b if r not in a][:2], default=str)[:1500]
    out = []
    for x, y in zip(a, b):
        for k in sorted(set(x) | set(y)):
            if x.get(k) != y.get(k):
                out.append(f"{k}: {str(x.get(k))[:300]!r} vs {str(y.get(k))[:300]!r}")
    return "; ".join(out[:6])
