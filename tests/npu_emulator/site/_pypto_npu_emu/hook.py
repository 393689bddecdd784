"""How the emulated box runs a ``RunMode.NPU`` kernel (test-only; tests/npu_emulator/README.md).

``sitecustomize`` installs :class:`_EntryFinder`; when ``pypto.frontend.parser.entry`` is first imported, its
``JitCallableWrapper.__call__`` is wrapped. A call whose jit asked for ``RunMode.NPU`` then:

1. takes the chip from ``TILE_FWK_DEVICE_ID`` and counts the run in the box's state (per chip);
2. applies the chip's configured fault: Alarm health or one of the first ``fail_first_runs`` runs → a runtime
   error; ``hang`` → sleeps until killed; ``busy`` → durations × ``busy_slowdown``;
3. runs the very same jit in ``RunMode.SIM`` (PyPTO's cost model computes the timings);
4. turns every output folder the call created into the NPU layout (``convert.py``) and deletes the SIM folder;
5. numerics: SIM computes no output values. If the test harness registered a reference for this kernel in the
   box config, the outputs are filled from it and a line on stderr says so — the kernel computed nothing. A chip
   with ``wrong_numerics`` (or a kernel without a reference) leaves the outputs as SIM left them, so the
   operator's own precision check fails.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

from _pypto_npu_emu.config import (
    EmuConfig,
    current_config,
    device_from_env,
    log_run,
    next_run_index,
)

TARGET = "pypto.frontend.parser.entry"
_NPU, _SIM = 0, 1  # pypto.RunMode values
_launches = 0  # NPU launches in this process: the <round> of the AICPU trace files


def _say(msg: str) -> None:
    print(f"[npu-emulator] {msg}", file=sys.stderr, flush=True)


class _EntryFinder(importlib.abc.MetaPathFinder):
    """Patches pypto's jit wrapper class right after its module has executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_patch(module, _exec=exec_module):
                    _exec(module)
                    patch(module)

                spec.loader.exec_module = exec_and_patch
                return spec
        return None


def install() -> None:
    if not any(isinstance(f, _EntryFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _EntryFinder())
    if TARGET in sys.modules:  # imported before us (not the case with sitecustomize, but keep it correct)
        patch(sys.modules[TARGET])


def patch(entry_module) -> None:
    cls = entry_module.JitCallableWrapper
    if getattr(cls, "_npu_emulated", False):
        return
    original = cls.__call__

    def __call__(self, *args, **kwargs):
        mode = self._runtime_options.get("run_mode")
        cfg = current_config()
        if mode is None or int(mode) != _NPU or cfg is None:
            return original(self, *args, **kwargs)
        return _npu_call(cfg, self, original, args, kwargs)

    cls.__call__ = __call__
    cls._npu_emulated = True


def _kernel_name(jit) -> str:
    return getattr(jit._original_func, "__name__", "kernel")


def _npu_call(cfg: EmuConfig, jit, original, args, kwargs):
    global _launches
    device = device_from_env()
    name = _kernel_name(jit)
    if device >= cfg.chips:
        raise RuntimeError(f"NPU emulator: TILE_FWK_DEVICE_ID={device} but the box has {cfg.chips} chip(s)")
    spec = cfg.device(device)
    run = next_run_index(cfg, device)
    record = {"kernel": name, "device": device, "run": run, "pid": os.getpid(), "cwd": os.getcwd(),
              "started": time.time()}
    if spec.health == "Alarm":
        log_run(cfg, {**record, "outcome": "alarm"})
        raise RuntimeError(f"NPU emulator: device {device} health is Alarm: the runtime refuses to launch {name}")
    if run < spec.fail_first_runs:
        log_run(cfg, {**record, "outcome": "runtime-error"})
        raise RuntimeError(f"NPU emulator: runtime error on device {device} (emulated fault: run {run + 1} of the "
                           f"first {spec.fail_first_runs} failing runs of this chip)")
    if spec.hang:
        log_run(cfg, {**record, "outcome": "hang"})
        _say(f"device {device} hangs (emulated fault): {name} never returns")
        while True:
            time.sleep(3600)
    round_id = _launches
    _launches += 1
    out_root = Path.cwd() / "output"
    before = {p.name for p in out_root.iterdir()} if out_root.is_dir() else set()
    cache = _cache_dir(cfg, jit, args, kwargs)
    kernel_error: BaseException | None = None
    if cache is not None and cache.is_dir():
        out_root.mkdir(exist_ok=True)
        for i, folder in enumerate(sorted(cache.iterdir())):
            stamp = time.strftime("%Y%m%d_%H%M%S") + f"_{time.time_ns() // 1000 % 1_000_000:06d}"
            shutil.copytree(folder, out_root / f"output_{stamp}_{os.getpid()}_cached{i}")
    else:
        jit._runtime_options["run_mode"] = _SIM
        try:
            original(jit, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after its folder is converted all the same
            kernel_error = exc
        finally:
            jit._runtime_options["run_mode"] = _NPU
    created = sorted(p for p in out_root.iterdir() if p.is_dir() and p.name.startswith("output_")
                     and p.name not in before) if out_root.is_dir() else []
    if cache is not None and not cache.is_dir() and kernel_error is None and created:
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        for p in created:
            shutil.copytree(p, tmp / p.name)
        try:
            os.rename(tmp, cache)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process cached the same code meanwhile
    summaries = [_convert(cfg, p, f"{cfg.seed}/{device}/{run}/{i}", round_id, spec, jit) for i, p in enumerate(created)]
    if kernel_error is not None:
        log_run(cfg, {**record, "outcome": "kernel-error", "folders": summaries, "error": repr(kernel_error)})
        raise kernel_error
    filled = _fill_outputs(cfg, spec, name, args, kwargs)
    log_run(cfg, {**record, "outcome": "ok", "folders": summaries, "outputs": filled,
                  "ended": time.time(), "round": round_id})


def _cache_dir(cfg: EmuConfig, jit, args, kwargs) -> Path | None:
    """Where the SIM folders of this exact call are cached (config ``cache_sim``), keyed by the kernel's source
    file, its option dicts and the inputs' shapes and dtypes; None when caching is off."""
    if not cfg.cache_sim:
        return None
    import hashlib

    h = hashlib.sha256()
    code = getattr(jit._original_func, "__code__", None)
    if code is not None and os.path.isfile(code.co_filename):
        h.update(Path(code.co_filename).read_bytes())
    h.update(code.co_name.encode() if code is not None else b"")
    opts = {k: v for k, v in (jit._runtime_options or {}).items() if k != "run_mode"}
    for part in (opts, getattr(jit, "_pass_options", None), jit._debug_options):
        h.update(repr(sorted((part or {}).items(), key=repr)).encode())
    for a in list(args) + list(kwargs.values()):
        h.update(repr((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a))))).encode())
    return cfg.state / "sim-cache" / h.hexdigest()[:24]


