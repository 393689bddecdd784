"""Typed picture of what the run-time probe recorded (``hook/pypto_tune_probe.py`` writes it; :mod:`.reader` reads it).

Paths are workspace-relative when the file lies in the run's private copy of the workspace (``in_workspace``),
else absolute (pypto's own files, site-packages, the interpreter). Values are the effective arguments as the hook
pictured them: numbers, strings, lists, dicts with string keys, and tagged objects — ``{"$tensor": shape, "dtype":
…}``, ``{"$sym": "(i*4)"}`` for a symbolic scalar that was not concrete, ``{"$enum": "RunMode.SIM"}``,
``{"$repr": type name}`` for anything else.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

ProbeStatus = Literal["reported", "no-report", "unreadable", "not-probed"]


class Frame(BaseModel):
    """One frame of user code above a recorded call (innermost first)."""

    file: str
    line: int
    function: str = Field(description="code name; '<jit>' for a kernel-body statement pypto's parser evaluated")
    jit_body: bool = False
    in_workspace: bool = False


class UnrollVariant(BaseModel):
    """One variant of a ``pypto.loop_unroll`` (its body traced with one unroll factor) that a recorded call sat in."""

    file: str
    line: int = Field(description="line of the loop_unroll call")
    factor: int | None = None
    iterations: int | None = Field(None, description="how often the variant's loop runs at the test's shapes (the "
                                   "trip count of the loop pypto opened for it); null when its bounds are symbolic")

    @property
    def executes(self) -> bool | None:
        """False: traced and compiled, never executed at the test's shapes; None: the run cannot tell."""
        return None if self.iterations is None else self.iterations > 0


class MatmulOperands(BaseModel):
    """What a cube tile cuts: the matmul's A and B as built (null: a dimension known only at run time)."""

    a: list[int | None]
    b: list[int | None]
    a_trans: bool = False
    b_trans: bool = False


class ProbeCall(BaseModel):
    """One distinct call of a tiling / option / loop / view API: same site, kernel and effective values."""

    api: str = Field(description="set_vec_tile_shapes, set_cube_tile_shapes, set_pass_options, set_options, loop, "
                     "loop_unroll, view, reshape, assemble, Tensor.view, Tensor.set_cache_policy, "
                     "set_operation_options, …")
    file: str
    line: int
    function: str
    jit_body: bool = False
    in_workspace: bool = False
    kernel: str | None = Field(None, description="key of the jit kernel being compiled when it ran (ProbeKernel.key)")
    origin: Literal["direct", "pypto"] = Field(
        "direct", description="'direct': user code called it; 'pypto': pypto called it for the user (the jit applying "
        "its option dicts, a slice becoming a view, an assignment becoming assemble)")
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    result_shape: list[Any] | None = None
    count: int = 1
    ops: int | None = Field(None, description="tile calls: operations built while this tile was in force (cube "
                            "operations for a cube tile, the others for a vector tile); 0: a later tile call replaced "
                            "it before any operation used it; null: not counted")
    extent: dict[str, list[int | None]] | None = Field(
        None, description="vector tile calls: rank -> the largest extent of each dimension over the tensors the "
        "vector operations under this tile worked on (null: known only at run time); a tile dimension at or past it "
        "is clamped to the data")
    operands: MatmulOperands | None = Field(None, description="cube tile calls: the first matmul built under the "
                                            "tile, its operands' shapes and transposes")
    stack: list[Frame] = Field(default_factory=list)
    unroll: list[UnrollVariant] = Field(default_factory=list, description="the loop_unroll variants (outermost "
                                        "first) whose body was being traced when the call was made")


class TensorArg(BaseModel):
    shape: list[Any]
    dtype: str
    device: str = ""


class ProbeKernel(BaseModel):
    """One jit kernel the run called."""

    key: str
    name: str
    qualname: str
    file: str
    line: int = Field(description="first line of its definition (the decorator line)")
    in_workspace: bool = False
    calls: int = 0
    compiled: bool | None = None
    ran: bool = False
    error: str | None = None
    inputs: list[list[Any]] = Field(default_factory=list, description="distinct argument lists it was called with")
    options: dict[str, Any] = Field(default_factory=dict, description="its option dicts as pypto held them")
    called_from: list[list[Frame]] = Field(default_factory=list)

    def tensors(self) -> list[TensorArg]:
        """The tensors of its first call, in argument order."""
        out = []
        for a in (self.inputs[0] if self.inputs else []):
            if isinstance(a, dict) and "$tensor" in a:
                out.append(TensorArg(shape=list(a["$tensor"]), dtype=str(a.get("dtype", "")),
                                     device=str(a.get("device", ""))))
        return out


class ProbeRecord(BaseModel):
    """What one run's probe said (all its Python processes that imported pypto, merged)."""

    status: ProbeStatus
    reason: str = Field("", description="why there is no record, in words")
    pypto_version: str | None = None
    python: str = ""
    argv: list[str] = Field(default_factory=list)
    processes: int = 0
    sys_path: list[str] = Field(default_factory=list)
    modules: list[str] = Field(default_factory=list, description="files of the modules the run imported")
    kernels: list[ProbeKernel] = Field(default_factory=list)
    calls: list[ProbeCall] = Field(default_factory=list)
    traced: dict[str, list[int]] = Field(default_factory=dict, description="kernel-body statement lines pypto's "
                                         "parser traced, per file")
    faults: list[str] = Field(default_factory=list, description="the probe's own failures (the run was unaffected)")
    self_s: float = Field(0.0, description="wall time the probe's own code took in the run (all processes)")
    ran_sources: dict[str, str] = Field(default_factory=dict, description="the operator files the run executed "
                                        "(filled by the server when it stores the record; lines refer to these)")

    @property
    def reported(self) -> bool:
        return self.status == "reported"

    def summary(self) -> str:
        if not self.reported:
            return f"probe: {self.status}" + (f" ({self.reason})" if self.reason else "")
        ran = sum(1 for k in self.kernels if k.ran)
        return (f"probe: {len(self.kernels)} kernel(s) called ({ran} ran), {len(self.calls)} distinct tiling/option "
                f"call(s)" + (f", {len(self.faults)} probe fault(s)" if self.faults else ""))
