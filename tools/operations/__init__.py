"""The session operations, one object per group, so a reader finds each rule's enforcement in one place.

* ``base``      — ``SessionContext``: finding a session, deriving its state from the ledger, running the gates, writes
  of operator files; every operation object is built with it;
* ``run_world`` — ``RunWorldOps``: the world a session's runs execute in, and the questions a change of it raises;
* ``setup``     — ``SetupOps``: start_session, the environment check, precision runs (S1);
* ``runs``      — ``RunOps``: executing the test command on the recorded bytes, collect_swimlane, analyze_bubbles;
* ``rounds``    — ``RoundOps``: apply_tuning_patch (through ``tools/code/admission.py``), revert_patch, record_round;
* ``search``    — ``SearchOps``: propose_candidates, run_candidates;
* ``stages``    — ``StageControl`` (stage exits, global termination, the server's own checklist marks) and
  ``StageOps`` (mark_checklist, advance_stage, stop_session);
* ``reporting`` — ``ReportOps``: status, knobs, ledger, the final report.

Each object names its collaborators in its constructor; ``tools/service.py`` builds them and is the one
``TuningService`` the MCP adapter talks to. Their rows go to the ledger through ``tools/session/recorder.py``.
"""
