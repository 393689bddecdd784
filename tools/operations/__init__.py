"""The session operations, one module per group, so a reader finds each rule's enforcement in one place.

* ``base``      — finding a session, deriving its state from the ledger, running the gates, recorded writes;
* ``setup``     — start_session, the environment check, precision runs (S1);
* ``runs``      — executing the test command on the recorded bytes, collect_swimlane, analyze_bubbles;
* ``rounds``    — apply_tuning_patch (through ``tools/code/admission.py``), revert_patch, record_round;
* ``stages``    — stage exits, global termination, the checklist, stop_session;
* ``reporting`` — status, knobs, ledger, the final report.

``tools/service.py`` composes them into the one ``TuningService`` the MCP adapter talks to.
"""
