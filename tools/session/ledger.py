"""The durable, append-only ledger of a tuning session (SQLite in ``WORKSPACE/.pypto-tune/ledger.sqlite3``).

Why SQLite with WAL and ``synchronous=FULL``: a server may be SIGKILLed in the middle of an eight-hour session; every
event is one transaction, so after a crash the file holds exactly the events that were committed, never half of one.
Why append-only (enforced by triggers, not by convention): the ledger is the evidence the report is built from; a
number that could be edited later would be worth nothing. Current state is *derived* from the rows (``tools/session/state.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from pypto_tune.tools.errors import LedgerError
from pypto_tune.tools.session.ledger_seal import Sealer, key_path, load_key
from pypto_tune.tools.code.workspace import LEDGER_DIR  # noqa: F401  (re-exported: the ledger's folder)

LEDGER_FILE = "ledger.sqlite3"

log = logging.getLogger("pypto_tune.ledger")

# Each migration runs once, in its own transaction, and leaves a row in schema_migrations.
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "initial schema",
        """
        CREATE TABLE sessions(
            id TEXT PRIMARY KEY, created_at TEXT NOT NULL, workspace TEXT NOT NULL, operator TEXT NOT NULL,
            operator_files TEXT NOT NULL, test_command TEXT NOT NULL, shell INTEGER NOT NULL DEFAULT 0,
            run_mode TEXT NOT NULL, goal_kind TEXT NOT NULL, goal_value REAL NOT NULL, timeout_s REAL NOT NULL,
            device_ids TEXT NOT NULL, time_limit_h REAL NOT NULL, repeats INTEGER NOT NULL,
            original_sources TEXT NOT NULL, original_hash TEXT NOT NULL, original_raw_hash TEXT NOT NULL,
            config TEXT NOT NULL);
        CREATE TABLE env_checks(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            batch INTEGER NOT NULL, name TEXT NOT NULL, ok INTEGER NOT NULL, detail TEXT NOT NULL);
        CREATE TABLE runs(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            purpose TEXT NOT NULL, round INTEGER, argv TEXT NOT NULL, env TEXT NOT NULL, cwd TEXT NOT NULL,
            exit_code INTEGER, signal INTEGER, timed_out INTEGER NOT NULL, cancelled INTEGER NOT NULL,
            duration_s REAL NOT NULL, started_epoch REAL NOT NULL, output_head TEXT NOT NULL,
            output_tail TEXT NOT NULL, output_bytes INTEGER NOT NULL, output_dirs TEXT NOT NULL,
            code_hash TEXT NOT NULL, raw_hash TEXT NOT NULL, device_id TEXT);
        CREATE TABLE precision_records(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            run_id INTEGER REFERENCES runs(id), command TEXT NOT NULL, verdict TEXT NOT NULL,
            numerics_checked INTEGER NOT NULL, exit_code INTEGER, duration_s REAL NOT NULL, key_output TEXT NOT NULL,
            reason TEXT NOT NULL, code_hash TEXT NOT NULL, round INTEGER, device_id TEXT, result_type TEXT);
        CREATE TABLE measurements(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            round INTEGER NOT NULL, code_hash TEXT NOT NULL, valid INTEGER NOT NULL, invalid_reasons TEXT NOT NULL,
            operator_time_us REAL, e2e_us REAL, samples TEXT NOT NULL, analysis TEXT NOT NULL, archive TEXT NOT NULL,
            run_ids TEXT NOT NULL, stage TEXT);
        CREATE TABLE analyses(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            measurement_id INTEGER REFERENCES measurements(id), stage TEXT, report_path TEXT NOT NULL,
            suggestions TEXT NOT NULL);
        CREATE TABLE patches(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            round INTEGER, kind TEXT NOT NULL, catalog_id TEXT, diff TEXT NOT NULL, before_hash TEXT NOT NULL,
            after_hash TEXT NOT NULL, before_raw_hash TEXT NOT NULL, after_raw_hash TEXT NOT NULL,
            before_sources TEXT NOT NULL, after_sources TEXT NOT NULL, knob_changes TEXT NOT NULL,
            note TEXT NOT NULL);
        CREATE TABLE rounds(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), number INTEGER NOT NULL,
            opened_at TEXT NOT NULL, stage TEXT NOT NULL, outer_round INTEGER NOT NULL, kind TEXT NOT NULL,
            catalog_id TEXT NOT NULL, change TEXT NOT NULL, rationale TEXT NOT NULL, before_hash TEXT NOT NULL,
            before_raw_hash TEXT NOT NULL, before_us REAL, UNIQUE(session_id, number));
        CREATE TABLE round_decisions(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), number INTEGER NOT NULL,
            at TEXT NOT NULL, decision TEXT NOT NULL, result_type TEXT NOT NULL, after_us REAL, delta_pct REAL,
            error_output TEXT NOT NULL, notes TEXT NOT NULL, restored_hash TEXT NOT NULL,
            UNIQUE(session_id, number));
        CREATE TABLE transitions(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            level TEXT NOT NULL, from_value TEXT, to_value TEXT NOT NULL, reason TEXT NOT NULL,
            summary TEXT NOT NULL);
        CREATE TABLE checklist_marks(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            stage_group TEXT NOT NULL, catalog_id TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
            round INTEGER);
        CREATE TABLE refusals(
            id INTEGER PRIMARY KEY, session_id TEXT, at TEXT NOT NULL, tool TEXT NOT NULL, rule TEXT NOT NULL,
            message TEXT NOT NULL);
        CREATE TABLE confirmations(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            kind TEXT NOT NULL, detail TEXT NOT NULL);
        """,
    ),
    (
        2,
        "write intents: the sources the server is about to write, recorded before the write",
        # A crash between writing an operator file and recording the write would leave bytes the ledger does
        # not know. With the intent on record first, the next call recognises its own interrupted write and
        # undoes it instead of calling it an external edit (found by the SIGKILL trials, render_report#10).
        """
        CREATE TABLE write_intents(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            tool TEXT NOT NULL, before_sources TEXT NOT NULL, after_sources TEXT NOT NULL);
        """,
    ),
    (
        3,
        "the whole workspace tree, what each run executed, questions for a person, admissions, trials",
        # Issue #10: a verdict bound to the operator files alone could be had by rewriting the harness, and a run
        # on the live workspace could execute bytes swapped in while it ran. The session now records every file a
        # run can read (tree_files; copies in .pypto-tune/blobs/), each run executes a private copy of that state
        # (runs.exec_hash names it; runs.tampered lists files that changed in the copy during the run).
        # questions: what the server asked a person (R5 retry); confirmations.source says who answered (the MCP
        # client's elicitation or `pypto-tune confirm` typed at a terminal), never the agent's own argument.
        # admissions: how every change was accounted for (tools/code/admission.py). corrections: a test command fixed
        # before the baseline passed. trials: candidates of run_candidates batches (issue #12). checklist_marks.stage:
        # a mark belongs to one stage (SWIMLANE_2 starts with its own checklist, not SWIMLANE_1's marks).
        """
        CREATE TABLE tree_files(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), path TEXT NOT NULL,
            sha256 TEXT NOT NULL, size INTEGER NOT NULL, executable INTEGER NOT NULL, link TEXT,
            role TEXT NOT NULL);
        ALTER TABLE runs ADD COLUMN exec_hash TEXT;
        ALTER TABLE runs ADD COLUMN exec_dir TEXT;
        ALTER TABLE runs ADD COLUMN tampered TEXT;
        ALTER TABLE runs ADD COLUMN batch TEXT;
        ALTER TABLE confirmations ADD COLUMN source TEXT;
        ALTER TABLE confirmations ADD COLUMN question_id INTEGER;
        ALTER TABLE measurements ADD COLUMN per_kernel TEXT;
        ALTER TABLE checklist_marks ADD COLUMN stage TEXT;
        CREATE TABLE questions(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            kind TEXT NOT NULL, text TEXT NOT NULL, info TEXT NOT NULL);
        CREATE TABLE admissions(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            round INTEGER, path TEXT NOT NULL, verdict TEXT NOT NULL, knob_id TEXT, info TEXT NOT NULL);
        CREATE TABLE corrections(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            field TEXT NOT NULL, before_value TEXT NOT NULL, after_value TEXT NOT NULL, reason TEXT NOT NULL);
        CREATE TABLE trials(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            batch TEXT NOT NULL, candidate TEXT NOT NULL, round INTEGER, outcome TEXT NOT NULL,
            operator_time_us REAL, info TEXT NOT NULL);
        """,
    ),
    (
        4,
        "seals: every row carries an HMAC made with a key kept outside the workspace",
        # Red team: the triggers refuse UPDATE and DELETE, but an INSERT made with the sqlite3 shell (a person's
        # "confirmation", a measurement) was read as the server's own. Now every row the server writes gets a seal
        # (tools/session/ledger.py, Sealer); a row without a valid seal is not evidence and is left out of every state and
        # report, and a sealed row that disappeared is reported. seal_legacy: rows written before this migration
        # (ids 1..max_id) carry no seal and are accepted as they are.
        """
        CREATE TABLE seals(tbl TEXT NOT NULL, row_id INTEGER NOT NULL, mac TEXT NOT NULL, PRIMARY KEY(tbl, row_id));
        CREATE TABLE seal_keys(key_id TEXT PRIMARY KEY, at TEXT NOT NULL);
        CREATE TABLE seal_legacy(tbl TEXT PRIMARY KEY, max_id INTEGER NOT NULL);
        """ + "".join(f"INSERT INTO seal_legacy SELECT '{t}', COALESCE(MAX(rowid), 0) FROM {t};\n" for t in (
            "sessions", "env_checks", "runs", "precision_records", "measurements", "analyses", "patches", "rounds",
            "round_decisions", "transitions", "checklist_marks", "refusals", "confirmations", "write_intents",
            "tree_files", "questions", "admissions", "corrections", "trials")),
    ),
    (
        5,
        "probes: what the run-time probe saw in a run (issue #17)",
        # A new table rather than a column of runs: adding a column to a sealed table would change every old row's
        # stored values and break its seal. record: the ProbeRecord without its module list; modules: the files the
        # run imported, stored only when this session has not stored the same list before (modules_hash).
        """
        CREATE TABLE probes(
            id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id), at TEXT NOT NULL,
            run_id INTEGER REFERENCES runs(id), code_hash TEXT NOT NULL, status TEXT NOT NULL, record TEXT NOT NULL,
            modules_hash TEXT NOT NULL, modules TEXT);
        """,
    ),
]

APPEND_ONLY_TABLES = (
    "sessions", "env_checks", "runs", "precision_records", "measurements", "analyses", "patches", "rounds",
    "round_decisions", "transitions", "checklist_marks", "refusals", "confirmations", "write_intents",
    "tree_files", "questions", "admissions", "corrections", "trials", "probes",
)
#: tables whose rows are evidence and carry seals (the seal bookkeeping itself is append-only too)
SEALED_TABLES = APPEND_ONLY_TABLES
_SEAL_TABLES = ("seals", "seal_keys", "seal_legacy")

_JSON_COLUMNS = {
    "operator_files", "test_command", "device_ids", "original_sources", "config", "argv", "env", "output_dirs",
    "command", "invalid_reasons", "samples", "analysis", "run_ids", "suggestions", "before_sources",
    "after_sources", "knob_changes", "summary", "tampered", "info", "per_kernel", "candidate", "before_value",
    "after_value", "record", "modules",
}


def now_iso() -> str:
    """Local time with offset, to the second: what a person reads in the report."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=_default).decode()


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


