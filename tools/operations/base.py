"""What every operation object is built with: the session context (sessions by id, derived state, gates, recorded
writes), and the lock every operation that changes a session holds."""

from __future__ import annotations

import functools
import inspect
import logging
import stat
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pypto_tune.tools.rules import gates
from pypto_tune.tools.rules import calls as call_rules, drift as drift_rules, retry
from pypto_tune.tools.rules.drift import UnrecordedEdit
from pypto_tune.tools.errors import GateRefusal, InputError, PyptoTuneError
from pypto_tune.tools.session.ledger import LEDGER_DIR, Ledger
from pypto_tune.tools.session.recorder import Recorder
from pypto_tune.tools.patching import (
    hash_sources,
    read_sources,
    write_sources,
)
from pypto_tune.tools.patching.hashes import code_hash, semantic_hash  # noqa: F401  (re-exported)
from pypto_tune.tools.code.codestate import FileEntry, diff_trees, entries_for_sources, scan_tree
from pypto_tune.tools.errors import TreeError
from pypto_tune.tools.running.interpreter_files import EnvironmentWatch, Fingerprint
from pypto_tune.tools.session.discarded import VOID_FIELD, charged_discards
from pypto_tune.tools.session.state import SessionState, derive_state, load_rows
from pypto_tune.tools.code import server_files
from pypto_tune.tools.code.workspace import WorkspaceLock

if TYPE_CHECKING:
    from pypto_tune.tools.code.admission import Admission
    from pypto_tune.tools.running.executors import Executor


class ProgressSink(Protocol):
    """Where a long operation reports what it is doing. The executors call it with ``(elapsed_s, last_output_line)``
    every 2 s while a run executes; the operations add where they are: ``phase`` says it in words ("repeat 2/3",
    "environment checklist"), ``step`` of ``steps`` is the same position as numbers a client can draw a bar from
    (0-based ``step``; ``steps`` when the count is known)."""

    def __call__(self, elapsed: float, line: str, *, phase: str | None = None, step: int | None = None,
                 steps: int | None = None) -> Awaitable[None]: ...


Progress = ProgressSink | None

#: env_checks row naming the scan of the interpreter's files; its detail ends with "digest <sha256>"
INTERPRETER_CHECK = "interpreter files"

log = logging.getLogger("pypto_tune.service")


#: handles whose operation lock the current call holds (a context variable: each job task and each worker thread of
#: a synchronous tool has its own context, so two calls on one event loop are told apart)
_HELD: ContextVar[frozenset[int]] = ContextVar("pypto_tune_operation_locks", default=frozenset())


class Handle:
    """What this process keeps per workspace: the ledger, the session lock and the operation in progress."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.ledger = Ledger.for_workspace(workspace)
        self.lock = WorkspaceLock(workspace)
        self.busy: str | None = None  # name of the operation that holds the operation lock
        self.server_index: tuple[tuple[str, ...], dict[str, int]] | None = None  # sessions, recorded blobs
        self._busy_mutex = threading.Lock()
        self.env_watch = EnvironmentWatch()  # scans of the interpreter's files, shared by parallel runs
        self.fingerprints: dict[str, Fingerprint | None] = {}  # session -> what was scanned before its baseline
        self.legacy_worlds: dict[str, Any] = {}  # session -> RunWorld of a session recorded without one
        # session -> (hash of the exact bytes, RunOutcome) of its last run, when that run was a passed SIM precision
        # run (RunOps.offer_sample / take_sample): it may be the next collect_swimlane's sample. Kept in memory only:
        # the output folders' digests at the run's end, which the sample is checked against, are not in the ledger
        self.fresh_sim_runs: dict[str, tuple[str, Any]] = {}
        self.quarantined: list[str] = []  # what write copied away before writing over an edit (for the message)

    def record(self, session_id: str | None) -> Recorder:
        """The writes of ``session_id`` into this workspace's ledger, one method per kind of row."""
        return Recorder(self.ledger, session_id)


