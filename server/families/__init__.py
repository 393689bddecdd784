"""The server's tools, one module per family. Each module has ``register(w: Wiring) -> None``; ``FAMILIES`` is the
order they appear in ``tools/list``. A new family: a module here with its ``register``, one entry below, a row per
tool in the README's tool table (``tests/test_contract.py`` checks it)."""

from __future__ import annotations

from collections.abc import Callable

from pypto_tune.server.families import campaign, jobs, rounds, runs, search, session
from pypto_tune.server.wiring import Wiring

FAMILIES: tuple[Callable[[Wiring], None], ...] = (
    session.register,  # start_session, get_status, list_knobs, mark_checklist, advance_stage, stop_session, …
    runs.register,  # run_precision_check, enable_runtime_debug, collect_swimlane, analyze_bubbles
    rounds.register,  # apply_tuning_patch, revert_patch, record_round
    search.register,  # propose_candidates, run_candidates
    jobs.register,  # wait_job, cancel_job
    campaign.register,  # start_campaign, campaign_status, stop_campaign
)
