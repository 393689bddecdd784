"""Issue #17 item 3 on the upstream-style fixtures, with the probe record of a real SIM run of each (no simulator here).

The records in ``tests/search/data/`` were written by ``record_probes.py`` there (the server's probe hook on the
fixture's own test). What is expected is read off the fixture's source, never off the ranker:

* the static test never enters ``if config.use_dynamic_shape:`` nor calls the kernels other tests use, so no knob
  whose site sits there is ever proposed;
* ``test_layer_norm`` builds ``LayerNormConfig(block_rows=1, vec_tile_shape=(1, 128))`` over x[128, HIDDEN]: one
  loop iteration's view is [1, 512], so no tile may have more than 1 row or 512 columns; the activation kernel has
  no loop and tiles the whole [128, 1024] tensor;
* a tile can use no more rows than the block gives it, so the best point needs both knobs; each step must be kept
  on its own and the block alone is predicted to gain little, so the pair's tile goes first, clipped to the one row
  the block gives it now (the only tile larger than its view the search proposes), and the block then uncovers it;
* ``attention_probs.py`` (a held-out operator: no ranking weight was chosen looking at it) multiplies a block of
  ``q_block = 8`` query rows by Kᵀ and takes a row softmax of the [8, KV_LEN] result: the vector tile tiles that
  matmul output, not the [8, HEAD_DIM] query view, so tiles up to [8, KV_LEN] are proposed and none beyond;
* the session's history moves the ranking the right way: a direction that regressed goes down (wherever it was
  tried from), the neighbourhood of a gain goes up, a regression never makes a knob "worth another look".

The searches run with ``budget_s=0``: one candidate is admitted, the rest are ranked and generated exactly the same
way but not admitted (0.5–4 s each); legality by admission is checked over stdio and by the live benchmark.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import pytest
from pypto_tune.tools.search import AdmissionCache, TriedChange, search

from .conftest import OPS

DATA = Path(__file__).resolve().parent / "data"
LN, LN_FILE = "upstream_layernorm", "layernorm_op.py"
ATT, ATT_FILE = "upstream_attention", "attention_probs.py"
ACT, ACT_FILE = "upstream_activation", "activation_ops.py"
BLOCK = "layernorm_op.py:test_layer_norm.LayerNormConfig(block_rows)"
TILE_FIELD = "layernorm_op.py:test_layer_norm.LayerNormConfig(vec_tile_shape)"


def _load(op: str, file: str) -> tuple[dict[str, str], dict]:
    return {file: (OPS / op / file).read_text()}, json.loads((DATA / f"{op}.probe.json").read_text())


@pytest.fixture(scope="module")
def cache() -> AdmissionCache:
    return AdmissionCache()


@pytest.fixture(scope="module")
def ln_all(cache):
    kept, rec = _load(LN, LN_FILE)
    return search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0)


def _dynamic_branch_lines(text: str) -> set[int]:
    """Lines inside ``if config.use_dynamic_shape:`` bodies (the branch a static test never takes)."""
    out: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.If) and "use_dynamic_shape" in ast.unparse(node.test):
            for st in node.body:
                out.update(range(st.lineno, (st.end_lineno or st.lineno) + 1))
    return out


def test_the_record_is_of_the_fixture_as_it_is():
    for op, file in ((LN, LN_FILE), (ACT, ACT_FILE), (ATT, ATT_FILE)):
        kept, rec = _load(op, file)
        assert rec["status"] == "reported"
        assert rec["fixture_sha256"][file] == hashlib.sha256(kept[file].encode()).hexdigest(), \
            f"{op} changed since its probe record was made: run tests/search/data/record_probes.py again"


def test_no_proposal_targets_a_site_the_test_never_runs(ln_all, cache):
    kept, _ = _load(LN, LN_FILE)
    branch = _dynamic_branch_lines(kept[LN_FILE])
    from pypto_tune.tools.patching import extract_knobs

    in_branch = {k.id for k in extract_knobs(kept) if k.line in branch and k.tunable}
    assert in_branch, "the fixture has tunable sites in its dynamic branch"
    proposed = {c.knob for c in ln_all.candidates}
    assert proposed and not proposed & in_branch
    assert in_branch <= set(ln_all.dead_sites)
    # another test's config: the no-affine test builds its own LayerNormConfig, which this test never constructs
    assert "layernorm_op.py:test_layer_norm_no_affine.LayerNormConfig(block_rows)" in ln_all.dead_sites
    assert any("never ran" in n for n in ln_all.notes)

    # activations: four kernels share the helper; the SwiGLU test runs one of them, so the other three kernels' jit
    # options are dead, and the helper's site is live
    kept, rec = _load(ACT, ACT_FILE)
    prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0)
    others = ("build_gelu.", "build_silu.", "build_relu.")
    assert all(not c.knob.split(":", 1)[1].startswith(others) for c in prop.candidates)
    assert {d for d in prop.dead_sites if d.split(":", 1)[1].startswith(others)}
    assert any(c.knob.endswith("configure_tiling.tile_list[*]") for c in prop.candidates)


def _rows_cols(c) -> tuple[int, int] | None:
    v = c.value
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return v[0], v[1]
    if isinstance(v, int) and c.knob.endswith("tile_list[*]"):
        return v, v  # the comprehension fills every axis with the literal
    return None


def test_no_tile_is_larger_than_the_view_it_tiles_but_the_linked_pairs_own(ln_all, cache):
    tiles = [(c, _rows_cols(c)) for c in ln_all.candidates if "vec_tile" in c.knob or "set_vec_tile_shapes" in c.knob]
    assert tiles
    beyond = [(c, rc) for c, rc in tiles if rc is None or rc[0] > 1 or rc[1] > 512]  # view [block_rows=1, 512]
    (pair_tile, rc), = beyond  # one: the linked pair's tile, set first
    assert pair_tile.knob == TILE_FIELD and rc[1] <= 512
    best = pair_tile.evidence["model"]["linked_pair"]["best_point"]
    assert best["LayerNormConfig.vec_tile_shape"] == pair_tile.value and best["LayerNormConfig.block_rows"] >= rc[0]
    assert "clipped to the view" in pair_tile.why
    kept, rec = _load(ACT, ACT_FILE)
    prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0)
    tiles = [(c, _rows_cols(c)) for c in prop.candidates]
    assert tiles
    for c, rc in tiles:
        assert rc is not None and rc[0] <= 128 and rc[1] <= 1024, (c.knob, c.value)  # no loop: the whole tensor
        assert rc[0] * rc[1] * 4 <= 64 * 1024  # F-10: at most 64 KB of FP32


def test_a_vector_tile_after_a_matmul_tiles_the_matmuls_output(cache):
    kept, rec = _load(ATT, ATT_FILE)
    text = kept[ATT_FILE]
    q_block = int(re.search(r"q_block = (\d+)", text).group(1))
    consts = dict(zip(("Q_LEN", "KV_LEN", "HEAD_DIM"), map(int, re.search(
        r"^Q_LEN, KV_LEN, HEAD_DIM = (\d+), (\d+), (\d+)", text, re.M).groups())))
    assert consts["KV_LEN"] != consts["HEAD_DIM"]  # otherwise the query view and the scores look alike
    prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0,
                  knob=f"{ATT_FILE}:build_attention_probs.attention_probs_kernel.set_vec_tile_shapes#1")
    tiles = [c.value for c in prop.candidates]
    assert [q_block, consts["KV_LEN"]] in tiles  # the whole [q_block, KV_LEN] score block in one tile
    assert all(r <= q_block and c <= consts["KV_LEN"] for r, c in tiles), tiles


def test_the_linked_pairs_tile_comes_first_clipped_and_the_block_follows(ln_all):
    """upstream_layernorm: block_rows 1, tile (1, 128) over rows of 512. The best point the model sees is a block of
    4 with a [4, 512] tile. A block step alone is predicted to gain little (a kept step must gain on its own; on
    rope and multi_stage such a block step ran exactly as before), while [4, 512] set now runs as [1, 512], the
    best lone tile: so the tile goes first and the block uncovers it next."""
    first = ln_all.candidates[0]
    pair = first.evidence["model"]["linked_pair"]
    assert first.knob == TILE_FIELD and first.value == pair["best_point"]["LayerNormConfig.vec_tile_shape"]
    assert first.value[0] > 1 and pair["block_knob"] == BLOCK and pair["order"].startswith("set ")
    block_rank = min(c.rank for c in ln_all.candidates if c.knob == BLOCK)
    assert block_rank > first.rank
    assert not any("opens room" in c.why for c in ln_all.candidates)  # the block does not also claim the pair
    assert any(n.startswith("linked pair") and "block_rows" in n and "goes first, clipped" in n
               for n in ln_all.notes)


def _rank(prop, knob, value) -> int:
    return next(c.rank for c in prop.candidates if c.knob == knob and c.value == value)


def test_a_direction_that_regressed_from_other_kept_states_goes_down(ln_all, cache):
    kept, rec = _load(LN, LN_FILE)
    # raising the block regressed twice this session, each time from another kept state (block 2, then block 4)
    hist = [TriedChange(knob_id=BLOCK, value=8, before_value=2, from_kept_hash="a", outcome="regression",
                        before_us=40.0, after_us=46.2, round=3),
            TriedChange(knob_id=BLOCK, value=16, before_value=4, from_kept_hash="b", outcome="regression",
                        before_us=40.0, after_us=47.0, round=5)]
    after = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=hist)
    ups = [c for c in after.candidates if c.knob == BLOCK and c.value > 1]
    before_ups = {c.value: c.score for c in ln_all.candidates if c.knob == BLOCK and c.value > 1}
    assert ups
    for c in ups:
        assert c.score < before_ups[c.value]  # every step up is lowered
        assert "regressed" in c.why
    assert after.candidates[0].knob != BLOCK  # no longer the first thing to try


def test_a_regression_never_raises_its_knob(cache):
    kept, rec = _load(LN, LN_FILE)
    # the transcript's case: one large regression of this knob ("moved the time by +15.6 %")
    hist = [TriedChange(knob_id=BLOCK, value=2, before_value=4, from_kept_hash="a", outcome="regression",
                        before_us=10.0, after_us=11.56, round=2)]
    prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=hist)
    for c in prop.candidates:
        if c.knob == BLOCK:
            assert "sensitive" not in c.why
            assert sum(h.get("delta_pct", 0) < 0 for h in c.evidence.get("history", [])) == 0


def test_the_neighbourhood_of_a_gain_goes_up(ln_all, cache):
    kept, rec = _load(LN, LN_FILE)
    # the tile [1, 512] gained 65 % from an older kept state, but another trial of its batch was kept instead
    hist = [TriedChange(knob_id=TILE_FIELD, value=[1, 512], before_value=[1, 128], from_kept_hash="older",
                        outcome="not-chosen", before_us=193.7, after_us=67.0, round=2)]
    prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=hist)
    score = {(c.knob, json.dumps(c.value)): c.score for c in prop.candidates}
    base = {(c.knob, json.dumps(c.value)): c.score for c in ln_all.candidates}
    at_gain = (TILE_FIELD, json.dumps([1, 512]))
    next_to = (TILE_FIELD, json.dumps([1, 256]))  # one log2 step away
    assert score[at_gain] > base[at_gain] and score[next_to] > base[next_to]
    # nearer the gain, the prediction (the session model's mean) is raised more; the score also carries the
    # exploration bonus, which shrinks most where the measurement is
    mean = {(c.knob, json.dumps(c.value)): c.evidence["session"]["mean"] for c in prop.candidates}
    mean0 = {(c.knob, json.dumps(c.value)): c.evidence["session"]["mean"] for c in ln_all.candidates}
    assert mean[at_gain] - mean0[at_gain] >= mean[next_to] - mean0[next_to]
    assert _rank(prop, TILE_FIELD, [1, 512]) <= _rank(ln_all, TILE_FIELD, [1, 512])


def test_a_flat_ranking_says_so(cache):
    kept, rec = _load(ACT, ACT_FILE)
    prop = search(kept, stage="frontend", limit=6, cache=cache, run=rec, budget_s=0.0)
    top = [c.score for c in prop.candidates]
    tied = sum(1 for s in top if abs(s - top[0]) <= 0.05)
    assert prop.ranking_flat == (tied >= max(2, (len(top) + 1) // 2))
    if prop.ranking_flat:
        assert any(n.startswith("ranking is flat") for n in prop.notes)


def test_a_value_tried_before_only_this_knob_changed_is_not_proposed_again(cache):
    # a batch ran two pinned tiles of the helper's call from state A; one was kept. Pinning the other again from the
    # new state writes exactly the code that was tried (the rest of the file is as it was in A): the no-retry gate
    # would refuse it, so it is not proposed — even past the answer budget, where candidates are not admitted
    text = (OPS / ACT / ACT_FILE).read_text()
    state_b = {ACT_FILE: text.replace("pypto.set_vec_tile_shapes(*tile_list)", "pypto.set_vec_tile_shapes(128, 64)")}
    pin = f"{ACT_FILE}:configure_tiling.set_vec_tile_shapes#1"
    hist = [TriedChange(knob_id=pin, value=[64, 256], before_value=[32, 32], from_kept_hash="A", outcome="no-gain",
                        before_us=30.485, after_us=30.485, round=1),
            TriedChange(knob_id=pin, value=[128, 64], before_value=[32, 32], from_kept_hash="A", outcome="kept",
                        before_us=30.485, after_us=8.184, round=2)]
    prop = search(state_b, stage="frontend", limit=None, cache=cache, budget_s=0.0, history=hist)
    values = [c.value for c in prop.candidates if c.knob == pin]
    assert values and [64, 256] not in values and prop.excluded.get("tried", 0) >= 1


def test_the_way_back_to_an_earlier_kept_state_is_not_proposed(cache):
    # pinning the helper's call to (128, 64) was kept over the shipped [32, 32]. From there, pinning [32, 32] again
    # writes code that runs exactly what the first state ran: measured already, and slower than the kept state
    # (the kept change beat it), so a trial of it can only lose
    text = (OPS / ACT / ACT_FILE).read_text()
    state_b = {ACT_FILE: text.replace("pypto.set_vec_tile_shapes(*tile_list)", "pypto.set_vec_tile_shapes(128, 64)")}
    pin = f"{ACT_FILE}:configure_tiling.set_vec_tile_shapes#1"
    kept = TriedChange(knob_id=pin, value=[128, 64], before_value=[32, 32], from_kept_hash="A", outcome="kept",
                       before_us=30.485, after_us=8.184, round=1)
    prop = search(state_b, stage="frontend", limit=None, cache=cache, budget_s=0.0, history=[kept], kept_hash="B")
    values = [c.value for c in prop.candidates if c.knob == pin]
    assert values and [32, 32] not in values and prop.excluded.get("tried", 0) >= 1
    # once a change of another knob was kept since, [32, 32] is new code (the rest of the file moved on): proposed
    other = TriedChange(knob_id=f"{ACT_FILE}:build_swiglu.swiglu_kernel.runtime_options.stitch_function_max_num",
                        value=64, before_value=128, from_kept_hash="B", outcome="kept", before_us=8.184,
                        after_us=8.0, round=2)
    swiglu = '@pypto.frontend.jit(runtime_options={"run_mode": mode, "stitch_function_max_num": 128})\n    def swiglu'
    assert state_b[ACT_FILE].count(swiglu) == 1
    state_c = {ACT_FILE: state_b[ACT_FILE].replace(swiglu, swiglu.replace("128", "64"))}
    prop = search(state_c, stage="frontend", limit=None, cache=cache, budget_s=0.0, history=[kept, other],
                  kept_hash="C")
    assert [32, 32] in [c.value for c in prop.candidates if c.knob == pin]


def test_a_pinned_value_tried_before_a_source_only_it_reads_changed_is_not_proposed_again(cache):
    # the helper's comprehension literal 32 → 128 was kept; pinning the call to [32, 512] had been tried from the
    # first state. The literal feeds that call alone, so once the call is pinned it reads nothing: pinning [32, 512]
    # from the new state runs what the first trial ran, whatever the literal now says
    kept, rec = _load(ACT, ACT_FILE)
    literal = "tile_list = [32 for _ in range(len(x.shape))]"
    assert literal in kept[ACT_FILE]
    state_b = {ACT_FILE: kept[ACT_FILE].replace(literal, literal.replace("32", "128"))}  # the same lines
    pin, source = f"{ACT_FILE}:configure_tiling.set_vec_tile_shapes#1", f"{ACT_FILE}:configure_tiling.tile_list[*]"
    hist = [TriedChange(knob_id=source, value=128, before_value=32, from_kept_hash="A", outcome="kept",
                        before_us=30.485, after_us=8.701, round=1),
            TriedChange(knob_id=pin, value=[32, 512], before_value=[32, 32], from_kept_hash="A", outcome="no-gain",
                        before_us=30.485, after_us=8.701, round=2)]
    prop = search(state_b, stage="frontend", limit=None, cache=cache, budget_s=0.0, history=hist, kept_hash="B",
                  run=rec)
    values = [c.value for c in prop.candidates if c.knob == pin]
    assert values and [32, 512] not in values
    # and once the call itself was pinned (kept): the literal is no knob any more, and still [32, 512] ran already
    state_c = {ACT_FILE: state_b[ACT_FILE].replace("pypto.set_vec_tile_shapes(*tile_list)",
                                                   "pypto.set_vec_tile_shapes(128, 64)")}
    hist.append(TriedChange(knob_id=pin, value=[128, 64], before_value=[128, 128], from_kept_hash="B",
                            outcome="kept", before_us=8.701, after_us=8.184, round=3))
    prop = search(state_c, stage="frontend", limit=None, cache=cache, budget_s=0.0, history=hist, kept_hash="C")
    values = [c.value for c in prop.candidates if c.knob == pin]
    assert values and [32, 512] not in values
    assert [64, 256] in values  # a value not tried yet is still proposed


def test_a_call_written_as_an_expression_learns_from_its_pinned_values_as_a_literal_call_does(cache):
    """The ledger records a pinned call's value before the change as written (``*tile_list``); the candidates start
    from the value it ran with ([32, 32]). Read as a move from an expression, a 4× regression of one pinned value said
    nothing of the next (the arctic LSTM: [4, 4096] ran 4.6× slower, then [2, 4096] was proposed, "nothing measured
    near it"); read from the value that ran, it says what the same trial from a literal call says."""
    kept, rec = _load(ACT, ACT_FILE)
    pin = f"{ACT_FILE}:configure_tiling.set_vec_tile_shapes#1"
    written = {"$expr": "pypto.set_vec_tile_shapes(*tile_list)"}
    assert "pypto.set_vec_tile_shapes(*tile_list)" in kept[ACT_FILE]

    def read(before):  # what the session model makes of the trial at each other value of the call
        hist = [TriedChange(knob_id=pin, value=[128, 128], before_value=before, from_kept_hash="A",
                            outcome="regression", before_us=30.0, after_us=120.0, round=1)]
        prop = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=hist,
                      kept_hash="A")
        # the uncertainty and the prior's remaining weight are the kernel's alone (the prior's own mean also reads
        # the history, by its own rules)
        return {json.dumps(c.value): (c.evidence["session"]["sd"], c.evidence["session"]["prior"]["weight"],
                                      [m["round"] for m in c.evidence["session"]["moved_by"] if m["part"] < 0])
                for c in prop.candidates if c.knob == pin}

    as_written = read(written)
    assert as_written and as_written == read([32, 32])
    assert as_written[json.dumps([64, 128])][1:] == (0.56, [1])  # the regression lowers its neighbour


