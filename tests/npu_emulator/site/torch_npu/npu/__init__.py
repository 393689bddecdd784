"""``torch_npu.npu`` of the emulated box: device count and properties come from the box's emulator.json."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from _pypto_npu_emu.config import current_config, device_from_env

# Atlas A2 (910B2) core counts; pypto's SIM models the same platform (24 AIC + 48 AIV, domain A.3).
CUBE_CORE_NUM = 24
VECTOR_CORE_NUM = 48

_current: int | None = None


def _cfg():
    cfg = current_config()
    if cfg is None:
        raise RuntimeError("torch_npu stand-in: the NPU emulator box disappeared (emulator.json not found)")
    return cfg


def device_count() -> int:
    return _cfg().chips


def is_available() -> bool:
    return device_count() > 0


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"expected an npu device, got {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, str):
        dev = torch.device(device)
        return _index(dev)
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise TypeError(f"invalid device {device!r}")


def _check(index: int) -> int:
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"Invalid device ID {index}: the emulated box has {count} NPU(s) (0..{count - 1})")
    return index


def set_device(device) -> None:
    global _current
    _current = _check(_index(device))


def current_device() -> int:
    # The real torch_npu starts at 0; here the default follows TILE_FWK_DEVICE_ID, the chip pypto's runtime
    # runs on, so that a test that never calls set_device reports the chip its kernel ran on.
    if _current is not None:
        return _current
    return _check(device_from_env())


def synchronize(device=None) -> None:
    """Kernels of the emulated box have finished when their call returns: nothing to wait for."""
    _check(_index(device))


def manual_seed(seed: int) -> None:
    """torch.manual_seed forwards here; the emulated device has no generator of its own (tensors are CPU)."""


def manual_seed_all(seed: int) -> None:
    """See manual_seed."""


def _is_in_bad_fork() -> bool:
    # torch.manual_seed asks the device module this before seeding it.
    return False


@dataclass(frozen=True)
class NPUDeviceProperties:
    name: str
    total_memory: int
    cube_core_num: int = CUBE_CORE_NUM
    vector_core_num: int = VECTOR_CORE_NUM


def get_device_properties(device=None) -> NPUDeviceProperties:
    cfg = _cfg()
    _check(_index(device))
    return NPUDeviceProperties(name=f"Ascend{cfg.chip_name}", total_memory=cfg.hbm_total_mb * 1024 * 1024)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def _to_cpu(arg):
    """Map every npu device designation to cpu (see the package docstring); leave everything else alone."""
    if isinstance(arg, torch.device) and arg.type == "npu":
        return torch.device("cpu")
    if isinstance(arg, str) and arg.split(":", 1)[0] == "npu":
        torch.device(arg)  # still reject malformed strings like "npu:x"
        return "cpu"
    return arg


def _install_tensor_methods() -> None:
    if getattr(torch.Tensor, "_pypto_npu_emulated", False):
        return
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        args = tuple(_to_cpu(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _to_cpu(kwargs["device"])
        return original_to(self, *args, **kwargs)

    def npu(self, device=None, non_blocking=False, **kwargs):
        _check(_index(device))
        return self

    torch.Tensor.to = to
    torch.Tensor.npu = npu
    torch.Tensor._pypto_npu_emulated = True
