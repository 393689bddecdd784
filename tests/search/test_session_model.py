"""The session model (tools/search/learn.py) and the rules it brings to the ranking, without running anything.

* two trials of a knob without effect from one kept state: the knob is not proposed from that state again;
* a kind of knob nobody has tried gets its turn before a knob (or kind) measured only without effect;
* a candidate whose effective configuration (a tile clamped to the view it tiles) was measured is reported as
  known, not proposed;
* every candidate says what moved it: the session's trials (round, knob, Δ %, their part) and the prior's part;
* the model itself: the prior decides where nothing was measured, the measurements where they were, a gain raises
  its neighbours, and the answer is the same for the same ledger;
* a run one knob away from the kept state is also that knob's move from here, its effect the two times' ratio: a
  gain banked from an earlier state no longer lifts the values around it.
"""

from __future__ import annotations

import numpy as np
import pytest
from pypto_tune.tools.search import TriedChange, code_hash, search
from pypto_tune.tools.search import learn

from .conftest import load_operator

FILE = "rmsnorm_grid.py"
BLOCK = f"{FILE}:ROWS_PER_BLOCK"
TILE = f"{FILE}:rmsnorm_rows.set_vec_tile_shapes#1"
UNROLL = f"{FILE}:rmsnorm_rows.loop[LOOP_ROWS].unroll_list"


def _rows(n: int, tile: str = "1, 64") -> dict[str, str]:
    kept, _ = load_operator("rmsnorm_grid")
    return {f: t.replace("ROWS_PER_BLOCK = 1", f"ROWS_PER_BLOCK = {n}")
            .replace("set_vec_tile_shapes(1, 64)", f"set_vec_tile_shapes({tile})") for f, t in kept.items()}


def _trial(knob: str, value, before, state: str, before_us: float, after_us: float | None, rnd: int,
           outcome: str | None = None) -> TriedChange:
    if outcome is None:
        outcome = ("failed" if after_us is None else "kept" if after_us < before_us else
                   "no-gain" if after_us == before_us else "regression")
    return TriedChange(knob_id=knob, value=value, before_value=before, from_kept_hash=state, outcome=outcome,
                       before_us=before_us, after_us=after_us, round=rnd, stage="FRONTEND")


def _search(kept, hist, **kw):
    _, ctx = load_operator("rmsnorm_grid")
    return search(kept, stage="frontend", context=ctx, history=hist, limit=None, budget_s=0.0, **kw)


# --------------------------------------------------------------------------------------------- the search's rules

def test_a_knob_with_two_no_effect_trials_from_this_state_is_not_proposed_from_it_again():
    kept = _rows(4)
    here = code_hash(kept)
    one = [_trial(BLOCK, 8, 4, here, 35.460556, 35.460556, 3)]
    two = one + [_trial(BLOCK, 16, 4, here, 35.460556, 35.460556, 4)]
    after_one = _search(kept, one)
    assert any(c.knob == BLOCK for c in after_one.candidates)  # one trial is not enough to give up
    after_two = _search(kept, two)
    assert not any(c.knob == BLOCK for c in after_two.candidates)
    assert after_two.excluded["no-effect-here"] == len([c for c in after_one.candidates if c.knob == BLOCK]) - 1
    assert after_two.candidates and after_two.candidates[0].knob != BLOCK
    # the same two trials from another kept state: the knob is still proposed here, behind every untried kind
    elsewhere = [t.model_copy(update={"from_kept_hash": "another-state"}) for t in two]
    other = _search(kept, elsewhere)
    block = [c.rank for c in other.candidates if c.knob == BLOCK]
    untried = [c.rank for c in other.candidates if c.knob in (TILE, UNROLL)]
    assert block and untried and max(untried) < min(block)


def test_an_untried_kind_gets_its_turn_before_a_third_try_of_an_unresponsive_kind():
    kept = _rows(4)
    here = code_hash(kept)
    # the vector tile measured twice without effect, from two different states (so neither rule of "this state"
    # applies): the block size and the unroll list, never tried, go first
    hist = [_trial(TILE, [2, 64], [1, 64], "s1", 35.46, 35.46, 2), _trial(TILE, [1, 128], [1, 64], "s2", 35.46,
                                                                          35.46, 3)]
    prop = _search(kept, hist)
    tiles = [c.rank for c in prop.candidates if c.knob == TILE]
    others = [c.rank for c in prop.candidates if c.knob in (BLOCK, UNROLL)]
    assert tiles and others and max(others) < min(tiles)
    assert here not in {t.from_kept_hash for t in hist}


