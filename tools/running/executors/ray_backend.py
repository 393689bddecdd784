"""The Ray executor: each isolated run is one Ray task, on whichever node Ray places it.

Needs the optional extra (``pip install .[ray]``); ``ray`` is imported only when this executor connects, so the
server and the local executor never pay for it.

**What a run is on the worker** (:func:`_remote_run`, a streaming-generator task): the files of the
:class:`RunSpec` travel with the task; the worker makes a temporary *worker-local workspace* to hold the private copy
(mounted inside the run's sandbox at the session's workspace path, as on the driver's machine; only an unsandboxed
run has its argv and environment rewritten to it), and starts one helper process
(``worker_run.py``) that calls the same ``run_isolated`` the local executor uses, so the same process-group, timeout
and clean-up discipline holds and the private copy is verified the same way. (Why a process and not a thread:
``worker_run.py`` says.) The helper is a fresh interpreter on every run; it imports only the run's path, never the code
model or the server (``tests/executors/test_worker_start_up.py``; measured ~0.2 s of CPU, of ~0.6 s that a run cost
on Ray beyond the local pool: ``benchmarks/executor_overhead.py``), and that start-up is paid ahead: when a run
starts, its worker process starts the helper for its next run (a *spare*, which holds no job until one arrives and
exits when the worker process dies; a cancelled run's worker kills it).
The output folders ``run_isolated`` moved into the worker-local ``output/`` are packed into one ``tar.gz`` and
streamed back in chunks; the driver unpacks them into a staging folder next to the session's
copies and moves them into ``WORKSPACE/output/`` with ``adopt_outputs`` (same collision rule as local runs), where
the ledger expects them. The worker removes its temporary folder on every path it controls; a folder left by a
worker that was killed is removed by the next run on that machine.

The task streams small messages: ``started`` (node, chip), ``progress`` (every ~2 s, what ``run_command`` reports),
``chunk`` (artifact bytes), then ``done`` (the RunResult and what ``run_isolated`` returned) or ``error`` (a
PyptoTuneError from the worker, re-raised on the driver as the same class). Ray never retries a run
(``max_retries=0``): a retry would execute the command a second time behind the ledger's back.

**NPU chips** are Ray resources. Ray itself knows Ascend chips (``ray._private.accelerators.npu``): a raylet on an
NPU node counts ``/dev/davinci*`` (or asks AscendCL) and offers them as the accelerator resource ``NPU``; the
``ray-ascend`` plugin (HCCL collectives, tensor transport) builds on that same built-in resource, so where it is
installed the name is still ``NPU``. The name is taken from Ray's Ascend accelerator manager when present, else
``NPU``, and can be overridden (``npu_resource=``). A node without chips can offer them by hand:
``ray start --resources '{"NPU": 8}'``. Each NPU run asks for ``{NPU: 1}``; because ``NPU`` is an accelerator
resource, Ray hands the task a concrete chip id (``get_accelerator_ids()``), and the worker sets the child's
``TILE_FWK_DEVICE_ID`` to it. The child's environment drops ``ASCEND_RT_VISIBLE_DEVICES`` (the driver's value means
nothing on another node, and with it set the runtime would renumber the chips), so the id is the physical chip
number, the one ``npu-smi`` shows. Limit which chips Ray hands out by starting the raylet with
``ASCEND_RT_VISIBLE_DEVICES`` set. Ray cannot place a task on one chip named in advance, so a pinned chip
(``RunSpec.device_id``, the session's current chip of the R5 rotation) is not honoured: Ray picks a free ``NPU`` of
the cluster, the chip used comes back in ``ExecutorRun.device_id`` (the ledger must record that one), and the
pin is logged. A chip that hung is therefore not avoided on Ray; take it out of the cluster (``ray start`` without
it in ``ASCEND_RT_VISIBLE_DEVICES``).

**Cancellation.** Cancelling the driver's task asks Ray to cancel the task gracefully (``ray.cancel``: a
``KeyboardInterrupt`` in the task's thread, which Ray repeats every couple of seconds until the task ends). The
task's ``finally`` SIGTERMs the helper, which cancels ``run_isolated``: ``run_command`` kills the process group
(SIGTERM, grace, SIGKILL) and removes the copy; the task waits for that, ignoring the repeated interrupts, then
removes its folder. Measured: ~2.5 s for a group whose grandchild ignores SIGTERM. If the task has not ended
``cancel_grace_s`` later (10 s), ``ray.cancel(force=True)``: the worker SIGKILLs its direct children (the helper)
and exits; the command's supervisor (``runner._PDEATHSIG_LAUNCHER``), whose parent is the helper, gets its
parent-death signal and SIGKILLs the group. ``cancel_grace_s=0`` forces at once. Either way the group is gone; both
paths are tested with a grandchild that ignores SIGTERM.

**Connecting.** ``address`` is what ``ray.init`` takes: ``None`` joins the cluster in ``RAY_ADDRESS`` or else starts
a local one; ``HOST:PORT`` joins a running cluster from one of its nodes (run ``ray start --address HOST:PORT`` on
the server's machine first); ``ray://HOST:10001`` uses Ray Client (untested here). Worker nodes need pypto-tune
installed (the task function is imported by name) and the operator's interpreter: when the driver's Python path
does not exist on the worker, the worker's own interpreter replaces it in the argv and PATH. Ray's own output goes
to stderr and worker logs stay on the workers (``log_to_driver=False``): on stdio, stdout belongs to MCP.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pickle
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from pypto_tune.tools.errors import InputError, PyptoTuneError, RunError, TreeError
from pypto_tune.tools.running.execution import adopt_outputs, exec_parent, rewrite_command
from pypto_tune.tools.running.executors.base import (
    Executor,
    ExecutorError,
    ExecutorRun,
    ProgressCallback,
    RunMode,
    RunSpec,
)
from pypto_tune.tools.running.executors.worker_run import WorkerJob, read_message

log = logging.getLogger("pypto_tune.executors.ray")

INSTALL_HINT = "install the optional extra: pip install .[ray] (in a checkout; or pip install 'pypto-tune[ray]')"
DEFAULT_NPU_RESOURCE = "NPU"
#: Artifact bytes per streamed message: bounds the memory of both ends whatever the run wrote.
CHUNK_BYTES = 8 * 1024 * 1024
#: Seconds between the graceful ``ray.cancel`` and the forced one. The graceful path needs ~2 × KILL_GRACE_S of
#: ``run_command`` to kill a group that ignores SIGTERM, plus the removal of the copy.
CANCEL_GRACE_S = 10.0

#: Seconds the run's helper process gets to end its run after SIGTERM (run_command needs ~2 × KILL_GRACE_S).
HELPER_STOP_S = 20.0
#: Seconds to wait, after a forced cancel, for Ray to see the task's worker gone.
FORCED_END_S = 5.0
#: Prefix of a run's temporary folder on a worker; the folder holds ``owner`` (the worker's pid).
ROOT_PREFIX = "pypto-tune-ray-"

# Errors a worker may raise that the driver re-raises as themselves (anything else becomes an ExecutorError).
_ERRORS: dict[str, type[PyptoTuneError]] = {c.__name__: c for c in (RunError, InputError, TreeError, ExecutorError)}


def ray_available() -> bool:
    """True when ``ray`` can be imported (without importing it: that takes seconds)."""
    return importlib.util.find_spec("ray") is not None


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise InputError(f"the Ray executor needs the optional dependency 'ray' ({exc})", hint=INSTALL_HINT) from None
    return ray


def detect_npu_resource() -> str:
    """The resource name Ray gives Ascend chips: from Ray's accelerator registry (built in since Ray 2.9, and what
    ray-ascend uses), else ``NPU``."""
    try:
        from ray._private.accelerators import get_all_accelerator_managers

        for manager in get_all_accelerator_managers():
            if manager.__name__ == "NPUAcceleratorManager" or manager.get_visible_accelerator_ids_env_var() \
                    == "ASCEND_RT_VISIBLE_DEVICES":
                return str(manager.get_resource_name())
    except Exception:
        log.debug("Ray's accelerator registry is not readable; using %s", DEFAULT_NPU_RESOURCE, exc_info=True)
    return DEFAULT_NPU_RESOURCE


class RayExecutor(Executor):
    """Runs each isolated run as a Ray task; see the module docstring.

    ``init_kwargs`` go to ``ray.init`` (tests pass ``num_cpus``; ``address`` is the argument above).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, npu_resource: str | None = None,
                 cancel_grace_s: float = CANCEL_GRACE_S, init_kwargs: dict[str, Any] | None = None) -> None:
        if not ray_available():
            raise InputError("the Ray executor needs the optional dependency 'ray', which is not installed",
                             hint=INSTALL_HINT)
        self.address = address
        self._npu_resource = npu_resource
        self.cancel_grace_s = float(cancel_grace_s)
        self.init_kwargs = dict(init_kwargs or {})
        self._lock = threading.Lock()
        self._remote: Any = None
        self._initialised_here = False
        self._home: threading.Thread | None = None
        self._closing = threading.Event()
        self.connect_s: float | None = None  # how long ray.init took (reported by the benchmark)

    # ------------------------------------------------------------------------------------------------ connection
    @property
    def npu_resource(self) -> str:
        if self._npu_resource is None:
            self._npu_resource = detect_npu_resource()
        return self._npu_resource

    def connect_sync(self) -> Any:
        """``ray.init`` once (blocking: seconds when it starts a local cluster); returns the ``ray`` module."""
        ray = import_ray()
        with self._lock:
            if self._remote is None:
                t0 = time.monotonic()
                if not ray.is_initialized():
                    self._init_in_home_thread(ray)
                    self._initialised_here = True
                self.connect_s = round(time.monotonic() - t0, 3)
                self._remote = ray.remote(max_retries=0)(_remote_run)
        return ray

    def _init_in_home_thread(self, ray: Any) -> None:
        """``ray.init`` in a thread that lives as long as the executor.

        Why: a local cluster's processes (GCS, raylet) are started with a parent-death signal, and Linux sends it
        when the *thread* that started them exits, not the process. Called from a pool thread (anyio's worker
        threads retire after 10 s idle) the cluster was SIGKILLed under the server a few seconds later.
        """
        ready = threading.Event()
        failure: list[BaseException] = []

        def home() -> None:
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, **self.init_kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failure.append(exc)
                return
            finally:
                ready.set()
            self._closing.wait()  # keep the thread (and with it the cluster's parent) alive until close()

        self._closing.clear()
        self._home = threading.Thread(target=home, name="pypto-tune-ray-home", daemon=True)
        self._home.start()
        ready.wait()
        if failure:
            self._home = None
            exc = failure[0]
            where = self.address or "RAY_ADDRESS or a new local instance"
            raise ExecutorError(f"cannot connect to the Ray cluster at {where}: {exc}",
                                hint="check --ray-address (HOST:PORT of the head, from a cluster node) and that the "
                                "cluster runs the same Ray version") from exc

    async def connect(self) -> None:
        """``connect_sync`` off the event loop."""
        await anyio.to_thread.run_sync(self.connect_sync)

    async def prepare(self) -> None:
        await self.connect()

    def capacity(self, run_mode: RunMode, device_ids: list[str] | tuple[str, ...] = ()) -> int:
        """The cluster's CPUs (SIM: one per run) or its NPU resources. ``device_ids`` does not apply: Ray's chips are
        the raylets' (see the module docstring)."""
        ray = self.connect_sync()
        total = ray.cluster_resources()
        key = self.npu_resource if run_mode == "npu" else "CPU"
        return max(int(total.get(key, 0)), 1)

    def close(self) -> None:
        with self._lock:
            if self._initialised_here:
                ray = import_ray()
                if ray.is_initialized():
                    ray.shutdown()
            self._closing.set()
            if self._home is not None:
                self._home.join(timeout=10)
            self._home = None
            self._initialised_here = False
            self._remote = None

    # ------------------------------------------------------------------------------------------------ one run
    async def run(self, spec: RunSpec, *, on_progress: ProgressCallback | None = None) -> ExecutorRun:
        if spec.run_mode == "npu" and spec.device_id is not None:
            log.info("run %s asked for chip %s; on Ray the cluster picks the chip (reported in device_id)", spec.tag,
                     spec.device_id)
        t0 = time.monotonic()
        ray = await anyio.to_thread.run_sync(self.connect_sync)
        options: dict[str, Any] = {"num_returns": "streaming", "num_cpus": 1}
        if spec.run_mode == "npu":
            resource = self.npu_resource
            offered = await anyio.to_thread.run_sync(lambda: ray.cluster_resources().get(resource, 0))
            if not offered:
                raise ExecutorError(f"the Ray cluster offers no {resource!r} resource, so an NPU run would wait "
                                    "forever", hint="start the raylets on the NPU nodes (Ray counts /dev/davinci*), "
                                    f"or declare chips: ray start --resources '{{\"{resource}\": N}}'")
            options["resources"] = {resource: 1}
        workspace = Path(spec.workspace)
        staging = exec_parent(workspace) / f"ray-{spec.tag or 'run'}-{uuid.uuid4().hex[:10]}"
        staging.mkdir(parents=True)
        try:
            gen = self._remote.options(**options).remote(spec, sys.executable, self.npu_resource)
            try:
                info, queued_s, error = await self._consume(ray, gen, staging, t0, on_progress)
            except BaseException:
                # cancelled, our own progress callback failed, or the stream broke: the remote run must end too
                with anyio.CancelScope(shield=True):
                    await self._stop(ray, gen)
                raise
            if error is not None:  # reported by the worker, whose task has ended cleanly: nothing to stop
                raise error
            if info["exec_hash"] != spec.exec_hash:
                raise ExecutorError("the worker materialised other bytes than the run's files (hash "
                                    f"{info['exec_hash'][:12]} ≠ {spec.exec_hash[:12]})",
                                    hint="the workers must run the same pypto-tune version as the server")
            digests: dict[str, str] = {}
            names: dict[str, str] = {}
            outputs = _unpack(staging, workspace, digests, names) if info["packed"] else []
            # the worker digested its folders before packing them; what arrived must be those bytes
            if sorted(digests.values()) != sorted(info.get("output_digests", {}).values()):
                raise ExecutorError("the run folders that arrived from the worker differ from the ones it wrote",
                                    hint="run again; if it repeats, check the workers' disks and pypto-tune version")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        sources = dict(info.get("output_sources", {}))  # folder name as born → recorded files it names
        return ExecutorRun(result=info["result"], exec_hash=info["exec_hash"], exec_dir=info["exec_dir"],
                           tampered=list(info["tampered"]), output_dirs=outputs, argv=list(info["argv"]),
                           output_digests=digests,
                           output_sources={p: list(sources.get(n, [])) for p, n in names.items()},
                           rejected_outputs=dict(info.get("rejected_outputs", {})), sandbox=info.get("sandbox", ""),
                           captured=dict(info.get("captured", {})),
                           device_id=info["device"], executor=self.name, node=info["node"], queued_s=queued_s)

    async def _consume(self, ray: Any, gen: Any, staging: Path, t0: float, on_progress: ProgressCallback | None,
                       ) -> tuple[dict[str, Any], float, PyptoTuneError | None]:
        """Read the task's stream to its end: (the ``done`` payload, seconds queued, or the worker's error)."""
        info: dict[str, Any] = {}
        error: PyptoTuneError | None = None
        queued_s = 0.0
        tar_path = staging / "outputs.tar.gz"
        try:
            async for ref in gen:
                kind, *rest = await ref
                if kind == "started":
                    queued_s = round(time.monotonic() - t0, 3)
                elif kind == "progress":
                    if on_progress is not None:
                        await on_progress(rest[0], rest[1])
                elif kind == "chunk":
                    async with await anyio.open_file(tar_path, "ab") as fh:
                        await fh.write(rest[0])
                elif kind == "error":
                    error = _ERRORS.get(rest[0], ExecutorError)(rest[1], hint=rest[2])
                elif kind == "done":
                    info = rest[0]
        except ray.exceptions.RayError as exc:
            raise ExecutorError(f"the Ray task of this run failed: {exc}",
                                hint="check the cluster (ray status) and the worker's log; the run was not "
                                "retried") from exc
        if not info and error is None:
            raise ExecutorError("the Ray task ended without a result", hint="check the worker's log")
        return info, queued_s, error

    async def _stop(self, ray: Any, gen: Any) -> None:
        """Graceful cancel, then forced after ``cancel_grace_s`` (see the module docstring); ``cancel_grace_s`` ≤ 0
        forces at once. Not both at once: a worker killed while ``run_command`` is between its SIGTERM and its
        SIGKILL leaves a group member that ignores SIGTERM alive (the command's supervisor has already exited with
        the command, so no parent-death signal fires)."""
        if self.cancel_grace_s > 0:
            try:
                ray.cancel(gen)
            except Exception:
                log.debug("ray.cancel failed", exc_info=True)
                return
            with anyio.move_on_after(self.cancel_grace_s):
                await _task_end(gen)
                return
            log.warning("the Ray task did not end %.0f s after a graceful cancel: killing its worker",
                        self.cancel_grace_s)
        try:
            ray.cancel(gen, force=True)
        except Exception:
            log.debug("forced ray.cancel failed", exc_info=True)
            return
        with anyio.move_on_after(FORCED_END_S):  # the worker's death is what kills the group: wait to see it
            await _task_end(gen)


