"""``TuningService`` is a facade over operation objects: each public method hands the call, unchanged, to the one
object that owns it, and the objects are composed (built with their collaborators), not inherited into one class."""

from __future__ import annotations

import inspect

import pytest
from pypto_tune.tools.errors import InputError
from pypto_tune.tools.operations.base import SessionContext
from pypto_tune.tools.service import TuningService


def _facade_methods() -> list[str]:
    return sorted(n for n, v in vars(TuningService).items() if inspect.isfunction(v) and not n.startswith("_"))


def _parts(svc: TuningService) -> dict[str, object]:
    return {name: part for name, part in vars(svc).items() if hasattr(part, "ctx") or isinstance(part, SessionContext)}


def test_each_facade_method_has_the_signature_of_the_one_operation_that_owns_it() -> None:
    svc = TuningService()
    parts = _parts(svc)
    assert _facade_methods(), "the facade lost its methods"
    for name in _facade_methods():
        owners = [p for p in parts.values() if callable(getattr(type(p), name, None))]
        assert len(owners) == 1, f"{name}: owned by {len(owners)} operation objects"
        target = getattr(type(owners[0]), name)
        facade = getattr(TuningService, name)
        assert inspect.signature(facade) == inspect.signature(target), name
        assert inspect.iscoroutinefunction(facade) == inspect.iscoroutinefunction(inspect.unwrap(target)), name


def test_the_operations_share_one_context_and_inherit_nothing() -> None:
    svc = TuningService()
    parts = {n: p for n, p in _parts(svc).items() if not isinstance(p, SessionContext)}
    assert len(parts) == 8
    for name, part in parts.items():
        assert part.ctx is svc.ctx, name  # type: ignore[attr-defined]
        assert type(part).__bases__ == (object,), f"{name} inherits {type(part).__bases__}"
    assert TuningService.__bases__ == (object,)


def test_a_call_reaches_the_operation_with_its_arguments() -> None:
    svc = TuningService()
    with pytest.raises(InputError, match="unknown session_id 'nope'"):
        svc.get_status("nope", lang="en")
    with pytest.raises(InputError, match="unknown session_id 'nope'"):
        svc.apply_tuning_patch("nope", catalog_id="F-1", rationale="r", knob="k", value=1)
    assert svc.session_lang(None, "en") == "en"
    assert svc.session_ids() == []
