"""The optimisation catalogue (domain C) as package data: ``prompts/catalog.json``, parsed once and cached."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from pydantic import ValidationError

from pypto_tune.tools.analysis.models import Catalog
from pypto_tune.tools.errors import ArtifactError


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """F-1…F-15, S-1…S-13, I-1…I-9 with stage, stars, P-level, titles, knobs, preconditions, symptoms and
    SIM notes (``sim_check`` / ``sim_check_zh``).

    Cached: the file is package data and never changes while the server runs. Callers must not mutate the result.
    """
    try:
        raw = resources.files("pypto_tune.prompts").joinpath("catalog.json").read_bytes()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ArtifactError(f"the optimisation catalogue is not installed ({exc})", path="pypto_tune/prompts/catalog.json",
                            hint="reinstall pypto-tune; catalog.json is package data") from None
    try:
        return Catalog.model_validate_json(raw)
    except ValidationError as exc:
        raise ArtifactError(f"catalog.json does not match the schema: {exc.errors()[0]['msg']}",
                            path="pypto_tune/prompts/catalog.json", where=str(exc.errors()[0]["loc"]),
                            expected="the Catalog model", hint="reinstall pypto-tune") from None