class Row(dict):
    """A ledger row with JSON columns decoded; attribute access for readability."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:  # pragma: no cover - programming error
            raise AttributeError(name) from exc


class Ledger:
    """Append-only event store. One instance per workspace; safe to share between threads of one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        for p in (path.parent, path, *(path.with_name(path.name + x) for x in ("-wal", "-shm", "-journal"))):
            if p.is_symlink():
                # SQLite follows links: the evidence would live wherever the link points (issue #16)
                raise LedgerError(f"{p} is a symbolic link (to {os.readlink(p)}): the ledger is opened only as the "
                                  "server's own file", hint="remove the link and restore the ledger file; the "
                                  "server never writes through a link")
        existed = path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=10)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._open_seals()
            self._history = HistoryRecord(path)
            # the record before the count: another server's commit between the two then only raises the count
            recorded = self._history.read() if existed else None
            self._sealed_rows = self._sealed_count()
            if existed:
                self._history.check(self._sealed_rows, recorded)
            else:  # a new ledger at this path: whatever was recorded for an earlier one here is not its history
                self._note_history()
        except sqlite3.Error as exc:
            raise ledger_fault(path, exc, "cannot open the ledger") from exc
        except OSError as exc:
            raise LedgerError(
                f"cannot create the ledger folder {path.parent}: {exc}",
                hint="check that the workspace exists and is writable; nothing was recorded",
            ) from exc
        _OPEN.add(self)

    @classmethod
    def for_workspace(cls, workspace: Path) -> Ledger:
        return cls(workspace / LEDGER_DIR / LEDGER_FILE)

    # -- schema -------------------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        with self._lock:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations("
                "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL, description TEXT NOT NULL)"
            )
            done = {r[0] for r in self._conn.execute("SELECT version FROM schema_migrations")}
            for version, description, script in MIGRATIONS:
                if version in done:
                    continue
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in script.split(";"):
                        if statement.strip():
                            self._conn.execute(statement)
                    tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    for table in APPEND_ONLY_TABLES + _SEAL_TABLES:
                        if table not in tables:
                            continue
                        for op in ("UPDATE", "DELETE"):
                            self._conn.execute(
                                f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
                                f"BEGIN SELECT RAISE(ABORT, 'ledger is append-only: {op} on {table} refused'); END"
                            )
                    self._conn.execute(
                        "INSERT INTO schema_migrations(version, applied_at, description) VALUES (?,?,?)",
                        (version, now_iso(), description),
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise

    def _open_seals(self) -> None:
        """Load the seal key and check it is the one this ledger was sealed with (tools/session/ledger_seal.py)."""
        self._sealer = Sealer(load_key())
        self.rejected: dict[tuple[str, int], str] = {}  # rows left out because their seal is missing or wrong
        with self._lock:
            known = [r[0] for r in self._conn.execute("SELECT key_id FROM seal_keys")]
            if not known:
                self._conn.execute("INSERT INTO seal_keys(key_id, at) VALUES (?, ?)", (self._sealer.key_id, now_iso()))
            elif self._sealer.key_id not in known:
                from pypto_tune.tools.session.ledger_seal import KEY_ENV, key_path

                raise LedgerError(
                    f"the ledger {self.path} was sealed with another key (id {known[0]}) than this machine's "
                    f"{key_path()} (id {self._sealer.key_id}): its rows could not be told from forged ones",
                    hint=f"set {KEY_ENV} to the key file of the server that wrote this ledger")
            self._legacy = {str(t): int(m) for t, m in self._conn.execute("SELECT tbl, max_id FROM seal_legacy")}

    def _sealed_count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM seals").fetchone()[0])

    def checkpoint(self, *, own_connection: bool = False) -> None:
        """Copy the write-ahead log into the main file (and empty the log when no reader holds it), then record
        how many sealed rows the main file holds (:class:`HistoryRecord`). Called after each decided round and when
        the server exits: a ledger file copied or backed up alone then holds the session's history, not a 4 KiB
        header whose rows are all in ``ledger.sqlite3-wal``. ``own_connection``: on a connection of its own, for
        a signal handler that may interrupt this one mid-transaction. Best effort: a failed checkpoint loses nothing
        (the rows stay in the log), so it is logged, never raised."""
        try:
            if own_connection:
                conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=2)
                try:
                    _checkpoint(conn)
                    sealed = int(conn.execute("SELECT COUNT(*) FROM seals").fetchone()[0])
                finally:
                    conn.close()
            else:
                with self._lock:
                    _checkpoint(self._conn)
                    sealed = self._sealed_rows = self._sealed_count()
            self._history.write(sealed)
        except (sqlite3.Error, OSError) as exc:
            log.warning("ledger checkpoint of %s failed: %s", self.path, exc)

    def schema_version(self) -> int:
        row = self._conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- writing ------------------------------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """One event = one transaction: everything inside commits together or not at all."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise ledger_fault(self.path, exc, "the ledger is not writable") from exc
            tx = _Tx(self._conn, self._sealer)
            try:
                yield tx
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._safe_rollback()
                raise ledger_fault(self.path, exc, "a ledger write failed and was rolled back (nothing of this "
                                   "event was recorded)") from exc
            except BaseException:
                self._safe_rollback()
                raise
            self._sealed_rows += tx.count
            if "round_decisions" in tx.tables:
                self.checkpoint()
            elif tx.count:
                self._note_history()

    def _note_history(self) -> None:
        """Record the sealed rows committed so far beside the seal key (:class:`HistoryRecord`): a ledger file later
        found with fewer — copied without its log mid-session, or its log lost — is refused, not started afresh."""
        try:
            self._history.write(self._sealed_rows)
        except OSError as exc:
            log.warning("cannot record %s's history at %s: %s", self.path, self._history.path, exc)

    def _safe_rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def insert(self, table: str, **fields: Any) -> int:
        with self.transaction() as tx:
            return tx.insert(table, **fields)

    # -- reading ------------------------------------------------------------------------------------------------
    def rows(self, table: str, session_id: str | None = None, where: str = "", params: tuple = ()) -> list[Row]:
        if table not in APPEND_ONLY_TABLES:
            raise ValueError(table)
        sql = (f"SELECT t.rowid AS seal__rowid, s.mac AS seal__mac, t.* FROM {table} t "
               "LEFT JOIN seals s ON s.tbl = ? AND s.row_id = t.rowid")
        clauses, args = [], [table]
        if session_id is not None:
            clauses.append(("id" if table == "sessions" else "session_id") + " = ?")
            args.append(session_id)
        if where:
            clauses.append(where)
            args.extend(params)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY " + ("number" if table in ("rounds", "round_decisions") else "id")
        with self._lock:
            try:
                result = self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise ledger_fault(self.path, exc, f"the ledger's {table} cannot be read") from exc
        return [_decode(r) for r in result if self._sealed(table, r)]

    def _sealed(self, table: str, r: sqlite3.Row) -> bool:
        """Written by a server holding the key (or before seals existed); else remembered in ``rejected``."""
        rowid, mac = int(r["seal__rowid"]), r["seal__mac"]
        if mac is None and 1 <= rowid <= self._legacy.get(table, 0):
            return True
        row = {k: r[k] for k in r.keys() if not k.startswith("seal__")}
        if self._sealer.valid(table, rowid, row, mac):
            return True
        self.rejected[(table, rowid)] = "no seal" if mac is None else "seal does not match the row"
        return False

    def integrity_findings(self) -> list[str]:
        """Rows that are not the server's (left out of everything) and sealed rows that disappeared."""
        out: list[str] = []
        with self._lock:
            for table in SEALED_TABLES:
                self.rows(table)
                missing = self._conn.execute(
                    f"SELECT row_id FROM seals s WHERE s.tbl = ? AND NOT EXISTS (SELECT 1 FROM {table} t "
                    "WHERE t.rowid = s.row_id)", (table,)).fetchall()
                out += [f"{table} row {m[0]} was written by the server and has been deleted" for m in missing]
        out += [f"{t} row {i}: {why} — not written by this server, ignored" for (t, i), why in
                sorted(self.rejected.items())]
        return out

    def stored_output_bytes(self, session_id: str) -> int:
        """Bytes of run output the session's runs hold (what bounds the next run's, ``operations/runs.py``)."""
        with self._lock:
            try:
                row = self._conn.execute("SELECT COALESCE(SUM(LENGTH(CAST(output_head AS BLOB)) + "
                                         "LENGTH(CAST(output_tail AS BLOB))), 0) FROM runs WHERE session_id = ?",
                                         (session_id,)).fetchone()
            except sqlite3.Error as exc:
                raise ledger_fault(self.path, exc, "the ledger's runs cannot be read") from exc
        return int(row[0])

    def integrity_ok(self) -> bool:
        with self._lock:
            return self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        with self._lock:
            self._conn.close()


