"""From a ledger to observations: every decided one-knob round of every session, with its situation and outcome.

Only what the ledger decided counts: a round needs its decision (kept / reverted / failed, with the result type)
and a patch with exactly one knob change (a ``run_candidates`` trial, a hand-made round, an adopted edit). The
sources before and after come from the patch row (whole files), the workspace's other Python files from the blob
store (they decide which names are knobs), the run-time record of the state before the change from the ledger's
``probes`` rows; the situation is computed through the search's own view of the change (the record's picture of the
kernels as they ran, else the static shape model of ``tools/search/kernel.py``) and :mod:`.situation`. Times are the ledger's: the kept state's time the round was
judged against, and the round's measured time.

A ledger is opened with the ledger's own reader, so only rows carrying this machine's seal count; a ledger sealed on
another machine is refused with the way round it: export its knowledge there and import the file here.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from pypto_tune.tools.session.discarded import charged_discards, voided_rounds
from pypto_tune.tools.errors import InputError, LedgerError, PyptoTuneError
from pypto_tune.tools.knowledge import situation as S
from pypto_tune.tools.knowledge.store import KnowledgeFile, Observation, SourceInfo, empty, read, write

_PATCH_KINDS = ("tuning", "trial", "manual-adopt")


def _outcome(decision: dict[str, Any]) -> str:
    d, rt = decision["decision"], str(decision.get("result_type") or "")
    if d == "kept":
        return "kept"
    if d == "failed":
        return "failed"
    if rt == "not-chosen":
        return "not-chosen"
    return "regression" if rt == "regression" else "no-gain"


def _group(stage: str) -> str:
    s = (stage or "").lower()
    for g in ("frontend", "swimlane", "incore", "algorithm"):
        if s.startswith(g):
            return g
    return s or "unknown"


def _context(workspace: Path | None, rows: dict[str, list[dict[str, Any]]], operator_files: list[str]) -> dict[str, str]:
    """The workspace's other Python files as recorded at session start (from the blob store), {} without it."""
    if workspace is None:
        return {}
    from pypto_tune.tools.code.codestate import BlobStore

    store = BlobStore(workspace)
    out: dict[str, str] = {}
    for t in rows.get("tree_files", []):
        path = str(t["path"])
        if path.endswith(".py") and path not in operator_files and not t.get("link"):
            try:
                out[path] = store.get(str(t["sha256"])).decode("utf-8", "surrogateescape")
            except (PyptoTuneError, OSError):
                continue
    return out


def _pypto(rows: dict[str, list[dict[str, Any]]]) -> str:
    for r in rows.get("env_checks", []):
        if r.get("name") == "import pypto":
            parts = str(r.get("detail") or "").split()
            if len(parts) >= 2 and parts[0] == "pypto":
                return parts[1]
    return ""


def observation(*, operator: str, session_id: str, round_no: int, stage: str, catalog_id: str,
                before_sources: dict[str, str], after_sources: dict[str, str], context: dict[str, str],
                knob_id: str, before_value: Any, after_value: Any, before_us: float | None, after_us: float | None,
                outcome: str, failure_type: str | None, run_mode: str = "sim", pypto: str = "",
                record: dict[str, Any] | None = None) -> Observation | None:
    """One observation from one decided one-knob change (the ledger path and the offline benchmark share it).

    The situation is computed through the search's own view of the change (``search.propose.change_view``: the
    probe ``record`` of the state before it, when the run reported one, else the static shape model), so that it
    is the situation the ranking asks about when it meets a similar change: a tile set from a test-built list or
    config is seen only through the record. ``after_sources`` is kept for the signature; what the change did is
    the view's prediction at the measured value, as for a candidate."""
    from pypto_tune.tools.search.priors import parse_priors, seed_data
    from pypto_tune.tools.search.propose import change_view

    try:
        # the seed's own prediction of the change, so that what it measured can correct the model where the model
        # is wrong on changes like it (match.experience_score), not replace it where it is right
        view = change_view(before_sources, knob_id, after_value, context=context, run=record,
                           priors=parse_priors(seed_data()), stage=stage)
    except (PyptoTuneError, SyntaxError, ValueError, RecursionError):
        return None
    knob, base, after, reached = (view.knob, view.base, view.after, view.reached) if view is not None \
        else (None, [], None, None)
    kind = knob.kind if knob else "unknown"
    name = knob.name if knob else knob_id.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    cls = S.change_class(kind, name, knob.context.get("consumers") if knob else None)
    fb, fa = S.changed_kernel(base, after, reached)
    # the before value as the ranking sees it: an expression-valued tile as it ran
    sit = S.describe(cls, fb, fa, knob.value if knob is not None else before_value, after_value)
    gain = None
    if outcome != "failed" and before_us and after_us:
        gain = round(math.log2(before_us / after_us), 5)
    key = hashlib.sha256(f"{session_id}\0{round_no}".encode()).hexdigest()[:20]
    return Observation(
        key=key, operator=operator, session_id=session_id, round=round_no, stage=stage, group=_group(stage),
        catalog_id=catalog_id or "", kernel=str((fb or {}).get("scope", "")), kernel_kind=S.kernel_kind(fb),
        change_class=cls, knob=name, knob_kind=kind, before=before_value, after=after_value, before_us=before_us,
        after_us=None if outcome == "failed" else after_us, gain_log2=gain, outcome=outcome,  # type: ignore[arg-type]
        failure_type=failure_type if outcome == "failed" else None, situation=sit,
        model_log2=None if view is None or view.model_score is None else round(view.model_score, 5),
        tensors=[list(d) if d else [] for d in (fb or {}).get("tensor_dims", [])],
        elem_bytes=(fb or {}).get("elem_bytes"), run_mode=run_mode, pypto=pypto)


