"""The ``torch_npu`` stand-in: the API a PyPTO operator test and the R3 check use, on CPU torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

PROBE = r"""
import json, warnings
warnings.simplefilter("error")  # torch warns when the npu device module lacks its seeding hooks
import torch, torch_npu
out = {"count": torch_npu.npu.device_count(), "available": torch.npu.is_available(),
       "current": torch.npu.current_device(), "same_module": torch.npu is torch_npu.npu,
       "device_type": torch.device("npu:1").type}
props = torch_npu.npu.get_device_properties(0)
out["props"] = [props.name, props.cube_core_num, props.vector_core_num, props.total_memory]
torch.manual_seed(0)
x = torch.arange(6.0).reshape(2, 3)
moved = [x.to("npu:1"), x.npu(), x.to(device=torch.device("npu", 0)), x.to("npu:1", torch.float16)]
out["moved_devices"] = [str(m.device) for m in moved]
out["moved_equal"] = all(torch.equal(m.float(), x) for m in moved)
out["dtype_kept"] = str(moved[3].dtype)
torch.npu.set_device("npu:2")
out["after_set"] = torch.npu.current_device()
torch.npu.synchronize()
for bad in (9, "npu:9"):
    try:
        torch.npu.set_device(bad)
    except RuntimeError as exc:
        out.setdefault("errors", []).append(str(exc))
print(json.dumps(out))
"""


def probe(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)


def test_device_api_follows_the_box_and_tile_fwk_device_id(npu_box) -> None:
    res = probe(npu_box(chips=4, device_id=3))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["count"] == 4 and out["available"] is True and out["same_module"] is True
    assert out["current"] == 3  # TILE_FWK_DEVICE_ID, the chip pypto's runtime uses
    assert out["device_type"] == "npu"
    assert out["props"] == ["Ascend910B2", 24, 48, 65536 * 1024 * 1024]
    # CPU torch has no npu kernels: "moving" keeps the data on the CPU, unchanged
    assert out["moved_devices"] == ["cpu"] * 4 and out["moved_equal"] and out["dtype_kept"] == "torch.float16"
    assert out["after_set"] == 2
    assert len(out["errors"]) == 2 and all("Invalid device ID 9" in e and "4 NPU(s)" in e for e in out["errors"])


def test_zero_chips_means_not_available(npu_box) -> None:
    code = ("import torch, torch_npu; print(torch_npu.npu.device_count(), torch.npu.is_available()); "
            "torch.npu.current_device()")
    res = subprocess.run([sys.executable, "-c", code], env=npu_box(chips=0), capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.split() == ["0", "False"]
    assert res.returncode == 1 and "Invalid device ID 0: the emulated box has 0 NPU(s)" in res.stderr


def test_without_a_box_the_import_fails_like_a_host_without_torch_npu(npu_box, tmp_path) -> None:
    env = npu_box()
    env.pop("PYPTO_NPU_EMU_CONFIG")
    (tmp_path / "npu-box" / "emulator.json").unlink()
    res = subprocess.run([sys.executable, "-c", "import torch_npu"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1
    assert "ImportError: torch_npu stand-in: no NPU emulator box here" in res.stderr
