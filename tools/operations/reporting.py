"""Read-only views and the final report: status board, knobs, ledger, snapshot, render_report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pypto_tune.tools.session.discarded import invalid_next_step, voided_rounds
from pypto_tune.tools.rules import tuning_loop
from pypto_tune.tools.session.state import SessionState

from pypto_tune.tools.errors import InputError
from pypto_tune.tools.session.ledger import LEDGER_DIR, LEDGER_FILE
from pypto_tune.tools.patching import set_runtime_debug
from pypto_tune.tools.operations.results import (
    KnobOut,
    KnobsResult,
    ReportResult,
    StatusResult,
)
from pypto_tune.tools.session.state import load_rows

from pypto_tune.tools.operations.base import (
    exclusive, SessionContext,
)
from pypto_tune.tools.operations.stages import checklist


log = logging.getLogger("pypto_tune.service")


class ReportOps:
    """render_report, get_status, list_knobs, ledger_json, snapshot."""

    def __init__(self, ctx: SessionContext) -> None:
        self.ctx = ctx

    @exclusive
    def render_report(self, session_id: str, *, fmt: str = "md", lang: str | None = None) -> ReportResult:
        """Write the final report (R21) after restoring debug options (R22)."""
        lang = self.ctx.session_lang(session_id, lang)
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        if fmt not in ("md", "html", "both"):
            raise InputError(f"format must be md, html or both, got {fmt!r}", hint="md is the default")
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be zh or en, got {lang!r}", hint="zh is the default")
        self.ctx.gate(h, st, "render_report")
        restored_now = False
        if st.debug_enabled:
            before = st.expected_sources
            after = set_runtime_debug(before, False, baseline=st.debug_baseline)
            self.ctx.write(h, st, after, "render_report")
            h.record(st.id).patch(kind="debug-restore", round_no=None, before=before, after=after,
                                  note="debug_options restored by render_report (R22)")
            restored_now = True
            st = self.ctx.state(h, session_id)
        snap = self.snapshot(session_id)
        paths = self._write_reports(h, st, snap, fmt, lang)
        if st.level1 != "DONE":
            self.ctx.transition(h, st, "state", "DONE", "final report rendered")
        # A finished session writes nothing more: free the workspace so another server can start the next one
        # (rendering again re-takes the lock if it is still free).
        h.lock.release()
        st2 = self.ctx.state(h, session_id)
        return ReportResult(**self.ctx.result_base(st2, "report written: " + ", ".join(paths)
                                         + " (this session's own file, then the latest under the stable name)"
                                         + ("; debug options restored first (R22)" if restored_now else "")),
                            paths=paths, debug_restored_now=restored_now)

    def _write_reports(self, h: Any, st: SessionState, snap: Any, fmt: str, lang: str) -> list[str]:
        """Each format twice: the session's own {operator}_tuning_report_{session_id}[_en].{fmt}, which a later
        session on the same operator never overwrites, and the latest under R21's stable name (issue #11).

        Rendered into a private folder first and then copied next to the operator without following any link
        (``tools/patching/nofollow.py``): a report name, or its temp file, planted as a link to the ledger would
        otherwise have the report written over the ledger (issue #16)."""
        import tempfile
        from pathlib import PurePosixPath

        from pypto_tune.tools.patching.nofollow import open_tree
        from pypto_tune.tools.report import write_report_files

        folder = PurePosixPath(st.session["operator_files"][0]).parent
        paths: list[str] = []
        with tempfile.TemporaryDirectory(prefix="pypto-tune-report-") as private, open_tree(h.workspace) as tree:
            for f in (["md", "html"] if fmt == "both" else [fmt]):
                for made in write_report_files(snap, f, lang, Path(private)):
                    rel = str(folder / made.name) if str(folder) != "." else made.name
                    tree.write(rel, made.read_bytes(), mode=0o644)
                    paths.append(str(h.workspace / rel))
        return paths

    def get_status(self, session_id: str, lang: str | None = None) -> StatusResult:
        lang = self.ctx.session_lang(session_id, lang)
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        drift_detail = self.ctx.drift(h, st)
        drift = bool(drift_detail)
        snap = self.snapshot(session_id)
        voided = voided_rounds(st.rows)  # decided on runs the server discarded: no result (session/discarded.py)
        decided = [d for n, d in st.decisions.items() if n not in voided]
        kept = sum(1 for d in decided if d["decision"] == "kept")
        findings = h.ledger.integrity_findings()
        invalid = [t for t in st.rows["trials"] if t["outcome"] == "invalid"]
        return StatusResult(
            **self.ctx.result_base(st, f"{st.level1}" + (f" / {st.stage}" if st.stage else "")
                         + (f" — DRIFT: the workspace changed outside the server ({drift_detail})" if drift
                            else "")
                         + (f" — INVALID: {len(invalid)} trial(s) discarded by the server, not charged to their "
                            f"values (last: round {invalid[-1]['round']}, {str(invalid[-1]['info'].get('reason'))[:300]}"
                            f"). Next: {invalid_next_step(str(invalid[-1]['info'].get('reason')))}" if invalid
                            else "")
                         + (f" — LEDGER: {len(findings)} row(s) not the server's ({findings[0]})" if findings
                            else "")),
            ledger_findings=findings,
            board=render_status_board(snap, lang), baseline_us=st.baseline_us, target_us=st.target_us,
            best_us=st.kept_us, rounds=len(decided), kept=kept,
            success_rate_pct=(sum(1 for d in decided if d["result_type"] in ("gain", "not-chosen")) / len(decided)
                              * 100.0) if decided else None, finished=st.finished,
            running_job=h.busy, drift=drift, kept_samples=len(st.kept_samples),
            checklist=checklist(st, tuning_loop.STAGES_BY_NAME[st.stage].group)
            if st.stage and st.stage in tuning_loop.STAGES_BY_NAME else [],
        )

    def list_knobs(self, session_id: str, detail: str = "summary") -> KnobsResult:
        """Every knob of the current code, joined with the run-time probe's record of a run of it (issue #17):
        live ones in ``knobs``, dead ones apart in ``dead_knobs``; effective values, shapes and sharing.

        ``detail="summary"`` (the default) answers what choosing a knob needs: each kind's legal values once
        (``legal_by_kind``), no per-knob list of runs, a dead site's id and why; ``"full"``: every field."""
        h = self.ctx.find(session_id)
        st = self.ctx.state(h, session_id)
        from pypto_tune.tools.operations import probes
        from pypto_tune.tools.patching import roles
        from pypto_tune.tools.patching.extract import sites_of
        from pypto_tune.tools.patching.runmap import RunMap

        context = self.ctx.context_files(h, st)
        _, sites = sites_of(st.expected_sources, context)
        knobs = [s.knob.model_copy(deep=True) for s in sites]
        files = {**context, **st.expected_sources}
        program = roles.analyze(files)
        record, what = probes.record_for(h.ledger, st.id, st.expected_sources), "the current code"
        if record is None and st.kept_sources != st.expected_sources:
            record, what = probes.record_for(h.ledger, st.id, st.kept_sources), "the kept state"
        runmap = RunMap(files, sites, program, record)
        ran = _kernels_that_ran(st)
        feeders = _feeders(sites)
        live_out, dead_out = [], []
        for site, k in zip(sites, knobs):
            kernel = _kernel_of_knob(k, program)
            info = runmap.of(site)
            if info.shapes and not k.context.get("tensor_shapes"):
                k.context["tensor_shapes"] = [s for s in info.shapes if all(isinstance(d, int) for d in s)]
            kernel_ran = (kernel in ran) if (kernel and ran is not None) else None
            if runmap.reported and kernel is not None:
                kernel_ran = any(kk["name"] == kernel for kk in runmap.kernels.values())
            out = KnobOut(
                id=k.id, kind=k.kind, file=k.file, line=k.line, value=k.value, catalog_ids=list(k.catalog_ids),
                legal=k.legal, tunable=k.tunable, legal_here=_legal_here(k, program, st.expected_sources),
                not_tunable_because="; ".join(k.context.get("problem_uses", [])[:3]) if not k.tunable else "",
                kernel=kernel, kernel_ran=kernel_ran, live=info.live, effective=info.effective,
                ran_in=[f"kernel {n}" for n in info.kernels] + [f"test {t}" for t in info.tests],
                shapes=info.shapes, dtypes=info.dtypes, shared_with=info.shared_with,
                tune_by=([k.id] + feeders.get(k.id, [])) if _is_expression(k.value) and k.tunable else [],
                feeds=list(k.context.get("feeds", [])), why=info.why, unroll=info.unroll)
            (dead_out if info.live is False else live_out).append(out)
        idle = sum(1 for o in live_out if o.kernel_ran is False)
        text = (f"{len(knobs)} knobs in {len(st.expected_sources)} file(s)"
                + (f"; {len(dead_out)} dead for this test (listed apart: branches or kernels the test did not run)"
                   if dead_out else "")
                + (f"; {idle} belong to kernels the test did not run" if idle else "")
                + "; " + probes.describe(record, what))
        if detail != "full":
            return KnobsResult(**self.ctx.result_base(st, text), detail="summary", legal_by_kind=_summarise(live_out, dead_out),
                               knobs=live_out, dead_knobs=dead_out, probe=probes.describe(record, what))
        return KnobsResult(**self.ctx.result_base(st, text), detail="full", knobs=live_out, dead_knobs=dead_out,
                           probe=probes.describe(record, what))

    def ledger_json(self, session_id: str) -> dict[str, Any]:
        h = self.ctx.find(session_id)
        rows = load_rows(h.ledger, session_id)
        return {"schema_version": h.ledger.schema_version(),
                "tables": {k: [dict(r) for r in v] for k, v in rows.items()}}

    def analysis_json(self, session_id: str, measurement_id: int) -> dict[str, Any]:
        """The whole analysis recorded with one measurement of the session (read-only).

        It is the analysis ``collect_swimlane`` recorded from the run's artifacts (cores, leaves, chains,
        cross-check, suggestions in both languages), kept in the ledger, so it outlives the run folders."""
        h = self.ctx.find(session_id)
        rows = h.ledger.rows("measurements", session_id, "id = ?", (int(measurement_id),))
        if not rows:
            known = [int(r["id"]) for r in h.ledger.rows("measurements", session_id)]
            raise InputError(f"session {session_id} has no measurement {measurement_id}",
                             hint=f"its measurements are {known or 'none yet (collect_swimlane first)'}")
        m = rows[0]
        return {"session_id": session_id, "measurement_id": int(m["id"]), "round": m["round"],
                "stage": m["stage"], "valid": bool(m["valid"]), "invalid_reasons": m["invalid_reasons"],
                "operator_time_us": m["operator_time_us"], "e2e_us": m["e2e_us"], "samples_us": m["samples"],
                "code_hash": m["code_hash"], "archive": m["archive"], "analysis": m["analysis"]}

    def last_analysed_measurement(self, session_id: str) -> int | None:
        """The measurement the session's latest analyze_bubbles call analysed (read-only; None before any)."""
        rows = self.ctx.find(session_id).ledger.rows("analyses", session_id)
        return int(rows[-1]["measurement_id"]) if rows else None

    def measurement_ids(self, session_id: str) -> list[int]:
        """Ids of the session's measurements, oldest first (read-only; for completions)."""
        return [int(r["id"]) for r in self.ctx.find(session_id).ledger.rows("measurements", session_id)]

    def session_ids(self) -> list[str]:
        """Sessions recorded in the default workspace's ledger, newest first (read-only; never creates a ledger)."""
        ws = self.ctx.default_workspace
        if ws is None or not (ws / LEDGER_DIR / LEDGER_FILE).exists():
            return []
        return [str(r["id"]) for r in reversed(self.ctx.handle(ws).ledger.rows("sessions"))]

    def snapshot(self, session_id: str) -> Any:
        from pypto_tune.tools.operations.snapshot_builder import build_snapshot

        h = self.ctx.find(session_id)
        return build_snapshot(self.ctx.state(h, session_id))



def _legal_here(k: Any, program: Any, sources: dict[str, str]) -> str:
    """The knob's legal values for this operator, in words. A view's valid part is no speed knob: it says how much of
    the view is computed, so only the view's extent as it ran (or the loop's tail expression) is legal, and the
    search proposes no value for it."""
    from pypto_tune.tools.patching.effective import describe_legal

    if k.kind == "valid_shape":
        return ("the view's extent as it ran, or the loop's tail expression: how much of the view is computed, not "
                "a speed knob (the search proposes none; tune the block that sizes the view)")
    return describe_legal(k, program, sources)


def render_status_board(snap: Any, lang: str = "en") -> str:
    from pypto_tune.tools.report import render_status_board as render

    return render(snap, lang)


def render_report_file(snap: Any, fmt: str, lang: str, out_dir: Path) -> Path:
    from pypto_tune.tools.report import render_report as render

    return render(snap, fmt, lang, out_dir)


def _is_expression(value: Any) -> bool:
    from pypto_tune.tools.patching._cst import is_expr

    if is_expr(value):
        return True
    if isinstance(value, list):
        return any(_is_expression(v) for v in value)
    if isinstance(value, dict):
        return any(_is_expression(v) for v in value.values())
    return False


def _feeders(sites: list[Any]) -> dict[str, list[str]]:
    """Tile call id → the tiling sources (tools/patching/flows.py) whose value reaches it."""
    by_line: dict[tuple[str, int], str] = {(s.file, s.knob.line): s.knob.id for s in sites
                                           if s.knob.kind in ("vec_tile", "cube_tile")}
    out: dict[str, list[str]] = {}
    for s in sites:
        if s.extra.get("source") and s.knob.tunable:
            for feed in s.knob.context.get("feeds", []):
                file, _, line = feed.rpartition(":")
                target = by_line.get((file, int(line)))
                if target is not None:
                    out.setdefault(target, []).append(s.knob.id)
    return out


def _kernels_that_ran(st: SessionState) -> set[str] | None:
    """Names of the jit kernels the session's measurements saw (per-kernel labels without '#n'/'@file'); None
    before any measurement named them."""
    names: set[str] = set()
    for m in st.rows["measurements"]:
        for label in (m.get("per_kernel") or {}):
            names.add(label.split("#", 1)[0].split("@", 1)[0])
    return names or None


def _kernel_of_knob(knob: Any, program: Any) -> str | None:
    """The jit kernel a knob configures: the innermost jit-decorated function around its site."""
    parts = (knob.function or "").split(".") if knob.function else []
    for i in range(len(parts), 0, -1):
        if (knob.file, ".".join(parts[:i])) in program.jit_scopes:
            return parts[i - 1]
    return None


def _summarise(live: list[KnobOut], dead: list[KnobOut]) -> dict[str, str]:
    """Thin the knobs to what choosing one needs (their answer leaves out what is empty); returns each kind's legal
    text, said once.

    A live knob drops its kind's legal text (the same for every knob of a kind; a knob whose rule differs keeps its
    own), the list of kernels and tests that ran it (``kernel`` and ``shared_with`` say what matters), its ``why``
    (the same probe sentence on every knob; ``probe`` says it once), the file (the id starts with it) and all but the
    first reason a constant is not tunable. A dead site, never proposed and refused if changed, says only what it
    is (id, kind, line, value, catalogue ids) and why it is dead."""
    legal: dict[str, str] = {}
    for k in live:
        k._brief = "live"
        if k.legal and legal.setdefault(k.kind, k.legal) == k.legal:
            k.legal = ""
        k.ran_in, k.file, k.why = [], "", ""
        if k.not_tunable_because:
            k.not_tunable_because = k.not_tunable_because.split("; ")[0]
    for k in dead:
        k._brief = "dead"
    return legal
