"""Seals on ledger rows: an HMAC per row, made with a key that lives outside the workspace.

The ledger's triggers refuse UPDATE and DELETE, but anyone who can open the SQLite file can INSERT: a forged
"person's confirmation" or measurement would read like the server's own (red team, issue #10). Every row the
server writes therefore gets a seal — HMAC-SHA256 over the table, the rowid and the row's stored values — and a row
without a valid seal is not evidence: ``Ledger.rows`` leaves it out (and remembers it), so no state, gate or report
is built on it.

The key is 32 random bytes in ``$PYPTO_TUNE_SEAL_KEY`` (a file path) or ``~/.config/pypto-tune/ledger-seal.key``,
created with mode 0600 on first use. Its id (a hash of it) is recorded in the ledger, so a ledger opened with another
key fails with a clear error instead of every row silently disappearing.

What this does not stop: a process running as the same user can read the key file and seal a forged row. Run the
agent under another account than the server (README, "Running the agent as another user") for that guarantee.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

import orjson

from pypto_tune.tools.errors import LedgerError

KEY_ENV = "PYPTO_TUNE_SEAL_KEY"


def key_path() -> Path:
    explicit = os.environ.get(KEY_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "pypto-tune" / "ledger-seal.key"


def load_key(create: bool = True) -> bytes:
    path = key_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not create:
            raise LedgerError(f"no ledger seal key at {path}",
                              hint=f"set {KEY_ENV} to the key file the server used for this ledger") from None
        # Written whole to a private file, then linked into place: a server starting at the same moment never
        # reads a key file that exists but is still empty, and exactly one key wins (link fails if one exists).
        data = secrets.token_bytes(32)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)
        except FileExistsError:  # another server created it between our read and our link
            return load_key(create=False)
        except OSError as exc:
            raise LedgerError(f"cannot create the ledger seal key {path}: {exc}",
                              hint=f"make {path.parent} writable, or set {KEY_ENV} to a writable file path") from exc
        finally:
            tmp.unlink(missing_ok=True)
        return data
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger seal key {path}: {exc}",
                          hint=f"fix its permissions, or set {KEY_ENV} to the key file") from exc
    if len(data) < 16:
        raise LedgerError(f"the ledger seal key {path} is too short ({len(data)} bytes)",
                          hint="restore the key file the server created (32 random bytes)")
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return value


class Sealer:
    def __init__(self, key: bytes) -> None:
        self._key = key
        self.key_id = hashlib.sha256(b"pypto-tune seal key id\0" + key).hexdigest()[:16]

    def mac(self, table: str, rowid: int, row: dict[str, Any]) -> str:
        """The seal of one stored row (``row``: column → value exactly as SQLite returns it)."""
        body = orjson.dumps([table, int(rowid), sorted((k, _plain(v)) for k, v in row.items())])
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def valid(self, table: str, rowid: int, row: dict[str, Any], mac: str | None) -> bool:
        return mac is not None and hmac.compare_digest(self.mac(table, rowid, row), mac)
