"""Test-only emulation of an Ascend NPU box on top of PyPTO's SIM cost model (see README.md here)."""
