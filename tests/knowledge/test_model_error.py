"""With the hand-written model ranking too, the store corrects the model by its error on similar changes; it does not
replace the model's reading of this kernel with how similar moves did elsewhere.

Neighbours here are exact matches of one situation (weight 1 each), so the confidence is n / (n + 2) and every
expected score below is worked out by hand from match.py's formulas.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from pypto_tune.tools.knowledge import match
from pypto_tune.tools.knowledge.distill import distill_workspace
from pypto_tune.tools.knowledge.store import Observation

SIT = {"d_tpi": -1.0, "b_tpi": 5.0, "a_tpi": 4.0}
DEMO = Path(__file__).resolve().parents[1] / "report" / "demo_ledger.sqlite3"


def _obs(i: int, gain: float | None, model: float | None, outcome: str = "kept") -> Observation:
    return Observation(key=f"k{i}", operator=f"op{i}", session_id=f"s{i}", round=1, stage="FRONTEND",
                       group="frontend", kernel_kind="vector", change_class="vector-work", knob="TILE", knob_kind="vec_tile",
                       before_us=10.0, after_us=None if gain is None else 10.0 / 2 ** gain, gain_log2=gain,
                       outcome=outcome, situation=dict(SIT), model_log2=model)  # type: ignore[arg-type]


def _pred(obs: list[Observation]) -> match.Prediction:
    pred = match.predict(obs, change_class="vector-work", kernel_kind="vector", group="frontend", situation=dict(SIT))
    assert pred is not None and pred.n == len(obs) and pred.n_eff == pytest.approx(len(obs))
    return pred


def test_where_the_model_was_right_on_the_neighbours_its_score_here_stands() -> None:
    # two neighbours gained 0.2 and the model had said 0.2: the model's +1.0 here is not pulled to 0.2
    pred = _pred([_obs(1, 0.2, 0.2), _obs(2, 0.2, 0.2)])
    assert match.experience_score(pred, 1.0) == pytest.approx(0.0)
    # the old rule moved it by confidence × (0.2 − 1.0) = 0.5 × −0.8
    assert match.experience_score(pred, 1.0, with_model=False) == pytest.approx(0.5 * (0.2 - 1.0))


def test_where_the_model_overrated_the_neighbours_the_score_drops_by_its_error() -> None:
    pred = _pred([_obs(1, 0.0, 0.8), _obs(2, 0.1, 0.7)])  # errors −0.8 and −0.6, mean −0.7
    assert pred.model_error(1.0) == pytest.approx(-0.7)
    assert match.experience_score(pred, 1.0) == pytest.approx(0.5 * -0.7)
    text, evidence = match.describe(pred, 1.0, match.experience_score(pred, 1.0))
    assert "the model's error on them -0.70" in text and evidence["model_error_log2"] == pytest.approx(-0.7)


def test_a_failed_neighbour_still_pulls_toward_a_failure() -> None:
    pred = _pred([_obs(1, 0.3, 0.3), _obs(2, None, 0.5, "failed")])  # half failed; the measured one was predicted
    assert match.experience_score(pred, 1.0) == pytest.approx(0.5 * (0.5 * 0.0 + 0.5 * (match.FAIL_SCORE - 1.0)))


def test_a_neighbour_without_the_models_prediction_is_read_as_before() -> None:
    # a store file from before the prediction was kept: its gain is compared with the model's score here
    pred = _pred([_obs(1, 0.2, None), _obs(2, 0.2, None)])
    assert match.experience_score(pred, 1.0) == pytest.approx(0.5 * (0.2 - 1.0))


def test_the_store_alone_ranks_by_the_measured_gain() -> None:
    # no model family in the ranking (its score is 0): the stored predictions play no part
    pred = _pred([_obs(1, 0.6, 2.0), _obs(2, 0.6, -1.0)])
    assert match.experience_score(pred, 0.0, with_model=False) == pytest.approx(0.5 * 0.6)


def test_a_distilled_observation_carries_the_models_prediction(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".pypto-tune").mkdir(parents=True)
    shutil.copy2(DEMO, ws / ".pypto-tune" / "ledger.sqlite3")
    obs = sorted(distill_workspace(ws).observations, key=lambda o: o.round)
    # the demo's first round, (1,4,256) → (1,8,256) on softmax: the model predicted a gain (fewer, larger tasks per
    # iteration) and it gained log2(36.405 / 21.031) = 0.79
    assert obs[0].model_log2 is not None and obs[0].model_log2 > 0
    assert obs[0].gain_log2 == pytest.approx(math.log2(36.405 / 21.031), abs=1e-3)
    assert all(o.model_log2 is not None for o in obs if o.change_class == "vector-work")


def test_an_operator_counts_once_however_often_its_session_tried_the_move() -> None:
    # twelve regressions of one operator and one gain of another: two operators' experience, weighed alike
    many = [_obs(1, -1.0, 1.0).model_copy(update={"key": f"r{i}", "round": i}) for i in range(12)]
    pred = _pred_n(many + [_obs(2, 0.6, 1.0)])
    assert pred.n == 13 and pred.n_eff == pytest.approx(2.0) and pred.confidence == pytest.approx(0.5)
    assert pred.gain_log2 == pytest.approx((-1.0 + 0.6) / 2)  # not (12 × −1.0 + 0.6) / 13
    assert pred.model_error(1.0) == pytest.approx(((-1.0 - 1.0) + (0.6 - 1.0)) / 2)


def _pred_n(obs: list[Observation]) -> match.Prediction:
    pred = match.predict(obs, change_class="vector-work", kernel_kind="vector", group="frontend", situation=dict(SIT))
    assert pred is not None
    return pred


def test_the_model_is_calibrated_per_class_over_the_whole_store_each_operator_weighing_one() -> None:
    # op1 measured half of what the model said, twice; op2 once: fitted 0.5, shrunk toward 1 by two operators' worth
    obs = [_obs(1, 1.0, 2.0), _obs(1, 2.0, 4.0).model_copy(update={"key": "k1b", "round": 2}), _obs(2, 1.0, 2.0)]
    cal = match.calibrate(obs, "vector-work")
    assert (cal.operators, cal.observations) == (2, 3)
    assert cal.scale == pytest.approx((2 * 0.5 + match.PRIOR_COUNT) / (2 + match.PRIOR_COUNT))
    assert match.calibrate(obs, "cube-tile").scale == 1.0  # nothing measured in that class: the model as it is
    # a candidate nobody measured anything like is rescaled all the same, so the measured ones are not singled out
    assert match.experience_score(None, 2.0, scale=cal.scale) == pytest.approx((cal.scale - 1.0) * 2.0)
    assert match.experience_score(None, 2.0, with_model=False, scale=cal.scale) == 0.0
    # with neighbours: the rescaled model, corrected by its (rescaled) error on them
    pred = _pred([_obs(3, 0.6, 1.0), _obs(4, 0.6, 1.0)])
    want = (cal.scale - 1.0) * 2.0 + pred.confidence * (0.6 - cal.scale * 1.0)
    assert match.experience_score(pred, 2.0, scale=cal.scale) == pytest.approx(want)
