"""The knowledge store: distilled from real ledgers, shared as one file, read by the search as labelled priors.

The ledger used is the recorded demo session (``tests/report/demo_ledger.sqlite3``: a real SIM session on the
softmax fixture). Its rounds, as ``fixtures/operators/README.md`` measured them: vec tile (1,4,256) → (1,8,256)
36.405 → 21.031 µs kept; → (1,32,256) 8.546 kept; → (1,16,256) 15.463 regression; → (4,32,256) compile failure
(128 KB tile); TILE_B 4 → 1 2.726 kept.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.knowledge import match, situation
from pypto_tune.tools.knowledge.distill import distill_workspace, observation
from pypto_tune.tools.knowledge.store import FORMAT, read
from pypto_tune.tools.search import priors as priors_mod
from pypto_tune.tools.search import search
from pypto_tune.tools.search.priors import load_priors

from tests.conftest import OPERATORS

pytestmark = pytest.mark.process

DEMO = Path(__file__).resolve().parents[1] / "report" / "demo_ledger.sqlite3"
README_ROUNDS = [  # (before, after µs, outcome) of the demo plan, fixtures/operators/README.md
    ([1, 4, 256], [1, 8, 256], 36.405, 21.031, "kept"),
    ([1, 8, 256], [1, 32, 256], 21.031, 8.546, "kept"),
    ([1, 32, 256], [1, 16, 256], 8.546, 15.463, "regression"),
    ([1, 32, 256], [4, 32, 256], 8.546, None, "failed"),
    (4, 1, 8.546, 2.726, "kept"),
]


@pytest.fixture
def demo_ws(tmp_path: Path) -> Path:
    ws = tmp_path / "demo-ws"
    (ws / ".pypto-tune").mkdir(parents=True)
    shutil.copy2(DEMO, ws / ".pypto-tune" / "ledger.sqlite3")
    return ws


@pytest.fixture
def no_store(monkeypatch: pytest.MonkeyPatch):
    """Priors without any store, whatever the environment says; restored afterwards."""
    monkeypatch.delenv("PYPTO_TUNE_KNOWLEDGE", raising=False)
    monkeypatch.setattr(priors_mod, "_configured", False)
    monkeypatch.setattr(priors_mod, "_store", None)
    yield


def test_a_ledger_distills_to_one_observation_per_decided_round(demo_ws: Path) -> None:
    kf = distill_workspace(demo_ws)
    assert [s.operator for s in kf.sources] == ["softmax"] and kf.sources[0].pypto == "0.2.0"
    obs = sorted(kf.observations, key=lambda o: o.round)
    assert len(obs) == len(README_ROUNDS)
    for o, (before, after, b_us, a_us, outcome) in zip(obs, README_ROUNDS):
        assert (o.before, o.after, o.outcome) == (before, after, outcome)
        assert o.before_us == pytest.approx(b_us, abs=1e-3)
        if a_us is None:
            assert o.after_us is None and o.gain_log2 is None and o.failure_type == "compile-failure"
        else:
            assert o.gain_log2 == pytest.approx(math.log2(b_us / a_us), abs=1e-3)
        # every round of this vector kernel moves its vector work: one class, one kind of kernel, FRONTEND
        assert (o.change_class, o.kernel_kind, o.group) == ("vector-work", "vector", "frontend")
    # what the changes did, in the shared quantities: (1,4,256) → (1,8,256) halves the tiles per iteration of the
    # [4, 32, 256] block (32 → 16), i.e. d_tpi = -1; the failed (4,32,256) FP32 tile is 128 KB, one log2 step over
    # the catalogue's 64 KB; TILE_B 4 → 1 quadruples the loop's iterations (8 → 32)
    assert obs[0].situation["d_tpi"] == -1.0 and obs[0].situation["a_bytes"] == math.log2(8 * 256 * 4)
    assert obs[3].situation["a_over"] == 1.0 and obs[0].situation["a_over"] == 0.0
    assert obs[4].situation["d_iters"] == 2.0
    # distilling the same ledger again gives the same keys: importing twice adds nothing
    assert [o.key for o in distill_workspace(demo_ws).observations] == [o.key for o in kf.observations]


def test_the_nearest_failure_is_predicted_as_a_failure(demo_ws: Path) -> None:
    obs = distill_workspace(demo_ws).observations
    failed = next(o for o in obs if o.outcome == "failed")
    pred = match.predict(obs, change_class="vector-work", kernel_kind="vector", group="frontend",
                         situation=dict(failed.situation))
    assert pred is not None and pred.neighbours[0][1].key == failed.key and pred.p_fail > 0.3
    assert match.experience_score(pred, model_score=1.0) < 0  # a predicted compile failure pulls the score down
    # another class of change is never compared with it
    assert match.predict(obs, change_class="option:vec_nbuffer_setting", kernel_kind="vector", group="frontend",
                         situation=dict(failed.situation)) is None


def test_export_and_import_through_the_command_line(demo_ws: Path, tmp_path: Path) -> None:
    store, team = tmp_path / "store.json", tmp_path / "team.json"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pypto_tune.server.cli", "knowledge", *args],
                              capture_output=True, text=True, timeout=120)

    first = cli("import", str(demo_ws), "--store", str(store))
    assert first.returncode == 0 and "5 observation(s) from 1 session(s) added" in first.stdout, first.stderr
    again = cli("import", str(demo_ws / ".pypto-tune" / "ledger.sqlite3"), "--store", str(store))
    assert "0 observation(s) from 0 session(s) added (5 already there)" in again.stdout, again.stdout
    assert cli("export", str(team), "--store", str(store)).returncode == 0
    data = json.loads(team.read_text())
    assert data["format"] == FORMAT and len(data["observations"]) == 5
    # the hand-written priors travel with it as the store's seed
    assert data["seed_version"] == priors_mod.seed_data()["version"] and len(data["seed"]["rules"]) >= 10
    other = tmp_path / "other.json"
    assert cli("import", str(team), "--store", str(other)).returncode == 0
    assert sorted(o.key for o in read(other).observations) == sorted(o["key"] for o in data["observations"])
    shown = cli("show", "--store", str(other)).stdout
    assert "softmax: 5" in shown and "vector-work failed: 1" in shown
    # bad input: a clear message naming the file and the next step, exit 2, nothing written
    (tmp_path / "broken.json").write_text('{"format": "pypto-tune-knowledge/1", "observations": [{"key": 1}]}')
    bad = cli("import", str(tmp_path / "broken.json"), "--store", str(other))
    assert bad.returncode == 2 and "broken.json" in bad.stderr and "Next:" in bad.stderr, bad.stderr
    assert len(read(other).observations) == 5


def test_a_ledger_sealed_on_another_machine_is_refused_with_the_way_round(demo_ws: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pypto_tune.tools.session.ledger import Ledger

    monkeypatch.setenv("PYPTO_TUNE_SEAL_KEY", str(tmp_path / "key-a"))
    Ledger.for_workspace(demo_ws).close()  # the ledger now names key a
    monkeypatch.setenv("PYPTO_TUNE_SEAL_KEY", str(tmp_path / "key-b"))
    with pytest.raises(InputError, match="sealed with another key") as e:
        distill_workspace(demo_ws)
    assert "knowledge export" in e.value.hint


def test_the_store_ranks_another_operator_with_the_evidence_named(demo_ws: Path, no_store: None) -> None:
    kf = distill_workspace(demo_ws)
    src = {"rmsnorm.py": (OPERATORS / "rmsnorm" / "rmsnorm.py").read_text()}
    plain = search(src, stage="frontend", limit=6)
    assert load_priors().knowledge == []  # nothing configured: the seed alone, reproducibly
    assert all("knowledge" not in c.evidence for c in plain.candidates)
    learned = search(src, stage="frontend", limit=6, priors=load_priors(knowledge=kf))
    # a candidate with measured neighbours names them; the others carry the store's calibration of the model alone
    with_terms = [c for c in learned.candidates if any("supported_by" in e for e in c.evidence.get("knowledge", []))]
    assert with_terms, [c.why for c in learned.candidates]
    for c in learned.candidates:
        for e in c.evidence.get("knowledge", []):
            assert "supported_by" in e or e["calibration"]["operators"] == 1, e  # the demo ledger: one operator
    c = with_terms[0]
    ev = c.evidence["knowledge"][0]
    # labelled as other sessions' measurements, with the rounds that support it and their own numbers
    assert ev["kind"].startswith("knowledge (other sessions' measurements")
    assert all(s["operator"] == "softmax" for s in ev["supported_by"])
    cited = {s["round"] for s in ev["supported_by"]}
    assert cited <= {1, 2, 3, 4, 5} and "softmax r" in c.why and "µs" in c.why
    # the term moves the score from the model's prediction toward the measured one, and the candidate says so
    assert c.why.count("knowledge") >= 1 and f"{ev['model_score']:+.2f}" in c.why


def test_a_configured_store_is_read_once_and_a_broken_one_is_a_clear_error(tmp_path: Path, demo_ws: Path,
                                                                              no_store: None,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from pypto_tune.tools.knowledge.commands import import_paths

    store = tmp_path / "k.json"
    import_paths(store, [demo_ws])
    monkeypatch.setenv("PYPTO_TUNE_KNOWLEDGE", str(store))
    assert len(load_priors().knowledge) == 5
    store.write_text("{}")  # changed after it was read: this process keeps its snapshot
    assert len(load_priors().knowledge) == 5
    with pytest.raises(InputError, match="not a pypto-tune knowledge file") as e:
        priors_mod.configure_knowledge(store)
    assert "knowledge export" in e.value.hint
    assert situation.change_class("vec_tile", "set_vec_tile_shapes") == "vector-work"


def test_a_tile_the_test_builds_is_distilled_through_the_run_it_made() -> None:
    """upstream_activation sets its tile as ``set_vec_tile_shapes(*tile_list)``, the list built from the tensor's
    rank (32 on each axis): no static reading sees [32, 32], the probe record of a real SIM run does. The SwiGLU
    kernel has no loop and tiles the whole [128, 1024] FP32 tensor, so [32, 32] → [64, 256] takes its tasks from
    4 · 32 = 128 to 2 · 4 = 8 (on 48 vector cores: 3 waves → 1, 48 parallel → 8) and a task's bytes from
    32 · 32 · 4 to 64 · 256 · 4. Without the record the change has no situation, so it can teach nothing; with it,
    the situation is the one the ranking computes for the same candidate of another operator."""
    op = OPERATORS / "upstream_activation"
    src = {"activation_ops.py": (op / "activation_ops.py").read_text()}
    record = json.loads((Path(__file__).resolve().parents[1] / "search" / "data"
                         / "upstream_activation.probe.json").read_text())
    knob = "activation_ops.py:configure_tiling.set_vec_tile_shapes#1"

    def observe(rec):
        return observation(operator="upstream_activation", session_id="s", round_no=1, stage="FRONTEND",
                           catalog_id="F-1", before_sources=src, after_sources=src, context={}, knob_id=knob,
                           before_value={"$expr": "pypto.set_vec_tile_shapes(*tile_list)"}, after_value=[64, 256],
                           before_us=30.485, after_us=8.701, outcome="kept", failure_type=None, record=rec)

    assert observe(None).situation == {}
    seen = observe(record)
    assert (seen.change_class, seen.kernel_kind) == ("vector-work", "vector")
    sit = seen.situation
    assert (sit["b_tasks"], sit["a_tasks"], sit["d_tasks"]) == (math.log2(128), math.log2(8), -4.0)
    assert (sit["b_bytes"], sit["a_bytes"]) == (math.log2(32 * 32 * 4), math.log2(64 * 256 * 4))
    assert sit["b_waves"] == pytest.approx(math.log2(3), abs=1e-3) and sit["a_waves"] == 0.0
    assert sit["b_par"] == pytest.approx(math.log2(48), abs=1e-3) and sit["a_par"] == math.log2(8)
    assert sit["d_iters"] == 0.0  # no loop around the tiled work


def test_a_config_field_set_in_the_test_is_classed_by_what_it_feeds() -> None:
    """The upstream examples' style: the test builds a config dataclass and the kernel reads its fields. Read
    from the fixtures' own code: upstream_layernorm's ``block_rows`` sets the ``LOOP_ROWS`` trip count and the
    row slices, its ``vec_tile_shape`` is starred into ``set_vec_tile_shapes``; upstream_ffn's
    ``cube_tile_shape`` is unpacked into ``set_cube_tile_shapes``. Such a field was once classed "other": the
    store kept no situation for its moves and predicted nothing for them, on exactly the operators written the
    way PyPTO's own examples are."""
    from pypto_tune.tools.patching import extract_knobs

    def classes(folder: str, name: str) -> dict[str, str]:
        src = {name: (OPERATORS / folder / name).read_text()}
        return {k.name: situation.change_class(k.kind, k.name, k.context.get("consumers"))
                for k in extract_knobs(src, {}) if k.kind == "tile_source" and k.present}

    ln = classes("upstream_layernorm", "layernorm_op.py")
    assert {ln[n] for n in ln if n.endswith("block_rows")} == {"vector-work"}
    assert {ln[n] for n in ln if n.endswith("vec_tile_shape")} == {"vector-work"}
    ffn = classes("upstream_ffn", "ffn_module.py")
    assert {ffn[n] for n in ffn if n.endswith("cube_tile_shape")} == {"cube-tile"}
    assert {ffn[n] for n in ffn if n.endswith("block_m") or n.endswith("vec_tile_shape")} == {"vector-work"}
