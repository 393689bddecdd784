"""A campaign over three fixture operators on a three-node Ray cluster survives the loss of a worker node
and a kill of its driver, and ends with every operator's ledger equal to the same campaign on the local pool.

Two campaigns run at the same time over copies of the same three operators (the same manifest but for the workspaces):

* on the local pool (``pypto-tune campaign MANIFEST --slots 2``), undisturbed — the reference;
* on a Ray cluster of three raylets on loopback inside a network namespace the test creates (``ray_campaign.py``:
  a head without CPUs, node A with 1 CPU, node B with 2), which loses node A while a test command runs on it,
  then loses its driver (SIGKILL) after one operator is done and others run, and is resumed with ``--resume``.

Both use one HOME (one seal key, one recorded environment). Each operator's ledger is then compared table by table
after the masks of ``parity.py`` (ids, times, paths, seals; the undecided rows the killed driver left, and the round
numbers they used). The three operators include an upstream-style one (``upstream_softmax``: a factory-built jit, a
``--run_mode`` flag, a ``✓ … passed`` line), a cube one (``matmul_act``) and a vector one on a grid of cores
(``rmsnorm_grid``). Three are enough for every phase: all three run at once on the cluster's three CPUs (one of them
on node A when it dies), and when the first is done the other two are still running (the driver's kill).

Budgets are small (two trials each, one batch) so that both campaigns take a few minutes on the 2-core machine;
marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.campaign.parity import difference, normalised, undecided
from tests.conftest import OPERATORS, require_real

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executors"))
from exec_helpers import kill_leftovers, processes_mentioning, ray_unavailable  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

HERE = Path(__file__).resolve().parent
#: the campaign's name (its folder under .pypto-tune-campaign/)
NAME = "three"
#: name -> (operator file, test command after the interpreter, trial budget)
# Two trials each, one batch of two: a batch decides when both have run, so from the first trial's record to the
# decision a session holds undecided work for a run's length — where the driver's kill is meant to land
OPS = {"matmul_act": ("matmul_act.py", ["matmul_act.py", "--run-mode", "sim"], 2),
       "rmsnorm_grid": ("rmsnorm_grid.py", ["rmsnorm_grid.py", "--run-mode", "sim"], 2),
       "upstream_softmax": ("softmax_op.py", ["softmax_op.py", "--run_mode", "sim"], 2)}
TIMEOUT_S = 1800


def write_manifest(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = [f'name = "{NAME}"', "batch = 2", "", "[defaults]", 'run_mode = "sim"', "goal_speedup = 50", ""]
    for name, (f, cmd, trials) in OPS.items():
        lines += ["[[operator]]", f'name = "{name}"', f'workspace = "ws/{name}"',
                  f'source = "{OPERATORS / name}"', f'operator_files = ["{f}"]',
                  "test_command = " + json.dumps(["python", *cmd]), f"trials = {trials}", ""]
    path = root / "campaign.toml"
    path.write_text("\n".join(lines))
    return path


def journal_of(root: Path) -> Path:
    return root / ".pypto-tune-campaign" / NAME / "journal.jsonl"


def events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal_of(root).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Any]]:
    reason = ray_unavailable()
    require_real(not reason, reason)  # CI installs the extra and runs as root: a skip there would hide a regression
    base = Path(tempfile.mkdtemp(prefix="pcr", dir="/tmp"))  # short: Ray's unix sockets live under TMPDIR
    home, tmp = base / "home", base / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYPTO_TUNE_KNOWLEDGE", "PYPTO_TUNE_SEAL_KEY",
                                                            "RAY_ADDRESS", "XDG_CONFIG_HOME")}
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    local_m, ray_m = write_manifest(base / "local"), write_manifest(base / "ray")
    out = base / "ray-scenario.json"
    try:
        with open(base / "local.log", "wb") as log:
            local = subprocess.Popen([sys.executable, "-m", "pypto_tune.server.cli", "campaign", str(local_m),
                                      "--slots", "2", "--quiet"], cwd=str(base / "local"), env=env, stdout=log,
                                     stderr=subprocess.STDOUT)
            scenario = subprocess.run([sys.executable, str(HERE / "ray_campaign.py"), str(out), str(base / "ray"),
                                       str(ray_m), str(journal_of(base / "ray"))], env=env, capture_output=True,
                                      text=True, timeout=TIMEOUT_S)
            local_rc = local.wait(timeout=TIMEOUT_S)
        facts = json.loads(out.read_text()) if out.exists() else {}
        if not facts or scenario.returncode:
            sys.stderr.write(f"[ray scenario exit {scenario.returncode}]\n{scenario.stdout[-3000:]}\n"
                             f"{scenario.stderr[-6000:]}\n")
        sys.stderr.write(f"[campaign on Ray: scenario {facts.get('wall_s')} s; phases "
                         f"{ {k: v.get('at_s') for k, v in facts.get('phases', {}).items()} }]\n")
        yield {"base": base, "home": home, "facts": facts, "local_rc": local_rc,
               "local_log": (base / "local.log").read_text(errors="replace")}
    finally:
        kill_leftovers(processes_mentioning(str(base)))
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def ledgers(runs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per operator and side: the session's tables, normalised tables and undecided rows."""
    from pypto_tune.tools.campaign.facts import latest_session, ledger_tables

    key = runs["home"] / ".config" / "pypto-tune" / "ledger-seal.key"
    old = os.environ.get("PYPTO_TUNE_SEAL_KEY")
    os.environ["PYPTO_TUNE_SEAL_KEY"] = str(key)  # the campaigns' key (their HOME), to read their seals
    try:
        out: dict[str, dict[str, Any]] = {}
        for name in OPS:
            for side in ("local", "ray"):
                ws = runs["base"] / side / "ws" / name
                f = latest_session(ws)
                assert f is not None, (side, name, runs["local_log"][-2000:])
                tables = ledger_tables(ws, f.session_id)
                out.setdefault(name, {})[side] = {"facts": f, "tables": tables, "undecided": undecided(tables),
                                                  "normalised": normalised(tables, ws, f.session_id)}
        return out
    finally:
        if old is None:
            os.environ.pop("PYPTO_TUNE_SEAL_KEY", None)
        else:
            os.environ["PYPTO_TUNE_SEAL_KEY"] = old