def _convert(cfg: EmuConfig, sim_dir: Path, rng_seed: str, round_id: int, spec, jit) -> dict:
    """One folder of this call; the noise stream is a function of (seed, chip, run on that chip, folder)."""
    from _pypto_npu_emu.convert import Options, convert_run

    debug = int((jit._debug_options or {}).get("runtime_debug_mode", 0) or 0) >= 1
    tick_base = cfg.tick_base if cfg.tick_base is not None else time.monotonic_ns() // 20  # 50 MHz counter
    aicpu = cfg.aicpu_trace == "always" or (cfg.aicpu_trace == "dump_device_perf"
                                            and os.environ.get("DUMP_DEVICE_PERF", "").lower() == "true")
    scale = 1.0
    for option, effects in cfg.option_effects.items():
        value = (jit._runtime_options or {}).get(option)
        if value is not None and str(value) in effects:
            scale *= effects[str(value)]
    opts = Options(noise_pct=cfg.noise_pct, noise_run_share=cfg.noise_run_share, time_scale=scale,
                   rng_seed=rng_seed,
                   slowdown=cfg.busy_slowdown if spec.busy else 1.0, hub_lane=cfg.hub_lane, tick_base=tick_base,
                   round_id=round_id, debug=debug, aicpu_trace=aicpu, pipe_usage=cfg.pipe_usage,
                   python3=shutil.which("python3") or sys.executable,
                   keep_sim_in=cfg.path.parent / "sim-runs" if cfg.keep_sim_runs else None)
    try:
        return convert_run(sim_dir, opts)
    except Exception as exc:
        raise RuntimeError(f"NPU emulator: turning {sim_dir} into an NPU run folder failed: {exc}") from exc


def _load_reference(spec_text: str):
    file, _, func = spec_text.rpartition(":")
    module_spec = importlib.util.spec_from_file_location(f"_npu_emu_reference_{abs(hash(file))}", file)
    if module_spec is None or module_spec.loader is None:
        raise RuntimeError(f"NPU emulator: cannot load reference file {file}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    try:
        return getattr(module, func)
    except AttributeError:
        raise RuntimeError(f"NPU emulator: {file} has no function {func!r}") from None


def _fill_outputs(cfg: EmuConfig, spec, name: str, args, kwargs) -> str:
    if spec.wrong_numerics:
        _say(f"device {spec.index} has the 'wrong_numerics' fault: outputs of {name} left as SIM left them")
        return "wrong-numerics"
    ref = cfg.references.get(name)
    if ref is None:
        _say(f"SIM computes no values and no reference is registered for {name}: outputs left unwritten")
        return "unwritten"
    import torch

    with torch.no_grad():
        _load_reference(ref)(*args, **kwargs)
    _say(f"outputs of {name} were filled by the test harness's reference {ref} — NOT computed by the kernel "
         "(SIM computes no values)")
    return "reference"