def exclusive(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A call that changes a session holds the session's one operation lock from before its gates to its last
    write — long jobs and synchronous tools alike. A second such call meanwhile is refused (``GATE busy``) before it
    reads anything, so it cannot act on a state that the first is changing (issue #16: of two concurrent
    ``apply_tuning_patch`` calls the refused one had already written the operator file).

    Decorates a method of an operation object: the object's ``ctx`` (a :class:`SessionContext`) holds the lock."""
    name = fn.__name__
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(self: HasContext, session_id: str | None = None, *args: Any, **kw: Any) -> Any:
            with self.ctx.operation(session_id, name):
                return await fn(self, session_id, *args, **kw)
        return run_async

    @functools.wraps(fn)
    def run(self: HasContext, session_id: str | None = None, *args: Any, **kw: Any) -> Any:
        with self.ctx.operation(session_id, name):
            return fn(self, session_id, *args, **kw)
    return run


class HasContext(Protocol):
    """An operation object: built with the one :class:`SessionContext` of its service."""

    ctx: SessionContext


class SessionContext:
    """What every operation object shares, passed to its constructor: the sessions this process serves (one ledger
    and workspace lock per workspace), the runner (``executor``, ``python``), deriving a session's state, the gates,
    and the writes of operator files. One per ``TuningService``."""

    @contextmanager
    def operation(self, session_id: str | None, name: str) -> Iterator[None]:
        if session_id is None:  # no session (analyze_bubbles on a folder): nothing to lock
            yield
            return
        with self.claim(self.find(session_id), name, session_id):
            yield

    @contextmanager
    def claim(self, h: Handle, name: str, session_id: str | None) -> Iterator[None]:
        """Take ``h``'s operation lock for ``name`` (re-entrant within one call), or refuse with ``GATE busy``."""
        if id(h) in _HELD.get():
            yield
            return
        with h._busy_mutex:
            holder = h.busy
            if holder is None:
                h.busy = name
        if holder is not None:
            raise self.refuse(h, session_id, name, call_rules.busy(holder))
        token = _HELD.set(_HELD.get() | {id(h)})
        try:
            yield
        finally:
            _HELD.reset(token)
            with h._busy_mutex:
                h.busy = None

    # -------------------------------------------------------------- the interpreter's files (interpreter_files.py)
    def fingerprint_path(self, h: Handle, session_id: str) -> Path:
        return h.workspace / LEDGER_DIR / "interpreter" / f"{session_id}.json.gz"

    def fingerprint(self, h: Handle, st: SessionState) -> Fingerprint | None:
        """The scan taken before the session's baseline, checked against the digest the ledger holds for it (a
        rewritten fingerprint file is not trusted: every run is then refused until the session is restarted)."""
        if st.id in h.fingerprints:
            return h.fingerprints[st.id]
        rows = [r for r in st.rows.get("env_checks", []) if r["name"] == INTERPRETER_CHECK]
        fp: Fingerprint | None = None
        if rows:
            want = str(rows[-1]["detail"]).rsplit("digest ", 1)[-1].strip()
            try:
                fp = Fingerprint.load(self.fingerprint_path(h, st.id))
            except (OSError, ValueError, KeyError) as exc:
                log.warning("interpreter fingerprint of %s unreadable: %s", st.id, exc)
                fp = Fingerprint(roots=[], entries={"<fingerprint file unreadable>": (0, 0, 0)})
            if fp.digest != want:
                fp = Fingerprint(roots=fp.roots, entries={"<fingerprint file differs from the ledger>": (0, 0, 0)})
        h.fingerprints[st.id] = fp
        return fp

    def __init__(self, *, default_workspace: Path | None = None, python: str = sys.executable,
                 executor: "Executor | None" = None) -> None:
        from pypto_tune.tools.running.executors import default_executor

        self.default_workspace = default_workspace
        self.python = python
        # where isolated runs execute (tools/running/executors/): this machine unless `serve --executor ray` chose Ray
        self.executor: Executor = executor if executor is not None else default_executor()
        self._handles: dict[Path, Handle] = {}
        self._session_ws: dict[str, Path] = {}
        self._contexts: dict[tuple[str, str], dict[str, str]] = {}
        self._sem_cache: dict[str, str] = {}

    def handle(self, workspace: Path) -> Handle:
        if workspace not in self._handles:
            self._handles[workspace] = Handle(workspace)
        return self._handles[workspace]

    def find(self, session_id: str) -> Handle:
        if not session_id or not isinstance(session_id, str):
            raise InputError("session_id is required", hint="call start_session first; it returns the id")
        ws = self._session_ws.get(session_id)
        if ws is None:
            candidates = [self.default_workspace] if self.default_workspace else []
            for cand in candidates:
                ledger_file = cand / LEDGER_DIR / "ledger.sqlite3"
                if ledger_file.exists():
                    h = self.handle(cand)
                    if h.ledger.rows("sessions", session_id):
                        ws = cand
                        self._session_ws[session_id] = cand
        if ws is None:
            raise InputError(
                f"unknown session_id {session_id!r}",
                hint="call start_session with the workspace to resume it (the ledger lives in WORKSPACE/.pypto-tune/)",
            )
        return self.handle(ws)

    def know_session(self, workspace: Path, session_id: str) -> None:
        """Let later calls find a session this process neither started nor resumed. A campaign driver that resumes
        after its predecessor died finds a session already finished in its operator's workspace, and must still be
        able to write that session's reports (``render_report`` is the one call a finished session takes)."""
        h = self.handle(workspace)
        if not h.ledger.rows("sessions", session_id):
            raise InputError(f"the ledger of {workspace} holds no session {session_id!r}",
                             hint="pass the workspace the session was started in")
        self._session_ws[session_id] = workspace

    def remember(self, session_id: str, workspace: Path) -> None:
        """Later calls find ``session_id`` in ``workspace`` (a session this process started, resumed or attached)."""
        self._session_ws[session_id] = workspace

    def state(self, h: Handle, session_id: str) -> SessionState:
        return derive_state(load_rows(h.ledger, session_id))

    def refuse(self, h: Handle, session_id: str | None, tool: str, refusal: GateRefusal) -> GateRefusal:
        try:
            h.record(session_id).refusal(tool=tool, rule=refusal.rule, message=refusal.message)
        except PyptoTuneError:
            log.exception("could not record a refusal")
        return refusal

    def gate(self, h: Handle, st: SessionState, tool: str, *, mutating: bool = True, **kw: Any) -> None:
        """Run the gates for ``tool``; record and raise the first refusal."""
        try:
            if mutating:
                if id(h) not in _HELD.get():  # every call that changes a session is @exclusive (a bug otherwise)
                    raise RuntimeError(f"{tool} changes the session without holding its operation lock")
                h.lock.acquire()
                findings = h.ledger.integrity_findings() if tool not in call_rules.INTEGRITY_EXEMPT else []
                if findings:
                    raise call_rules.untrusted_ledger(findings)
                st = self.heal(h, st)
                st = self.void_discarded(h, st)[0]
                if (not st.finished and st.open_round is None and st.level1 == "S4_TUNE"
                        and gates.time_limit_exceeded(st)):
                    self.finish(h, st, f"time limit of {st.session['time_limit_h']} h reached")
                    st = self.state(h, st.id)
            gates.check(tool, st, drift=self.drift(h, st), **kw)
        except GateRefusal as refusal:
            raise self.refuse(h, st.id, tool, refusal) from None

    def drift(self, h: Handle, st: SessionState) -> str:
        """'' when the workspace holds exactly the recorded state, else what differs (every file a run can read
        counts, not only the operator files: a rewritten harness is drift like an edited kernel)."""
        try:
            actual = scan_tree(h.workspace, strict=False) if st.tree else _operator_entries(h.workspace, st)
        except TreeError as exc:
            return exc.message
        # The server's own reports (render_report writes them next to the operator) are not drift. Safe to skip:
        # a run materialises only the RECORDED files, so a file added later can never reach a run anyway.
        reports = _report_names(st)
        actual = {p: e for p, e in actual.items() if p not in reports or p in st.tree}
        diff = diff_trees(st.expected_tree, actual)
        parts = [] if diff.empty else [diff.describe()]
        alien = self._foreign(h, st)
        if alien:
            parts.append(server_files.describe(alien))
        return "; ".join(parts)

    def _foreign(self, h: Handle, st: SessionState) -> list[tuple[str, str]]:
        """Entries of ``.pypto-tune/`` the server did not write (``tools/code/server_files.py``), judged against the
        sealed ledger: its sessions and every session's recorded blobs."""
        sessions = tuple(sorted(str(r["id"]) for r in h.ledger.rows("sessions")))
        if h.server_index is None or h.server_index[0] != sessions:
            blobs = {str(r["sha256"]): int(r["size"]) for r in h.ledger.rows("tree_files") if r["link"] is None}
            h.server_index = (sessions, blobs)
        known = server_files.Known(sessions=set(sessions), blobs=h.server_index[1])
        return server_files.foreign(h.workspace, known)

    def disk_sources(self, h: Handle, st: SessionState) -> dict[str, str]:
        """The operator files as they are on disk, for the record of what a revert replaced. A file that is missing,
        or is now a symbolic link (never read through), is recorded as a one-line note instead of its text."""
        from pypto_tune.tools.patching.nofollow import LinkRefused

        out: dict[str, str] = {}
        for rel in st.session["operator_files"]:
            try:
                out.update(read_sources(h.workspace, [rel]))
            except LinkRefused as exc:
                out[rel] = f"# <not read: {exc.message}>\n"
            except InputError:
                out[rel] = "# <missing on disk>\n"
        return out

    def restore_tree(self, h: Handle, st: SessionState) -> str:
        """Put the recorded state back: the operator files as the server wrote them, every other recorded file from
        the blob store; files added since are moved to ``.pypto-tune/quarantine/<time>/`` (nothing a person wrote is
        deleted). Returns what was done besides the operator files.

        No step follows a symbolic link (``tools/patching/nofollow.py``): a recorded folder that is now a link is
        refused, naming it, before anything is written, removed or moved (issue #16: revert rewrote a file outside
        the workspace, and pointed at .pypto-tune/ it overwrote the ledger). The added entry that IS the link is
        moved into quarantine as a link; its target is never touched."""
        from datetime import datetime

        from pypto_tune.tools.code.codestate import BlobStore
        from pypto_tune.tools.patching.nofollow import open_tree

        diff = diff_trees(st.expected_tree, scan_tree(h.workspace, strict=False)) if st.tree else None
        restore = [p for p in (diff.changed + diff.removed if diff else []) if p not in st.expected_sources]
        added = list(diff.added) if diff else []
        alien = [p for p, _ in self._foreign(h, st)]
        if LEDGER_DIR in alien:
            raise drift_rules.ledger_dir_is_link(LEDGER_DIR)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        moved: list[str] = []
        with open_tree(h.workspace) as tree, open_tree(h.workspace, allow_server_dir=True) as own:
            for path in [*st.expected_sources, *restore, *added]:
                tree.check_parents(path)  # LinkRefused before the first write
            for path in alien:
                own.check_parents(path)
            self.write(h, st, st.expected_sources, "revert_patch", over_edit="quarantine")
            for path in alien:  # files dropped into the server's own folder: out of every run's way
                own.move_to(path, own, f"{LEDGER_DIR}/quarantine/{stamp}/{path}")
                moved.append(path)
            if diff is None:
                return f"moved to {LEDGER_DIR}/quarantine/: " + ", ".join(moved) if moved else ""
            if added:
                for path in added:
                    if any(path.startswith(m + "/") for m in moved):
                        continue  # went with its folder
                    tree.move_to(path, own, f"{LEDGER_DIR}/quarantine/{stamp}/{path}")
                    moved.append(path)
            store = BlobStore(h.workspace)
            restored: list[str] = []
            for path in restore:
                e = st.tree[path]
                tree.check_parents(path)
                if e.link is not None:
                    tree.symlink(path, e.link)
                else:
                    now = tree.lstat(path)
                    if now is not None and stat.S_ISDIR(now.st_mode):
                        tree.remove(path)  # a folder where the recorded file was (its own links are not followed)
                    tree.write(path, store.get(e.sha256), executable=e.executable)
                restored.append(path)
        parts = []
        if restored:
            parts.append("restored " + ", ".join(restored))
        if moved:
            parts.append(f"moved added files to {LEDGER_DIR}/quarantine/{stamp}/: " + ", ".join(moved))
        return "; ".join(parts)

    def context_files(self, h: Handle, st: SessionState) -> dict[str, str]:
        """The workspace's other Python files as recorded at session start (the harness, helpers): never edited,
        but they decide which names reach the problem (tools/patching/roles.py). Read from the blob store."""
        key = (str(h.workspace), st.id)
        cached = self._contexts.get(key)
        if cached is not None:
            return cached
        from pypto_tune.tools.code.codestate import BlobStore

        store = BlobStore(h.workspace)
        out: dict[str, str] = {}
        for path, e in st.tree.items():
            if path.endswith(".py") and path not in st.expected_sources and e.link is None:
                try:
                    out[path] = store.get(e.sha256).decode("utf-8", "surrogateescape")
                except TreeError:
                    continue  # a missing blob is caught where it matters: materialising a run
        self._contexts[key] = out
        return out

    def admit(self, h: Handle, st: SessionState, tool: str, reference: dict[str, str], after: dict[str, str], *,
               catalog_id: str, algorithm: bool = False, same_knob_as: str | None = None,
               path: str = "knob", same_knobs: frozenset[str] | None = None) -> "Admission":
        """The one admission path (tools/code/admission.py) plus the session's own rules: the catalogue id the knob
        serves (R10), a correction touches the round's own knob (R11; ``same_knobs``: the round's knobs, both of a
        linked pair's round), and a change that already failed or did not pay off from this kept state is never tried
        again (R19). A linked pair (rule linked-pair) cites an id one of its knobs serves. Refusals are recorded and
        raised."""
        from pypto_tune.tools.code import admission as adm_mod
        from pypto_tune.tools.rules import tuning_loop

        stage = tuning_loop.STAGES_BY_NAME.get(st.stage or "")
        try:
            from pypto_tune.tools.operations import probes

            adm = adm_mod.admit(reference, after, context=self.context_files(h, st), algorithm=algorithm,
                                allow_structural=bool(stage and stage.group == "algorithm" and algorithm),
                                run=probes.record_for(h.ledger, st.id, reference))
            if same_knob_as is not None and same_knobs is None:
                same_knobs = frozenset({same_knob_as})
            refusal = (retry.served_and_corrected(adm, stage, catalog_id, same_knobs)
                       or retry.already_tried(st, semantic_hash(after), adm, self.patch_semantic_hash))
            if refusal is not None:
                raise refusal
        except GateRefusal as refusal:
            raise self.refuse(h, st.id, tool, refusal) from None
        h.record(st.id).admission(round=st.open_round.number if st.open_round else None, path=path, verdict=adm.kind,
                                  knob_id=adm.change.knob_id if adm.change else (adm.changes[0].knob_id if adm.changes
                                                                                 else None),
                                  info=adm.model_dump(mode="json"))
        return adm

    def patch_semantic_hash(self, patch: Any) -> str:
        cached = self._sem_cache.get(patch["after_raw_hash"])
        if cached is None:
            cached = self._sem_cache[patch["after_raw_hash"]] = semantic_hash(dict(patch["after_sources"]))
        return cached

    def session_lang(self, session_id: str | None, lang: str | None = None) -> str:
        """``lang`` when given, else the language the session was started with (``start_session(lang=…)``, kept in
        its config); zh — the server's default — for a session started without one, or no session."""
        if lang:
            return lang
        if not session_id:
            return "zh"
        try:
            h = self.find(session_id)
            return str((self.state(h, session_id).session["config"] or {}).get("lang") or "zh")
        except PyptoTuneError:
            return "zh"  # an unknown session: the tool itself names it

    def result_base(self, st: SessionState, message: str = "") -> dict[str, Any]:
        return {"session_id": st.id, "state": st.level1, "stage": st.stage, "message": message,
                "next_actions": gates.allowed_actions(st)}

    def write(self, h: Handle, st: SessionState, sources: dict[str, str], tool: str, *,
               over_edit: str = "refuse", ours: dict[str, str] | None = None) -> str:
        """Write operator sources, with the intent on record first (ledger migration 2, see ``heal``).

        Every write of an operator file passes here, and none goes over a change nobody recorded: each file about to
        be written must still hold what the server recorded (``st.expected_sources``; ``ours``: other bytes the
        caller knows to be the server's own, such as an interrupted write ``heal`` undoes). A file edited since —
        by the agent or a person, while a batch ran or between two calls — is, by ``over_edit``:

        * ``"refuse"``: nothing is written and ``UnrecordedEdit`` (GATE drift) names the files; the edit stays;
        * ``"quarantine"``: a copy of each edited file is kept in ``.pypto-tune/quarantine/<time>/`` first (the
          explicit reverts, which exist to undo such edits), and the message says where.

        A check right before the write leaves the moment between the check and the rename; an edit in that
        moment is caught by the read-back in ``write_sources``, not preserved."""
        edited = self._unrecorded_edits(h, st, sources, ours or {})
        if edited and over_edit != "quarantine":
            raise self.refuse(h, st.id, tool, UnrecordedEdit(tool, sorted(edited)))
        if edited:
            self._quarantine_copies(h, edited, tool)
        h.record(st.id).write_intent(tool=tool, before_sources=st.expected_sources, after_sources=sources)
        return write_sources(h.workspace, sources)

    def _unrecorded_edits(self, h: Handle, st: SessionState, sources: dict[str, str],
                          ours: dict[str, str]) -> dict[str, bytes | None]:
        """Files of ``sources`` whose bytes on disk are neither the recorded ones, nor ``ours``, nor the bytes about
        to be written (path → the bytes found; None for a link, which is never read through). A missing file holds
        nothing to lose."""
        from pypto_tune.tools.patching.files import to_bytes
        from pypto_tune.tools.patching.nofollow import LinkRefused, open_tree

        out: dict[str, bytes | None] = {}
        with open_tree(h.workspace) as tree:
            for rel in sorted(sources):
                try:
                    data: bytes | None = tree.read(rel)
                except LinkRefused:
                    data = None
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    continue
                known = {to_bytes(t) for t in (st.expected_sources.get(rel), ours.get(rel), sources[rel])
                         if t is not None}
                if data is None or data not in known:
                    out[rel] = data
        return out

    def _quarantine_copies(self, h: Handle, edited: dict[str, bytes | None], tool: str) -> str:
        """Keep a copy of each edited file before a revert writes over it; returns the folder (workspace-relative)."""
        from datetime import datetime

        from pypto_tune.tools.patching.nofollow import open_tree

        folder = f"{LEDGER_DIR}/quarantine/{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}-{tool}"
        with open_tree(h.workspace, allow_server_dir=True) as own:
            for rel, data in edited.items():
                if data is not None:
                    own.write(f"{folder}/{rel}", data)
        log.warning("%s: kept a copy of the unrecorded edit of %s in %s", tool, ", ".join(edited), folder)
        h.quarantined.append(f"a copy of the unrecorded edit of {', '.join(edited)} is in {folder}/")
        return folder

    def heal(self, h: Handle, st: SessionState) -> SessionState:
        """Undo this server's own write if a crash cut it off before it was recorded.

        The sign: the last write intent started from the sources the ledger still expects, and every file on disk
        holds either its before or its after bytes. Those bytes were never accepted by any rule, so the ledger's
        state is restored (recorded as a drift-revert) instead of being reported as an external edit. Any other
        difference stays drift for the agent to resolve.
        """
        # only the newest intent matters, and each row holds two full copies of the sources: fetch just that one
        intents = h.ledger.rows("write_intents", st.id, "id = (SELECT MAX(id) FROM write_intents WHERE session_id = ?)",
                                (st.id,))
        if not intents:
            return st
        last = intents[0]
        before, after = dict(last["before_sources"]), dict(last["after_sources"])
        if hash_sources(before) != st.expected_raw_hash:
            return st  # that write was recorded (or superseded): nothing of ours is pending
        try:
            disk = read_sources(h.workspace, list(st.session["operator_files"]))
        except (FileNotFoundError, InputError):  # missing, or a link now (never read through): not our write
            return st
        if hash_sources(disk) == st.expected_raw_hash:
            return st
        if not all(disk.get(f) in (before.get(f), after.get(f)) for f in disk):
            return st
        self.write(h, st, st.expected_sources, "heal", ours=after)  # also supersedes the interrupted intent
        h.record(st.id).patch(kind="drift-revert", round_no=None, before=disk, after=st.expected_sources,
                              note=f"undid {last['tool']}'s write of {last['at']}, interrupted before it was recorded "
                                   "(server crash)")
        return self.state(h, st.id)

    def void_discarded(self, h: Handle, st: SessionState) -> tuple[SessionState, str]:
        """Repair a ledger that charged runs the server discarded to the code they ran (``tools/session/discarded.py``):
        the rounds decided failed on such runs only are voided by one appended correction that names them — their
        values become proposable again. Returns the state and a note for the caller's message ('' when none)."""
        charged = charged_discards(st.rows)
        if not charged:
            return st, ""
        rounds = sorted(charged)
        causes = sorted(set(charged.values()))
        reason = (f"round(s) {', '.join(map(str, rounds))} were decided failed on runs the server discarded ("
                  + "; ".join(causes)[:1500] + "): no result of their code; voided, their changes may be tried again")
        h.record(st.id).correction(field=VOID_FIELD,
                                   before_value={str(n): f"{st.decisions[n]['decision']} / "
                                                         f"{st.decisions[n]['result_type']}" for n in rounds},
                                   after_value={"rounds": rounds, "status": "invalid"}, reason=reason)
        return self.state(h, st.id), (f"; repaired the ledger: round(s) {', '.join(map(str, rounds))} had been "
                                       "recorded failed on runs the server discarded (" + "; ".join(causes)[:300]
                                       + ") — voided by a correction row, their values are proposable again")

    def transition(self, h: Handle, st: SessionState, level: str, to: str, reason: str,
                    summary: dict[str, Any] | None = None) -> None:
        h.record(st.id).transition(level=level, from_value=st.level1 if level == "state" else st.stage, to_value=to,
                                   reason=reason, summary=summary or {})

    def finish(self, h: Handle, st: SessionState, reason: str, summary: dict[str, Any] | None = None) -> None:
        self.transition(h, st, "state", "S5_REPORT", reason, summary or gates.stage_summary(st))


def goal_text(row: Any) -> str:
    return (f"{row['goal_value']:g}x faster" if row["goal_kind"] == "speedup" else f"≤ {row['goal_value']:g} µs")


def next_round(st: SessionState) -> int:
    """The next round number, past every number a run, verdict or measurement already used (a candidate batch that
    was cancelled or cut off by a crash leaves runs under numbers that never got a round row)."""
    used = [int(r["number"]) for r in st.rounds]
    for table in ("runs", "precision_records", "measurements"):
        used += [int(r["round"]) for r in st.rows[table] if r.get("round") is not None]
    return max(used, default=0) + 1


def describe_change(changes: list[Any]) -> str:
    """A round's change as the ledger's ``rounds.change`` says it: a linked pair (two knobs) as one change, ``a +
    b``."""
    return (" + " if len(changes) == 2 else "; ").join(f"{c.knob_id}: {c.before!r} → {c.after!r}" for c in changes)


def _operator_entries(workspace: Path, st: SessionState) -> dict[str, FileEntry]:
    """Legacy sessions (no recorded tree): the operator files only, as they are on disk."""
    try:
        disk = read_sources(workspace, list(st.session["operator_files"]))
    except (FileNotFoundError, InputError) as exc:
        raise TreeError(f"an operator file cannot be read: {exc}") from None
    return entries_for_sources(disk, {})


def _report_names(st: SessionState) -> set[str]:
    """Workspace-relative paths render_report writes for this session (per-session and stable names)."""
    from pathlib import PurePosixPath

    first = PurePosixPath(st.session["operator_files"][0])
    folder = first.parent
    op = st.session["operator"]
    out = set()
    for sid in ("", f"_{st.id}"):
        for lang in ("", "_en", "_zh"):
            for ext in ("md", "html"):
                out.add(str(folder / f"{op}_tuning_report{sid}{lang}.{ext}"))
    return out