def test_a_knob_that_showed_nothing_once_waits_for_the_untried_kinds():
    """Each kind once before a knob that showed nothing is tried again (PyPTO's dynamic-GELU FFN: the activation
    kernel's vector tile measured exactly +0.0 %, and its next value went ahead of the loop's unroll list)."""
    kept = _rows(4)
    hist = [_trial(TILE, [2, 64], [1, 64], "s1", 35.46, 35.46, 2)]
    prop = _search(kept, hist)
    tiles = [c.rank for c in prop.candidates if c.knob == TILE]
    others = [c.rank for c in prop.candidates if c.knob in (BLOCK, UNROLL)]
    assert tiles and others and max(others) < min(tiles)
    # a knob that responded once keeps its place by score
    moved = _search(kept, [_trial(TILE, [2, 64], [1, 64], "s1", 35.46, 30.0, 2)])
    assert min(c.rank for c in moved.candidates if c.knob == TILE) == 1


def test_one_knobs_silence_does_not_demote_another_of_its_kind():
    silent = learn.Observation(_pt("a", (4.0,)), 0.0, TriedChange(knob_id="a", value=1, outcome="no-gain",
                                                                 before_us=10.0, after_us=10.0, round=1))
    m = learn.SessionModel([silent], "s")
    assert m.unresponsive("a", "vector-tile") and not m.unresponsive("b", "vector-tile")
    twice = learn.SessionModel([silent, learn.Observation(_pt("b", (4.0,)), 0.0, silent.trial)], "s")
    assert twice.unresponsive("c", "vector-tile")  # two knobs of one kind, both silent: the kind waits


def test_a_tile_clamped_to_a_measured_configuration_is_known_not_proposed():
    kept = _rows(4)
    here = code_hash(kept)
    # [8, 64] over a view of 4 rows runs as [4, 64]: measured once, the candidate [4, 64] is that same run
    hist = [_trial(TILE, [8, 64], [1, 64], here, 35.460556, 20.0, 5, outcome="regression")]
    prop = _search(kept, hist)
    assert [4, 64] not in [c.value for c in prop.candidates if c.knob == TILE]
    known = [k for k in prop.known_outcomes if k["value"] == [4, 64]]
    assert known == [{"knob": TILE, "value": [4, 64], "same_as_round": 5, "operator_time_us": 20.0,
                      "same_as": "rmsnorm_rows.set_vec_tile_shapes#1 = [8, 64]"}]
    assert prop.excluded["known"] >= 1
    # a tile the view does not clamp is a different run: still proposed
    assert [4, 128] in [c.value for c in prop.candidates if c.knob == TILE]


def test_an_unroll_list_of_one_runs_as_the_loop_without_one_and_is_known():
    """A loop without an unroll list and one with ``[1]`` unroll nothing: after a kept ``[4, 2, 1]``, the step to
    ``[1]`` is the state before it, measured (PyPTO's dynamic-GELU FFN ran it again: 58.128 µs, as before)."""
    before = _rows(4, tile="2, 64")
    kept = {f: t.replace('idx_name="blk")', 'idx_name="blk", unroll_list=[4, 2, 1])') for f, t in before.items()}
    assert kept != before
    hist = [_trial(TILE, [2, 64], [1, 64], "s-base", 35.46, 30.0, 2),  # -> the state without a list, measured
            _trial(UNROLL, [4, 2, 1], None, code_hash(before), 30.0, 25.0, 3)]  # -> the kept state
    prop = _search(kept, hist, knob=UNROLL)
    assert [1] not in [c.value for c in prop.candidates]
    known = [k for k in prop.known_outcomes if k["value"] == [1]]
    assert known and known[0]["same_as_round"] == 2 and known[0]["operator_time_us"] == 30.0, prop.known_outcomes


def test_the_state_a_kept_change_left_is_measured_and_stepping_back_to_it_is_known():
    """The baseline was never a trial, yet it was measured: after an unroll list kept from it, ``[1]`` is the
    baseline again (PyPTO's GLM expert selection ran it anew and measured the baseline's 11.27 µs to the digit)."""
    before = _rows(4, tile="2, 64")
    kept = {f: t.replace('idx_name="blk")', 'idx_name="blk", unroll_list=[4, 2, 1])') for f, t in before.items()}
    hist = [_trial(UNROLL, [4, 2, 1], None, code_hash(before), 30.0, 25.0, 3)]
    prop = _search(kept, hist, knob=UNROLL)
    assert [1] not in [c.value for c in prop.candidates]
    known = [k for k in prop.known_outcomes if k["value"] == [1]]
    assert known == [{"knob": UNROLL, "value": [1], "same_as_round": 3, "operator_time_us": 30.0,
                      "same_as": "the state kept before round 3"}], prop.known_outcomes


