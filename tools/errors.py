"""The flat family of errors the domain library raises.

Every error carries a stable ``code`` and a ``hint`` that names what to do next, so that ``server/`` can map
any of them to a ToolError the agent can act on, and the CLI to a one-line message. Nothing here is an MCP type.
"""

from __future__ import annotations


class PyptoTuneError(Exception):
    """Base class. ``code`` is stable (scripts match on it); ``hint`` says what to do next."""

    code = "error"

    def __init__(self, message: str, *, hint: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code

    def __str__(self) -> str:  # the text an agent reads
        return f"{self.message}" + (f"\nNext: {self.hint}" if self.hint else "")


class GateRefusal(PyptoTuneError):
    """A tuning rule forbids the call. ``rule`` is the rule id shown as ``GATE <rule>:``."""

    code = "gate"

    def __init__(self, rule: str, message: str, *, allowed: list[str] | None = None, hint: str = "") -> None:
        self.rule = rule
        self.allowed = list(allowed or [])
        super().__init__(message, hint=hint)

    def __str__(self) -> str:
        text = f"GATE {self.rule}: {self.message}"
        if self.hint:
            text += f"\nNext: {self.hint}"
        if self.allowed:
            text += "\nAllowed now: " + ", ".join(self.allowed)
        return text


class InputError(PyptoTuneError):
    """An argument is malformed or out of range (bad path, unknown knob, illegal value...)."""

    code = "input"


class ArtifactError(PyptoTuneError):
    """A run's artifact is missing, empty, truncated or malformed. Names the file and the place."""

    code = "artifact"

    def __init__(self, message: str, *, path: str = "", where: str = "", expected: str = "", hint: str = "") -> None:
        self.summary = message  # without the file/place parts (lets a worker process re-raise it unchanged)
        self.path = path
        self.where = where
        self.expected = expected
        parts = [message]
        if path:
            parts.append(f"file: {path}")
        if where:
            parts.append(f"at: {where}")
        if expected:
            parts.append(f"expected: {expected}")
        super().__init__("; ".join(parts), hint=hint)


class PatchError(PyptoTuneError):
    """A source edit could not be planned or applied; the files were not touched."""

    code = "patch"


class KnobValueError(PatchError):
    """A knob value breaks its legality rule (domain.md C). ``rule`` names it, ``legal`` the allowed range."""

    code = "knob-value"

    def __init__(self, message: str, *, rule: str, legal: str, hint: str = "") -> None:
        self.rule = rule
        self.legal = legal
        super().__init__(f"{message} (rule {rule}; legal: {legal})", hint=hint)


class TreeError(PyptoTuneError):
    """The workspace tree cannot be accounted for (too large, a link out of it, a recorded copy altered)."""

    code = "tree"


class RunError(PyptoTuneError):
    """The test command could not be started at all (missing interpreter, bad cwd...)."""

    code = "run"


class LedgerError(PyptoTuneError):
    """The ledger cannot be opened or written (read-only workspace, disk full, locked by another server)."""

    code = "ledger"


class ResourceError(PyptoTuneError):
    """The machine refused the server a resource it needed (a full disk, a file it may not write)."""

    code = "resource"


def domain_error(exc: BaseException) -> PyptoTuneError | None:
    """The error an agent should read for ``exc``, or None for a bug. Concurrent work (a batch's trials run in a task
    group) fails as an ExceptionGroup whose own text says only "unhandled errors in a TaskGroup": its first domain
    error is the cause. An OSError of the file system (ENOSPC, EROFS, EACCES...) names the file and what to do."""
    import errno

    if isinstance(exc, PyptoTuneError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        leaves = [domain_error(e) for e in exc.exceptions]
        return next((e for e in leaves if e is not None), None)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                                                  errno.EPERM, errno.EIO):
        where = f" writing {exc.filename}" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return ResourceError(f"the disk is full ({exc.strerror}){where}",
                                 hint="free space on that file system, then call again; every ledger event is one "
                                 "transaction, so nothing was recorded half (get_status shows what was)")
        return ResourceError(f"the server may not write there ({exc.strerror}){where}",
                             hint="make the workspace writable by the server's account, then call again")
    return None