#: every ledger this process opened, so that the server's exit (a signal or the end of its input) can checkpoint them
_OPEN: "weakref.WeakSet[Ledger]" = weakref.WeakSet()


def checkpoint_all() -> None:
    """Checkpoint every ledger this process has open (see :meth:`Ledger.checkpoint`); called on the way out, each on
    a connection of its own."""
    for ledger in list(_OPEN):
        ledger.checkpoint(own_connection=True)


def _checkpoint(conn: sqlite3.Connection) -> None:
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:  # a reader of another connection holds the log: copy what can be copied
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()


def ledger_fault(path: Path, exc: sqlite3.Error, doing: str) -> LedgerError:
    """A SQLite failure as a cause and a next step that name the file: a damaged file, a full disk, a read-only or
    locked file each need a different action (a generic "check permissions" for a malformed file sends a person to
    the wrong place)."""
    text = str(exc)
    low = text.lower()
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return LedgerError(
            f"{doing}: the ledger file {path} is damaged ({text})",
            hint=f"restore {path} (with its -wal file, if the copy has one) from a backup; or keep it for the record "
            f"(`sqlite3 {path} .recover` salvages the rows it can) and start a new session in a clean workspace. "
            "The server writes nothing to a damaged ledger", code="ledger-damaged")
    if "full" in low:
        return LedgerError(f"{doing}: the disk holding {path} is full ({text})",
                           hint=f"free space on the file system of {path.parent}, then retry the call; nothing "
                           "half-recorded stays behind", code="disk-full")
    if "readonly" in low or "read-only" in low or "permission" in low or "unable to open" in low:
        return LedgerError(f"{doing}: {path} cannot be written ({text})",
                           hint=f"make {path.parent} and its files writable by the server's account (is the file "
                           "system mounted read-only?), then retry", code="ledger-readonly")
    if "locked" in low or "busy" in low:
        return LedgerError(f"{doing}: {path} is locked by another process ({text})",
                           hint="another server or a sqlite3 shell holds a write lock on it; close it, then retry")
    return LedgerError(f"{doing}: {path}: {text}",
                       hint="check that the workspace is writable and has free space; nothing half-recorded stays "
                       "behind")


