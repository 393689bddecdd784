"""What this session measured, turned into ranking signals for the next trials.

Only the session's own history counts here (never another operator's numbers). A knob's values are compared along
their components (an int, each dim of a tile, each L0/L1 of a cube axis, the N of a merge setting), so "direction"
means which components a change moved up or down. The signals, strongest first:

* **stop** — a change that regressed or failed from the knob's current value: values at or beyond it in the same
  direction are pushed down hard (a larger tile after a larger tile failed to compile), values part of the way there
  a little;
* **regressed direction** — a change of this knob that regressed from *another* kept state still lowers the same
  direction from here (issue #17: a knob that had just regressed twice was ranked first, because each regression
  started from a different kept state), more for each such regression;
* **size-failed** — a value that failed to compile from any state: every value at least as large on the grown
  components is pushed down (the unified buffer and L0C budgets do not move);
* **continue** — the change that made the current value a kept gain: keep going the same way, do not walk back;
* **near a gain** — a value next to one that measured a gain (kept, or a gain another trial of its batch beat) and
  that still beats the kept state is raised: the neighbourhood of a gain is where the next one is likely;
* **flat** — a knob whose every measured change left the time unchanged (±0.05 %) is pushed down, and so is more
  of the same after a no-gain step;
* **sensitive** — a knob whose change *gained* ≥ 10 % somewhere is worth trying again (a large regression says the
  opposite: it never raises a knob).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pypto_tune.tools.search.models import TriedChange, norm_value

FLAT_PCT = 0.05
SENSITIVE_PCT = 10.0
W_STOP_REGRESSION = -2.0
W_STOP_FAILED = -3.0
W_PARTWAY = -0.5
W_SIZE_FAILED = -2.5
W_CONTINUE = 0.3
W_WALK_BACK = -0.5
W_FLAT_KNOB = -1.0
W_FLAT_MORE = -0.5
W_SENSITIVE = 0.2
W_DIRECTION_REGRESSED = -1.0
W_DIRECTION_MORE = -0.5  # each further regression of the same direction
W_NEAR_GAIN = 0.3
GAINS = ("kept", "not-chosen")


def components(value: Any) -> tuple[float, ...] | None:
    """The numbers a value is made of, in a fixed order; None for values without an order (bools, code)."""
    v = norm_value(value)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return (float(v),)
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return tuple(float(x) for x in v)
    if isinstance(v, dict):
        if all(isinstance(v.get(a), list) for a in ("m", "k", "n")):
            out: list[float] = []
            for a in ("m", "k", "n"):
                axis = v[a]
                if not all(isinstance(x, (int, float)) for x in axis):
                    return None
                out.extend(float(x) for x in axis[:2])
            return tuple(out)
        if all(isinstance(k, int) for k in v) and all(isinstance(x, int) and not isinstance(x, bool)
                                                    for x in v.values()):
            return tuple(float(v[k]) for k in sorted(v))
    return None


def direction(a: Any, b: Any) -> tuple[int, ...] | None:
    """Per component: +1 if b is larger than a, −1 if smaller, 0 if equal; None if not comparable."""
    ca, cb = components(a), components(b)
    if ca is None or cb is None or len(ca) != len(cb):
        return None
    return tuple((y > x) - (y < x) for x, y in zip(ca, cb))


def _beyond(cur: tuple, probe: tuple, cand: tuple, d_probe: tuple) -> str:
    """'beyond' if cand moves the way probe did on every component probe moved, at least as far; 'partway' if it
    moves that way but not as far; '' otherwise. Components probe left alone must stay as they are."""
    moved = [i for i, s in enumerate(d_probe) if s]
    if not moved:
        return ""
    for i, s in enumerate(d_probe):
        if not s and cand[i] != cur[i]:
            return ""
    far = True
    for i in moved:
        step = cand[i] - cur[i]
        if step * d_probe[i] <= 0:
            return ""
        if abs(step) < abs(probe[i] - cur[i]):
            far = False
    return "beyond" if far else "partway"


@dataclass
class Signal:
    name: str
    score: float
    text: str
    evidence: dict[str, Any]


def _ev(t: TriedChange) -> dict[str, Any]:
    return {"round": t.round, "knob": t.knob_id, "from": t.before_value, "to": t.value, "outcome": t.outcome,
            "failure_type": t.failure_type, "before_us": t.before_us, "after_us": t.after_us,
            "delta_pct": None if t.delta_pct is None else round(t.delta_pct, 3)}


def _fmt(v: Any) -> str:
    return repr(norm_value(v))


def history_signals(knob_id: str, current: Any, value: Any, history: Iterable[TriedChange],
                    kept_us: float | None = None) -> list[Signal]:
    """Ranking signals for changing ``knob_id`` from ``current`` to ``value``, from this session's trials.
    ``kept_us``: the kept state's time now (a gain measured earlier is a promise only if it beats it)."""
    mine = [t for t in history if t.knob_id == knob_id]
    if not mine:
        return []
    out: list[Signal] = []
    cur_c, val_c = components(current), components(value)
    d_cand = direction(current, value)
    comparable = cur_c is not None and val_c is not None and d_cand is not None
    current = norm_value(current)
    # stop: what already went wrong from this very value
    worst: Signal | None = None
    for t in mine:
        if norm_value(t.before_value) != current or t.outcome not in ("regression", "failed"):
            continue
        if not comparable:
            continue
        probe = components(t.value)
        d_t = direction(current, t.value)
        if probe is None or d_t is None or len(probe) != len(cur_c):  # type: ignore[arg-type]
            continue
        where = _beyond(cur_c, probe, val_c, d_t)  # type: ignore[arg-type]
        if not where:
            continue
        what = "failed" if t.outcome == "failed" else f"regressed {t.delta_pct:+.1f} %" if t.delta_pct is not None \
            else "regressed"
        if where == "beyond":
            w = W_STOP_FAILED if t.outcome == "failed" else W_STOP_REGRESSION
            s = Signal("stop", w, f"this direction {what} from {_fmt(current)} at {_fmt(t.value)}"
                       + (f" (round {t.round})" if t.round is not None else "") + ": stop it", _ev(t))
        else:
            s = Signal("partway", W_PARTWAY, f"part of the way to {_fmt(t.value)}, which {what}", _ev(t))
        if worst is None or s.score < worst.score:
            worst = s
    if worst is not None:
        out.append(worst)
    # size-failed: any failed compile at a value this candidate reaches or exceeds on the grown components
    if comparable and not any(s.name == "stop" for s in out):
        for t in mine:
            if t.outcome != "failed" or (t.failure_type or "compile-failure") != "compile-failure":
                continue
            probe = components(t.value)
            if probe is None or len(probe) != len(val_c):  # type: ignore[arg-type]
                continue
            grown = [i for i in range(len(probe)) if probe[i] > cur_c[i]]  # type: ignore[index]
            if grown and all(val_c[i] >= probe[i] for i in grown) and all(  # type: ignore[index]
                    val_c[i] >= cur_c[i] for i in grown):  # type: ignore[index]
                out.append(Signal("size-failed", W_SIZE_FAILED, f"{_fmt(t.value)} failed to compile "
                                  f"({t.failure_type or 'compile-failure'}); this value is at least as large",
                                  _ev(t)))
                break
    # continue / walk back: the change that brought the knob to its current value
    kept_here = [t for t in mine if t.outcome == "kept" and norm_value(t.value) == current]
    if kept_here and comparable:
        t = kept_here[-1]
        d_prev = direction(t.before_value, t.value) if t.before_value is not None else None
        if d_prev is not None and len(d_prev) == len(d_cand):  # type: ignore[arg-type]
            same = all(a == b or a == 0 for a, b in zip(d_prev, d_cand)) and any(  # type: ignore[arg-type]
                a == b != 0 for a, b in zip(d_prev, d_cand))  # type: ignore[arg-type]
            # back only when every component the gaining move changed is reversed: a gain of two components at once
            # (a cube tile's k and n) says nothing of which one gained, and reversing one of them is the test of it
            # (PyPTO's matmul example: k 128 → 64 with n 64 → 32 gained, and k back to 128 with n 32 was the grid's
            # best, never proposed behind this signal)
            moved = [(a, b) for a, b in zip(d_prev, d_cand) if a != 0]  # type: ignore[arg-type]
            back = bool(moved) and all(b == -a for a, b in moved)
            gain = -(t.delta_pct or 0.0)
            if same:
                out.append(Signal("continue", W_CONTINUE + 0.1 * math.log2(1 + max(gain, 0.0)),
                                  f"continues the direction that gained {gain:.1f} % ({_fmt(t.before_value)} → "
                                  f"{_fmt(t.value)})", _ev(t)))
            elif back:
                out.append(Signal("walk-back", W_WALK_BACK, f"walks back toward {_fmt(t.before_value)}, which "
                                  f"was {gain:.1f} % slower", _ev(t)))
    # regressed direction from other kept states (the same state is "stop" above)
    if comparable and not any(s.name == "stop" for s in out):
        same_dir = []
        for t in mine:
            if t.outcome not in ("regression", "failed") or norm_value(t.before_value) == current:
                continue
            d_t = direction(t.before_value, t.value) if t.before_value is not None else None
            if d_t is None or len(d_t) != len(d_cand) or not _same_way(d_t, d_cand):  # type: ignore[arg-type]
                continue
            same_dir.append(t)
        if same_dir:
            worst = max(same_dir, key=lambda t: t.delta_pct if t.delta_pct is not None else 1e9)
            score = W_DIRECTION_REGRESSED + W_DIRECTION_MORE * (len(same_dir) - 1)
            what = ", ".join(f"{_fmt(t.before_value)} → {_fmt(t.value)} "
                             + ("failed" if t.delta_pct is None else f"{t.delta_pct:+.1f} %") for t in same_dir[:3])
            out.append(Signal("regressed-direction", score, f"this direction regressed {len(same_dir)}× in this "
                              f"session from other kept states ({what})", _ev(worst)))
    # near a gain: values next to a point that measured a gain (and still beats the kept state)
    if comparable:
        near = []
        for t in mine:
            if t.outcome not in GAINS or t.delta_pct is None or t.delta_pct >= 0:
                continue
            if kept_us is not None and t.after_us is not None and t.after_us >= kept_us * (1 - 1e-9):
                continue  # a gain over an older state that the kept state has caught up with
            probe = components(t.value)
            if probe is None or len(probe) != len(val_c):  # type: ignore[arg-type]
                continue
            if norm_value(t.value) == current:
                continue  # the gain made the current value: "continue" speaks for it
            dist = sum(abs(math.log2(max(a, 0.5) / max(b, 0.5))) for a, b in zip(probe, val_c))  # type: ignore[arg-type]
            if dist <= 1.0:
                near.append((dist, t))
        if near:
            dist, t = min(near, key=lambda x: (x[0], x[1].delta_pct))
            out.append(Signal("near-gain", W_NEAR_GAIN * (1.0 - 0.5 * dist), f"{'at' if dist == 0 else 'next to'} "
                              f"{_fmt(t.value)}, which gained {-t.delta_pct:.1f} % ({t.outcome})", _ev(t)))
    # flat knob / flat direction
    measured = [t for t in mine if t.delta_pct is not None]
    if len(measured) >= 2 and all(abs(t.delta_pct) <= FLAT_PCT for t in measured):  # type: ignore[arg-type]
        out.append(Signal("flat-knob", W_FLAT_KNOB, f"all {len(measured)} measured changes of this knob left the "
                          "time unchanged", {"trials": [_ev(t) for t in measured[:4]]}))
    elif comparable:
        for t in mine:
            if norm_value(t.before_value) != current or t.outcome != "no-gain":
                continue
            probe, d_t = components(t.value), direction(current, t.value)
            if probe is None or d_t is None or len(probe) != len(cur_c):  # type: ignore[arg-type]
                continue
            if _beyond(cur_c, probe, val_c, d_t) == "beyond":  # type: ignore[arg-type]
                out.append(Signal("flat-more", W_FLAT_MORE, f"{_fmt(t.value)} gained nothing from here; this goes "
                                  "further the same way", _ev(t)))
                break
    # only gains make a knob worth another look; a regression of any size never raises it (issue #17: "moved the time
    # by +15.6 %" once ranked a knob first)
    big = [t for t in measured if t.delta_pct <= -SENSITIVE_PCT]  # type: ignore[operator]
    if big and not any(s.score < 0 for s in out):
        t = min(big, key=lambda x: x.delta_pct)  # type: ignore[arg-type, return-value]
        out.append(Signal("sensitive", W_SENSITIVE, f"a change of this knob gained {-t.delta_pct:.1f} % in this "
                          "session", _ev(t)))
    return out


def _same_way(d_probe: tuple[int, ...], d_cand: tuple[int, ...]) -> bool:
    """The candidate moves every component the probe moved, the same way, and no component the probe left alone."""
    moved = [i for i, x in enumerate(d_probe) if x]
    return bool(moved) and all(d_cand[i] == d_probe[i] for i in moved) and all(
        d_cand[i] == 0 for i, x in enumerate(d_probe) if not x)
