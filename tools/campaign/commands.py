"""``pypto-tune campaign``: run, resume, watch or stop a campaign from the command line (server/cli.py parses the
flags and calls :func:`campaign_command`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from pypto_tune.tools.campaign.journal import CampaignDir, default_out
from pypto_tune.tools.campaign.manifest import CampaignSpec, load
from pypto_tune.tools.errors import InputError

HELP = """Manifest keys (TOML; YAML with the same keys):
  name, batch (candidates per batch, default 2), concurrency (sessions at once), trials (overall), wall_h (overall)
  [defaults] and [[operator]]: workspace, source (copied into workspace on the first start), operator_files,
  test_command, run_mode (sim|npu), goal_speedup | goal_target_us, trials, wall_h, timeout_s, repeats, device_ids,
  pass_pattern, fail_pattern
A folder instead of a manifest: one operator per sub-folder with a @pypto.frontend.jit kernel (--copy-to DIR tunes
copies in DIR/<name>); --goal-speedup or --goal-target-us is required (the goal is the user's, never guessed)."""


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("target", type=Path, help="a manifest (.toml / .yaml) or a folder of operators")
    c.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="where runs execute: this machine (default) or a Ray cluster (pip install .[ray])")
    c.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: HOST:PORT of the cluster's head (default: RAY_ADDRESS, else a local "
                   "Ray instance)")
    c.add_argument("--resume", action="store_true", help="continue the campaign in --out where its ledgers say it "
                   "stopped (after a killed driver, a stop, or a lost machine)")
    c.add_argument("--knowledge", type=Path, default=None, metavar="FILE",
                   help="knowledge store: its observations rank the candidates of every session (as labelled "
                   "priors), and the campaign's ledgers are added to it at the end")
    c.add_argument("--out", type=Path, default=None, help="the campaign's folder (board, journal, report); default "
                   "<manifest folder>/.pypto-tune-campaign/<name>/")
    c.add_argument("--status", action="store_true", help="print the board of the campaign in --out and exit")
    c.add_argument("--stop", action="store_true", help="ask the campaign in --out to stop (running sessions finish "
                   "their step, are stopped and reported) and exit")
    c.add_argument("--force", action="store_true", help="with --stop: cancel the running steps (their runs are "
                   "killed; sessions stay resumable)")
    c.add_argument("--quiet", action="store_true", help="no terminal board (board.html still refreshes)")
    g = c.add_argument_group("a folder of operators")
    g.add_argument("--copy-to", type=Path, default=None, help="tune copies in DIR/<operator>, not the folder itself")
    g.add_argument("--goal-speedup", type=float, default=None, help="goal of every operator as a speed-up factor "
                   "(this or --goal-target-us is required)")
    g.add_argument("--goal-target-us", type=float, default=None, help="goal of every operator as a target time in µs")
    g.add_argument("--run-mode", choices=["sim", "npu"], default="sim", help="sim (default) or npu")
    g.add_argument("--trials", type=int, default=None, help="trial budget per operator (default 8)")
    g.add_argument("--wall-h", type=float, default=None, help="wall-time budget per operator in hours (default 1)")
    b = c.add_argument_group("campaign-wide (override the manifest)")
    b.add_argument("--batch", type=int, default=None, help="candidates per batch (default 2)")
    b.add_argument("--concurrency", type=int, default=None, help="sessions at once (default: 2 × the slots)")
    b.add_argument("--trials-total", type=int, default=None, help="overall trial budget")
    b.add_argument("--wall-h-total", type=float, default=None, help="overall wall-time budget in hours")
    b.add_argument("--slots", type=int, default=None, help="local pool: runs at once (default: usable cores)")


def _spec(args: argparse.Namespace) -> CampaignSpec:
    options = {"batch": args.batch, "concurrency": args.concurrency, "trials_total": args.trials_total,
               "wall_h_total": args.wall_h_total}
    if args.target.is_dir():
        options.update(copy_to=args.copy_to.resolve() if args.copy_to else None, run_mode=args.run_mode,
                       goal_speedup=args.goal_speedup, goal_target_us=args.goal_target_us, trials=args.trials,
                       wall_h=args.wall_h)
    elif args.copy_to or args.goal_speedup or args.goal_target_us or args.trials or args.wall_h:
        raise InputError("--copy-to, --goal-*, --trials and --wall-h apply to a folder of operators",
                         hint="with a manifest, set them in its [defaults] or [[operator]] tables")
    return load(args.target, **options)


