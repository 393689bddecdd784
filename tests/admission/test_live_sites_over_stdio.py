"""Issue #17 items 1–2 over MCP stdio, real simulator: the knob map built from what the test ran.

On the upstream-style LayerNorm fixture (config dataclass built in the test, a dynamic branch the static test never
enters, three tests sharing the kernel) and the activation fixture (a comprehension helper shared by four kernels):

* list_knobs puts dead sites apart, gives every live tile site the value that ran, the shapes it ran on, the two
  ways to tune it, and the kernels and tests that share it;
* no dead site can be changed (apply_tuning_patch, run_candidates): GATE live-site;
* a live tile site tuned through its config field is checked on the shapes that ran (an illegal value is refused
  naming them; a legal one is measured and kept);
* an agent cannot smuggle a change of the problem in through the source path: a field that reaches anything but
  tiling is not a knob;
* a shared site's note is in list_knobs and in the round;
* a run whose probe cannot report (``python -E`` ignores PYTHONPATH) is said so, and nothing is guessed from it.

Expected values come from the fixtures' text (test_layer_norm: x [128, 512], LayerNormConfig(block_rows=1,
vec_tile_shape=(1, 128))) and the recorded grid (benchmarks/grids/upstream_layernorm.json: (1, 512) at block 1 is
14.76 µs against the shipped 193.74 µs).

The three sessions run on one server (each names its workspace); a module fixture plays each once and its test checks
it (tests/sessions.Chapters).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import OPERATORS
from tests.server.mcp_client import Session, connect
from tests.sessions import Chapters

pytestmark = pytest.mark.sim

LN = "layernorm_op.py:"
KERNEL = LN + "build_layer_norm.layer_norm_kernel."
STATIC_TILE = KERNEL + "set_vec_tile_shapes#2"
DYNAMIC_TILE = KERNEL + "set_vec_tile_shapes#1"
TILE_FIELD = LN + "test_layer_norm.LayerNormConfig(vec_tile_shape)"
HIDDEN_FIELD = LN + "test_layer_norm.LayerNormConfig(hidden)"
OTHER_TEST_BLOCK = LN + "test_layer_norm_no_affine.LayerNormConfig(block_rows)"
# the attack surface: the test also names the hidden size (the default, 512) in its config; hidden sizes the
# tensors and is read by the dynamic branch's view — it reaches tiling AND the problem
SHIPPED = "config = LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128))"
WITH_HIDDEN = "config = LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128), hidden=512)"


def _layernorm(tmp_path: Path, name: str) -> Path:
    ws = tmp_path / name
    ws.mkdir()
    text = (OPERATORS / "upstream_layernorm" / "layernorm_op.py").read_text(encoding="utf-8")
    assert text.count(SHIPPED) == 1
    (ws / "layernorm_op.py").write_text(text.replace(SHIPPED, WITH_HIDDEN), encoding="utf-8")
    return ws


def _cmd(*python_flags: str, file: str = "layernorm_op.py", test: str = "test_layer_norm") -> list[str]:
    return [sys.executable, *python_flags, file, f"{file}::{test}", "--run_mode", "sim"]


async def _frontend(s: Session, ws: Path, files: list[str], cmd: list[str]) -> tuple[str, dict[str, Any]]:
    sid = (await s.ok("start_session", workspace=str(ws), operator_files=files, test_command=cmd, run_mode="sim",
                      goal_speedup=100.0))["session_id"]
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    knobs = await s.ok("list_knobs", session_id=sid, detail="full")
    await s.ok("enable_runtime_debug", session_id=sid)
    assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
    assert (await s.ok("analyze_bubbles", session_id=sid, lang="en"))["stage"] == "FRONTEND"
    return sid, knobs


def _by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["id"]: k for k in result["knobs"] + result["dead_knobs"]}


def _diff(ws: Path, file: str, old: str, new: str) -> str:
    lines = (ws / file).read_text(encoding="utf-8").splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if old in line)
    return (f"--- a/{file}\n+++ b/{file}\n@@ -{i + 1} +{i + 1} @@\n-{lines[i]}+{lines[i].replace(old, new)}")


async def _dead_sites_and_smuggling(s: Session, ws: Path) -> None:
    sid, listed = await _frontend(s, ws, ["layernorm_op.py"], _cmd())
    assert "run-time probe of the current code" in listed["probe"] and "layer_norm_kernel ran" in listed["probe"]
    dead = {k["id"] for k in listed["dead_knobs"]}
    live = {k["id"] for k in listed["knobs"]}
    assert {DYNAMIC_TILE, OTHER_TEST_BLOCK, KERNEL + "loop[LOOP_DYN_ROWS].unroll_list"} <= dead
    assert {STATIC_TILE, TILE_FIELD} <= live and not dead & live
    knobs = _by_id(listed)
    tile = knobs[STATIC_TILE]
    assert tile["live"] is True and tile["effective"] == [[1, 128]]
    assert [128, 512] in tile["shapes"] and [1, 512] in tile["shapes"]  # x, and the one-row block of x
    assert tile["tune_by"] == [STATIC_TILE, TILE_FIELD]  # pin the call, or change the field it flows from
    assert "test test_layer_norm_no_affine (not run by this test)" in tile["shared_with"]
    assert knobs[TILE_FIELD]["feeds"] == [f"layernorm_op.py:{knobs[STATIC_TILE]['line']}"]
    hidden = knobs[HIDDEN_FIELD]
    assert hidden["tunable"] is False and "pypto.Tensor (shapes" in hidden["not_tunable_because"]

    # dead: never tunable, whichever tool asks
    text = await s.refused("apply_tuning_patch", session_id=sid, knob=DYNAMIC_TILE, value=[2, 512],
                           catalog_id="F-10", rationale="a dead branch's tile")
    assert "GATE live-site" in text and "never ran" in text
    batch = await s.ok("run_candidates", session_id=sid, candidates=[
        {"id": "hand-dead", "knob": OTHER_TEST_BLOCK, "value": 8, "catalog_id": "F-3", "why": "test",
         "evidence": {}}])
    assert batch["trials"] == [] and "GATE live-site" in batch["refused"][0]

    # illegal on the shapes that ran: x is [128, 512], a tile 1024 wide does not fit it
    text = await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_FIELD, value=[1, 1024],
                           catalog_id="F-10", rationale="too wide")
    assert "GATE legality" in text and "[128, 512]" in text and "layer_norm_kernel" in text

    # smuggling the problem in through the source path: a field that also sizes the tensors is not a knob
    for old, new in (("hidden=512", "hidden=256"), ("block_rows=1, vec", "block_rows=1, eps=1e-3, vec")):
        text = await s.refused("apply_tuning_patch", session_id=sid, catalog_id="F-10", rationale="smuggle",
                               diff=_diff(ws, "layernorm_op.py", old, new))
        assert "GATE one-change" in text and ("not a tuning knob" in text or "not a knob change" in text), text

    # legal: measured and kept (grid: 193.74 µs → 14.76 µs)
    patch = await s.ok("apply_tuning_patch", session_id=sid, knob=TILE_FIELD, value=[1, 512], catalog_id="F-10",
                       rationale="whole rows per tile")
    assert patch["ran_with"] == [[1, 128]]
    assert any("[1, 512]" in c and "[128, 512]" in c for c in patch["legality_checked"])
    assert patch["legality_unchecked"] == []
    assert (await s.ok("run_precision_check", session_id=sid))["verdict"] == "passed"
    assert (await s.ok("collect_swimlane", session_id=sid))["valid"]
    decided = await s.ok("record_round", session_id=sid)
    assert decided["decision"] == "kept" and decided["after_us"] < decided["before_us"] / 5
    after = _by_id(await s.ok("list_knobs", session_id=sid))
    assert after[STATIC_TILE]["effective"] == [[1, 512]]  # the kept state's own probe record


async def _shared_helper(s: Session, ws: Path) -> None:
    source = "activation_ops.py:configure_tiling.tile_list[*]"
    sid, listed = await _frontend(s, ws, ["activation_ops.py"], _cmd(file="activation_ops.py",
                                                                     test="test_swiglu"))
    knobs = _by_id(listed)
    assert knobs[source]["live"] is True and knobs[source]["effective"] == [32]
    shared = knobs[source]["shared_with"]
    assert "kernel swiglu_kernel (ran)" in shared and "kernel gelu_kernel (not run by this test)" in shared
    assert "test test_silu_short_batch (not run by this test)" in shared
    assert knobs["activation_ops.py:build_gelu.gelu_kernel.runtime_options.stitch_function_max_num"]["live"] \
        is False
    res = await s.call("apply_tuning_patch", session_id=sid, knob=source, value=64, catalog_id="F-10",
                       rationale="bigger tiles for every kernel of the helper")
    patch = res.structured_content
    assert "kernel relu_kernel (not run by this test)" in patch["shared_with"] and patch["ran_with"] == [32]
    assert "shared site" in "".join(getattr(b, "text", "") for b in res.content)
    ledger = json.loads((await s.client.read_resource(f"pypto-tune://sessions/{sid}/ledger")).contents[0].text)
    admission = ledger["tables"]["admissions"][-1]
    assert admission["knob_id"] == source and "kernel silu_kernel (not run by this test)" in \
        admission["info"]["shared_with"]
    await s.ok("revert_patch", session_id=sid, notes="only the note was wanted")


async def _probe_cannot_report(s: Session, ws: Path) -> None:
    # python -E ignores PYTHONPATH: the hook never loads, the run itself is unchanged
    sid, listed = await _frontend(s, ws, ["layernorm_op.py"], _cmd("-E"))
    assert "did not report" in listed["probe"] and listed["dead_knobs"] == []
    knobs = _by_id(listed)
    assert knobs[DYNAMIC_TILE]["live"] is None and knobs[STATIC_TILE]["effective"] == []
    text = await s.refused("apply_tuning_patch", session_id=sid, knob=TILE_FIELD, value=[1, 512],
                           catalog_id="F-10", rationale="needs the record")
    assert "GATE legality" in text and "run-time probe" in text
    patch = await s.ok("apply_tuning_patch", session_id=sid, knob=STATIC_TILE, value=[1, 512],
                       catalog_id="F-10", rationale="pinning needs no record")
    assert patch["ran_with"] == [] and patch["knob_changes"][0]["knob_id"] == STATIC_TILE


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Chapters]:
    """The three sessions, each played once on one server (a failure in one leaves the others played)."""
    tmp = tmp_path_factory.mktemp("live-sites")
    ln, ln_e, act = _layernorm(tmp, "ln"), _layernorm(tmp, "ln-E"), tmp / "act"
    act.mkdir()
    shutil.copy2(OPERATORS / "upstream_activation" / "activation_ops.py", act / "activation_ops.py")
    played = {name: Chapters() for name in ("ln", "act", "ln-E")}

    async def scenario() -> None:
        async with connect(ln) as s:
            await played["ln"].play("session", lambda: _dead_sites_and_smuggling(s, ln))
            await played["act"].play("session", lambda: _shared_helper(s, act))
            await played["ln-E"].play("session", lambda: _probe_cannot_report(s, ln_e))

    anyio.run(scenario)
    return played


def test_dead_sites_apart_live_tiles_checked_on_what_ran_and_no_smuggling(sessions: dict[str, Chapters]) -> None:
    sessions["ln"].check("session")


def test_a_shared_helper_is_named_in_list_knobs_and_in_the_round(sessions: dict[str, Chapters]) -> None:
    sessions["act"].check("session")


def test_a_probe_that_cannot_report_is_said_so_and_nothing_is_guessed(sessions: dict[str, Chapters]) -> None:
    sessions["ln-E"].check("session")
