"""What every tool family is registered with (``server/families/``): the lazily built service, the job registry, the
tool registry, and the parameter types and annotations the families share.

A family is a module with ``register(w: Wiring) -> None`` that declares its tools with ``w.reg.tool`` /
``w.reg.long_tool`` and reaches the domain through ``w.sync`` (a synchronous operation, off the event loop) or
``await w.holder.aget()`` (an async one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
from mcp.types import ToolAnnotations
from pydantic import BeforeValidator, Field
from pypto_tune.server.jobs import JobRegistry
from pypto_tune.server.tooling import ToolRegistry

if TYPE_CHECKING:
    from pypto_tune.tools.service import TuningService

T = TypeVar("T")

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"  # the one default of every lang argument (tools, prompts, the status resource)

# Annotations say what a tool does to the user's machine. The ledger and archives under WORKSPACE/.pypto-tune/ are
# the server's own bookkeeping: writing them does not make a tool "not read-only".
RO = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
LEDGER = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
LEDGER_IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                    open_world_hint=False)
EDITS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
EDITS_IDEMPOTENT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                   open_world_hint=False)


def _check_lang(value: Any) -> Any:
    # A clearer refusal than pydantic's literal_error, and never a silent fallback to the default.
    if value not in LANGS:
        raise ValueError(f"lang must be 'zh' or 'en' (got {value!r}); zh is the default")
    return value


SessionId = Annotated[str, Field(description="id returned by start_session")]
Lang = Annotated[Literal["zh", "en"], BeforeValidator(_check_lang),
                 Field(description="language of labels and messages")]
#: a tool that answers a session in prose (a board, an analysis, a report): omitted, it takes the session's language
# (typed without None: an omitted lang is None — defaults are not validated — and the schema stays one enum)
SessionLang = Annotated[Literal["zh", "en"], BeforeValidator(_check_lang),
                        Field(description="default: the session's")]
StartLang = Annotated[Literal["zh", "en"], BeforeValidator(_check_lang),
                      Field(description="the session's language (default zh)")]


class ServiceHolder:
    """The ``TuningService``, built once on first use: ``initialize`` and the listings need only the result models
    and the rules, so a client's connect is not held up by a second of imports (numpy, libcst, the analysis)."""

    def __init__(self, service: TuningService | None = None, workspace: Path | None = None) -> None:
        self._service = service
        self._workspace = workspace
        self._lock = threading.Lock()

    def get(self) -> TuningService:
        with self._lock:
            if self._service is None:
                from pypto_tune.tools.service import TuningService

                self._service = TuningService(default_workspace=self._workspace)
            return self._service

    @property
    def built(self) -> bool:
        return self._service is not None

    @property
    def workspace(self) -> Path | None:
        """The server's default workspace (relative paths an agent passes are read against it)."""
        return self._workspace

    async def aget(self) -> TuningService:
        return self._service if self._service is not None else await anyio.to_thread.run_sync(self.get)


@dataclass
class Wiring:
    holder: ServiceHolder
    jobs: JobRegistry
    reg: ToolRegistry

    async def sync(self, work: Callable[[TuningService], T]) -> T:
        """A synchronous domain operation, off the event loop (errors are mapped by the registry)."""
        return await anyio.to_thread.run_sync(lambda: work(self.holder.get()))
