"""Command line: ``pypto-tune serve | demo | analyze | status | report``.

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

from pypto_tune import __version__
from pypto_tune.tools.errors import PyptoTuneError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


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
    s.add_argument("--log-level", default="INFO")

    d = sub.add_parser("demo", help="the main job: a complete scripted tuning session on a bundled operator (SIM)")
    d.add_argument("--workspace", type=Path, default=None, help="where to copy the operator (default: ./demo-run)")
    d.add_argument("--lang", choices=["zh", "en"], default="en")
    d.add_argument("--operator", default="softmax", help="bundled operator to tune")

    a = sub.add_parser("analyze", help="one-shot analysis of a run's output folder (NPU or SIM layout)")
    a.add_argument("args", nargs=argparse.REMAINDER, help="OUTPUT_DIR [--json] [--lang zh|en] [--outer-loops N]")

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

            return run_demo(workspace=args.workspace, lang=args.lang, operator=args.operator)
        if args.command == "analyze":
            from pypto_tune.tools.analysis.cli import analyze_command

            return analyze_command(list(args.args))
        if args.command in ("status", "report"):
            return _offline(args)
    except PyptoTuneError as exc:
        print(f"pypto-tune: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _serve(args: argparse.Namespace) -> int:
    from pypto_tune.server.app import build_server, default_service

    ws = args.workspace.resolve() if args.workspace else None
    mcp = build_server(default_service(ws))
    if args.transport == "stdio":
        mcp.run("stdio")
        return 0
    from pypto_tune.server.http import run_http

    token = args.token or os.environ.get("PYPTO_TUNE_TOKEN")
    if args.host not in LOOPBACK:
        if not args.allow_remote:
            print(f"pypto-tune: refusing to bind {args.host}: not a loopback address. Pass --allow-remote and a "
                  "--token (or PYPTO_TUNE_TOKEN) to expose the server beyond this machine", file=sys.stderr)
            return 2
        if not token:
            print("pypto-tune: --allow-remote needs a bearer token: pass --token or set PYPTO_TUNE_TOKEN "
                  f"(for example {secrets.token_urlsafe(24)})", file=sys.stderr)
            return 2
    run_http(mcp, host=args.host, port=args.port, token=token)
    return 0


def _offline(args: argparse.Namespace) -> int:
    """status / report straight from the ledger, without a server."""
    from pypto_tune.tools.ledger import LEDGER_DIR, LEDGER_FILE, Ledger
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