class HistoryRecord:
    """How many sealed rows a ledger held at its last checkpoint, kept outside the workspace beside the seal key
    (``<key folder>/ledgers/<hash of the ledger's path>.json``).

    A ledger whose rows were in its write-ahead log when the file was copied, backed up or moved alone opens as an
    empty or older ledger: SQLite cannot tell, and a server would start a fresh session over a workspace that has
    one. With the count kept elsewhere, a ledger that holds fewer sealed rows than it did is refused, naming what is
    missing. Only a ledger file that exists is checked: a workspace whose ``.pypto-tune/`` was removed on purpose
    starts anew, and its new ledger resets the record."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger.resolve()
        digest = hashlib.sha256(str(self.ledger).encode()).hexdigest()[:20]
        self.path = key_path().parent / "ledgers" / f"{digest}.json"

    def read(self) -> dict[str, Any] | None:
        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("ledger") == str(self.ledger) else None

    def check(self, sealed: int, rec: dict[str, Any] | None) -> None:
        """Refuse a ledger holding fewer sealed rows than ``rec`` (read before ``sealed`` was counted)."""
        if rec is None or sealed >= int(rec.get("sealed_rows", 0)):
            return
        wal = self.ledger.with_name(self.ledger.name + "-wal")
        raise LedgerError(
            f"the ledger {self.ledger} holds {sealed} sealed rows, but held {rec['sealed_rows']} at its last "
            f"checkpoint ({rec.get('at', '?')}): its history is missing — was the file copied or restored without "
            f"its write-ahead log {wal.name}? A fresh session over this workspace would hide the one it has",
            hint=f"put back the ledger file together with {wal.name} (or the whole .pypto-tune/ folder) from where "
            f"it was copied; to start over on purpose, move {self.ledger.parent} away first (the record of the old "
            f"ledger is {self.path})", code="ledger-history-lost")

    def write(self, sealed: int) -> None:
        """Atomically; a failure is left to the caller's logging (the ledger itself is unaffected)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(orjson.dumps({"ledger": str(self.ledger), "sealed_rows": sealed, "at": now_iso()}))
        os.replace(tmp, self.path)


class _Tx:
    def __init__(self, conn: sqlite3.Connection, sealer: Sealer) -> None:
        self._conn = conn
        self._sealer = sealer
        self.tables: set[str] = set()
        self.count = 0  # rows inserted (each with its seal)

    def insert(self, table: str, **fields: Any) -> int:
        if table not in APPEND_ONLY_TABLES:
            raise ValueError(table)
        self.tables.add(table)
        self.count += 1
        cols = list(fields)
        values = [_dumps(v) if c in _JSON_COLUMNS else _scalar(v) for c, v in fields.items()]
        cur = self._conn.execute(
            f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})", values
        )
        rowid = int(cur.lastrowid)
        # sealed as stored (read back), so the check in Ledger.rows sees exactly the bytes this seal covers
        stored = self._conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
        self._conn.execute("INSERT INTO seals(tbl, row_id, mac) VALUES (?, ?, ?)",
                           (table, rowid, self._sealer.mac(table, rowid, {k: stored[k] for k in stored.keys()})))
        return rowid


def _scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _decode(row: sqlite3.Row) -> Row:
    out = Row()
    for key in row.keys():
        value = row[key]
        if key in _JSON_COLUMNS and isinstance(value, str):
            value = orjson.loads(value)
        out[key] = value
    return out
