"""Stand-in for ``torch_npu`` on the emulated Ascend box (test-only; tests/npu_emulator/README.md).

Importing it does what the real package does for a test script, as far as CPU torch allows:
* renames torch's PrivateUse1 backend to ``npu`` and registers ``torch.npu``, so ``torch.device("npu:0")``,
  ``torch.npu.is_available()`` and ``torch.npu.synchronize()`` work;
* makes ``tensor.npu()`` and ``tensor.to("npu:N")`` keep the tensor on the CPU. CPU torch has no npu kernels, so
  a tensor cannot really live on an ``npu`` device here; the device string is mapped to ``cpu`` and the data stay
  where they are. ``tensor.device`` therefore reads ``cpu``.

Without a box (no emulator.json found) the import fails like a host without torch_npu.
"""

from _pypto_npu_emu.config import EmulatorConfigError, current_config

try:
    _CFG = current_config()
except EmulatorConfigError as _exc:
    raise ImportError(f"torch_npu stand-in: {_exc}") from _exc
if _CFG is None:
    raise ImportError("torch_npu stand-in: no NPU emulator box here (no emulator.json via PYPTO_NPU_EMU_CONFIG or "
                      "next to the npu-smi on PATH)")

import torch

from torch_npu import npu
from torch_npu.npu import _install_tensor_methods

__version__ = "2.13.0.emulated"

if torch._C._get_privateuse1_backend_name() != "npu":
    torch.utils.rename_privateuse1_backend("npu")
if not hasattr(torch, "npu"):
    torch._register_device_module("npu", npu)
_install_tensor_methods()


def get_npu_format(tensor) -> int:
    """ACL format id of a tensor; emulated tensors are plain ND (2) CPU tensors."""
    return 2


__all__ = ["get_npu_format", "npu"]
