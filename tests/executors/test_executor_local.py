"""LocalExecutor: what tools/running/executors/base.py promises, on this machine, with real child processes."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from exec_helpers import (
    DATA,
    job_spec,
    kill_leftovers,
    leftover_copies,
    make_workspace,
    max_overlap,
    output_summary,
    pids_in,
    read_result,
    wait_dead,
)
from pypto_tune.tools.errors import InputError, RunError
from pypto_tune.tools.running.executors import (
    ExecutorRun,
    LocalExecutor,
    RunSpec,
    SlotPool,
    default_executor,
)
from pypto_tune.tools.running.executors.local import usable_cores

pytestmark = [pytest.mark.process, pytest.mark.anyio]


async def run_all(ex: LocalExecutor, specs: list[RunSpec], progress=None) -> list[ExecutorRun]:
    results: list[ExecutorRun | None] = [None] * len(specs)

    async def one(i: int, spec: RunSpec) -> None:
        results[i] = await ex.run(spec, on_progress=progress)

    async with anyio.create_task_group() as tg:
        for i, spec in enumerate(specs):
            tg.start_soon(one, i, spec)
    return [r for r in results if r is not None]


async def test_n_runs_share_k_slots_and_every_output_lands_in_the_workspace(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    ex = LocalExecutor(sim_slots=2)
    specs = [job_spec(ws, f"r{i}", 1.0) for i in range(5)]
    t0 = time.monotonic()
    runs = await run_all(ex, specs)
    wall = time.monotonic() - t0
    assert [r.result.exit_code for r in runs] == [0] * 5
    records = [read_result(r.output_dirs[0]) for r in runs]
    assert max_overlap([(rec["start"], rec["end"]) for rec in records]) == 2  # never more than the slots
    assert wall >= 3 * 1.0  # ceil(5 / 2) waves of one run each
    assert sum(1 for r in runs if r.queued_s > 0.5) >= 3  # the runs past the second waited for a slot
    for r in runs:
        assert len(r.output_dirs) == 1 and r.output_dirs[0].parent == ws / "output"
        assert r.exec_hash == specs[0].exec_hash and r.tampered == [] and r.executor == "local"
    assert [s["label"] for s in output_summary(ws)] == [f"r{i}" for i in range(5)]
    assert all(s["data"] == "input data: 42\n" and "sub/trace.txt" in s["files"] for s in output_summary(ws))
    assert leftover_copies(ws) == [] and ex.pool.busy == frozenset()


async def test_argv_and_environment_naming_the_workspace_reach_the_copy(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    run = await LocalExecutor(sim_slots=1).run(job_spec(ws, "abs", 0.1, absolute=True))
    assert run.result.exit_code == 0, run.result.output
    assert run.argv[1] == str(ws / "job.py")  # nothing rewritten: the copy is mounted at the workspace's path
    assert output_summary(ws)[0]["data_dir"] == "copy" and output_summary(ws)[0]["data"] == DATA


async def test_each_npu_run_gets_a_chip_of_its_own(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    ex = LocalExecutor()
    assert ex.capacity("npu", ["3", "5"]) == 2 and ex.capacity("sim") == usable_cores()
    specs = [job_spec(ws, f"n{i}", 0.8, run_mode="npu", device_pool=("3", "5")) for i in range(4)]
    specs.append(job_spec(ws, "pinned", 0.8, run_mode="npu", device_pool=("3", "5"), device_id="5"))
    runs = await run_all(ex, specs)
    seen = []
    for r in runs:
        rec = read_result(r.output_dirs[0])
        assert rec["device"] == r.device_id  # the child's TILE_FWK_DEVICE_ID is the chip the executor reports
        seen.append((rec["device"], rec["start"], rec["end"]))
    assert {d for d, _, _ in seen} == {"3", "5"}
    assert runs[-1].device_id == "5"
    for chip in ("3", "5"):  # runs on one chip never overlap
        assert max_overlap([(s, e) for d, s, e in seen if d == chip]) == 1
    assert max_overlap([(s, e) for _, s, e in seen]) == 2


async def test_progress_is_reported_while_the_command_runs(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    seen: list[tuple[float, str]] = []

    async def progress(elapsed: float, line: str) -> None:
        seen.append((elapsed, line))

    run = await LocalExecutor(sim_slots=1).run(job_spec(ws, "p", 2.6), on_progress=progress)
    assert run.result.exit_code == 0
    # while it runs (every 2 s): its ticks; once it ended: its last line, so a short run still shows one
    assert len(seen) >= 2 and all(e >= 1.9 and line.startswith("tick p") for e, line in seen[:-1])
    assert seen[-1][1] == "done p" and seen[-1][0] >= 2.6


async def test_a_run_past_its_budget_is_a_timed_out_result_without_outputs(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    t0 = time.monotonic()
    run = await LocalExecutor(sim_slots=1).run(job_spec(ws, "slow", 60, timeout_s=1.0))
    assert run.result.timed_out and run.result.exit_code is None
    assert run.output_dirs == [] and time.monotonic() - t0 < 15
    assert leftover_copies(ws) == []


async def test_a_program_that_cannot_start_raises_run_error(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    ex = LocalExecutor(sim_slots=1)
    spec = job_spec(ws, "x")
    bad = RunSpec(files=spec.files, argv=["./missing-program"], env=spec.env, workspace=spec.workspace,
                  timeout_s=5)
    with pytest.raises(RunError):
        await ex.run(bad)
    assert ex.pool.busy == frozenset() and leftover_copies(ws) == []


async def test_cancelling_concurrent_runs_leaves_no_process_and_no_copy(tmp_path: Path) -> None:
    """Three runs on two slots: two start (each with a grandchild that ignores SIGTERM), one queues; cancelling
    the caller kills both groups, the queued run never starts, and the slots are free again."""
    ws = make_workspace(tmp_path, "ws")
    ex = LocalExecutor(sim_slots=2)
    pidfiles = [tmp_path / f"pids{i}" for i in range(3)]
    specs = [job_spec(ws, f"c{i}", 60, pidfile=pidfiles[i]) for i in range(3)]
    pids: list[int] = []
    try:
        with anyio.move_on_after(30) as scope:
            async with anyio.create_task_group() as tg:
                for spec in specs:
                    tg.start_soon(ex.run, spec)
                while sum(len(pids_in(p)) for p in pidfiles) < 4:  # two running jobs, two pids each
                    await anyio.sleep(0.05)
                pids = [p for f in pidfiles for p in pids_in(f)]
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught, "the runs never started"
        assert wait_dead(pids) == []
        assert pids_in(pidfiles[2]) == []  # the queued run never started
        assert leftover_copies(ws) == [] and ex.pool.busy == frozenset()
        assert not (ws / "output").exists()
    finally:
        kill_leftovers(pids)


async def test_slot_pool_hands_a_freed_slot_to_the_oldest_waiter_that_can_use_it() -> None:
    pool = SlotPool()
    assert await pool.acquire(["a"]) == "a"
    order: list[str] = []

    async def waiter(name: str, candidates: list[str]) -> None:
        slot = await pool.acquire(candidates)
        order.append(f"{name}:{slot}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, "first", ["a"])
        await anyio.sleep(0.05)
        tg.start_soon(waiter, "second", ["a", "b"])  # b is free: it takes b at once, not a
        await anyio.sleep(0.05)
        tg.start_soon(waiter, "third", ["a"])
        await anyio.sleep(0.05)
        pool.release("a")  # goes to "first", not to "third"
        await anyio.sleep(0.05)
        assert order == ["second:b", "first:a"]
        pool.release("a")
    assert order == ["second:b", "first:a", "third:a"]
    pool.release("a")
    pool.release("b")
    assert pool.busy == frozenset()


async def test_a_cancelled_waiter_does_not_keep_the_slot() -> None:
    pool = SlotPool()
    await pool.acquire(["a"])
    with anyio.move_on_after(0.1):
        await pool.acquire(["a"])
    pool.release("a")
    assert pool.busy == frozenset()
    assert await pool.acquire(["a"]) == "a"


def test_run_specs_are_checked_when_built(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    with pytest.raises(InputError, match="device_pool"):
        job_spec(ws, "x", run_mode="npu")
    with pytest.raises(InputError, match="not in the run's device_pool"):
        job_spec(ws, "x", run_mode="npu", device_pool=("0",), device_id="1")
    with pytest.raises(InputError, match="absolute"):
        RunSpec(files={}, argv=["true"], env={}, workspace="relative", timeout_s=1)
    assert job_spec(ws, "x", device_id="3").device_id is None  # a SIM run has no chip (like build_child_env)


def test_the_service_runs_through_an_executor(tmp_path: Path) -> None:
    from pypto_tune.tools.service import TuningService

    assert TuningService(default_workspace=tmp_path).executor is default_executor()
    mine = LocalExecutor(sim_slots=1)
    assert TuningService(default_workspace=tmp_path, executor=mine).executor is mine
