"""The workspace differs from what the server recorded (rule ``drift``): when that blocks a call, and how it is said.

Only ``tools/errors`` is imported, so that the session layer's callers and the gate table can use it alike.
"""

from __future__ import annotations

from pypto_tune.tools.errors import GateRefusal

#: the calls an agent may make while the workspace holds an edit the server did not record
DRIFT_ALLOWED = ["revert_patch", "run_precision_check(adopt_drift=true)", "get_status", "list_knobs"]


def blocks(tool: str, adopting: bool) -> bool:
    """Drift blocks every call except revert_patch and run_precision_check(adopt_drift=true)."""
    return not adopting and tool != "revert_patch"


def external_edit(drift: str) -> GateRefusal:
    return GateRefusal(
        "drift", f"the workspace differs from the state the server recorded ({drift}): an edit made behind its back, "
        "or an interrupted write; tuning is blocked", allowed=DRIFT_ALLOWED,
        hint="revert_patch restores every recorded file byte-for-byte (files added since are moved to "
        ".pypto-tune/quarantine/); during tuning, run_precision_check(adopt_drift=true) adopts an edit of "
        "the operator files that is exactly one legal knob change, as a manual round")


def report_over_edit(drift: str, allowed: list[str]) -> GateRefusal:
    """render_report restores the debug options; over an external edit it could overwrite it."""
    return GateRefusal("drift", f"the workspace changed outside the server ({drift}); restoring the debug options now "
                       "could overwrite that edit", allowed=allowed,
                       hint="undo the external edit (or copy it away), then retry")


def ledger_dir_is_link(ledger_dir: str) -> GateRefusal:
    return GateRefusal("drift", f"{ledger_dir}/ itself is a symbolic link: the ledger and the recorded files would "
                       "live wherever it points", allowed=["get_status"],
                       hint=f"a person must put the server's own {ledger_dir}/ folder back")


def adopt_outside_tuning(level1: str) -> GateRefusal:
    return GateRefusal("drift", f"an external edit can only be adopted while tuning (now {level1}); before that the "
                       "baseline must run on the code the session started with (R5: the tuner does not fix the "
                       "operator)", allowed=["revert_patch", "get_status"],
                       hint="revert_patch restores the recorded state")


def adopt_other_files(others: list[str]) -> GateRefusal:
    return GateRefusal("drift", f"files other than the operator files changed ({', '.join(others[:6])}): the harness, "
                       "helpers and data are fixed for the whole session", allowed=["revert_patch", "get_status"],
                       hint="revert_patch restores them (added files go to .pypto-tune/quarantine/); to change the "
                       "test, finish this session and start a new one")


class UnrecordedEdit(GateRefusal):
    """An operator file about to be written holds an edit nobody recorded (``SessionContext.write``, ``tools/operations/base.py``)."""

    def __init__(self, tool: str, files: list[str]) -> None:
        self.files = files
        super().__init__(
            "drift", f"{', '.join(files)} changed since the server recorded {'it' if len(files) == 1 else 'them'} "
            f"(an edit nobody recorded): {tool} wrote nothing over it, and the edit is still in the file",
            allowed=DRIFT_ALLOWED,
            hint="keep the edit as a change of its own (run_precision_check(adopt_drift=true) adopts an edit that is "
            "one legal knob change), or revert_patch: it keeps a copy of the edit in .pypto-tune/quarantine/ and "
            "restores the recorded state")
