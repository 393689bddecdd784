"""The tuning session: every operation an agent can ask for, with the rules enforced before anything happens.

Each public method (1) loads the session state from the ledger, (2) runs the gates (``tools/rules/gates.py``) — a refusal is
recorded and raised as ``GateRefusal`` —, (3) does the work (run the test, parse artifacts, edit source), and
(4) records the outcome as one ledger transaction. Numbers in the ledger come only from artifacts the server parsed.

The operations live in ``tools/operations/`` by group (setup, runs, rounds, search, stages, reporting); this class only
composes them, so the MCP adapter and the CLI keep one entry point.
"""

from __future__ import annotations

from pypto_tune.tools.operations.reporting import ReportOps
from pypto_tune.tools.operations.rounds import RoundOps
from pypto_tune.tools.operations.runs import RunOps
from pypto_tune.tools.operations.search import SearchOps
from pypto_tune.tools.operations.setup import SetupOps
from pypto_tune.tools.operations.stages import StageOps


class TuningService(SetupOps, RunOps, RoundOps, SearchOps, StageOps, ReportOps):
    """Owns the sessions this server process serves (one workspace each)."""


__all__ = ["TuningService"]