def _default_folder(args: argparse.Namespace) -> Path:
    """Where a campaign started with these arguments keeps its folder — without loading its spec (``--status`` and
    ``--stop`` need no goal)."""
    from pypto_tune.tools.campaign.journal import CAMPAIGN_DIR
    from pypto_tune.tools.campaign.manifest import _read_table

    target = args.target.resolve()
    if target.is_dir():
        home = args.copy_to.resolve() if args.copy_to else target
        return home / CAMPAIGN_DIR / target.name
    name = _read_table(target).get("name") or target.stem
    return target.parent / CAMPAIGN_DIR / str(name)


def campaign_command(args: argparse.Namespace) -> int:
    from pypto_tune.tools.campaign.board import read_board, render_terminal

    if not args.target.exists():
        raise InputError(f"{args.target} does not exist", hint="pass a manifest (.toml / .yaml) or a folder of "
                         "operators")
    if args.status or args.stop:
        out = args.out or _default_folder(args)
        cdir = CampaignDir(out)
        if not cdir.exists():
            raise InputError(f"no campaign in {cdir.path}", hint="pass --out with the campaign's folder")
        if args.stop:
            cdir.request_stop("pypto-tune campaign --stop", force=args.force)
            print(f"stop requested for campaign {cdir.campaign_id} ({cdir.path})")
            return 0
        board = read_board(cdir)
        print(render_terminal(board) if board else f"campaign {cdir.campaign_id}: no board yet")
        return 0
    from pypto_tune.tools.campaign.scheduler import CampaignOptions, run_campaign

    spec = _spec(args)
    out = (args.out or default_out(spec)).resolve()

    def show(text: str) -> None:
        print(text, flush=True)

    def notify(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    opts = CampaignOptions(executor=args.executor, ray_address=args.ray_address, resume=args.resume,
                           knowledge=args.knowledge.resolve() if args.knowledge else None, handle_signals=True,
                           show=None if args.quiet else show, sim_slots=args.slots, notify=notify)
    print(f"pypto-tune campaign {spec.name}: {len(spec.operators)} operator(s), batch {spec.batch}, executor "
          f"{args.executor}; board: {out / 'board.html'}", flush=True)
    result = run_campaign(spec, out, opts)
    for p in result.reports:
        print(f"report: {p}")
    if result.knowledge:
        print(f"knowledge: {result.knowledge}")
    c = result.board.counts
    if result.board.state == "interrupted":
        print(interrupted_line(result, out), flush=True)
        return 130
    print(f"campaign {result.campaign_id} {result.board.state}: {c['done']} done, {c['failed']} failed, "
          f"{c['stopped']} stopped, {c['not-started']} not started", flush=True)
    return 0 if result.board.state in ("finished", "stopped") and not c["failed"] else 1


def resume_command(argv: list[str], out: Path) -> str:
    """The command that continues this campaign: the same arguments (the spec must be the same), its folder, and
    ``--resume``."""
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        if a.startswith("--out=") or a == "--resume":
            continue
        args.append(a)
    return shlex.join(["pypto-tune", *args, "--out", str(out), "--resume"])


def interrupted_line(result: Any, out: Path) -> str:
    """One line for a person who pressed Ctrl-C: what state the operators are in and how to go on."""
    paused = sum(1 for o in result.outcomes if o.status == "stopped")
    c = result.board.counts
    return (f"pypto-tune campaign: interrupted ({result.stop_reason or 'stopped'}): {c['done']} done, {paused} "
            f"paused with their sessions resumable (each operator file holds its kept state), {c['not-started']} not "
            f"started; resume with: {resume_command(sys.argv[1:], out)}")


__all__ = ["HELP", "add_arguments", "campaign_command"]
