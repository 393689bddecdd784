"""The knowledge store: what every ledger it was given says about knob moves, as one JSON file a team can share.

One observation per decided one-knob round of a session (a ``run_candidates`` trial or a hand-made round): which
knob class moved, in which stage, on which kind of kernel (vector / cube / mixed), the kernel's shapes and dtypes,
the effective tiles and tasks before and after (:mod:`.situation`), and how much the operator time gained or lost —
or how the change failed. The hand-written priors (``tools/search/priors.json``) are the store's *seed*: every store
carries the seed rules it was built with, and ``tools/search/priors.load_priors`` reads seed and observations
through this one file format.

File format (``format = "pypto-tune-knowledge/1"``)::

    {"format", "exported_at", "seed_version", "seed": {priors.json},
     "sources": [{"key", "operator", "session_id", "workspace", "run_mode", "pypto", "distilled_at", "observations"}],
     "observations": [Observation, ...]}

Merging is by key (session id + round number): importing the same ledger or file twice adds nothing. A file is read
whole and checked; a malformed one is an ``InputError`` naming the file and the first bad entry.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from pypto_tune.tools.errors import ArtifactError, InputError

FORMAT = "pypto-tune-knowledge/1"
ENV = "PYPTO_TUNE_KNOWLEDGE"
Outcome = Literal["kept", "not-chosen", "no-gain", "regression", "failed"]


def default_store() -> Path:
    """``$PYPTO_TUNE_KNOWLEDGE``, else ``~/.config/pypto-tune/knowledge.json`` (import/export's default)."""
    env = os.environ.get(ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "pypto-tune" / "knowledge.json"


class Observation(BaseModel):
    key: str = Field(description="session id + round: the same trial imported twice is one observation")
    operator: str
    session_id: str
    round: int
    stage: str
    group: str = Field(description="frontend / swimlane / incore / algorithm")
    catalog_id: str = ""
    kernel: str = ""
    kernel_kind: str = Field("unknown", description="vector / cube / mixed")
    change_class: str = Field(description="vector-work, cube-tile, option:<name> or other (situation.py)")
    knob: str = Field(description="the knob's short name in its own operator (TILE_B, vec_tile, ...)")
    knob_kind: str
    before: Any = None
    after: Any = None
    before_us: float | None = None
    after_us: float | None = None
    gain_log2: float | None = Field(None, description="log2(before_us / after_us); None when it failed")
    outcome: Outcome
    failure_type: str | None = None
    situation: dict[str, float] = Field(default_factory=dict)
    model_log2: float | None = Field(None, description="the seed model's score of this change, computed when it was "
                                     "distilled: what the measured gain corrects (None: a file from before 2026-12-05 "
                                     "or a change the model cannot score)")
    tensors: list[list[int | None]] = Field(default_factory=list, description="the kernel's tensor shapes")
    elem_bytes: int | None = None
    run_mode: str = "sim"
    pypto: str = ""

    def cite(self) -> str:
        """One line naming the measurement: operator, round, change and times."""
        times = (f"{self.before_us:.3f} → {self.after_us:.3f} µs" if self.before_us and self.after_us is not None
                 else f"{self.before_us:.3f} µs → {self.failure_type or 'failed'}" if self.before_us
                 else self.outcome)
        return (f"{self.operator} r{self.round} ({self.stage}): {self.knob} {_short(self.before)} → "
                f"{_short(self.after)}, {times}")


def _short(v: Any) -> str:
    text = json.dumps(v, separators=(",", ":")) if not isinstance(v, str) else v
    return text if len(text) <= 40 else text[:37] + "..."


class SourceInfo(BaseModel):
    key: str
    operator: str
    session_id: str
    workspace: str = ""
    run_mode: str = "sim"
    pypto: str = ""
    distilled_at: str = ""
    observations: int = 0


class KnowledgeFile(BaseModel):
    format: str = FORMAT
    exported_at: str = ""
    seed_version: str = ""
    seed: dict[str, Any] = Field(default_factory=dict)
    sources: list[SourceInfo] = Field(default_factory=list)
    observations: list[Observation] = Field(default_factory=list)

    def merge(self, other: KnowledgeFile) -> tuple[int, int]:
        """Add ``other``'s observations and sources not here yet; returns (observations added, sources added)."""
        have = {o.key for o in self.observations}
        new = [o for o in other.observations if o.key not in have]
        self.observations.extend(new)
        srcs = {s.key for s in self.sources}
        new_src = [s for s in other.sources if s.key not in srcs]
        self.sources.extend(new_src)
        return len(new), len(new_src)

    def without_operator(self, operator: str) -> KnowledgeFile:
        """The same store minus one operator's observations (leave-one-out evaluation)."""
        return self.model_copy(update={"observations": [o for o in self.observations if o.operator != operator],
                                       "sources": [s for s in self.sources if s.operator != operator]})


@lru_cache(maxsize=1)
def seed() -> dict[str, Any]:
    """The hand-written priors the store starts from (``priors.json``, package data of tools/search; read here, below
    the search that ranks with them)."""
    try:
        text = resources.files("pypto_tune.tools.search").joinpath("priors.json").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ArtifactError(f"the search priors are not installed ({exc})",
                            path="pypto_tune/tools/search/priors.json",
                            hint="reinstall pypto-tune; priors.json is package data") from None
    return json.loads(text)


def empty() -> KnowledgeFile:
    data = seed()
    return KnowledgeFile(seed_version=str(data.get("version", "")), seed=data)


def read(path: Path) -> KnowledgeFile:
    """A knowledge file, checked. A missing file is an empty store (with the shipped seed)."""
    if not path.exists():
        return empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"the knowledge file {path} is not readable JSON ({exc})",
                         hint="restore it from where it was exported, or remove it to start an empty store") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path} is not a pypto-tune knowledge file (format {data.get('format') if isinstance(data, dict) else None!r}, expected {FORMAT!r})",  # noqa: E501
                         hint="export one with `pypto-tune knowledge export FILE`")
    try:
        kf = KnowledgeFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{path}: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}",
                         hint="the file was changed by hand or by another version; re-export it") from None
    if not kf.seed:
        fresh = empty()
        kf.seed, kf.seed_version = fresh.seed, fresh.seed_version
    return kf


def write(path: Path, kf: KnowledgeFile) -> None:
    """Atomically (a reader never sees half a file). The shipped seed is what a written file carries."""
    fresh = empty()
    kf.seed, kf.seed_version = fresh.seed, fresh.seed_version
    kf.exported_at = datetime.now().astimezone().isoformat(timespec="seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(kf.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, path)
