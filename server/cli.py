"""Command line: ``pypto-tune serve | demo | campaign | knowledge | analyze | status | report | confirm``.

Only parses flags and turns library errors into one-line messages; logs go to stderr because on stdio the
stdout stream belongs to the MCP protocol.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import NoReturn

from pypto_tune.tools.errors import PyptoTuneError

from pypto_tune import __version__


#: ``--help`` of each command ends with these (the first line a user tries is the one printed first)
EXAMPLES = {
    "pypto-tune": """examples:
  pypto-tune demo                                   # a whole SIM session on a bundled operator
  pypto-tune serve --workspace /path/to/operator    # the MCP server, for Claude Code, Codex, …
  pypto-tune COMMAND --help                         # each command's options and examples""",
    "serve": """examples:
  pypto-tune serve --workspace /path/to/operator
  pypto-tune serve --transport http --port 8765
  pypto-tune serve --transport http --host 0.0.0.0 --allow-remote --token SECRET
  pypto-tune serve --executor ray --ray-address HEAD_HOST:6379 --knowledge team.json""",
    "demo": """examples:
  pypto-tune demo
  pypto-tune demo --lang zh --workspace /tmp/demo-run
  pypto-tune demo --operator rmsnorm""",
    "campaign": """examples:
  pypto-tune campaign fixtures/operators --copy-to campaign-run --goal-speedup 8 --trials 6
  pypto-tune campaign mylib.toml --executor ray --ray-address HEAD_HOST:6379
  pypto-tune campaign fixtures/operators --copy-to campaign-run --status
  pypto-tune campaign mylib.toml --stop""",
    "knowledge": """examples:
  pypto-tune knowledge show
  pypto-tune knowledge import campaign-run               # every session a campaign folder holds
  pypto-tune knowledge import team.json ops/softmax      # a shared file and a workspace
  pypto-tune knowledge export team.json""",
    "analyze": """examples:
  pypto-tune analyze demo-run/output                     # the newest run under it
  pypto-tune analyze demo-run/output/output_20260101_000000 --json --lang en""",
    "confirm": """examples:
  pypto-tune confirm --workspace /path/to/operator""",
    "status": """examples:
  pypto-tune status --workspace demo-run --lang en""",
    "report": """examples:
  pypto-tune report --workspace demo-run --format html --lang en""",
}