def test_an_unroll_list_of_the_factors_a_kept_state_ran_is_that_state_in_any_order():
    """The arctic LSTM ships ``[1, 2, 4]``; after a kept ``[16, 8, 4, 2, 1]``, ``[4, 2, 1]`` runs the shipped loop
    (29.558 µs both, to the digit): known, not proposed."""
    before = _rows(4, tile="2, 64")
    shipped = {f: t.replace('idx_name="blk")', 'idx_name="blk", unroll_list=[1, 2, 4])') for f, t in before.items()}
    kept = {f: t.replace('idx_name="blk")', 'idx_name="blk", unroll_list=[16, 8, 4, 2, 1])') for f, t in before.items()}
    hist = [_trial(UNROLL, [16, 8, 4, 2, 1], [1, 2, 4], code_hash(shipped), 29.558, 28.139, 3)]
    prop = _search(kept, hist, knob=UNROLL)
    assert [4, 2, 1] not in [c.value for c in prop.candidates]
    assert [k["value"] for k in prop.known_outcomes if k["same_as_round"] == 3] == [[4, 2, 1]], prop.known_outcomes


def test_each_proposal_says_which_measurements_moved_it_and_the_priors_part():
    kept = _rows(4)
    here = code_hash(kept)
    hist = [_trial(TILE, [2, 64], [1, 64], here, 35.460556, 20.0, 7),  # a gain of the tile, from here
            _trial(BLOCK, 8, 4, here, 35.460556, 35.460556, 8)]
    prop = _search(kept, hist)
    near = next(c for c in prop.candidates if c.knob == TILE and c.value == [4, 64])
    ev = near.evidence["session"]
    assert ev["moved_by"][0]["round"] == 7 and ev["moved_by"][0]["part"] > 0  # raised by the gain next to it
    assert ev["moved_by"][0]["delta_pct"] == pytest.approx((20.0 - 35.460556) / 35.460556 * 100, abs=0.01)
    assert ev["prior"]["weight"] < 1 and "model" in ev["prior"]
    assert "session model" in near.why and "r7" in near.why
    unroll = next(c for c in prop.candidates if c.knob == UNROLL)
    assert unroll.evidence["session"]["moved_by"] == [] and unroll.evidence["session"]["prior"]["weight"] == 1.0


def test_same_ledger_same_ranking():
    kept = _rows(4)
    here = code_hash(kept)
    hist = [_trial(TILE, [2, 64], [1, 64], here, 35.46, 20.0, 7), _trial(BLOCK, 8, 4, here, 35.46, 35.46, 8)]
    a, b = _search(kept, hist), _search(kept, list(hist))
    assert [(c.id, c.score, c.why) for c in a.candidates] == [(c.id, c.score, c.why) for c in b.candidates]


def test_a_run_one_knob_away_from_the_kept_state_is_read_as_a_move_from_here_at_the_ratio_of_the_two_times():
    # from the shipped state (tile [1, 64], 35.46 µs) a batch tried [2, 64] (20.0 µs, kept) and [4, 64] (21.0 µs):
    # from the kept state, [4, 64] is 5 % slower, not the 69 % gain it was from the shipped state
    shipped, kept = code_hash(_rows(4)), _rows(4, "2, 64")
    hist = [_trial(TILE, [2, 64], [1, 64], shipped, 35.460556, 20.0, 1),
            _trial(TILE, [4, 64], [1, 64], shipped, 35.460556, 21.0, 2, outcome="not-chosen")]
    prop = _search(kept, hist)
    near = next(c for c in prop.candidates if c.knob == TILE and c.value == [4, 128])
    r2 = [m["part"] for m in near.evidence["session"]["moved_by"] if m["round"] == 2]
    assert r2 and sum(r2) < 0, near.evidence["session"]  # read from here too, it lowers its neighbour
    # once the block has moved too (kept), that run is two knobs away: read where it was made, beside round 1 made
    # from the same state, it still says that [2, 64] → [4, 64] is the slower way (a move is the difference of two
    # settings), not the 69 % gain it measured from the shipped state
    far = _search(_rows(8, "2, 64"), hist + [_trial(BLOCK, 8, 4, code_hash(kept), 20.0, 19.0, 3)])
    near_far = next(c for c in far.candidates if c.knob == TILE and c.value == [4, 128])
    r2_far = [m["part"] for m in near_far.evidence["session"]["moved_by"] if m["round"] == 2]
    assert r2_far and sum(r2_far) < 0, near_far.evidence["session"]


