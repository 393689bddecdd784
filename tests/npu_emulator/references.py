"""Torch references that the emulated box uses to fill kernel outputs (test-only; README "Numerics").

SIM computes no output values, so an emulated NPU run cannot produce real numerics. When the test harness
registers one of these for a kernel (``emulated_box(..., references=FIXTURE_REFERENCES)``), the box writes the
reference result into the kernel's output tensor after the SIM run and says so on stderr. The operator's own
precision check then exercises the verdict plumbing, not the kernel. Each function gets the kernel's arguments
in call order and writes its output argument in place; the formulas mirror the fixture operators' own checks.
"""

from __future__ import annotations

import torch

RMSNORM_EPS = 1e-6  # fixtures/operators/rmsnorm/rmsnorm.py EPS


def softmax(x: torch.Tensor, y: torch.Tensor) -> None:
    y.copy_(torch.softmax(x, dim=-1))


def rmsnorm(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> None:
    y.copy_(x / torch.sqrt((x * x).mean(-1, keepdim=True) + RMSNORM_EPS) * w)


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    c.copy_(a.float() @ b.float())
