"""The rules of starting and resuming a session: a goal, a fixed test command, a working environment, one server.

Rules ``goal``, ``command-fixed``, ``env-check``, ``sandbox``, ``environment`` and ``session-lock``. Only
``tools/errors`` is imported (the workspace lock sits below the session layer).
"""

from __future__ import annotations

from pypto_tune.tools.errors import GateRefusal


def no_goal() -> GateRefusal:
    return GateRefusal("goal", "exactly one of goal_speedup or goal_target_us is required (the agent must ask the "
                       "user, not guess)", allowed=["start_session"],
                       hint="ask the user: 'how many times faster?' or 'which time in µs?' and pass it")


def command_fixed(sid: str, command: list[str], finish: str) -> GateRefusal:
    return GateRefusal("command-fixed", f"session {sid} runs {command}; the test command is fixed once the baseline "
                       "precision passed (every verdict and measurement since was made with it)",
                       allowed=["start_session (same command)", "stop_session", "get_status"], hint=finish)


def patterns_fixed(sid: str, patterns: object, finish: str) -> GateRefusal:
    return GateRefusal("command-fixed", f"session {sid} judges its runs with {patterns}; the verdict patterns are "
                       "fixed once the baseline precision passed (every verdict since was made with them)",
                       allowed=["start_session (same patterns)", "stop_session", "get_status"], hint=finish)


def command_correctable(level1: str, passed_hashes: object) -> bool:
    """The command and the verdict patterns may be corrected until the baseline precision passed."""
    return level1 == "S1_SETUP" and not passed_hashes


def env_check_failed(bad: list[str]) -> GateRefusal:
    return GateRefusal("env-check", "the environment checklist failed: " + "; ".join(bad),
                       allowed=["run_precision_check", "get_status"],
                       hint="fix the failing items (see get_status for the whole checklist), then call "
                       "run_precision_check again")


def no_sandbox(message: str, install_hint: str) -> GateRefusal:
    return GateRefusal("sandbox", f"this server cannot measure: {message}", allowed=["get_status"], hint=install_hint)


def environment_differs(sid: str, diffs: list[str], workspace: object) -> GateRefusal:
    return GateRefusal(
        "environment", f"session {sid} records the environment its runs execute in, and this server's differs: "
        + "; ".join(diffs),
        allowed=["start_session (from a server started in the recorded environment)", "get_status"],
        hint=f"restart the server in the recorded environment, or have a person accept the new one: "
        f"`pypto-tune confirm --workspace {workspace}` typed at a terminal (or their answer in a client that supports "
        "elicitation), then start_session again")


def session_locked(pid: str, since: str) -> GateRefusal:
    return GateRefusal("session-lock", f"another pypto-tune server (pid {pid or '?'}, since {since or '?'}) holds the "
                       "session lock of this workspace", allowed=["get_status", "list_knobs", "analyze_bubbles"],
                       hint="use that server, or stop it; read-only calls keep working here")
