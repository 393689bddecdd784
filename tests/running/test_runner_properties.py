"""Properties that must hold for every input, not just the examples (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pypto_tune.tools.running.runner import _Capture
from pypto_tune.tools.rules.precision import judge_precision
from tests.running.test_verdict import MATPLOTLIB_NOISE, PASSED, run


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=40), cap=st.integers(min_value=2, max_value=200))
def test_capture_keeps_exactly_the_first_and_last_half_cap_bytes(chunks: list[bytes], cap: int) -> None:
    c = _Capture(cap)
    for chunk in chunks:
        c.feed(chunk)
    data = b"".join(chunks)
    half = cap // 2
    assert c.total == len(data)
    assert bytes(c.head) == data[:half]
    rest = data[half:]
    assert bytes(c.tail) == rest[-half:] if rest else bytes(c.tail) == b""
    assert len(c.head) + len(c.tail) <= 2 * half
    assert c.truncated == (len(data) > 2 * half)


@settings(max_examples=100, deadline=None)
@given(case=st.sampled_from(PASSED), where=st.integers(min_value=0, max_value=10), copies=st.integers(1, 3))
def test_matplotlib_noise_anywhere_never_flips_a_passed_verdict(case: tuple[str, str], where: int,
                                                                copies: int) -> None:
    lines = case[1].splitlines(keepends=True)
    at = min(where, len(lines))
    noisy = "".join(lines[:at]) + MATPLOTLIB_NOISE * copies + "".join(lines[at:])
    assert judge_precision(run(noisy), "npu").verdict == "passed"
