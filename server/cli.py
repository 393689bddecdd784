"""Command line: ``pypto-tune serve | demo | campaign | knowledge | analyze | status | report | confirm``.

Only parses flags and turns library errors into one-line messages; logs go to stderr because on stdio the
stdout stream belongs to the MCP protocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from pathlib import Path

from pypto_tune.tools.errors import PyptoTuneError

from pypto_tune import __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pypto-tune", description="MCP server that keeps PyPTO operator tuning honest")
    p.add_argument("--version", action="version", version=f"pypto-tune {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    s.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback by default)")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--workspace", type=Path, default=None,
                   help="default workspace: sessions in its ledger can be addressed by id after a restart")
    s.add_argument("--allow-remote", action="store_true",
                   help="permit a non-loopback --host (requires --token or PYPTO_TUNE_TOKEN)")
    s.add_argument("--token", default=None, help="bearer token required on every HTTP request")
    s.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="browser origin allowed to call the HTTP server (CORS), e.g. http://localhost:6274; "
                   "repeatable")
    s.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="where candidate trials run: this machine (default) or a Ray cluster (pip install .[ray])")
    s.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: the cluster to join (HOST:PORT of its head, from a cluster node); "
                   "default: RAY_ADDRESS, else a local Ray instance")
    s.add_argument("--unsandboxed", action="store_true",
                   help="measure without the run sandbox (bubblewrap) where it cannot be created here; such sessions "
                   "are marked unsandboxed in the ledger, the board and the report")
    s.add_argument("--sandbox-root", action="append", default=[], metavar="PATH",
                   help="a folder runs may read (read-only, fingerprinted) besides the interpreter's own roots, e.g. a "
                   "toolchain outside /usr; repeatable (also PYPTO_TUNE_SANDBOX_ROOTS)")
    s.add_argument("--sandbox-device", action="append", default=[], metavar="PATH",
                   help="a device path runs may use read-write (an NPU device node not named /dev/davinci*); "
                   "repeatable (also PYPTO_TUNE_SANDBOX_DEVICES)")
    s.add_argument("--knowledge", type=Path, default=None, metavar="FILE",
                   help="a knowledge store (pypto-tune knowledge export): its observations rank propose_candidates "
                   "as labelled priors (default: PYPTO_TUNE_KNOWLEDGE, else none)")
    s.add_argument("--log-level", default="INFO")

    d = sub.add_parser("demo", help="the main job: a complete scripted tuning session on a bundled operator (SIM)")
    d.add_argument("--workspace", type=Path, default=None, help="where to copy the operator (default: ./demo-run)")
    d.add_argument("--lang", choices=["zh", "en"], default="en")
    d.add_argument("--operator", default="softmax", help="bundled operator to tune")
    d.add_argument("--resume", action="store_true", help="continue the demo an interruption (Ctrl-C) left in "
                   "--workspace instead of starting over")

    from pypto_tune.tools.campaign.commands import HELP as CAMPAIGN_HELP
    from pypto_tune.tools.campaign.commands import add_arguments as campaign_arguments

    k = sub.add_parser("campaign", help="tune every operator of a manifest or folder, each a full gated session "
                       "driven by the server's own search", epilog=CAMPAIGN_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    campaign_arguments(k)

    kn = sub.add_parser("knowledge", help="the knowledge store distilled from ledgers: export it as one file, "
                        "import a file (or ledgers, or workspaces) into it")
    kn.add_argument("action", choices=["export", "import", "show"])
    kn.add_argument("files", nargs="*", type=Path, help="export: the file to write; import: knowledge files, "
                    "ledgers (.sqlite3) or workspaces")
    kn.add_argument("--store", type=Path, default=None, help="the store (default: PYPTO_TUNE_KNOWLEDGE, else "
                    "~/.config/pypto-tune/knowledge.json)")

    a = sub.add_parser("analyze", help="one-shot analysis of a run's output folder (NPU or SIM layout)")
    a.add_argument("args", nargs=argparse.REMAINDER, help="OUTPUT_DIR [--json] [--lang zh|en] [--outer-loops N]")

    c = sub.add_parser("confirm", help="answer, at a terminal, the question a session asked a person (R5 retry)")
    c.add_argument("--workspace", type=Path, default=Path.cwd())
    c.add_argument("--session", default=None, help="session id (default: the newest in the workspace)")

    for name, helptext in (("status", "print the status board of the session in --workspace"),
                           ("report", "render the report of the session in --workspace")):
        q = sub.add_parser(name, help=helptext)
        q.add_argument("--workspace", type=Path, default=Path.cwd())
        q.add_argument("--session", default=None, help="session id (default: the newest in the workspace)")
        q.add_argument("--lang", choices=["zh", "en"], default="zh")
        if name == "report":
            q.add_argument("--format", choices=["md", "html", "both"], default="both")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "WARNING"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "demo":
            from pypto_tune.server.demo import run_demo

            return run_demo(workspace=args.workspace, lang=args.lang, operator=args.operator, resume=args.resume)
        if args.command == "campaign":
            from pypto_tune.tools.campaign.commands import campaign_command

            return campaign_command(args)
        if args.command == "knowledge":
            from pypto_tune.tools.knowledge.commands import knowledge_command

            return knowledge_command(args.action, list(args.files), store=args.store)
        if args.command == "analyze":
            from pypto_tune.tools.analysis.cli import analyze_command

            return analyze_command(list(args.args))
        if args.command in ("status", "report"):
            return _offline(args)
        if args.command == "confirm":
            from pypto_tune.server.confirm import confirm_command

            return confirm_command(args.workspace, args.session)
    except PyptoTuneError as exc:
        print(f"pypto-tune: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _serve(args: argparse.Namespace) -> int:
    from pypto_tune.server.app import build_server

    ws = args.workspace.resolve() if args.workspace else None
    from pypto_tune.tools.running import sandbox

    # the run sandbox (tools/running/sandbox.py): measured with it, or — the person's explicit choice — without it
    sandbox.configure(allow_unsandboxed=args.unsandboxed, roots=args.sandbox_root, devices=args.sandbox_device)
    if args.knowledge is not None:
        from pypto_tune.tools.search.priors import configure_knowledge

        configure_knowledge(args.knowledge.resolve())  # read now: a malformed file is a one-line error, exit 2
    if args.executor != "local" or args.ray_address:
        from pypto_tune.tools.running.executors import configure_default

        # checked now (Ray missing → a one-line error and exit 2); connected on the first run
        configure_default(args.executor, ray_address=args.ray_address)
    # the TuningService is built on the first call that needs it: initialize is answered without its imports
    mcp = build_server(workspace=ws)
    if args.transport == "stdio":
        mcp.run("stdio")
        return 0
    from pypto_tune.server.http import is_loopback, run_http

    token = args.token or os.environ.get("PYPTO_TUNE_TOKEN")
    if not is_loopback(args.host):
        if not args.allow_remote:
            print(f"pypto-tune: refusing to bind {args.host}: not a loopback address. Pass --allow-remote and a "
                  "--token (or PYPTO_TUNE_TOKEN) to expose the server beyond this machine", file=sys.stderr)
            return 2
        if not token:
            print("pypto-tune: --allow-remote needs a bearer token: pass --token or set PYPTO_TUNE_TOKEN "
                  f"(for example {secrets.token_urlsafe(24)})", file=sys.stderr)
            return 2
    run_http(mcp, host=args.host, port=args.port, token=token, extra_origins=args.allow_origin)
    return 0


def _offline(args: argparse.Namespace) -> int:
    """status / report straight from the ledger, without a server."""
    from pypto_tune.tools.session.ledger import LEDGER_DIR, LEDGER_FILE, Ledger
    from pypto_tune.tools.service import TuningService

    ws = args.workspace.resolve()
    if not (ws / LEDGER_DIR / LEDGER_FILE).exists():
        print(f"pypto-tune: no ledger in {ws / LEDGER_DIR} — is this the session's workspace?", file=sys.stderr)
        return 2
    ledger = Ledger.for_workspace(ws)
    sessions = ledger.rows("sessions")
    ledger.close()
    if not sessions:
        print(f"pypto-tune: the ledger in {ws} holds no session", file=sys.stderr)
        return 2
    sid = args.session or sessions[-1]["id"]
    service = TuningService(default_workspace=ws)
    if args.command == "status":
        print(service.get_status(sid, args.lang).board)
        return 0
    result = service.render_report(sid, fmt=args.format, lang=args.lang)
    for path in result.paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
