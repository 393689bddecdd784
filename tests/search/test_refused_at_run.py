"""A proposal past the answer budget goes out unadmitted; when run_candidates' admission refuses it, the search keeps
that answer for the kept state and never proposes it again (the benchmark on PyPTO's ``loop.py`` spent two trials
on the same refused linked pair, proposed twice). Library level, on the layer norm fixture's recorded run."""

from __future__ import annotations

import json
from pathlib import Path

from pypto_tune.tools.search import AdmissionCache, remember_refusal, search

from .conftest import OPS

DATA = Path(__file__).resolve().parent / "data"
FILE = "layernorm_op.py"


def _load() -> tuple[dict[str, str], dict]:
    return {FILE: (OPS / "upstream_layernorm" / FILE).read_text()}, \
        json.loads((DATA / "upstream_layernorm.probe.json").read_text())


def _key(c) -> tuple:
    return (c.knob, json.dumps(c.value))


def test_a_change_refused_when_run_is_not_proposed_again_from_that_state():
    # (a linked pair likewise: tests/search/test_pair_proposals.py)
    kept, rec = _load()
    cache = AdmissionCache()
    first = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0).candidates
    single = next(c for c in first if not c.admitted)
    remember_refusal(cache, kept, None, rec, single.knob, single.value, None, "GATE legality: refused when run")
    again = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0)
    keys = {_key(c) for c in again.candidates}
    assert _key(single) not in keys and again.excluded.get("illegal", 0) >= 1
    assert {_key(c) for c in first} - keys == {_key(single)}  # only what was refused went


def test_a_refusal_no_value_can_change_retires_the_knob_from_that_state():
    """PyPTO's arctic LSTM: its hidden tile feeds a tile call whose other dimension is the loop's unroll factor, so
    the server cannot derive what any value gives there (rule C/derive); three values were refused at run, one trial
    each. After the first, no value of that knob is proposed from the state; other knobs' values stay."""
    kept, rec = _load()
    cache = AdmissionCache()
    first = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0).candidates
    single = next(c for c in first if not c.admitted and c.kind != "pair")
    same_knob = [c for c in first if c.knob == single.knob and c.kind != "pair"]
    assert len(same_knob) > 1, same_knob
    remember_refusal(cache, kept, None, rec, single.knob, single.value, None,
                     "GATE legality: the change makes a tiling site illegal: the server cannot tell what it gives "
                     "there (rule C/derive; legal: a change whose value at every tile call that ran the server can "
                     "compute)")
    again = search(kept, stage="frontend", limit=None, cache=cache, run=rec, budget_s=0.0)
    assert not [c for c in again.candidates if c.knob == single.knob and c.kind != "pair"]
    assert {_key(c) for c in again.candidates if c.knob != single.knob and c.kind != "pair"} == \
        {_key(c) for c in first if c.knob != single.knob and c.kind != "pair"}
