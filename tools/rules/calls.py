"""Whether a call may run at all: one changing call at a time, and only over a ledger the server can trust.

Rules ``busy`` and ``ledger-integrity``.
"""

from __future__ import annotations

from pypto_tune.tools.errors import GateRefusal

#: the calls that skip the ledger's integrity check: the way out of a ledger that cannot be trusted
INTEGRITY_EXEMPT = ("render_report", "stop_session")


def busy(holder: str) -> GateRefusal:
    return GateRefusal("busy", f"{holder} is running for this session; a call that changes the session waits for it",
                       allowed=["wait_job", "get_status", "list_knobs"],
                       hint="call again when it has returned (wait_job for a job)")


def untrusted_ledger(findings: list[str]) -> GateRefusal:
    return GateRefusal("ledger-integrity", f"the ledger holds {len(findings)} row(s) the server did not write, or "
                       f"misses rows it wrote ({'; '.join(findings[:3])}): its evidence cannot be trusted",
                       allowed=["get_status", "render_report", "stop_session"],
                       hint="restore .pypto-tune/ledger.sqlite3 from a backup, or start a new session in a fresh "
                       "workspace; get_status lists every finding")
