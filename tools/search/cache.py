"""Admission results, remembered by content: (kept sources, knob, value) → admitted edit or refusal.

Admitting one candidate plans the edit and runs the server's admission on it (libcst parses and the role analysis
of both states): about 0.5–1 s on the 2-core test machine. A session proposes from the same kept state several
times (every ``propose_candidates`` call, ``run_candidates`` re-checking ids), and the offline benchmark replays
many trajectories through the same states, so the result is kept. The key is the exact text of every operator
and context file, the knob id and the canonical value: a hit is the same question, so it has the same answer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pypto_tune.tools.patching._cst import canon


def state_key(kept: dict[str, str], context: dict[str, str] | None) -> str:
    h = hashlib.sha256()
    for tag, files in (("op", kept), ("ctx", context or {})):
        for path in sorted(files):
            h.update(f"{tag}\0{path}\0{files[path]}\0".encode())
    return h.hexdigest()


def admission_state_key(kept: dict[str, str], context: dict[str, str] | None, run: dict[str, Any] | None) -> str:
    """The state part of an admission's key: the sources, and the probe record the admission judged on (a site
    the record shows dead is refused, so the same edit may be admitted without a record and refused with one)."""
    key = state_key(kept, context)
    if run:
        key += ":run:" + hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return key


def value_key(value: Any) -> str:
    """A value's identity: ``True`` is not ``1`` (``canon``), and a dict's key order does not count
    (``{-2: 1, -1: 2}`` read back from the ledger as ``{"-1": 2, "-2": 1}`` is the same setting)."""
    return repr(canon(_sorted(value)))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict) and not (len(value) == 1 and "$expr" in value):
        return {k: _sorted(value[k]) for k in sorted(value, key=repr)}
    if isinstance(value, (list, tuple)):
        return [_sorted(v) for v in value]
    return value


class AdmissionCache:
    """In-memory, optionally backed by a JSON file (``load`` / ``save``); entries are plain dicts:
    ``{"ok": True, "sources": {...}, "diff": str, "semantic_hash": str}`` or ``{"ok": False, "refusal": str}``."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.entries: dict[str, dict[str, Any]] = {}
        self.hits = self.misses = 0
        self.admit_s: float | None = None  # running mean of one admission's wall time (the answer budget uses it)
        if self.path is not None and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                self.entries = {}

    @staticmethod
    def key(state: str, knob_id: str, value: Any) -> str:
        return hashlib.sha256(f"{state}\0{knob_id}\0{value_key(value)}".encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        e = self.entries.get(key)
        if e is None:
            self.misses += 1
        else:
            self.hits += 1
        return e

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.entries[key] = entry

    def timed(self, seconds: float) -> None:
        """Record how long one admission took (exponential mean, recent ones weigh most)."""
        self.admit_s = seconds if self.admit_s is None else 0.5 * self.admit_s + 0.5 * seconds

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.entries))
            tmp.replace(self.path)
