"""The world a session's runs execute in, recorded once at session start (issue #16, item 2).

A run's environment used to be built from whatever the server process had at that moment — so a server restarted
with ``PYTHONPATH=/somewhere`` (holding a ``sitecustomize.py``) and a resume carried that folder into every later
run, outside any fingerprint. Now :func:`current` describes what this server would give a run — the child
environment (``runner.build_child_env``: PATH, HOME, CANN's ``ASCEND_*`` / ``LD_LIBRARY_PATH``, ``PYTHONPATH``,
``PTO_*``, ``TILE_FWK_*``, ``TZ``), the interpreter, its closure (``closure.py``) and the sandbox — and the session
records it (``sessions.config``). Every run uses the recorded environment (plus the chip it is given), never the
server's; a resume whose world differs is refused with the differences named (:func:`differences`), unless a person
accepts the new world as the session's baseline (``pypto-tune confirm`` or the client's elicitation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.running import closure as closure_mod
from pypto_tune.tools.running import sandbox
from pypto_tune.tools.running.runner import build_child_env

#: Key of the record in ``sessions.config`` and in an ``environment`` correction's ``after_value``.
CONFIG_KEY = "run_world"
#: Not part of the recorded environment: the server picks the chip of every run (R3/R5).
PER_RUN = ("TILE_FWK_DEVICE_ID",)


@dataclass
class RunWorld:
    """What a session's runs execute in. ``sandbox`` is the tool (``bubblewrap 0.8.0``) or ``none``."""

    environment: dict[str, str]
    python: str
    closure: sandbox.Closure
    sandbox: str
    sandbox_note: str = ""  # when ``none``: what was missing (the person allowed --unsandboxed)
    probe: dict[str, Any] = field(default_factory=dict)  # the interpreter's own answer (sys.path ...), for the record

    @property
    def sandboxed(self) -> bool:
        return self.sandbox != "none"

    def run_env(self, device_id: str | None = None) -> dict[str, str]:
        """The environment of one run: the recorded one, plus the chip (NPU)."""
        env = dict(self.environment)
        if device_id is not None:
            env["TILE_FWK_DEVICE_ID"] = str(device_id)
        return env

    def as_json(self) -> dict[str, Any]:
        return {"environment": dict(self.environment), "python": self.python, "closure": self.closure.as_json(),
                "sandbox": self.sandbox, "sandbox_note": self.sandbox_note,
                "sys_path": list(self.probe.get("path", []))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunWorld":
        return cls(environment=dict(data["environment"]), python=str(data["python"]),
                   closure=sandbox.Closure.from_json(data.get("closure", {})), sandbox=str(data.get("sandbox", "")),
                   sandbox_note=str(data.get("sandbox_note", "")), probe={"path": list(data.get("sys_path", []))})


def child_environment(run_mode: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment this server gives a run, without the per-run chip."""
    env = build_child_env(run_mode=run_mode, extra=extra)
    for k in PER_RUN:
        env.pop(k, None)
    return env


def sandbox_mode() -> tuple[str, str]:
    """``(tool, note)``: the sandbox this server builds, or ``("none", what is missing)`` when the person allowed
    ``--unsandboxed``; raises SandboxUnavailable (naming what is missing and how to install it) otherwise."""
    st = sandbox.status()
    if st.ok:
        return st.tool, ""
    if sandbox.policy().allow_unsandboxed:
        return "none", st.missing
    sandbox.require()  # raises, with the install hint
    raise AssertionError("unreachable")


def current(*, run_mode: str, python: str, workspace: Path, extra: dict[str, str] | None = None) -> RunWorld:
    """What this server would record for a session now (see the module docstring). Checks, when sandboxed, that
    ``python`` starts inside the sandbox and sees its ``sys.path`` there; raises InputError naming what is missing."""
    tool, note = sandbox_mode()
    env = child_environment(run_mode, extra)
    roots, devices = closure_mod.declared()
    clo, info = closure_mod.find_sync(python, env, workspace=workspace, declared_roots=roots,
                                      declared_devices=devices)
    if info.get("error"):
        raise InputError(f"the test command's interpreter {python} does not start: {info['error'][-300:]}",
                         hint="give a test command whose Python runs (e.g. the server's own: python3)")
    if tool != "none":
        problem = closure_mod.check_inside(python, env, clo, workspace=workspace, outside=info)
        if problem:
            raise InputError(problem, hint="declare the missing folder with --sandbox-root and start the server "
                             "again")
    return RunWorld(environment=env, python=python, closure=clo, sandbox=tool, sandbox_note=note, probe=info)


def _short(value: str, limit: int = 160) -> str:
    return value if len(value) <= limit else value[:limit - 1] + "…"


def differences(recorded: RunWorld, now: RunWorld) -> list[str]:
    """What differs between the recorded world and this server's, one line per item, for a person to read."""
    out: list[str] = []
    a, b = recorded.environment, now.environment
    for key in sorted(set(a) | set(b)):
        if key in PER_RUN or a.get(key) == b.get(key):
            continue
        if key not in b:
            out.append(f"{key} was {_short(a[key])!r}, now unset")
        elif key not in a:
            out.append(f"{key} is now {_short(b[key])!r} (unset when the session started)")
        else:
            out.append(f"{key} was {_short(a[key])!r}, now {_short(b[key])!r}")
    if recorded.python != now.python:
        out.append(f"the interpreter was {recorded.python}, now {now.python}")
    ra, rb = set(recorded.closure.roots), set(now.closure.roots)
    if ra != rb:
        if rb - ra:
            out.append("interpreter/toolchain roots added: " + ", ".join(sorted(rb - ra)[:6]))
        if ra - rb:
            out.append("interpreter/toolchain roots gone: " + ", ".join(sorted(ra - rb)[:6]))
    da, db = set(recorded.closure.devices), set(now.closure.devices)
    if da != db:
        out.append(f"device paths were {sorted(da) or 'none'}, now {sorted(db) or 'none'}")
    if recorded.sandboxed != now.sandboxed:
        out.append(f"runs were {'sandboxed (' + recorded.sandbox + ')' if recorded.sandboxed else 'unsandboxed'}, "
                   f"now {'sandboxed (' + now.sandbox + ')' if now.sandboxed else 'unsandboxed: ' + now.sandbox_note}")
    return out
