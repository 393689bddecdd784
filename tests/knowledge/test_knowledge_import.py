"""`pypto-tune knowledge import` takes what a user has at hand — a campaign's folder, the folder `campaign --copy-to`
made, workspaces, ledgers — reports each source on its own line, and imports what it can when one path is bad."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pypto_tune.tools.knowledge.store import read

from tests.knowledge.test_knowledge import DEMO

import pytest

pytestmark = pytest.mark.process


def _campaign_run(tmp_path: Path) -> Path:
    """What `pypto-tune campaign ops --copy-to campaign-run` leaves: the copies (each a workspace with its ledger)
    and the campaign's own folder naming them. One operator's workspace was deleted since."""
    run = tmp_path / "campaign-run"
    ledger = run / "softmax" / ".pypto-tune" / "ledger.sqlite3"
    ledger.parent.mkdir(parents=True)
    shutil.copy2(DEMO, ledger)
    spec = {"name": "ops", "operators": [{"name": "softmax", "workspace": str(run / "softmax")},
                                         {"name": "rmsnorm", "workspace": str(run / "rmsnorm")}]}
    camp = run / ".pypto-tune-campaign" / "ops"
    camp.mkdir(parents=True)
    (camp / "campaign.json").write_text(json.dumps({"id": "ops-1", "spec": spec}))
    return run


def _import(store: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pypto_tune.server.cli", "knowledge", "import", *map(str, paths),
                           "--store", str(store)], capture_output=True, text=True, timeout=120)


def test_a_campaign_folder_is_imported_source_by_source_and_a_bad_path_skips_only_itself(tmp_path: Path) -> None:
    run = _campaign_run(tmp_path)
    store = tmp_path / "store.json"
    out = _import(store, tmp_path / "nope", run)
    assert out.returncode == 1, out.stderr  # some sources were skipped, the others imported
    skipped = out.stderr.splitlines()
    assert skipped[0].startswith(f"{tmp_path / 'nope'}: skipped — ") and "does not exist. Next: " in skipped[0]
    assert skipped[1].startswith(f"{run} → {run / 'rmsnorm'}: skipped — no ledger at")
    assert f"{run} → {run / 'softmax'}: 5 observation(s) from 1 session(s) added" in out.stdout
    assert out.stdout.splitlines()[-1].endswith("5 observation(s) from 1 session(s); 2 source(s) skipped")
    assert len(read(store).observations) == 5
    # the campaign's own folder names the same workspaces; nothing is counted twice
    again = _import(store, run / ".pypto-tune-campaign" / "ops")
    assert f"→ {run / 'softmax'}: 0 observation(s) from 0 session(s) added (5 already there)" in again.stdout
    assert len(read(store).observations) == 5


def test_a_folder_with_nothing_to_import_names_what_it_takes(tmp_path: Path) -> None:
    out = _import(tmp_path / "store.json", tmp_path)
    assert out.returncode == 2  # nothing imported
    assert "holds no ledger, workspace or campaign" in out.stderr and "a campaign's folder" in out.stderr
