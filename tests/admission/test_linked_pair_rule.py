"""The rule ``linked-pair`` (``tools/code/admission.py``): two knobs in one round only as a pair the run links.

The operator is the upstream-style LayerNorm fixture with the run-time probe's record of a real SIM run of its static
test (``tests/search/data/upstream_layernorm.probe.json``): ``test_layer_norm`` builds
``LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128))`` over x[128, 512]; the loop takes ``block_rows`` rows per
iteration and the vector tile tiles that view, so the run links the block and the tile (a tile can use no more rows
than the view the block sets). The dynamic branch (``if config.use_dynamic_shape:``) and the other tests' configs
never run in that test.

A linked pair is admitted as one change point, each knob held to what a change of it alone is held to, legality
judged on both values at once; every other two-knob change is refused exactly as before (rule ``one-change``). The
attacks below are the ways a second change could ride along with a legal pair. No simulator runs here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pypto_tune.tools.code.admission import admit
from pypto_tune.tools.errors import GateRefusal
from pypto_tune.tools.patching import plan_knob_edit
from pypto_tune.tools.search.linked import run_links
from pypto_tune.tools.rules.tuning_loop import RULES_BY_ID
from tests.conftest import OPERATORS

FILE = "layernorm_op.py"
KEPT = {FILE: (OPERATORS / "upstream_layernorm" / FILE).read_text()}
RECORD = json.loads((Path(__file__).resolve().parents[1] / "search" / "data" / "upstream_layernorm.probe.json")
                    .read_text())
BLOCK = f"{FILE}:test_layer_norm.LayerNormConfig(block_rows)"
TILE = f"{FILE}:test_layer_norm.LayerNormConfig(vec_tile_shape)"
CALL = f"{FILE}:build_layer_norm.layer_norm_kernel.set_vec_tile_shapes#2"  # the tile call the config field feeds
DEAD_CALL = f"{FILE}:build_layer_norm.layer_norm_kernel.set_vec_tile_shapes#1"  # the dynamic branch's: never runs
DEAD_BLOCK = f"{FILE}:test_layer_norm_no_affine.LayerNormConfig(block_rows)"  # another test's config
STITCH = f"{FILE}:build_layer_norm.layer_norm_kernel.runtime_options.stitch_function_max_num"
SHIPPED_CONFIG = "LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128))"


def _edit(*changes: tuple[str, object]) -> dict[str, str]:
    """The kept sources with each knob set by the one-knob edit, one after the other."""
    out = dict(KEPT)
    for knob, value in changes:
        out = plan_knob_edit(out, knob, value).new_sources
    return out


def _text(old: str, new: str, sources: dict[str, str] | None = None) -> dict[str, str]:
    src = (sources or KEPT)[FILE]
    assert src.count(old) == 1, old
    return {FILE: src.replace(old, new)}


def _refused(after: dict[str, str], run: dict | None = RECORD) -> GateRefusal:
    with pytest.raises(GateRefusal) as exc:
        admit(KEPT, after, run=run)
    return exc.value


# ------------------------------------------------------------------------------------------------ admitted


def test_the_run_links_the_block_and_the_tile_of_the_view_it_sets():
    pairs = {(lk.block.id, lk.tile.id) for lk in run_links(KEPT, None, RECORD)}
    assert pairs == {(BLOCK, TILE), (BLOCK, CALL)}  # the config field, or the call it feeds pinned


def test_a_linked_pair_through_two_config_fields_is_one_change_point():
    adm = admit(KEPT, _edit((TILE, [4, 512]), (BLOCK, 4)), run=RECORD)
    assert adm.kind == "pair" and adm.change is None
    assert [(c.knob_id, c.before, c.after) for c in adm.changes] == [(BLOCK, 1, 4), (TILE, [1, 128], [4, 512])]
    assert "can use no more rows than the view LayerNormConfig.block_rows sets" in adm.link
    assert adm.live is True
    # each knob's own domain, and the joint effective values: the tile call as it ran, the loop on the run's axis
    assert any(c.startswith(f"{BLOCK} = 4 within its domain") for c in adm.checked)
    assert any(c.startswith(f"{TILE} = [4, 512] within its domain") for c in adm.checked)
    assert any("set_vec_tile_shapes#2" in c and "= [4, 512]" in c for c in adm.checked)
    assert any("axis 128 (from the run) in 32 block(s) of 4" in c for c in adm.checked)
    assert adm.describe() == f"{BLOCK}: 1 → 4 + {TILE}: [1, 128] → [4, 512] (linked pair)"
    assert set(adm.catalog_ids) >= {"F-3", "F-10"}  # the ids either knob serves


def test_a_linked_pair_with_the_tile_call_pinned_is_one_change_point():
    adm = admit(KEPT, _edit((BLOCK, 8), (CALL, [8, 512])), run=RECORD)
    assert adm.kind == "pair" and {c.knob_id for c in adm.changes} == {BLOCK, CALL}


def test_a_comment_beside_a_linked_pair_carries_nothing_and_is_admitted_as_with_one_knob():
    after = _edit((BLOCK, 4), (TILE, [4, 512]))
    after = _text("pypto.set_vec_tile_shapes(*config.vec_tile_shape)",
                  "pypto.set_vec_tile_shapes(*config.vec_tile_shape)  # the tile's rows follow the block", after)
    assert admit(KEPT, after, run=RECORD).kind == "pair"


# ------------------------------------------------------------------------------------------------ refused


def test_without_a_record_of_the_kept_states_run_no_two_knobs_are_linked():
    r = _refused(_edit((BLOCK, 4), (TILE, [4, 512])), run=None)
    assert r.rule == "one-change" and "no run-time probe record" in r.message


def test_an_unlinked_pair_is_refused_as_before():
    r = _refused(_edit((BLOCK, 4), (STITCH, 256)))
    assert r.rule == "one-change"
    assert "touches 2 knobs at once" in r.message and "not a linked pair" in r.message
    assert f"{BLOCK} with {TILE}" in r.message  # what the run does link


def test_a_pair_whose_link_exists_only_in_a_branch_the_test_never_runs_is_refused():
    # block_rows also sizes the dynamic branch's view, tiled by that branch's own call: linked in the text only
    r = _refused(_edit((BLOCK, 4), (DEAD_CALL, [4, 512])))
    assert r.rule == "one-change" and "not a linked pair" in r.message
    # another test's block with this test's tile: the same shapes in the text, but that config never runs here
    r = _refused(_edit((DEAD_BLOCK, 8), (TILE, [8, 512])))
    assert r.rule == "one-change" and "not a linked pair" in r.message


def test_a_block_and_a_tile_change_the_block_does_not_cap_are_two_decisions():
    # the block sets the view's rows, not its columns: more rows per block and a wider tile are tuned apart
    r = _refused(_edit((BLOCK, 4), (TILE, [1, 512])))
    assert r.rule == "one-change" and "changes only what LayerNormConfig.block_rows does not cap" in r.message


def test_a_linked_pair_plus_a_third_knob_is_refused():
    r = _refused(_edit((BLOCK, 4), (TILE, [4, 512]), (STITCH, 256)))
    assert r.rule == "one-change" and "touches 3 knobs at once" in r.message


def test_a_linked_pair_plus_an_edit_that_is_not_a_knob_is_refused():
    after = _text("torch.manual_seed(rows)", "torch.manual_seed(rows + 1)", _edit((BLOCK, 4), (TILE, [4, 512])))
    r = _refused(after)
    assert r.rule == "one-change" and "not a knob change" in r.message and "manual_seed" in r.message


def test_a_linked_pair_that_changes_a_problem_size_is_refused():
    # the problem's rows ride along in the test's call (not a knob: structural)
    after = _text('_run("LayerNorm", 128, config', '_run("LayerNorm", 256, config',
                  _edit((BLOCK, 4), (TILE, [4, 512])))
    assert _refused(after).rule == "one-change"
    # the hidden size (a shape constant) moved with the tile: no run links a problem size to anything
    r = _refused(_text("HIDDEN = 512", "HIDDEN = 1024", _edit((TILE, [1, 1024]))))
    assert r.rule == "one-change"


def test_a_linked_pair_where_the_block_alone_would_be_refused_is_refused():
    # 3 does not divide the 128 rows the run blocked: the last rows would never be computed
    r = _refused(_edit((TILE, [3, 512]), (BLOCK, 3)))
    assert r.rule == "legality" and "128 is not a multiple of 3" in r.message


def test_a_linked_pair_where_the_tile_alone_would_be_refused_is_refused():
    r = _refused(_text(SHIPPED_CONFIG, "LayerNormConfig(block_rows=4, vec_tile_shape=(0, 512))"))
    assert r.rule == "legality"
    # a value that is code, not data, in either half: a call is no knob value, so the edit is not a knob change
    r = _refused(_text(SHIPPED_CONFIG, "LayerNormConfig(block_rows=4, vec_tile_shape=(int('4'), 512))"))
    assert r.rule == "one-change" and "not a knob change" in r.message


def test_a_linked_pair_cannot_smuggle_code_through_an_encoding_declaration():
    after = _edit((BLOCK, 4), (TILE, [4, 512]))
    r = _refused({FILE: "# -*- coding: unicode_escape -*-\n" + after[FILE]})
    assert r.rule == "one-change" and "encoding" in r.message


def test_the_rule_says_why_a_pair_is_one_change_point():
    rule = RULES_BY_ID["linked-pair"]
    assert "one tiling decision" in rule.text_en and "run-time probe" in rule.text_en
    assert "no-retry" in rule.text_en and "one-change" in rule.text_en
    assert "切分决策" in rule.text_zh