async def _task_end(gen: Any) -> None:
    try:
        await gen.completed()
    except Exception:  # noqa: BLE001 - TaskCancelledError / WorkerCrashedError are the expected ends
        pass


def _unpack(staging: Path, workspace: Path, digests: dict[str, str] | None = None,
            names: dict[str, str] | None = None) -> list[Path]:
    """Extract the worker's output folders into ``staging/output/`` and move them into ``WORKSPACE/output/``.

    The archive comes from another machine: members must stay inside ``staging/output/``; they are extracted
    with ``tarfile``'s ``data`` filter (no absolute or escaping paths or links, no devices), or, on a Python without
    extraction filters, only plain files and folders are accepted.
    """
    target = staging / "output"
    target.mkdir()
    filtered = hasattr(tarfile, "data_filter")
    with tarfile.open(staging / "outputs.tar.gz", "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            parts = Path(m.name).parts
            allowed = m.isfile() or m.isdir() or (filtered and m.issym())
            if Path(m.name).is_absolute() or ".." in parts or len(parts) < 2 or parts[0] != "output" or not allowed:
                raise ExecutorError(f"the worker's artifact archive holds an unexpected member {m.name!r}",
                                    hint="the workers must run the same pypto-tune version as the server")
        try:
            if filtered:
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        except getattr(tarfile, "FilterError", ()) as exc:  # absent before the extraction filters
            raise ExecutorError(f"the worker's artifact archive was refused: {exc}",
                                hint="a run folder may only hold files, folders and links inside it") from exc
    return adopt_outputs(staging, workspace, digests, names=names)


# ---------------------------------------------------------------------------------------------------- the worker
class _HelperRun:
    """The run's own process (``worker_run.py``: why it exists is said there), seen from the Ray task.

    The task's main thread is where Ray's graceful cancel raises ``KeyboardInterrupt``, repeated every couple of
    seconds until the task ends; so the helper's messages are read by a thread of their own, and everything the
    main thread must finish after an interrupt (SIGTERM to the helper, waiting for it) retries on interruption.
    """

    def __init__(self, job: WorkerJob) -> None:
        self.proc = _take_helper()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.messages: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        try:
            self.proc.stdin.write(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
            self.proc.stdin.close()
        except BaseException:  # the helper died at start-up (or we were interrupted): leave no process behind
            self.proc.kill()
            self.proc.wait()
            raise
        self.reader = threading.Thread(target=self._read, name="pypto-tune-run-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while (message := read_message(self.proc.stdout)) is not None:
                self.messages.put(message)
        finally:
            self.messages.put(None)  # end of stream

    def stop_uninterrupted(self) -> None:
        """SIGTERM the helper (it cancels the run: the group is killed with the usual grace, the copy removed) and
        wait for it, whatever interrupts arrive meanwhile. The SIGTERM is repeated every second (the helper takes
        repeats as one request; one sent before its receiver was up would be lost). A helper still there after
        ``HELPER_STOP_S`` is SIGKILLed: the supervisor's parent-death signal then kills the group at once."""
        deadline = time.monotonic() + HELPER_STOP_S
        while self.proc.poll() is None:
            try:
                if time.monotonic() > deadline:
                    self.proc.kill()
                else:
                    self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=1.0)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                continue
        self.reader.join(timeout=5)


# This Ray worker process's next helper. A helper's interpreter start-up (~0.2 s of CPU: the run's imports) used to
# be paid inside each run, while the run held its slot; the spare is started when this worker's current run starts,
# so the start-up overlaps that run. (Started when a run ended, it overlapped only the gap between tasks, and in a
# campaign, whose next task is queued already, there is hardly one: the next run waited for its imports.) It is still
# a fresh interpreter for each run (a spare never held a job) and holds nothing but its imports: it blocks reading
# its job from stdin and exits on end of file, which it reads when this worker process dies.
_spare: subprocess.Popen[bytes] | None = None
#: ``0`` in a worker's environment: no spare, every helper started inside its run (as before spares; for measuring)
SPARE_ENV = "PYPTO_TUNE_RAY_SPARE"
_spare_lock = threading.Lock()


def _start_helper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "pypto_tune.tools.running.executors.worker_run"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)


def _take_helper() -> subprocess.Popen[bytes]:
    """The spare if it is alive (it has only imported), else a helper started now."""
    global _spare
    with _spare_lock:
        proc, _spare = _spare, None
    if proc is not None:
        if proc.poll() is None:
            return proc
        proc.wait()  # a spare that died idle (it should not): reap it and start afresh
    return _start_helper()


def _prestart_helper() -> None:
    global _spare
    if os.environ.get(SPARE_ENV, "1") == "0":  # the benchmark's arm without spares (executor_overhead.py)
        return
    with _spare_lock:
        if _spare is None or _spare.poll() is not None:
            _spare = _start_helper()


def _discard_spare() -> None:
    global _spare
    with _spare_lock:
        proc, _spare = _spare, None
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _sweep_orphaned_roots() -> None:
    """Remove the temporary folders of runs whose worker process is gone: a forced cancel kills the worker before
    it can clean up, so the next run on that machine does it. A folder whose owner pid is alive (or unreadable,
    i.e. being created) is left alone."""
    for d in Path(tempfile.gettempdir()).glob(ROOT_PREFIX + "*"):
        try:
            pid = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


def _remove_uninterrupted(path: Path) -> None:
    while True:
        try:
            shutil.rmtree(path, ignore_errors=True)
            return
        except KeyboardInterrupt:
            continue


def _remote_run(spec: RunSpec, driver_python: str, npu_resource: str):
    """Runs on a Ray worker: see the module docstring. Yields ``(kind, ...)`` tuples."""
    _sweep_orphaned_roots()
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
    helper: _HelperRun | None = None
    interrupted = False
    try:
        (root / "owner").write_text(str(os.getpid()))
        env = dict(spec.env)
        device = None
        if spec.run_mode == "npu":
            import ray

            ids = ray.get_runtime_context().get_accelerator_ids().get(npu_resource) or []
            if not ids:
                yield ("error", "ExecutorError",
                       (f"Ray gave this task no {npu_resource} id: {npu_resource!r} is not an accelerator resource "
                        "Ray assigns ids for"), "use the built-in NPU resource (the default)")
                return
            device = str(ids[0])
            env["TILE_FWK_DEVICE_ID"] = device
            env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
        yield ("started", socket.gethostname(), device)
        worker_ws = root / "ws"
        argv = list(spec.argv)
        if not spec.sandboxed:  # in the sandbox the copy appears at the session's path: nothing to rewrite
            argv, env = rewrite_command(argv, env, Path(spec.workspace), worker_ws)
        argv, env = _local_interpreter(argv, env, driver_python)
        helper = _HelperRun(WorkerJob(files=spec.files, argv=argv, env=env, workspace=str(worker_ws),
                                      timeout_s=spec.timeout_s, tag=spec.tag, parent_pid=os.getpid(),
                                      mount_at=spec.workspace, **spec.isolation()))
        # the next run's helper imports while this run executes: started when this run ended, it was still
        # importing when a queued task arrived at once (a campaign keeps its slots busy), and that task waited
        _prestart_helper()
        final: tuple[Any, ...] | None = None
        while True:
            try:
                message = helper.messages.get(timeout=0.1)
            except queue.Empty:
                continue
            if message is None:
                break
            if message[0] == "progress":
                yield message
            else:
                final = message
        code = helper.proc.wait()
        if final is None:
            yield ("error", "ExecutorError", f"the run's process on the worker ended without a result (exit {code})",
                   "see the Ray worker's log (stderr) on that node")
            return
        if final[0] == "error":
            yield final
            return
        iso = final[1]
        packed = False
        if iso.output_dirs:
            archive = root / "outputs.tar.gz"
            # compresslevel 1: artifacts are mostly JSON text, level 1 already shrinks them several times at a
            # fraction of the default level's time
            with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
                for d in iso.output_dirs:
                    tar.add(str(d), arcname=f"output/{d.name}")
            with open(archive, "rb") as fh:
                while chunk := fh.read(CHUNK_BYTES):
                    yield ("chunk", chunk)
            packed = True
        by_name = {Path(p).name: src for p, src in iso.output_sources.items()}
        yield ("done", {"result": iso.result, "exec_hash": iso.exec_hash, "exec_dir": iso.exec_dir,
                        "tampered": list(iso.tampered), "argv": list(iso.argv), "device": device,
                        "output_digests": dict(iso.output_digests), "output_sources": by_name,
                        "rejected_outputs": dict(iso.rejected_outputs), "sandbox": iso.sandbox,
                        "captured": dict(iso.captured),
                        "node": socket.gethostname(), "packed": packed})
    except BaseException:
        interrupted = True
        raise
    finally:
        # Reached early when Ray cancels the task gracefully (KeyboardInterrupt) or closes the generator: stop the
        # run and wait until its group is dead and its copy removed, whatever else is raised meanwhile.
        if helper is not None:
            helper.stop_uninterrupted()
        _remove_uninterrupted(root)
        if interrupted:  # a cancelled task leaves no process behind, not even a spare
            _discard_spare()
        else:
            _prestart_helper()  # the one started with the run, unless it died meanwhile


def _local_interpreter(argv: list[str], env: dict[str, str], driver_python: str) -> tuple[list[str], dict[str, str]]:
    """On a worker whose disk lacks the driver's interpreter, use the worker's own (same venv layout expected)."""
    if os.path.exists(driver_python) or driver_python == sys.executable:
        return argv, env
    old_dir, new_dir = os.path.dirname(driver_python), os.path.dirname(sys.executable)
    argv = [sys.executable if a == driver_python else a for a in argv]
    if "PATH" in env:
        env = dict(env)
        env["PATH"] = os.pathsep.join(new_dir if p == old_dir else p for p in env["PATH"].split(os.pathsep))
    return argv, env