def test_the_ray_campaign_lost_a_node_and_its_driver_and_still_finished(runs: dict[str, Any]) -> None:
    facts, base = runs["facts"], runs["base"]
    phases = facts["phases"]
    assert [c["rc"] for c in facts["cluster"]] == [0, 0, 0], facts["cluster"]
    # node A died while a test command ran on it ...
    assert phases["node_a_killed"]["killed"] > 0 and phases["node_a_killed"]["running"], phases
    ev = events(base / "ray")
    lost = [e for e in ev if e["event"] == "run-lost"]
    assert lost and all("dead" in e["error"] or "died" in e["error"].lower() for e in lost), lost
    # ... then the driver, mid-campaign: one operator done, others running; the status says the driver is gone
    killed = phases["driver_killed"]
    assert killed["done"] and killed["running"] and killed["status_after_kill"] == "driver-gone", killed
    drivers = [e for e in ev if e["event"] == "driver-started"]
    assert [d["resume"] for d in drivers] == [False, True]
    # the resumed driver saw only what was left of the cluster: node A's port is gone from its nodes
    assert any("6611" in n for n in drivers[0]["nodes"]) and not any("6611" in n for n in drivers[1]["nodes"])
    assert phases["resumed"]["rc"] == 0 and runs["local_rc"] == 0, runs["local_log"][-2000:]
    for side in ("local", "ray"):
        board = json.loads((base / side / ".pypto-tune-campaign" / NAME / "board.json").read_text())
        assert board["state"] == "finished" and board["counts"]["done"] == len(OPS), board["counts"]
    # nothing the campaigns started is still running (test commands, run helpers), and the cluster stopped cleanly
    assert phases["resumed"]["runs_alive"] == [] and facts["leftovers"] == [], facts


def test_every_run_of_the_ray_campaign_went_through_the_cluster(ledgers: dict[str, dict[str, Any]]) -> None:
    for name, sides in ledgers.items():
        ray_runs = sides["ray"]["tables"]["runs"]
        assert ray_runs and all("/pypto-tune-ray-" in r["exec_dir"] for r in ray_runs), name
        assert all("/.pypto-tune/exec/" in r["exec_dir"] and "pypto-tune-ray" not in r["exec_dir"]
                   for r in sides["local"]["tables"]["runs"]), name


