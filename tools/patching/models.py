"""Typed results of the patching library: what a knob is, what an edit will do, what a snapshot holds.

Everything here is JSON-able (``model_dump(mode="json")``) so that ``server/`` can hand it to the agent and the
ledger can store it. Dict-valued knobs with int keys (``vec_nbuffer_setting``) keep int keys in Python; JSON turns
them into strings, and the validators turn numeric strings back into ints (0.2.0 rejects string keys, domain C S-5).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..snapshot import KnobChange

KnobKind = Literal[
    "jit_option",  # an entry of a @jit(...) option dict (runtime_options / pass_options / ...), literal or variable
    "pass_option",  # a keyword of pypto.set_pass_options(...) other than sg_set_scope (vec_nbuffer_setting=...)
    "debug_option",  # debug_options entries: runtime_debug_mode is not a tuning knob (enable_runtime_debug owns it)
    "vec_tile",  # pypto.set_vec_tile_shapes(...) call site
    "cube_tile",  # pypto.set_cube_tile_shapes(...) call site
    "loop_option",  # unroll_list / submit_before_loop of pypto.loop / pypto.loop_unroll
    "tile_constant",  # module-level name bound once to a literal whose every use is tiling / blocking (F-11)
    "shape_constant",  # module-level name that also reaches the problem (signatures, tensor creation, the harness)
    "local_constant",  # a local of the kernel (or of the function around it) bound once to a literal
    "sg_set_scope",  # pypto.set_pass_options(sg_set_scope=...)
    "cache_policy",  # <tensor>.set_cache_policy(pypto.CachePolicy.NONE_CACHEABLE, <bool>)
    "combine_axis",  # pypto.experimental.set_operation_options(combine_axis=...)
    "valid_shape",  # valid_shape=[...] of pypto.view / Tensor.view / pypto.reshape
    "tile_source",  # a literal a tiling value flows from: a comprehension element, a config field set in the test,
    # an entry of a tiling dict read entry by entry
]

# Element sizes of pypto dtypes (domain C: alignment and UB budget rules are in bytes).
DTYPE_BYTES = {"DT_FP16": 2, "DT_BF16": 2, "DT_FP32": 4, "DT_INT8": 1, "DT_INT16": 2, "DT_INT32": 4,
               "DT_INT64": 8, "DT_UINT8": 1, "DT_FP8": 1, "DT_HF8": 1, "DT_BOOL": 1}

# Marker for a value that is code, not a literal: {"$expr": "pypto.RunMode.SIM"}. Accepted back by the editor, so
# an agent can write e.g. {"$expr": "TILE_B * 2"} where a literal would be wrong.
EXPR_KEY = "$expr"


class Knob(BaseModel):
    """One tunable (or at least tracked) setting found in the operator sources."""

    id: str = Field(description="Stable id: '<file>:<scope>.<site>[.<key>]'. Does not contain line numbers.")
    kind: KnobKind
    name: str = Field(description="Short name an agent may pass instead of the id, e.g. 'vec_nbuffer_setting'.")
    file: str
    line: int = Field(description="1-based line of the value (of the call for call-site knobs).")
    value: Any = Field(description="Current value; None when the knob is absent (default). Code as {'$expr': ...}.")
    present: bool = Field(True, description="False: not written in the source yet; an edit will add it.")
    catalog_ids: list[str] = Field(default_factory=list, description="Optimisation catalogue ids this knob serves.")
    legal: str = Field("", description="Legal values in words (domain.md C).")
    target: str | None = Field(None, description="'file:line' selector that picks this call site.")
    function: str | None = Field(None, description="Enclosing function, None at module level.")
    tunable: bool = Field(True, description="False for knobs the tuning loop must not edit (run_mode, debug mode, problem sizes).")
    context: dict[str, Any] = Field(default_factory=dict, description="What validation knows: trip_count, dtype, tensor_dims...")


class EditPlan(BaseModel):
    """A planned edit. Nothing has been written yet; ``write_sources(workspace, plan.new_sources)`` applies it."""

    new_sources: dict[str, str] = Field(description="Full text of every operator file after the edit (unchanged ones included).")
    changes: list[KnobChange] = Field(default_factory=list, description="Knob delta before → after.")
    diff: str = Field("", description="Unified diff with a/ and b/ paths.")
    changed_files: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(
        default_factory=list,
        description="Knobs whose value breaks its legality rule after the edit (diff edits only; a knob edit that "
                    "would cause one is refused instead).",
    )


class Snapshot(BaseModel):
    """The exact text of a set of files and its hash, so a revert can prove it restored the bytes."""

    sources: dict[str, str]
    hash: str
