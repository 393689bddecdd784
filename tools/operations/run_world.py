"""The world a session's runs execute in (``tools/running/recorded_env.py``): recorded at start, enforced on resume.

* ``start_session`` records this server's :class:`RunWorld` (environment, interpreter, closure, sandbox) in the
  session row; no sandbox and no ``--unsandboxed`` is refused (GATE sandbox) before anything is recorded.
* Every run uses the recorded world (``child_env``, ``RunOps.run``), never the environment of the server that runs it.
* A resume whose world differs is refused (GATE environment) with the differences named, and a question for a
  person is recorded; once a person accepts (``pypto-tune confirm`` at a terminal, or the client's elicitation), the
  next resume records the new world as the session's baseline (a ``corrections`` row, ``field="environment"``) and
  fingerprints the new interpreter roots.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from pypto_tune.tools.rules import setup as setup_rules
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.operations.base import INTERPRETER_CHECK, Handle, SessionContext
from pypto_tune.tools.running import recorded_env, sandbox
from pypto_tune.tools.running.interpreter_files import Fingerprint, python_of
from pypto_tune.tools.running.recorded_env import RunWorld
from pypto_tune.tools.session.state import PERSON_SOURCES, SessionState

log = logging.getLogger("pypto_tune.service")

QUESTION_KIND = "environment-change"
ANSWER_KIND = "environment-accepted"
DECLINE_KIND = "environment-declined"


def world_digest(world: RunWorld) -> str:
    return hashlib.sha256(json.dumps(world.as_json(), sort_keys=True).encode()).hexdigest()


class RunWorldOps:
    """The recorded run world of a session; see the module docstring."""

    def __init__(self, ctx: SessionContext) -> None:
        self.ctx = ctx

    @staticmethod
    def world(st: SessionState) -> RunWorld | None:
        """The session's recorded world: from its start, or the last change a person accepted. None for sessions
        recorded before worlds were (they keep running in the server's environment, as they always did)."""
        data = (st.session["config"] or {}).get(recorded_env.CONFIG_KEY)
        for c in st.rows.get("corrections", []):
            if c["field"] == "environment" and isinstance(c["after_value"], dict):
                data = c["after_value"]
        return RunWorld.from_json(data) if data else None

    def _extra_env(self, run_mode: str) -> dict[str, str] | None:
        # NPU: DUMP_DEVICE_PERF=true makes the runtime dump the AICPU phase counters (domain A.2 step 4), whose
        # machine_runtime_operator_trace gives the AICPU-side end-to-end time recorded beside max_work_time (B.10)
        return {"DUMP_DEVICE_PERF": "true"} if run_mode == "npu" else None

    def current_world(self, h: Handle, session_id: str | None, argv: list[str], run_mode: str) -> RunWorld:
        """This server's world for ``argv``; no sandbox without ``--unsandboxed`` is refused (GATE sandbox)."""
        try:
            return recorded_env.current(run_mode=run_mode, python=python_of(argv, self.ctx.python), workspace=h.workspace,
                                        extra=self._extra_env(run_mode))
        except sandbox.SandboxUnavailable as exc:
            raise self.ctx.refuse(h, session_id, "start_session", setup_rules.no_sandbox(exc.message,
                                                                                       sandbox.INSTALL_HINT)) from None

    def run_world(self, h: Handle, st: SessionState) -> RunWorld:
        """The world a run of ``st`` executes in (a legacy session: this server's, found once per process)."""
        world = self.world(st)
        if world is None:
            if st.id not in h.legacy_worlds:
                h.legacy_worlds[st.id] = self.current_world(h, st.id, list(st.test_command), st.run_mode)
            world = h.legacy_worlds[st.id]
        return world

    def child_env(self, st: SessionState, device_id: str | None) -> dict[str, str]:
        """The environment of a run of ``st`` on ``device_id``: the recorded one (NPU: plus the chip)."""
        h = self.ctx.find(st.id)
        return self.run_world(h, st).run_env(device_id if st.run_mode == "npu" else None)

    # -------------------------------------------------------------------------------------------------- resume
    def check_world(self, h: Handle, st: SessionState) -> tuple[SessionState, str]:
        """On resume: the same world as recorded, or a change a person accepted (recorded now), or GATE environment.
        Returns the state and a note for the resume message."""
        recorded = self.world(st)
        if recorded is None:
            return st, ""
        now = self.current_world(h, st.id, list(st.test_command), st.run_mode)
        diffs = recorded_env.differences(recorded, now)
        if not diffs:
            return st, ""
        if st.level1 == "S1_SETUP" and not st.passed_hashes:
            # nothing was verified or measured yet (like a command correction): the new world is simply recorded
            h.record(st.id).correction(field="environment", before_value=recorded.as_json(),
                                       after_value=now.as_json(),
                                       reason="environment changed before the baseline precision passed: "
                                       + "; ".join(diffs)[:2000])
            return self.ctx.state(h, st.id), "; the run environment changed before the baseline and is recorded anew"
        digest = world_digest(now)
        questions = [q for q in st.rows.get("questions", []) if q["kind"] == QUESTION_KIND]
        answers = {int(c["question_id"]): c for c in st.rows.get("confirmations", [])
                   if c.get("question_id") is not None and c["kind"] in (ANSWER_KIND, DECLINE_KIND)}
        accepted = next((q for q in reversed(questions) if (q["info"] or {}).get("digest") == digest
                         and answers.get(int(q["id"]), {}).get("kind") == ANSWER_KIND), None)
        if accepted is not None:
            source = answers[int(accepted["id"])]["source"]
            h.record(st.id).correction(field="environment", before_value=recorded.as_json(),
                                       after_value=now.as_json(),
                                       reason=f"a person accepted the new environment ({source}): "
                                       + "; ".join(diffs)[:2000])
            st = self.ctx.state(h, st.id)
            if any(r["name"] == INTERPRETER_CHECK for r in st.rows.get("env_checks", [])):
                self.record_interpreter_scan(h, st, self.scan_interpreter_sync(h, st))  # the new roots, from here on
                st = self.ctx.state(h, st.id)
            return st, "; the new environment a person accepted is recorded as this session's baseline"
        pending = next((q for q in reversed(questions) if (q["info"] or {}).get("digest") == digest
                        and int(q["id"]) not in answers), None)
        if pending is None:
            h.record(st.id).question(kind=QUESTION_KIND,
                                     text=(f"The server that resumes session {st.id} runs in another environment "
                                           "than the one the session recorded: " + "; ".join(diffs) + ". Accept it as "
                                           "the session's new baseline environment? Measurements so far were made in "
                                           "the recorded one."),
                                     info={"digest": digest, "differences": diffs})
        raise self.ctx.refuse(h, st.id, "start_session", setup_rules.environment_differs(st.id, diffs, h.workspace))

    def pending_environment_question(self, session_id: str) -> dict[str, Any] | None:
        """The newest unanswered environment question of the session, or None."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        answered = {int(c["question_id"]) for c in st.rows.get("confirmations", [])
                    if c.get("question_id") is not None and c["kind"] in (ANSWER_KIND, DECLINE_KIND)}
        return next((dict(q) for q in reversed(st.rows.get("questions", []))
                     if q["kind"] == QUESTION_KIND and int(q["id"]) not in answered), None)

    def environment_question_in(self, workspace: str) -> tuple[str, dict[str, Any]] | None:
        """``(session id, question)`` of the workspace's newest session when it waits for an environment answer."""
        from pypto_tune.tools.code.workspace import resolve_workspace

        h = self.ctx.handle(resolve_workspace(workspace))
        rows = h.ledger.rows("sessions")
        if not rows:
            return None
        sid = rows[-1]["id"]
        self.ctx.remember(sid, h.workspace)
        q = self.pending_environment_question(sid)
        return (sid, q) if q is not None else None

    def confirm_environment(self, session_id: str, *, source: str, accept: bool) -> str:
        """Record a person's answer to the pending environment question (``source``: "elicitation" or "cli")."""
        if source not in PERSON_SOURCES:
            raise InputError(f"confirmation source must be one of {PERSON_SOURCES}, got {source!r}")
        q = self.pending_environment_question(session_id)
        if q is None:
            raise InputError("there is no environment question waiting for an answer",
                             hint="it appears when a server in another environment resumes the session")
        h = self.ctx.find(session_id)
        h.record(session_id).confirmation(kind=ANSWER_KIND if accept else DECLINE_KIND,
                                          detail=str(q["info"].get("digest", "")), source=source,
                                          question_id=int(q["id"]))
        if accept:
            return ("accepted by a person: the next start_session from that server records its environment as the "
                    "session's baseline")
        return "declined: resume the session from a server started in the recorded environment"

    # ------------------------------------------------------------------------------------ interpreter fingerprint
    def scan_interpreter_sync(self, h: Handle, st: SessionState) -> Fingerprint:
        """Scan the closure's roots (``tools/running/interpreter_files.py``) as the session's fingerprint would."""
        from pypto_tune.tools.running.interpreter_files import take_sync

        world = self.run_world(h, st)
        # what a sandboxed run cannot see cannot move its number: only such a session leaves the hidden folders out
        return take_sync(world.closure.fingerprinted, workspace=Path(h.workspace),
                         hidden=world.closure.hidden if world.sandboxed else ())

    def record_interpreter_scan(self, h: Handle, st: SessionState, fp: Fingerprint) -> None:
        """Keep ``fp`` as the session's fingerprint: from here on a run is judged only while the roots are as
        scanned."""
        fp.save(self.ctx.fingerprint_path(h, st.id))
        detail = (f"{len(fp.entries)} entries under {len(fp.roots)} folders the run imports or executes from "
                  f"({', '.join(fp.roots[:4])}{', …' if len(fp.roots) > 4 else ''}); digest {fp.digest}")
        h.record(st.id).env_check(batch=max(st.env_batches, 1), name=INTERPRETER_CHECK, ok=True, detail=detail)
        h.fingerprints.pop(st.id, None)