def test_the_no_effect_rules_count_a_trial_once_where_it_was_made():
    # a no-effect trial from another state, one knob away from here: the model reads it from here, the rule "twice
    # from this state" does not count it here
    p_here = _pt("k", (2.0,), state="s1")
    t = TriedChange(knob_id="k", value=4, outcome="no-gain", round=1, before_us=10.0, after_us=10.0,
                    from_kept_hash="s0")
    m = learn.SessionModel([learn.Observation(_pt("k", (2.0,), state="s0"), 0.0, t, p_here, -0.1)], "s1")
    assert m.exhausted_here("k", "s1") == [] and m.predict(p_here, 0.0).mean < 0


# --------------------------------------------------------------------------------------------- the model alone

def _pt(group: str, ext: tuple[float, ...], kind: str = "vector-tile", state: str = "s", d=(1,)) -> learn.Point:
    return learn.Point(group, kind, ext, d, state, "frontend")


def _obs(p: learn.Point, y: float, rnd: int) -> learn.Observation:
    return learn.Observation(p, y, TriedChange(knob_id=p.group, value=1, outcome="no-gain", round=rnd))


def test_without_measurements_the_prior_decides_and_its_order_is_kept():
    m = learn.SessionModel([])
    a, b = m.predict(_pt("k", (1.0,)), 3.0), m.predict(_pt("k", (2.0,)), 0.5)
    assert a.score > b.score and a.prior_weight == b.prior_weight == 1.0 and a.moved_by == []
    assert a.mean == pytest.approx(learn.squash(3.0)) and abs(learn.squash(13.7)) <= learn.PRIOR_SCALE


def test_measurements_outweigh_the_prior_near_them_and_not_elsewhere():
    flat = learn.SessionModel([_obs(_pt("k", (1.0,)), 0.0, 1), _obs(_pt("k", (2.0,)), 0.0, 2)], "s")
    near = flat.predict(_pt("k", (1.5,)), 8.0)
    assert near.prior_weight < 0.2 and near.mean < 0.2 * learn.squash(8.0) + 1e-9
    assert {m.round for m in near.moved_by} == {1, 2} and all(m.part < 0 for m in near.moved_by)
    other_kind = flat.predict(_pt("c", (1.0,), kind="cube-tile"), 0.1)
    assert other_kind.prior_weight == 1.0 and other_kind.sd == pytest.approx(flat.scale) and flat.scale < 1
    assert other_kind.score > near.score  # an untried kind with a small prior beats a flat knob's large one


def test_a_gain_raises_its_neighbours_more_than_the_far_values():
    m = learn.SessionModel([_obs(_pt("k", (1.0,)), 1.0, 1)], "s")
    assert m.predict(_pt("k", (1.5,)), 0.0).mean > m.predict(_pt("k", (5.0,)), 0.0).mean > 0


def test_a_move_that_changed_nothing_elsewhere_is_read_as_nearly_exact_a_gain_elsewhere_is_not():
    # the same move measured from the previous kept state (s0; the kept change since was another knob's): PyPTO's
    # dynamic-GELU FFN tried its kernel's vector tile again from the next state, +0.0 % both times
    def reading(outcome: str, y: float) -> learn.Observation:
        return learn.Observation(_pt("k", (4.0,), state="s0"), y, TriedChange(
            knob_id="k", value=1, outcome=outcome, round=1, before_us=100.0, after_us=100.0 * 2 ** -y))

    flat = learn.SessionModel([reading("no-gain", 0.0)], "s1").predict(_pt("k", (4.0,), state="s1"), 8.0)
    assert flat.mean < 0.05 * learn.squash(8.0) and flat.sd < 0.2
    gain = learn.SessionModel([reading("kept", 1.0)], "s1").predict(_pt("k", (4.0,), state="s1"), 0.0)
    gain_here = learn.SessionModel([reading("kept", 1.0)], "s0").predict(_pt("k", (4.0,), state="s0"), 0.0)
    assert 0 < gain.mean < 0.6 * gain_here.mean and gain.sd > 0.5  # a banked gain lifts the way it came a little
    # a move that changed nothing reads the same from the state it was made in and from the next
    here = learn.SessionModel([reading("no-gain", 0.0)], "s0").predict(_pt("k", (4.0,), state="s0"), 8.0)
    assert (here.mean, here.sd) == pytest.approx((flat.mean, flat.sd))