def test_a_config_field_that_is_one_number_of_a_tile_is_moved_in_the_authors_form(cache):
    """upstream_linear_bias builds ``LinearTiling(m_block=16, cube_m=16, cube_k=32, cube_n=32, vec_rows=4)`` in the
    test; the kernel sets ``set_cube_tile_shapes([t.cube_m, t.cube_m], [t.cube_k, t.cube_k], [t.cube_n, t.cube_n])``
    and ``set_vec_tile_shapes(t.vec_rows, out_dim)``. Each field is one number of a tile. Before 2026-12-05 such a
    field got no value (the generator knew a field holding a whole tile, or a comprehension's element), so the search
    could only pin the calls — the author's knobs never moved, and an offline replay of the grid, which varies the
    fields, could follow 2 of its 1 166 first proposals."""
    probes = Path(__file__).resolve().parents[1] / "patching" / "data" / "probes"
    file = "linear_bias_op.py"
    kept = {file: (OPS / "upstream_linear_bias" / file).read_text()}
    rec = json.loads((probes / "upstream_linear_bias__test_linear_bias.json").read_text())
    vec_rows = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=None,
                      knob=f"{file}:test_linear_bias.LinearTiling(vec_rows)")
    rows = sorted(c.value for c in vec_rows.candidates)
    # out_dim is 256 FP32: 64 rows are 64 KB, 128 rows 128 KB (over the 96 KB a tile may take, refused)
    assert {1, 2, 8, 16, 32, 64} <= set(rows) and 128 not in rows, rows
    cube_m = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0,
                    knob=f"{file}:test_linear_bias.LinearTiling(cube_m)")
    ms = sorted(c.value for c in cube_m.candidates)
    assert {32, 64} <= set(ms) and all(m & (m - 1) == 0 and m <= 512 for m in ms), ms  # powers of two, ≤ 512


