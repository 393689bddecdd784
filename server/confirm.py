"""``pypto-tune confirm``: a person answers the question the server asked (R5: retry a baseline that failed 3 times;
or accept the environment of a server that wants to resume a session recorded in another one).

Why a terminal command: some MCP clients cannot ask their user anything (no elicitation), and the agent's own
``confirm_retry=true`` is not the user's answer (issue #10, attack 8). So the answer is typed at a terminal: stdin and
stdout must be a TTY, the question is shown, and only the word typed at the prompt counts. It is recorded as
``source="cli"`` with the question it answers. What this cannot rule out: an agent that drives a pseudo-terminal on
the user's account (``script``, ``expect``) can still impersonate the person; the ledger then shows a CLI answer at a
time the user can check against their own terminal history.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pypto_tune.tools.errors import InputError


def confirm_command(workspace: Path, session: str | None = None, *, stdin: TextIO | None = None,
                    stdout: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    if not (_isatty(stdin) and _isatty(stdout)):
        raise InputError("pypto-tune confirm must be typed by a person at a terminal (stdin/stdout are not a TTY): a "
                         "tool call of an agent is not the user's answer",
                         hint="run it yourself in a terminal, or answer in an MCP client that supports elicitation")
    from pypto_tune.tools.session.ledger import LEDGER_DIR, LEDGER_FILE, Ledger
    from pypto_tune.tools.service import TuningService

    ws = Path(workspace).resolve()
    if not (ws / LEDGER_DIR / LEDGER_FILE).exists():
        raise InputError(f"no pypto-tune ledger in {ws / LEDGER_DIR}", hint="pass the session's --workspace")
    ledger = Ledger.for_workspace(ws)
    sessions = ledger.rows("sessions")
    ledger.close()
    if not sessions:
        raise InputError(f"the ledger in {ws} holds no session", hint="start a session first")
    sid = session or sessions[-1]["id"]
    service = TuningService(default_workspace=ws)
    st = service.ctx.state(service.ctx.find(sid), sid)  # the CLI reads the question it answers
    head = f"session {sid} ({st.session['operator']}) asks:\n  "
    q = st.pending_question
    if q is not None:
        return _ask(stdin, stdout, head + q["text"], "RETRY", "to allow one more baseline attempt",
                    lambda yes: service.confirm(sid, source="cli", answer=yes))
    env_q = service.pending_environment_question(sid)
    if env_q is not None:  # a server in another environment wants to resume the session (issue #16)
        return _ask(stdin, stdout, head + env_q["text"], "ACCEPT", "to record the new environment as the session's "
                    "baseline", lambda yes: service.confirm_environment(sid, source="cli", accept=yes))
    stdout.write(f"session {sid}: no question is waiting for an answer.\n")
    return 1


def _ask(stdin: TextIO, stdout: TextIO, text: str, yes: str, means: str, record: Callable[[bool], str]) -> int:
    """Show the question; only the exact word ``yes`` or ``NO`` typed at the prompt is recorded."""
    stdout.write(f"{text}\nType {yes} {means}, or NO to decline: ")
    stdout.flush()
    answer = (stdin.readline() or "").strip()
    if answer not in (yes, "NO"):
        stdout.write(f"no answer recorded (type {yes} or NO exactly).\n")
        return 1
    stdout.write(record(answer == yes) + "\n")
    return 0


def _isatty(stream: TextIO) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
