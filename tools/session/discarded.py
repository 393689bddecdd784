"""Runs the server discarded for its own reasons are no result of the code they ran.

A run is discarded for the environment's sake when the interpreter's files changed since the session scanned them,
the disk was full when it ended (its output may be cut short), or the sandbox could not be set up
(``runs.tampered`` lists what, prefixed ``interpreter``, ``resource``, ``sandbox``; ``ENVIRONMENT``). Such a run
says nothing about the change: a trial of it is *invalid*, never a failed decision, never in the no-retry list
(R19), and its knob value stays proposable.

Ledgers written before that rule recorded such a trial as ``failed / runtime-error`` of its knob value (a re-run of
the set-up script during a batch blocked two values per batch, for the rest of the session). Those rounds are
recognised here from the rows alone — every failing precision record or invalid measurement of the round comes from
a discarded run — and voided by one appended ``corrections`` row (``field = "discarded-runs"``) that names them; old
rows are never rewritten. A voided round's decision stays in the ledger for the record but counts nowhere: not in
R19, not in the search's history, not in a stage's failure count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: ``corrections.field`` of a row that voids rounds decided on discarded runs
VOID_FIELD = "discarded-runs"

#: prefixes of ``runs.tampered`` entries that blame the environment, not the run's own copy: the interpreter's files,
#: the disk (``resource``), the sandbox. A copy rewritten while the run executed (a bare path) is an attack on the
#: run by a process of the agent's account, and stays charged to the change as it always was.
ENVIRONMENT = ("interpreter ", "resource ", "sandbox ")


def discarded_run_ids(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[int, list[str]]:
    """Run id → what changed, for every run the server discarded for the environment's sake only."""
    return {int(r["id"]): list(r["tampered"]) for r in rows.get("runs", [])
            if r.get("tampered") and all(str(t).startswith(ENVIRONMENT) for t in r["tampered"])}


def voided_rounds(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> set[int]:
    """Rounds a correction row voided (decided on discarded runs only)."""
    out: set[int] = set()
    for c in rows.get("corrections", []):
        if c["field"] == VOID_FIELD and isinstance(c["after_value"], dict):
            out.update(int(n) for n in c["after_value"].get("rounds", []))
    return out


def charged_discards(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[int, str]:
    """Round → why, for each decided-failed round not yet voided whose failure is only discarded runs: every failing
    precision record of the round ran on a discarded run, or (none failed) every invalid measurement of it includes
    one. A round with any failure of its own (a precision failure of a run the server vouched for) is not one."""
    discarded = discarded_run_ids(rows)
    if not discarded:
        return {}
    voided = voided_rounds(rows)
    out: dict[int, str] = {}
    for d in rows.get("round_decisions", []):
        n = int(d["number"])
        if d["decision"] != "failed" or n in voided:
            continue
        failing = [p for p in rows.get("precision_records", []) if p["round"] == n and p["verdict"] != "passed"]
        invalid = [m for m in rows.get("measurements", []) if m["round"] == n and not m["valid"]]
        if failing:
            runs = [p["run_id"] for p in failing]
            if all(r is not None and int(r) in discarded for r in runs):
                out[n] = _why(discarded[int(runs[-1])])
        elif invalid and all(any(int(r) in discarded for r in m["run_ids"] or []) for m in invalid):
            last = next(int(r) for r in reversed(invalid[-1]["run_ids"]) if int(r) in discarded)
            out[n] = _why(discarded[last])
    return out


def _why(tampered: list[str]) -> str:
    box = [t.removeprefix("sandbox ") for t in tampered if t.startswith("sandbox ")]
    if box:
        return "the run sandbox could not be set up (" + box[0] + ")"
    full = [t.removeprefix("resource ") for t in tampered if t.startswith("resource ")]
    if full:
        return "the disk filled while it ran (" + "; ".join(full[:2]) + ")"
    env = [t.removeprefix("interpreter ") for t in tampered if t.startswith("interpreter ")]
    if env:
        return "the interpreter's files changed (" + "; ".join(env[:3]) + ")"
    return "files of the run's private copy changed while it ran (" + ", ".join(tampered[:3]) + ")"


def invalid_next_step(reason: str) -> str:
    """What to do about trials the server discarded, by their cause."""
    if "interpreter's files changed" in reason:
        return ("the interpreter's files changed since the session's baseline (a set-up script or a pip install "
                "while it ran?): every later run is discarded too, and putting the files back does not help; "
                "stop_session and start a new session in a fresh workspace to tune in the changed environment")
    if "disk filled" in reason or "No space left" in reason:
        return "free space on the workspace's file system, then run the candidates again (they stay proposable)"
    if "sandbox could not be set up" in reason:
        return ("check that bubblewrap works here and that every folder the session mounts exists (serve "
                "--sandbox-root), then run the candidates again")
    if "private copy changed" in reason:
        return "stop whatever writes into the server's run copies, then run the candidates again"
    return "fix the cause named above (free disk space, restart the executor or its workers), then run the candidates again"

