"""The Ray worker starts one helper process per run (``executors/worker_run.py``: why a process, it says), a fresh
interpreter each time: whatever that helper imports is paid on every run of a campaign (ahead of the run since the
worker starts it as a spare when its previous run ends, but still on the same CPUs).
It needs the run's path only (materialise, sandbox, run, verify, digest). Measured 2026-12-04: importing the code
model with it (libcst, the knob extractor, through ``tools/patching/__init__.py``) was ~0.3 s of its ~0.55 s of CPU,
and Ray's per-run overhead fell from 1.39 s to 0.69 s when it went (``benchmarks/executor_overhead.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

#: Heavy imports the run's path never needs; each one found in the helper would be paid per run again.
NOT_ON_THE_RUN_PATH = ("libcst", "jinja2", "ray", "torch", "pypto", "mcp", "pypto_tune.tools.patching.edit",
                       "pypto_tune.tools.patching.extract", "pypto_tune.tools.snapshot", "pypto_tune.server")


def test_the_per_run_helper_imports_only_the_run_path():
    probe = ("import json, sys, pypto_tune.tools.running.executors.worker_run\n"
             f"heavy = {NOT_ON_THE_RUN_PATH!r}\n"
             "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_the_patching_exports_still_resolve_lazily():
    # what the session layer imports by name from the package (tools/operations/*.py, tools/search/*.py)
    from pypto_tune.tools import patching
    from pypto_tune.tools.patching import edit, extract, files, legality, models

    assert patching.plan_knob_edit is edit.plan_knob_edit
    assert patching.extract_knobs is extract.extract_knobs
    assert patching.write_sources is files.write_sources
    assert patching.validate is legality.validate
    assert patching.EditPlan is models.EditPlan
    assert all(getattr(patching, name) is not None for name in patching.__all__)


def test_a_spare_helper_whose_worker_ends_before_a_job_exits_quietly():
    """A Ray worker starts its next run's helper when a run ends (a spare); if the worker process dies first, the
    spare reads the end of its stdin and exits without a trace (no traceback in the worker's log, exit 0)."""
    spare = subprocess.run([sys.executable, "-m", "pypto_tune.tools.running.executors.worker_run"], input=b"",
                           capture_output=True, timeout=60)
    assert (spare.returncode, spare.stdout, spare.stderr) == (0, b"", b"")


def test_a_run_takes_the_spare_its_worker_started_and_a_fresh_one_when_there_is_none():
    from pypto_tune.tools.running.executors import ray_backend as rb

    rb._prestart_helper()
    spare = rb._spare
    assert spare is not None and spare.poll() is None
    rb._prestart_helper()  # one spare per worker process, never two
    assert rb._spare is spare
    taken = rb._take_helper()
    assert taken is spare and rb._spare is None
    fresh = rb._take_helper()  # no spare left: started now
    assert fresh is not spare and fresh.poll() is None
    rb._prestart_helper()
    dead = rb._spare
    assert dead is not None
    dead.kill()
    dead.wait()
    replaced = rb._take_helper()  # a spare that died idle is never handed a job
    assert replaced is not dead and replaced.poll() is None
    for p in (taken, fresh, replaced):
        assert p.stdin is not None
        p.stdin.close()
        assert p.wait(timeout=60) == 0