def test_no_effect_is_the_keep_rules_no_gain_or_a_change_within_the_margin():
    base = dict(knob_id="k", value=1, before_us=100.0)
    assert learn.no_effect(TriedChange(**base, outcome="no-gain", after_us=100.0))
    assert learn.no_effect(TriedChange(**base, outcome="regression", after_us=100.04))
    assert not learn.no_effect(TriedChange(**base, outcome="regression", after_us=100.3))
    assert not learn.no_effect(TriedChange(**base, outcome="failed", after_us=None))


def test_kinds_of_knob():
    assert learn.kind_of("loop_option", "unroll_list") == "unroll-list"
    assert learn.kind_of("jit_option", "vec_nbuffer_setting") == "buffer-count"
    assert learn.kind_of("tile_source", "cube_tile_shape", ["cube_tile"]) == "cube-tile"
    assert learn.kind_of("tile_constant", "ROWS_PER_BLOCK", ["loop", "view"]) == "block-size"
    assert learn.kind_of("vec_tile", "set_vec_tile_shapes#1") == "vector-tile"


def test_a_config_field_and_the_call_it_feeds_are_one_knob_when_its_other_call_never_ran():
    """PyPTO's FFN example: ``FFNConfig(vec_tile_shape)`` feeds the activation kernel's vector tile call (which ran)
    and a second call in a branch the static test never takes. Counted as a different knob from the pinned call, it
    got two more no-effect trials from every kept state; counted by the calls that ran, the field and the pinned call
    are one knob to the model and its no-effect rule. Without a probe record (nothing says what ran) every call
    counts."""
    from types import SimpleNamespace

    from pypto_tune.tools.patching.models import Knob
    from pypto_tune.tools.search.propose import _ran_tile_sites, _site_group

    pinned = Knob(id="ffn.py:kernel.set_vec_tile_shapes#1", kind="vec_tile", name="set_vec_tile_shapes",
                  file="ffn.py", line=234, value={"$expr": "*config.vec_tile_shape"})
    branch = Knob(id="ffn.py:kernel.set_vec_tile_shapes#0", kind="vec_tile", name="set_vec_tile_shapes",
                  file="ffn.py", line=205, value={"$expr": "*config.vec_tile_shape"})
    field = Knob(id="ffn.py:test.FFNConfig(vec_tile_shape)", kind="tile_source", name="vec_tile_shape",
                 file="ffn.py", line=280, value=[16, 32],
                 context={"consumers": ["vec_tile"], "feeds": ["ffn.py:205", "ffn.py:234"]})
    ran = SimpleNamespace(knobs=[pinned, branch, field], live=lambda k: k.line != 205)
    assert _ran_tile_sites(ran, field) == {("ffn.py", 234)}
    assert _site_group(ran, field) == _site_group(ran, pinned) == "sites:ffn.py:234"
    unknown = SimpleNamespace(knobs=[pinned, branch, field], live=lambda k: None)
    assert _ran_tile_sites(unknown, field) == {("ffn.py", 205), ("ffn.py", 234)}
    assert _site_group(unknown, field) != _site_group(unknown, pinned)


def test_knobs_that_set_some_of_the_same_tile_calls_are_partly_one_knob():
    """A config field feeding two kernels' cube tile calls and the pinned call of one of them (PyPTO's FFN): their
    measurements inform each other, less than one knob's own, more than another knob's of the same kind."""
    both, one, other = "sites:ffn.py:208,ffn.py:229", "sites:ffn.py:208", "sites:ffn.py:300"
    assert learn.overlap(both, one) == pytest.approx(2 ** -0.5) and learn.overlap(one, other) == 0.0
    assert learn.overlap("ffn.py:cfg.x", "ffn.py:cfg.x") == 1.0 and learn.overlap("ffn.py:cfg.x", one) == 0.0
    gain = learn.SessionModel([_obs(_pt(one, (4.0,), kind="cube-tile"), 1.0, 1)], "s")
    same, shared, apart = (gain.predict(_pt(g, (4.0,), kind="cube-tile"), 0.0).mean for g in (one, both, other))
    assert same > shared > apart > 0
    # a batch's second place on a call the first place already sets pays for it
    cands = [(_pt(one, (4.0,), kind="cube-tile"), 2.0, 0), (_pt(both, (4.0,), kind="cube-tile"), 1.9, 0),
             (_pt("tile", (4.0,)), 1.7, 0)]
    assert _batch(learn.SessionModel([], "s"), cands, depth=2)[:2] == [0, 2]