def _records(probes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Code hash → the probe record of that state as ``probes.record_for`` picks it (the latest reported one, else
    the latest)."""
    out: dict[str, dict[str, Any]] = {}
    for r in probes:
        h = str(r["code_hash"])
        if r["status"] == "reported" or h not in out or out[h].get("status") != "reported":
            out[h] = dict(r["record"])
    return out


def distill_session(rows: dict[str, list[dict[str, Any]]], workspace: Path | None,
                    probes: list[dict[str, Any]] | None = None) -> tuple[SourceInfo, list[Observation]]:
    """``probes``: the session's ``probes`` rows (the run-time records of the states it ran), or None."""
    from pypto_tune.tools.patching.hashes import code_hash

    records = _records(probes or [])
    session = rows["sessions"][0]
    sid, operator = str(session["id"]), str(session["operator"])
    files = list(session["operator_files"])
    context = _context(workspace, rows, files)
    pypto = _pypto(rows)
    rounds = {int(r["number"]): r for r in rows.get("rounds", [])}
    decisions = {int(d["number"]): d for d in rows.get("round_decisions", [])}
    # decided on runs the server discarded (voided, or a ledger from before that rule): nothing about the value
    void = voided_rounds(rows) | set(charged_discards(rows))
    out: list[Observation] = []
    for p in rows.get("patches", []):
        n = p.get("round")
        if n is None or p["kind"] not in _PATCH_KINDS or len(p.get("knob_changes") or []) != 1 or int(n) in void:
            continue
        r, d = rounds.get(int(n)), decisions.get(int(n))
        if r is None or d is None or d.get("result_type") == "abandoned":
            continue
        c = p["knob_changes"][0]
        outcome = _outcome(d)
        o = observation(operator=operator, session_id=sid, round_no=int(n), stage=str(r["stage"]),
                        catalog_id=str(r.get("catalog_id") or ""), before_sources=dict(p["before_sources"]),
                        after_sources=dict(p["after_sources"]), context=context, knob_id=str(c["knob_id"]),
                        before_value=c.get("before"), after_value=c.get("after"), before_us=r.get("before_us"),
                        after_us=d.get("after_us"), outcome=outcome,
                        failure_type=str(d.get("result_type")) if outcome == "failed" else None,
                        run_mode=str(session["run_mode"]), pypto=pypto,
                        record=records.get(code_hash(dict(p["before_sources"]))))
        if o is not None:
            out.append(o)
    info = SourceInfo(key=sid, operator=operator, session_id=sid, workspace=str(workspace or ""),
                      run_mode=str(session["run_mode"]), pypto=pypto,
                      distilled_at=datetime.now().astimezone().isoformat(timespec="seconds"), observations=len(out))
    return info, out


def distill_workspace(workspace: Path) -> KnowledgeFile:
    """Every session of a workspace's ledger (``WORKSPACE/.pypto-tune/ledger.sqlite3``), or of a ledger file."""
    from pypto_tune.tools.session.ledger import LEDGER_FILE, Ledger
    from pypto_tune.tools.session.state import load_rows

    path = workspace
    if path.is_dir():
        path = workspace / ".pypto-tune" / LEDGER_FILE
        ws: Path | None = workspace
    else:
        ws = path.parent.parent if path.parent.name == ".pypto-tune" else None
    if not path.is_file():
        raise InputError(f"no ledger at {path}", hint="pass a workspace that holds a session (its .pypto-tune/ "
                         "folder), a ledger file, or a knowledge file")
    try:
        ledger = Ledger(path)
    except LedgerError as exc:
        raise InputError(f"cannot read the ledger {path}: {exc.message}",
                         hint="export the knowledge on the machine that wrote it (`pypto-tune knowledge export "
                         "FILE --store ...` after importing the workspace there) and import that file here") from None
    kf = empty()
    try:
        for s in ledger.rows("sessions"):
            rows = {k: [dict(r) for r in v] for k, v in load_rows(ledger, str(s["id"])).items()}
            info, obs = distill_session(rows, ws, [dict(r) for r in ledger.rows("probes", str(s["id"]))])
            kf.sources.append(info)
            kf.observations.extend(obs)
    finally:
        ledger.close()
    return kf


def add_workspaces(path: Path, workspaces: list[Path]) -> str:
    """Distill every session of these workspaces' ledgers into the store at ``path``; returns a one-line summary."""
    kf = read(path)
    added = sources = 0
    for ws in workspaces:
        a, s = kf.merge(distill_workspace(ws))
        added, sources = added + a, sources + s
    write(path, kf)
    return (f"{added} observation(s) from {sources} new session(s) added to {path} "
            f"({len(kf.observations)} in all)")