def test_a_tile_whose_every_change_regressed_here_no_longer_rides_on_the_model(cache):
    """upstream_bmm_scale (held out): its vector-task priors predict a gain for every larger epilogue tile, but the
    kernel's cube side dominates — on the measured grid each larger tile from the shipped state is slower (173.125 →
    219.776 µs and worse). Live, both arms of 2026-12-05 spent all 12 trials on that tile and never touched the cube
    tile (the grid's best needs it). After three regressions of one tile from the same kept state — through the pinned
    call or the config field that feeds it — the model's prediction for that tile is cancelled, and the cube tile
    leads."""
    from pypto_tune.tools.search.hashing import code_hash

    probes = Path(__file__).resolve().parents[1] / "patching" / "data" / "probes"
    file = "bmm_scale_op.py"
    kept = {file: (OPS / "upstream_bmm_scale" / file).read_text()}
    rec = json.loads((probes / "upstream_bmm_scale__test_bmm_scale.json").read_text())
    pin = f"{file}:build_bmm_scale.bmm_scale_kernel.set_vec_tile_shapes#1"
    rows = f"{file}:test_bmm_scale.BmmTilingConfig(vec_rows)"
    here = code_hash(kept)
    tried = [TriedChange(knob_id=pin, value=[1, 128, 128], before_value=[1, 8, 64], from_kept_hash=here,
                         outcome="regression", before_us=173.125, after_us=219.776, round=1),
             TriedChange(knob_id=pin, value=[1, 64, 256], before_value=[1, 8, 64], from_kept_hash=here,
                         outcome="regression", before_us=173.125, after_us=219.776, round=2)]
    after_two = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=tried)
    # two are not yet enough to overrule the model
    assert all("its prediction is not counted here" not in c.why for c in after_two.candidates if c.knob == rows)
    tried.append(TriedChange(knob_id=rows, value=64, before_value=8, from_kept_hash=here, outcome="regression",
                             before_us=173.125, after_us=221.282, round=3))
    after = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0, history=tried)
    tile_cands = [c for c in after.candidates if c.knob in (pin, rows)]
    cancelled = [c for c in tile_cands if "its prediction is not counted here" in c.why]
    # the prior of every tile candidate is cancelled or no gain (the score adds the session model's exploration
    # bonus, which is never negative: the prior's part is what the model predicted)
    assert cancelled and all(c in cancelled or c.evidence["session"]["prior"]["part"] <= 0 for c in tile_cands)
    # with the tile's prediction cancelled, every tile candidate ranks below every cube-tile candidate the model scores
    cube = [c for c in after.candidates if c.knob.endswith(("set_cube_tile_shapes#1", "(tile_m)", "(tile_n)"))
            and c.evidence["session"]["prior"].get("model", 0) > 0]
    assert cube and max(c.score for c in tile_cands) < min(c.score for c in cube)