def _flat(p: learn.Point, rnd: int) -> learn.Observation:
    return learn.Observation(p, 0.0, TriedChange(knob_id=p.group, value=1, outcome="no-gain", round=rnd,
                                                 before_us=10.0, after_us=10.0))


def _cube(group: str, problem: str | None, d=(0, 0, 1, 1, 0, 0), ext=(4.0, 4.0, 6.0, 8.0, 4.0, 4.0),
          state: str = "s") -> learn.Point:
    return learn.Point(group, "cube-tile", ext, d, state, "frontend", problem)


def test_cube_tiles_of_one_matmul_shape_learn_from_each_other_and_the_kernel_stays_positive_definite():
    """PyPTO's tiling_config runtime test: two kernels, each one matmul of the same shape, each its own cube tile. A
    move measured on one says most of what the same move does on the other; a tile of another matmul shape, or one
    whose matmul is unknown, learns only what any cube tile does."""
    gain = learn.SessionModel([_obs(_cube("t64", "mkn:64x2048x2048"), 1.0, 1)], "s")
    same_knob, same_problem, other_problem, unknown = (
        gain.predict(_cube(g, pr), 0.0).mean for g, pr in (("t64", "mkn:64x2048x2048"),
                                                           ("t32", "mkn:64x2048x2048"),
                                                           ("t16", "mkn:16x64x64"), ("cfg", "knob:cfg")))
    assert same_knob > same_problem > 0.4 and other_problem == pytest.approx(unknown) and unknown < 0.15
    pts = [_cube(g, pr, d=d, ext=e) for g, pr in (("t64", "mkn:1x2x3"), ("t32", "mkn:1x2x3"), ("t16", "knob:t16"))
           for d in ((0, 0, 1, 1, 0, 0), (0, 0, 0, 1, 0, 0)) for e in ((4.0, 4.0, 6.0, 8.0, 4.0, 4.0),
                                                                        (4.0, 4.0, 7.0, 8.0, 4.0, 5.0))]
    cov = np.array([[learn.kernel(a, b) for b in pts] for a in pts])
    assert np.linalg.eigvalsh(cov).min() > -1e-9 and all(learn.kernel(p, p) == pytest.approx(1.0) for p in pts)


def test_a_cube_tile_move_of_one_level_waits_once_two_such_moves_measured_no_effect():
    """Two moves of a cube tile's L1 alone (L0 kept) that left the time as it was, on any cube tile of the session:
    the next L1-only move waits behind the other candidates; an L0 move does not; one L1 move with an effect keeps the
    level in play (an L1 can matter, domain F-9)."""
    l1_k, l1_n, l0 = (0, 0, 0, 1, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 1, 1, 0, 0)
    one = [_flat(_cube("t32", "p", d=l1_n), 1)]
    assert learn.SessionModel(one, "s").flat_level(_cube("t64", "p", d=l1_k)) == []  # one is not enough
    two = one + [_flat(_cube("t64", "p", d=l1_k), 2)]
    m = learn.SessionModel(two, "s")
    assert [t.round for t in m.flat_level(_cube("t32", "p", d=l1_k))] == [1, 2]
    assert m.flat_level(_cube("t32", "p", d=l0)) == [] and learn.levels_moved(_cube("t", "p", d=l0)) == {"L0", "L1"}
    moved = two + [learn.Observation(_cube("t16", "q", d=l1_n), -0.3,
                                     TriedChange(knob_id="t16", value=1, outcome="regression", round=3,
                                                 before_us=10.0, after_us=12.3))]
    assert learn.SessionModel(moved, "s").flat_level(_cube("t32", "p", d=l1_k)) == []
    assert learn.levels_moved(_pt("v", (1.0,))) is None


# --------------------------------------------------------------------------- a move as the difference of two settings

def _move(space: str, start: tuple[float, ...], end: tuple[float, ...], state: str, group: str = "tile",
          kind: str = "cube-tile") -> learn.Point:
    d = learn.direction(start, end)
    return learn.Point(group, kind, end, d, state, "frontend", None, start, space)


def _measured(p: learn.Point, y: float, rnd: int) -> learn.Observation:
    outcome = "kept" if y > 0 else "no-gain" if y == 0 else "regression"
    return learn.Observation(p, y, TriedChange(knob_id=p.group, value=1, outcome=outcome, round=rnd,
                                               before_us=100.0, after_us=100.0 * 2 ** -y))


