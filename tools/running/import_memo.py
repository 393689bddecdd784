"""What ``import pypto`` told the environment checklist, remembered for the interpreter it was asked of.

Every session's checklist asks the run's interpreter to import pypto (and torch with it: ~2.7 CPU s, as much as a
small SIM run) for two answers that only the installed files and the run's environment decide: that pypto imports
(its version and where from) and the option keys it knows. The session scans the interpreter's files before the
checklist anyway (``interpreter_files.py``: it is the fingerprint every run is judged against), so the answer is
kept under a key made of that scan's digest, the interpreter and the run environment, and a later session whose scan,
interpreter and environment are the same takes the answer instead of importing again. Anything that could change the
answer changes the key: a package installed, removed or edited (the digest covers every entry's size, inode and
ctime), another ``PYTHONPATH`` or library path (the environment).

What the digest does not cover, and how it is handled:

* the workspace — left out of the scan; the probe's working folder is the workspace and comes first on its
  ``sys.path``, so a workspace file named like a module the import loaded (``torch.py``, a ``numpy/`` folder) could
  shadow it. The answer lists the top-level modules the import loaded; a workspace (or a ``PYTHONPATH`` folder inside
  it) holding an entry with one of those names is asked afresh. An answer whose import loaded anything from the
  workspace is never kept.
* the system folders (``/usr/lib``) — a C library removed from under torch would be noticed by the first run (the
  baseline fails with the import error), not by the checklist.

Only an answer that passed is kept (a failing import is asked again after the user fixes it). An answer carries an
HMAC made with the ledger's seal key: a same-account process that can read the key can forge one, as it can a
ledger row (README, "Running the agent as another user").
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

import orjson
from pydantic import BaseModel, ValidationError

#: Bump when what the probe asks (or how its answer is read) changes: old answers then never match.
ANSWER_VERSION = "1"


class ImportAnswer(BaseModel):
    """``pypto``: what the "import pypto" check showed; ``options``: the option keys the installed pypto knows;
    ``modules``: top-level names the import loaded (for the shadowing check); ``at``: when it was asked."""

    pypto: str
    options: list[str]
    modules: list[str]
    at: str


def memo_folder() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pypto-tune" / "imports"


def memo_key(*, python: str, interpreter_digest: str, env: Mapping[str, str]) -> str:
    body = orjson.dumps([ANSWER_VERSION, python, interpreter_digest, sorted(env.items())])
    return hashlib.sha256(body).hexdigest()


def shadowing_names(folders: Iterable[Path], modules: Iterable[str]) -> list[str]:
    """Entries of ``folders`` named like one of ``modules`` (``torch.py``, ``torch/``, ``torch.cpython-….so``)."""
    wanted = set(modules)
    found: set[str] = set()
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found.update(n for n in names if n.split(".", 1)[0] in wanted)
    return sorted(found)


class ImportMemo:
    """The remembered answer for one key, checked against the folders a fresh probe would search first."""

    def __init__(self, *, key: str, seal_key: bytes, path_folders: list[Path], folder: Path | None = None) -> None:
        self.key = key
        self._seal_key = seal_key
        self._path_folders = path_folders
        self._file = (folder or memo_folder()) / f"{key}.json"
        #: why the last recall gave nothing (what the tests read)
        self.missed = ""

    def _mac(self, body: bytes) -> str:
        return hmac.new(self._seal_key, b"pypto-tune import answer\0" + self.key.encode() + b"\0" + body,
                        hashlib.sha256).hexdigest()

    def recall(self) -> ImportAnswer | None:
        try:
            stored = orjson.loads(self._file.read_bytes())
            body, mac = stored["answer"].encode(), str(stored["mac"])
        except FileNotFoundError:
            self.missed = "not asked before for this interpreter and environment"
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.missed = "the remembered answer is unreadable"
            return None
        if not hmac.compare_digest(self._mac(body), mac):
            self.missed = "the remembered answer's seal does not match"
            return None
        try:
            answer = ImportAnswer.model_validate_json(body)
        except ValidationError:
            self.missed = "the remembered answer is malformed"
            return None
        shadows = shadowing_names(self._path_folders, answer.modules)
        if shadows:
            self.missed = f"the workspace holds {', '.join(shadows[:3])}, named like a module the import loads"
            return None
        self.missed = ""
        return answer

    def remember(self, answer: ImportAnswer) -> None:
        """Keep ``answer`` (best effort: a cache folder that cannot be written only means the next session asks)."""
        body = answer.model_dump_json().encode()
        data = orjson.dumps({"answer": body.decode(), "mac": self._mac(body)})
        tmp = self._file.with_name(f".{self._file.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, self._file)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