class _Parser(argparse.ArgumentParser):
    """argparse as a first-time user needs it: a mistake is answered with the usage of the command it was made in
    (not the top level's), a close match for a mistyped flag, subcommand or choice, and where the examples are."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = super().parse_known_args(args, namespace)
        # a subcommand's parser is called with parse_known_args and hands what it did not know back to the top level,
        # whose error would show the top-level usage: a subcommand reports its own unknown arguments
        if extras and self.prog != "pypto-tune":
            known = [o for a in self._actions for o in a.option_strings]
            hints = []
            for extra in extras:
                close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1) if extra.startswith("-") else []
                hints.append(f"{extra} (did you mean {close[0]}?)" if close else extra)
            self.error("unrecognized arguments: " + " ".join(hints))
        return parsed, extras

    def _check_value(self, action: argparse.Action, value) -> None:  # noqa: ANN001 - argparse's own signature
        # argparse's check, with a close match named (Python 3.14 has suggest_on_error; this runs on 3.11)
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            close = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {choices}){hint}")

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n`{self.prog} --help` shows every option, with examples\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pypto-tune", description="MCP server that keeps PyPTO operator tuning honest",
                epilog=EXAMPLES["pypto-tune"])
    p.add_argument("--version", action="version", version=f"pypto-tune {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def command(name: str, helptext: str, epilog: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(name, help=helptext, description=helptext,
                              epilog=(epilog + "\n\n" if epilog else "") + EXAMPLES[name])

    s = command("serve", "run the MCP server (stdio by default)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (default: the client starts the server) or http (streamable HTTP at /mcp)")
    s.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback by default)")
    s.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
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
    s.add_argument("--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="what the server logs to stderr (default INFO; stdout belongs to the protocol)")

    d = command("demo", "the main job: a complete scripted tuning session on a bundled operator (SIM)")
    d.add_argument("--workspace", type=Path, default=None, help="where to copy the operator (default: ./demo-run)")
    d.add_argument("--lang", choices=["zh", "en"], default="en", help="language of the progress and the first "
                   "report (default en; both languages are written)")
    d.add_argument("--operator", default="softmax", help="bundled operator to tune (default softmax)")
    d.add_argument("--resume", action="store_true", help="continue the demo an interruption (Ctrl-C) left in "
                   "--workspace instead of starting over")

    from pypto_tune.tools.campaign.commands import HELP as CAMPAIGN_HELP
    from pypto_tune.tools.campaign.commands import add_arguments as campaign_arguments

    k = command("campaign", "tune every operator of a manifest or folder, each a full gated session driven by the "
                "server's own search", CAMPAIGN_HELP.rstrip())
    campaign_arguments(k)

    kn = command("knowledge", "the knowledge store distilled from ledgers: export it as one file, import a file (or "
                 "ledgers, workspaces, campaign folders) into it, show what it holds")
    kn.add_argument("action", choices=["export", "import", "show"],
                    help="export FILE: write the store; import PATH...: merge into it; show: summarise it")
    kn.add_argument("files", nargs="*", type=Path, help="export: the file to write; import: knowledge files, "
                    "ledgers (.sqlite3), workspaces or campaign folders (each reported on its own)")
    kn.add_argument("--store", type=Path, default=None, help="the store (default: PYPTO_TUNE_KNOWLEDGE, else "
                    "~/.config/pypto-tune/knowledge.json)")

    from pypto_tune.tools.analysis.cli import add_arguments as analyze_arguments

    a = command("analyze", "one-shot analysis of a run's output folder (NPU or SIM layout)")
    analyze_arguments(a)

    c = command("confirm", "answer, at a terminal, the question a session asked a person (R5 retry)")
    c.add_argument("--workspace", type=Path, default=Path.cwd(), help="the session's workspace (default: here)")
    c.add_argument("--session", default=None, help="session id (default: the newest in the workspace)")

    for name, helptext in (("status", "print the status board of the session in --workspace"),
                           ("report", "render the report of the session in --workspace")):
        q = command(name, helptext)
        q.add_argument("--workspace", type=Path, default=Path.cwd(), help="the session's workspace (default: here)")
        q.add_argument("--session", default=None, help="session id (default: the newest in the workspace)")
        q.add_argument("--lang", choices=["zh", "en"], default=None,
                       help="language (default: the session's, else zh)")
        if name == "report":
            q.add_argument("--format", choices=["md", "html", "both"], default="both",
                           help="Markdown, HTML or both (default both)")
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

            return analyze_command(args)
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
        _leave_on_signals()  # (uvicorn handles the HTTP transport's signals itself)
        try:
            mcp.run("stdio")
        finally:
            from pypto_tune.tools.session.ledger import checkpoint_all

            checkpoint_all()
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
    try:
        run_http(mcp, host=args.host, port=args.port, token=token, extra_origins=args.allow_origin)
    finally:
        from pypto_tune.tools.session.ledger import checkpoint_all

        checkpoint_all()
    return 0


def _leave_on_signals() -> None:
    """SIGINT and SIGTERM both end the server at once: its ledgers are checkpointed (the main file then holds the
    history, tools/session/ledger.py) and the process exits, which closes the connection to the client; every run
    in flight dies with it (each run's supervisor kills its process group when the server dies,
    tools/running/runner.py). Nothing is half-recorded — each ledger event is one transaction — and the next call
    after a restart heals or resumes (a batch's trials run again under new round numbers).

    Why not let Python handle SIGINT: KeyboardInterrupt cancels the event loop, but the thread reading standard
    input keeps the interpreter alive until the client closes it; a client waiting on its call (600 s tool timeout)
    then waited ten minutes. A second signal during the checkpoint ends the process at once (default action)."""

    def leave(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        logging.getLogger("pypto_tune.server").warning("%s: the server stops; runs in flight are cancelled",
                                                       signal.Signals(signum).name)
        try:
            from pypto_tune.tools.session.ledger import checkpoint_all

            checkpoint_all()
        finally:
            sys.stderr.flush()
            os._exit(128 + signum)

    signal.signal(signal.SIGINT, leave)
    signal.signal(signal.SIGTERM, leave)


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