def test_two_settings_measured_alike_from_one_state_make_the_move_between_them_no_effect():
    """PyPTO's tiling_config runtime test, de-tuned: from one state two values of a kernel's cube tile measured
    43.369 µs each (−84 %); one was kept, another knob moved since, and the move from the kept value to the other one
    was ranked first on the other's −84 %. A move's effect is the difference of the knob's time at its two settings,
    so the two readings say that move has none, wherever the search stands now."""
    a0, a, a2 = (3.0, 3.0, 6.0, 8.0, 7.0, 7.0), (5.0, 5.0, 6.0, 8.0, 7.0, 7.0), (6.0, 6.0, 6.0, 8.0, 6.0, 6.0)
    both = [_measured(_move("t32", a0, a, "s2"), 2.67, 3), _measured(_move("t32", a0, a2, "s2"), 2.67, 4)]
    between = learn.SessionModel(both, "s5").predict(_move("t32", a, a2, "s5"), 0.3)
    onward = learn.SessionModel(both[1:], "s5").predict(_move("t32", a, a2, "s5"), 0.3)
    assert abs(between.mean) < 0.1 and onward.mean > 0.5 + between.mean
    # the move back the way a kept gain came is its opposite
    back = learn.SessionModel(both[:1], "s2").predict(_move("t32", a, a0, "s2"), 0.0)
    assert back.mean < -1.5


def test_a_move_of_one_component_answers_alike_whatever_the_others_are():
    """PyPTO's basic_ops matmul: from one state the cube tile's n and its k each gained; n was kept. The k move on top
    of it is the same change of k: its gain lifts it (the joint part of the knob's function reads any move away from
    the kept n as a step off a peak, so it lifts it less than the 2 % measured)."""
    s0, n1, k1 = (5.0, 5.0, 6.0, 6.0, 5.0, 5.0), (5.0, 5.0, 6.0, 6.0, 5.0, 6.0), (5.0, 5.0, 7.0, 7.0, 5.0, 5.0)
    n_gain = [_measured(_move("c", s0, n1, "s0"), 0.1, 1)]
    m = learn.SessionModel([*n_gain, _measured(_move("c", s0, k1, "s0"), 0.03, 2)], "s1")
    k_on_top = _move("c", n1, (5.0, 5.0, 7.0, 7.0, 5.0, 6.0), "s1")
    on_top, untried = m.predict(k_on_top, 0.0), m.predict(_move("c", n1, (4.0, 4.0, 6.0, 6.0, 5.0, 6.0), "s1"), 0.0)
    assert on_top.mean > untried.mean and on_top.mean > learn.SessionModel(n_gain, "s1").predict(k_on_top, 0.0).mean


def test_two_parts_of_one_tile_are_not_one_axis():
    """A config's row count and its column count feed one tile call (one site): a larger row count that regressed
    says nothing of a larger column count (as one axis, 32 → 64 rows regressing made 128 → 256 columns look like
    the way back)."""
    rows = [_measured(_move(learn.PART + "rows", (5.0,), (6.0,), "s", kind="vector-tile"), -0.5, 1)]
    cols_up = _move(learn.PART + "cols", (7.0,), (8.0,), "s", kind="vector-tile")
    cols = learn.SessionModel(rows, "s").predict(cols_up, 1.0)
    assert cols.mean <= learn.squash(1.0) + 1e-9


def test_the_exploration_bonus_follows_the_size_of_the_effects_the_session_measured():
    """An operator shipped near its best measures effects of a few per cent (PyPTO's basic_ops matmul: its last 2 %
    was one k step on top of a kept n, ranked 27th behind untried values each worth the prior's 15 % bonus). The
    model's amplitude is fitted to the session's readings, the prior's 1 counted as two of them: small effects
    shrink the bonus, large ones (a de-tuned operator's 6×) leave it whole; the mean does not change."""
    small = [_measured(_move("c", (5.0,), (e,), "s"), y, r) for r, (e, y) in
             enumerate([(6.0, 0.03), (4.0, -0.02), (7.0, 0.01), (3.0, -0.04)], 1)]
    large = [_measured(_move("c", (3.0,), (5.0,), "s"), 2.67, 1), _measured(_move("c", (3.0,), (6.0,), "s"), 2.5, 2)]
    assert learn.SessionModel([], "s").scale == 1.0 and learn.SessionModel(large, "s").scale == 1.0
    m = learn.SessionModel(small, "s")
    assert m.scale < 0.75
    untried = _move("v", (5.0,), (6.0,), "s", group="other", kind="vector-tile")
    p = m.predict(untried, 0.0)
    assert p.sd == pytest.approx(m.scale * learn.kernel(untried, untried) ** 0.5)
    assert p.score == pytest.approx(p.mean + learn.BETA * p.sd)