@pytest.mark.parametrize("name", list(OPS))
def test_each_operators_ledger_equals_the_local_pools(ledgers: dict[str, dict[str, Any]], name: str) -> None:
    local, ray = ledgers[name]["local"], ledgers[name]["ray"]
    assert local["undecided"] == {}, "the undisturbed campaign left undecided work"
    # what the killed driver left is whole: complete runs (an exit code, a duration) and their verdicts, never a
    # decision, round, patch or trial
    for r in ray["undecided"].get("runs", []):
        assert r["exit_code"] is not None or r["cancelled"] or r["timed_out"], r
    assert set(ray["undecided"]) <= {"runs", "precision_records", "measurements"}
    assert set(local["normalised"]) == set(ray["normalised"])
    for table in local["normalised"]:
        assert ray["normalised"][table] == local["normalised"][table], (
            table, difference(local["normalised"][table], ray["normalised"][table]))
    # and the sessions did the work the manifest asked for
    assert local["facts"].trials == ray["facts"].trials == OPS[name][2]
    assert local["facts"].level1 == ray["facts"].level1 == "DONE"


def test_the_killed_driver_left_undecided_work_the_resume_did_again(ledgers: dict[str, dict[str, Any]]) -> None:
    """Not a tautology of the masks: the kill landed mid-work, so some session holds rows of work that was never
    decided — and the resumed driver decided that work again (the same rounds as the local pool)."""
    left = {name: {t: len(rows) for t, rows in sides["ray"]["undecided"].items()} for name, sides in ledgers.items()}
    assert any(left.values()), left


def test_the_board_and_the_report_say_what_the_ledgers_say(runs: dict[str, Any],
                                                           ledgers: dict[str, dict[str, Any]]) -> None:
    folder = runs["base"] / "local" / ".pypto-tune-campaign" / NAME
    board = json.loads((folder / "board.json").read_text())
    rows = {r["name"]: r for r in board["operators"]}
    for name, sides in ledgers.items():
        f = sides["local"]["facts"]
        assert rows[name]["baseline_us"] == pytest.approx(f.baseline_us) and rows[name]["best_us"] == \
            pytest.approx(f.best_us) and rows[name]["trials"] == f.trials
    speedups = {n: s["local"]["facts"].baseline_us / s["local"]["facts"].best_us for n, s in ledgers.items()}
    assert board["best_operator"] == max(speedups, key=speedups.get)
    en = (folder / "campaign_report_en.md").read_text()
    table = [line for line in en.splitlines() if line.startswith("| ") and line.split(" | ")[0][2:] in OPS]
    assert [line.split(" | ")[0][2:] for line in table] == sorted(speedups, key=lambda n: -speedups[n])
    for line in table:
        link = line.rsplit("](", 1)[1].rstrip(" |").rstrip(")")
        assert (folder / link).resolve().is_file(), link  # each session's own report
    zh = (folder / "campaign_report.md").read_text()
    assert "调优战役报告" in zh and "按收益排序" in zh and "SIM" in zh
    assert "SIM: a precision pass only means" in en


@pytest.mark.browser
def test_the_boards_render_in_chromium_and_refresh_only_while_running(runs: dict[str, Any]) -> None:
    from tests.report.cdp import CHROMIUM, Browser

    require_real(Path(CHROMIUM).exists(), "chromium is not installed: scripts/install_chromium.sh installs it")
    running = runs["base"] / "ray" / "board-at-kill.html"  # the board as the killed driver left it
    final = runs["base"] / "ray" / ".pypto-tune-campaign" / NAME / "board.html"
    report = runs["base"] / "ray" / ".pypto-tune-campaign" / NAME / "campaign_report_en.html"
    for page in (running, final, report):
        text = page.read_text()
        assert "http://" not in text and "https://" not in text and "<script" not in text  # self-contained
    b = Browser()
    try:
        b.open(running.as_uri())
        assert b.eval("document.body.dataset.state") == "running"
        assert b.eval("document.querySelector('meta[http-equiv=refresh]').content") == "5"
        assert b.eval("document.querySelectorAll('table.operators tbody tr').length") == len(OPS)
        assert b.eval("document.querySelectorAll('tr.running').length") >= 1
        b.open(final.as_uri())
        assert b.eval("document.querySelector('meta[http-equiv=refresh]')") is None
        assert b.eval("document.querySelectorAll('tr.done').length") == len(OPS)
        assert b.eval("document.querySelector('.tile[data-k=done] b').textContent") == str(len(OPS))
        b.open(report.as_uri())
        assert b.eval("document.querySelectorAll('table.operators tbody tr').length") == len(OPS)
        assert b.eval("document.querySelectorAll('table.operators a').length") == len(OPS)
        assert b.console_errors() == []
    finally:
        b.close()