def test_a_batched_matmul_is_read_from_its_views():
    """upstream_bmm_scale (held out) multiplies [bb, 128, 128] @ [bb, 128, 256] per loop iteration. The probe records
    the views, not the matmul's operands, and until 2026-12-05 only 2-D views were read as a matmul's: the batched
    one had no M, K, N, so every cube-tile candidate scored 0 and the live search stopped at 1.95× (the grid's best,
    11.43×, needs the cube tile). Read now: the pair of views with the same batch dims where A's last dim is B's
    second-to-last gives M, K, N = 128, 128, 256 and the batch; each batch entry has its own cube tasks."""
    from pypto_tune.tools.search.hashing import code_hash
    from pypto_tune.tools.search.priors import load_priors
    from pypto_tune.tools.search.propose import _Context, change_view

    probes = Path(__file__).resolve().parents[1] / "patching" / "data" / "probes"
    file = "bmm_scale_op.py"
    kept = {file: (OPS / "upstream_bmm_scale" / file).read_text()}
    rec = json.loads((probes / "upstream_bmm_scale__test_bmm_scale.json").read_text())
    ctx = _Context(kept, None, "frontend", None, [], load_priors(), code_hash(kept), rec)
    (kernel,) = ctx.base
    cube = kernel["cube"]
    # shipped cube tile m 16, n 32: 128 / 16 × 256 / 32 = 64 tasks for the one batch entry of an iteration
    assert (tuple(cube["mkn"]), cube["batch"], cube["tasks_per_iter"]) == ((128, 128, 256), 1, 64), cube
    view = change_view(kept, f"{file}:test_bmm_scale.BmmTilingConfig(batch_block)", 2, run=rec)
    assert view is not None and view.after is not None
    (after,) = view.after
    assert after["iterations"] == 4 and after["cube"]["batch"] == 2 and after["cube"]["tasks_per_iter"] == 128
    # and the cube tile is predicted to gain: the search's first answer is no longer a zero-scored guess
    first = search(kept, stage="frontend", limit=1, run=rec, budget_s=0.0,
                   knob=f"{file}:build_bmm_scale.bmm_scale_kernel.set_cube_tile_shapes#1").candidates[0]
    assert first.score > 0 and "cube" in first.why


def test_candidates_that_run_the_same_configuration_come_after_every_distinct_one(ln_all):
    """upstream_layernorm runs one row per block: a vector tile of 1, 2 or 4 rows is clipped to the same one-row view,
    so those candidates run the same configuration. Proposed side by side, a batch of two measured one run twice
    (PyPTO's FFN example: a cube tile's m of 16 and of 32 on a matmul of 16 rows, twice in 16 trials). Each such twin
    now follows every distinct configuration, says whose twin it is, and is counted; none is dropped (its written
    value may matter once the block grows)."""
    whys = [c.why for c in ln_all.candidates]
    twins = [i for i, w in enumerate(whys) if w.startswith("runs the same configuration as")]
    assert twins and ln_all.excluded.get("twin") == len(twins)
    assert twins == list(range(len(whys) - len(twins), len(whys)))  # all after the distinct ones
    first_twin = ln_all.candidates[twins[0]]
    named = first_twin.why.split("runs the same configuration as ", 1)[1].split(" (ranked above)", 1)[0]
    assert any(f"{c.knob.split(':', 1)[-1]} = {c.value!r}" == named for c in ln_all.candidates[:twins[0]])