def test_the_kernel_over_moves_stays_positive_semi_definite():
    pts = [_move(sp, s, e, st) for sp in ("a", "b") for st in ("s0", "s1")
           for s, e in (((3.0, 5.0), (4.0, 5.0)), ((4.0, 5.0), (4.0, 7.0)), ((3.0, 5.0), (5.0, 4.0)))]
    pts.append(_pt("tile", (4.0, 5.0), kind="cube-tile", d=(1, 0)))  # a move without its start (old readings)
    cov = np.array([[learn.kernel(a, b) for b in pts] for a in pts])
    assert np.linalg.eigvalsh(cov[:-1, :-1]).min() > -1e-9


# ------------------------------------------------------------------------------------------- a batch of trials

def _batch(m: learn.SessionModel, cands: list, depth: int) -> list[int]:
    """The order a batch takes ``cands`` in when every place stands."""
    picker, order = learn.BatchPicker(m, cands, depth), []
    while (i := picker.next()) is not None:
        picker.accept(i)
        order.append(i)
    return order


def test_a_batch_spreads_over_knobs_the_model_cannot_tell_apart_and_its_first_place_is_the_best():
    """Two vector-tile knobs with the same prior (sequential_functions, de-tuned: GELU's tile and the layer norm's,
    both at 8 rows): two values of the first knob rank 1 and 2 alone, but once the first is as good as measured its
    neighbour tells little more, so the batch's second place goes to the other knob."""
    gelu = [_pt("gelu", (5.0, 7.0)), _pt("gelu", (4.0, 7.0))]
    norm = [_pt("norm", (5.0, 7.0))]
    m = learn.SessionModel([], "s")
    cands = [(gelu[0], 2.0, 0), (gelu[1], 1.9, 0), (norm[0], 1.8, 0)]
    alone = sorted(range(3), key=lambda i: -m.predict(cands[i][0], cands[i][1]).score)
    assert alone == [0, 1, 2]
    assert _batch(m, cands, depth=2) == [0, 2, 1]
    assert _batch(m, cands, depth=1) == [0, 1, 2]  # a batch of one runs the model's best, as before
    # a knob measured flat is still behind: the tier comes before the spread
    assert _batch(m, [(gelu[0], 2.0, 0), (gelu[1], 1.9, 0), (norm[0], 1.8, 1)], depth=3) == [0, 1, 2]
    # a far better value of the same knob keeps its place: the spread only settles what the model cannot tell apart
    assert _batch(m, [(gelu[0], 8.0, 0), (gelu[1], 7.9, 0), (norm[0], -2.0, 0)], depth=2) == [0, 1, 2]
    # a pick refused at admission leaves no mark: the place goes to what would have come without it
    picker = learn.BatchPicker(m, cands, depth=2)
    first = picker.next()
    picker.drop(first)
    assert picker.next() == 1


def test_a_waiting_cube_move_says_why_it_ranks_low():
    """Over the search: once two L1-only moves of the cube tile measured nothing (and an L0 move gained), the L1-only
    candidates come after the others, each saying why."""
    kept, ctx = load_operator("matmul_act")
    cube = "matmul_act.py:matmul_silu.set_cube_tile_shapes#1"
    base = {"m": [32, 32], "k": [64, 64], "n": [64, 64]}
    hist = [TriedChange(knob_id=cube, value=v, before_value=base, from_kept_hash="elsewhere", outcome=o,
                        before_us=59.389, after_us=t, round=r, stage="FRONTEND")
            for r, (v, o, t) in enumerate([({**base, "k": [64, 128]}, "no-gain", 59.389),
                                           ({**base, "n": [64, 128]}, "no-gain", 59.389),
                                           ({**base, "k": [32, 64]}, "regression", 61.0)], 1)]
    prop = search(kept, stage="frontend", context=ctx, history=hist, limit=None, budget_s=0.0)
    l1_only = [c for c in prop.candidates if c.knob == cube and c.value["m"] == base["m"]
               and all(c.value[a][0] == base[a][0] for a in "kn") and c.value != base]
    assert l1_only, [c.value for c in prop.candidates if c.knob == cube][:8]
    assert all("ranked low because it moves the cube tile's L1 only, and 2 such moves" in c.why for c in l1_only)
    waiting = [i for i, c in enumerate(prop.candidates) if c in l1_only]
    first = [i for i, c in enumerate(prop.candidates)
             if "ranked low" not in c.why and not c.why.startswith("runs the same")]
    assert first and max(first) < min(waiting)  # every distinct candidate that does not wait comes before them
