"""Read-only views and the final report: status board, knobs, ledger, snapshot, render_report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pypto_tune.tools.errors import GateRefusal, InputError
from pypto_tune.tools.patching import (
    extract_knobs,
    hash_sources,
    set_runtime_debug,
)
from pypto_tune.tools.results import (
    KnobOut,
    KnobsResult,
    ReportResult,
    StatusResult,
)
from pypto_tune.tools.state import load_rows

from pypto_tune.tools.operations.base import (
    OperationsBase, _patch_row,
)


log = logging.getLogger("pypto_tune.service")


class ReportOps(OperationsBase):
    """render_report, get_status, list_knobs, ledger_json, snapshot."""

    def render_report(self, session_id: str, *, fmt: str = "md", lang: str = "zh") -> ReportResult:
        """Write the final report (R21) after restoring debug options (R22)."""
        h = self._find(session_id)
        st = self._state(h, session_id)
        if fmt not in ("md", "html", "both"):
            raise InputError(f"format must be md, html or both, got {fmt!r}", hint="md is the default")
        if lang not in ("zh", "en"):
            raise InputError(f"lang must be zh or en, got {lang!r}", hint="zh is the default")
        self._gate(h, st, "render_report")
        restored_now = False
        if st.debug_enabled:
            before = st.expected_sources
            after = set_runtime_debug(before, False, baseline=st.debug_baseline)
            self._write(h, st, after, "render_report")
            h.ledger.insert("patches", **_patch_row(st.id, kind="debug-restore", round_no=None, before=before,
                                                    after=after, note="debug_options restored by render_report "
                                                    "(R22)"))
            restored_now = True
            st = self._state(h, session_id)
        snap = self.snapshot(session_id)
        out_dir = (h.workspace / st.session["operator_files"][0]).parent
        paths = []
        for f in (["md", "html"] if fmt == "both" else [fmt]):
            paths.append(str(render_report_file(snap, f, lang, out_dir)))
        if st.level1 != "DONE":
            self._transition(h, st, "state", "DONE", "final report rendered")
        # A finished session writes nothing more: free the workspace so another server can start the next one
        # (rendering again re-takes the lock if it is still free).
        h.lock.release()
        st2 = self._state(h, session_id)
        return ReportResult(**self._base(st2, "report written: " + ", ".join(paths)
                                         + ("; debug options restored first (R22)" if restored_now else "")),
                            paths=paths, debug_restored_now=restored_now)

    def get_status(self, session_id: str, lang: str = "en") -> StatusResult:
        h = self._find(session_id)
        st = self._state(h, session_id)
        drift = False
        try:
            drift = hash_sources(self._disk_sources(h, st)) != st.expected_raw_hash
        except GateRefusal:
            drift = True
        snap = self.snapshot(session_id)
        decided = [d for d in st.decisions.values()]
        kept = sum(1 for d in decided if d["decision"] == "kept")
        return StatusResult(
            **self._base(st, f"{st.level1}" + (f" / {st.stage}" if st.stage else "")
                         + (" — DRIFT: operator files changed outside the server" if drift else "")),
            board=render_status_board(snap, lang), baseline_us=st.baseline_us, target_us=st.target_us,
            best_us=st.kept_us, rounds=len(decided), kept=kept,
            success_rate_pct=(kept / len(decided) * 100.0) if decided else None, finished=st.finished,
            running_job=h.busy, drift=drift,
        )

    def list_knobs(self, session_id: str) -> KnobsResult:
        h = self._find(session_id)
        st = self._state(h, session_id)
        knobs = extract_knobs(st.expected_sources)
        return KnobsResult(**self._base(st, f"{len(knobs)} knobs in {len(st.expected_sources)} file(s)"),
                           knobs=[KnobOut(id=k.id, kind=k.kind, file=k.file, line=k.line, value=k.value,
                                          catalog_ids=list(k.catalog_ids), legal=k.legal) for k in knobs])

    def ledger_json(self, session_id: str) -> dict[str, Any]:
        h = self._find(session_id)
        rows = load_rows(h.ledger, session_id)
        return {"schema_version": h.ledger.schema_version(),
                "tables": {k: [dict(r) for r in v] for k, v in rows.items()}}

    def snapshot(self, session_id: str) -> Any:
        from pypto_tune.tools.snapshot_builder import build_snapshot

        h = self._find(session_id)
        return build_snapshot(self._state(h, session_id))



def render_status_board(snap: Any, lang: str = "en") -> str:
    from pypto_tune.tools.report import render_status_board as render

    return render(snap, lang)


def render_report_file(snap: Any, fmt: str, lang: str, out_dir: Path) -> Path:
    from pypto_tune.tools.report import render_report as render

    return render(snap, fmt, lang, out_dir)
