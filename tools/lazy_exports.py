"""Package exports imported on first use (PEP 562), so that importing one light submodule does not load its heavy
siblings: ``tools/patching`` (the Ray worker's per-run helper imports ``nofollow``, never libcst), ``tools/report``
(every workspace scan imports ``names``, never jinja2) and ``tools/analysis`` (the topology worker imports only
``topo_worker``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def module_getattr(package: str, exports: dict[str, str], *, keep: bool = False) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``exports`` maps an exported name to the submodule defining
    it. Any other name is an AttributeError, so ``from package import submodule`` still imports the submodule.
    ``keep``: store the value in the package once imported (later lookups skip this function)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        if keep:
            setattr(sys.modules[package], name, value)
        return value

    return __getattr__
