"""A run lost with its node is run again; nothing else is. (The real node loss, on a real cluster, is in
``test_campaign_on_ray.py``; here the kinds of failure are told apart, with Ray's own exception classes.)"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from pypto_tune.tools.campaign.resilient import ResilientExecutor, lost_with_its_node
from pypto_tune.tools.errors import RunError
from pypto_tune.tools.running.executors import ExecutorError, LocalExecutor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executors"))
from exec_helpers import job_spec, make_workspace  # noqa: E402

pytestmark = pytest.mark.process

ray_exceptions = pytest.importorskip("ray.exceptions")


def raised_from(cause: BaseException) -> ExecutorError:
    """What the Ray executor raises when its task failed (ray_backend._consume: ``raise ... from exc``)."""
    try:
        try:
            raise cause
        except BaseException as exc:
            raise ExecutorError(f"the Ray task of this run failed: {exc}") from exc
    except ExecutorError as err:
        return err


def test_only_a_dead_node_or_worker_counts_as_lost() -> None:
    assert lost_with_its_node(raised_from(ray_exceptions.NodeDiedError("node 1 is dead")))
    assert lost_with_its_node(raised_from(ray_exceptions.WorkerCrashedError()))
    assert not lost_with_its_node(raised_from(ray_exceptions.TaskCancelledError()))  # we cancelled it
    assert not lost_with_its_node(ExecutorError("the worker materialised other bytes than the run's files"))
    assert not lost_with_its_node(RunError("cannot start the test command"))


class FlakyCluster(LocalExecutor):
    """The local pool, except that the first ``lose`` runs are lost with their node the way Ray reports it."""

    def __init__(self, lose: int, cause: BaseException) -> None:
        super().__init__(sim_slots=1)
        self.lose, self.cause, self.calls = lose, cause, 0

    async def run(self, spec, *, on_progress=None):  # type: ignore[override]
        self.calls += 1
        if self.calls <= self.lose:
            raise raised_from(self.cause)
        return await super().run(spec, on_progress=on_progress)


def test_a_lost_run_runs_again_and_the_loss_is_reported(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, "ws")
    seen: list[tuple[str, int]] = []
    ex = ResilientExecutor(FlakyCluster(2, ray_exceptions.NodeDiedError("gone")),
                           on_loss=lambda spec, attempt, exc: seen.append((spec.tag, attempt)))
    run = anyio.run(ex.run, job_spec(ws, "lost-twice", 0.1))
    assert run.result.exit_code == 0 and len(run.output_dirs) == 1  # the third attempt ran, once
    assert seen == [("lost-twice", 1), ("lost-twice", 2)] and ex.losses == 2
    # out of attempts: the loss is the caller's to handle
    with pytest.raises(ExecutorError, match="failed"):
        anyio.run(ResilientExecutor(FlakyCluster(3, ray_exceptions.NodeDiedError("gone"))).run,
                  job_spec(ws, "lost-thrice", 0.1))
    # any other failure is not retried
    never = FlakyCluster(1, ray_exceptions.TaskCancelledError())
    with pytest.raises(ExecutorError):
        anyio.run(ResilientExecutor(never).run, job_spec(ws, "cancelled", 0.1))
    assert never.calls == 1
