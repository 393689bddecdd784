"""The run-time probe's records in a session: which one describes a code state (issue #17).

Every precision run carries the probe (``runs.PROBED_PURPOSES``) and leaves a ``probes`` row bound to the code hash
it ran; the baseline's and each verified change's records are therefore there for the kept state. The knob map,
the admission gate and the search read the record of the state they start from through :func:`record_for`.
"""

from __future__ import annotations

from typing import Any

from pypto_tune.tools.patching.hashes import code_hash
from pypto_tune.tools.running.probe import ProbeRecord
from pypto_tune.tools.running.probe import store as probe_store


def record_for(ledger: Any, session_id: str, sources: dict[str, str]) -> dict[str, Any] | None:
    """The latest probe record of a run of exactly ``sources`` (by code hash), as plain data (``ProbeRecord``'s
    JSON form, with ``ran_sources``), or None when no probed run of that state exists. A record whose status is not
    ``reported`` is returned too: the caller says the probe did not report instead of guessing."""
    rows = ledger.rows("probes", session_id, "code_hash = ?", (code_hash(sources),))
    if not rows:
        return None
    reported = [r for r in rows if r["status"] == "reported"]
    row = (reported or rows)[-1]
    return dict(row["record"])


def full_record(ledger: Any, session_id: str, sources: dict[str, str]) -> ProbeRecord | None:
    """The typed record of ``sources`` with its module list restored (for the sandbox's hermeticity check)."""
    rows = ledger.rows("probes", session_id, "code_hash = ?", (code_hash(sources),))
    if not rows:
        return None
    every = ledger.rows("probes", session_id)
    return probe_store.from_rows(rows[-1], every)


def describe(record: dict[str, Any] | None, what: str) -> str:
    """One line for a tool's text: what the probe said about ``what`` (e.g. 'the kept state')."""
    if record is None:
        return f"run-time probe: no record of {what} (its precision run predates the probe or was not probed)"
    if record.get("status") != "reported":
        return f"run-time probe: did not report for {what} ({record.get('status')}: {record.get('reason', '')})"
    kernels = record.get("kernels") or []
    ran = [k["name"] for k in kernels if k.get("ran")]
    return (f"run-time probe of {what}: {len(kernels)} kernel(s) called" + (f" ({', '.join(ran)} ran)" if ran else "")
            + f", {len(record.get('calls') or [])} distinct tiling/option call(s)")
