"""`agentctl hub serve|status|report|migrate|schema`: the reference upstream's command line.

`status` and `report` read the hub's database (a SQLite file, or a PostgreSQL database that hubs on several
hosts share) read-only (no socket round trip, works while the hub is
down); they show what the hub last flushed, a fraction of a second behind the live hub. Exit codes
(agentctl.cli_support's table): 0 ok, 1 bad arguments or unknown session, 2 the database or socket cannot be
used, 128+N a second signal N cut `hub serve`'s drain short.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentctl.cli_support import (
    EXIT_FAILED,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    EXIT_USAGE,
    fail,
    out,
    print_json,
    stdout_color,
)
from agentctl.hub.locations import ENV_HUB_DB, ENV_HUB_RETENTION, ENV_HUB_SOCKET, default_db, default_socket
from agentctl.safetext import neutralize_data

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from agentctl.evidence.contract.hub import HubSession, HubSessionReport, HubStatus
    from agentctl.hub.state import SessionState
    from agentctl.lifecycle import Signals

    # The page's listener: host, port, token, whether the token was generated now, and its file.
    WebArgs = tuple[str, int, str, bool, Path | None]
    # Every session and the database's footprint (size, oldest contact), or a message and its exit code.
    Loaded = tuple[dict[str, SessionState], tuple[int, datetime | None]] | tuple[str, int]

def add_hub_commands(subparsers: Any) -> None:
    hub = subparsers.add_parser(
        "hub",
        help="the reference upstream: many daemons, every session's history in SQLite or a shared PostgreSQL",
        description="The reference upstream. Daemons with an [upstream] socket publish to it; it keeps every "
        "session's history in SQLite (or in PostgreSQL, shared by hubs on several hosts) and answers the tool "
        "tunnel from its own task store.",
    )
    hub.set_defaults(func=lambda args: (hub.print_help(), EXIT_USAGE)[1])
    sub = hub.add_subparsers(title="hub commands", metavar="COMMAND")
    db_help = (f"hub database: a SQLite file or a postgresql:// URL (libpq's key=value form too; the password best "
               f"in PGPASSFILE, PGPASSWORD or --db-file) (default: ${ENV_HUB_DB}, else <state dir>/hub.sqlite3)")
    db_file_help = "read the database location from PATH (mode 0600, yours): a connection string with a password"

    p = sub.add_parser("serve", help="run the hub in the foreground (one JSON line on stdout when ready)")
    p.add_argument("--socket", metavar="PATH", help=f"socket to serve (default: ${ENV_HUB_SOCKET}, else <runtime dir>/hub/hub.sock)")
    p.add_argument("--db", metavar="PATH|URL", help=db_help)
    p.add_argument("--db-file", metavar="PATH", help=db_file_help)
    p.add_argument("--tasks-db", metavar="PATH", help="task store for the tool tunnel, a SQLite file (default: next to "
                   "a SQLite --db; in the same database with PostgreSQL)")
    p.add_argument("--retention", metavar="PERIOD", help="prune sessions last in contact longer ago than PERIOD "
                   f"(30d, 12h, 90m, 3600s; `forever` or 0 keeps every one) (default: ${ENV_HUB_RETENTION}, else 30d)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="text lines, or one JSON object per line for log shippers (text)")
    p.add_argument("--http", metavar="HOST:PORT", help="also serve the read-only status page (loopback by default; "
                   "PORT alone means 127.0.0.1:PORT); its address with a new token is in the ready line")
    p.add_argument("--token-file", metavar="PATH", help="the page's token: read from PATH (created with a new "
                   "token, mode 0600, when missing) instead of a new one printed at start")
    p.set_defaults(func=cmd_hub_serve)

    p = sub.add_parser("status", help="every session: current execution and attempt, server states, last contact")
    p.add_argument("--db", metavar="PATH|URL", help=db_help)
    p.add_argument("--db-file", metavar="PATH", help=db_file_help)
    p.add_argument("--json", action="store_true", help="print JSON (HubStatus)")
    p.set_defaults(func=cmd_hub_status)

    p = sub.add_parser("report", help="one session's history: its executions and the current execution's attempts")
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument("--execution", metavar="ID", help="show this execution's history instead of the current one")
    p.add_argument("--db", metavar="PATH|URL", help=db_help)
    p.add_argument("--db-file", metavar="PATH", help=db_file_help)
    p.add_argument("--json", action="store_true", help="print JSON (HubSessionReport)")
    p.set_defaults(func=cmd_hub_report)

    p = sub.add_parser("schema", help="print the JSON Schema of the upstream frames")
    p.set_defaults(func=cmd_hub_schema)

    p = sub.add_parser("migrate", help="bring the hub database's schema to this agentctl's version, then exit",
                       description="Apply the hub database's schema migrations (what `hub serve` does at start) "
                       "and exit. A SQLite file is created when missing; a PostgreSQL database must exist.")
    p.add_argument("--db", metavar="PATH|URL", help=db_help)
    p.add_argument("--db-file", metavar="PATH", help=db_file_help)
    p.add_argument("--json", action="store_true", help="print JSON (HubMigration)")
    p.set_defaults(func=cmd_hub_migrate)


def cmd_hub_serve(args: argparse.Namespace) -> int:
    from agentctl.lifecycle import Signals

    signals = Signals().install()  # before the heavy imports: a stop during start-up is a drain, not a kill
    try:
        return _hub_serve(args, signals)
    finally:
        signals.uninstall()


def _hub_serve(args: argparse.Namespace, signals: Signals) -> int:
    from agentctl.backend.embedded import TaskStoreError
    from agentctl.unix_socket import ControlSocketError
    from agentctl.logs import configure_logging
    from agentctl.hub.hub_store import HubStoreError

    configure_logging(args.log_level, args.log_format)
    from agentctl.dsn import DsnError
    from agentctl.hub.migrate_command import hub_location

    try:
        socket_path = Path(args.socket).expanduser().absolute() if args.socket else default_socket()
        db = hub_location(args.db, args.db_file)
    except ControlSocketError as exc:
        return fail(f"hub socket: {exc}", EXIT_NO_DAEMON)
    except DsnError as exc:
        return fail(str(exc), EXIT_USAGE)
    from agentctl.hub.retention import DEFAULT_RETENTION, RetentionError, parse_retention

    try:
        setting = args.retention or os.environ.get(ENV_HUB_RETENTION)
        retention = parse_retention(setting) if setting else DEFAULT_RETENTION
    except RetentionError as exc:
        return fail(str(exc), EXIT_USAGE)
    from agentctl.hub.web import WebConfigError, load_token, parse_listen

    web_args: WebArgs | None = None
    try:
        if args.http:
            token_file = Path(args.token_file).expanduser().absolute() if args.token_file else None
            web_args = (*parse_listen(args.http), *load_token(token_file), token_file)
        elif args.token_file:
            return fail("--token-file needs --http HOST:PORT", EXIT_USAGE)
    except WebConfigError as exc:
        return fail(str(exc), EXIT_USAGE)
    from agentctl.lifecycle import run

    try:
        return run(_serve(socket_path, db, args.tasks_db, web_args, signals, retention))
    except ControlSocketError as exc:
        return fail(f"hub socket: {exc}", EXIT_NO_DAEMON)
    except (HubStoreError, TaskStoreError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    except WebConfigError as exc:
        return fail(str(exc), EXIT_NO_DAEMON)


# The hub has no spec: its drain (close connections, last flush, stores closed) is bounded by this.
HUB_SHUTDOWN_TIMEOUT = 10.0


async def _serve(socket_path: Path, db: Any, tasks_db: str | None, web_args: WebArgs | None = None,
                 signals: Signals | None = None, retention: Any = None) -> int:
    """Serve until SIGTERM/SIGINT (agentctl.lifecycle): exit 0 after the drain, 128 + N when a second signal
    N cut it short."""
    import asyncio
    import logging

    from agentctl.control.socket import cleanup_socket_path
    from agentctl.evidence.contract.base import encode
    from agentctl.evidence.contract.hub import HubReady
    from agentctl.lifecycle import StopStack, serve_until_signalled
    from agentctl.runtime import freeze_startup_heap
    from agentctl.hub.hub import Hub

    hub = Hub(socket_path, db, tasks_db=tasks_db, retention=retention)
    stops = StopStack(logging.getLogger("agentctl.hub"))

    async def start() -> HubReady:
        try:
            await stops.enter("hub", hub)
            ready = HubReady(socket=str(hub.socket_path), db=hub.db_label, tasks_db=hub.tasks_label,
                             pid=os.getpid())
            if web_args is not None:
                from agentctl.hub.web import HubWeb

                host, port, token, generated, token_file = web_args
                page = await stops.enter("hub page", HubWeb(hub, host, port, token=token))
                ready.http = page.url
                # The token goes in the fragment: a browser never sends that part of a URL to any server.
                ready.page = page.url + "#token=" + token if generated else page.url
                if token_file is not None:
                    ready.token_file = str(token_file)
        except BaseException:
            await stops.aclose()  # a start that failed or was cut short stops what it started
            raise
        freeze_startup_heap()
        return ready

    async def main(ready: HubReady) -> None:
        out(encode(ready).decode() + "\n")
        await asyncio.Event().wait()  # until a signal

    async def abort() -> None:
        cleanup_socket_path(hub.socket_path)  # what is flushed is flushed; the socket must not outlive us

    outcome = await serve_until_signalled(start=start, main=main, stop=stops.aclose, abort=abort,
                                          shutdown_timeout=HUB_SHUTDOWN_TIMEOUT, signals=signals)
    return EXIT_SIGNAL_BASE + outcome.forced_by if outcome.forced_by is not None else EXIT_OK


def _load(args: argparse.Namespace) -> Loaded:
    """Every session in the database and its footprint (size, oldest contact), or (message, exit code)."""
    from agentctl.dsn import DsnError
    from agentctl.hub.hub_store import HubStoreError
    from agentctl.hub.stores import open_store
    from agentctl.hub.migrate_command import hub_location

    try:
        db = hub_location(args.db, args.db_file)
    except DsnError as exc:
        return str(exc), EXIT_USAGE
    try:
        store = open_store(db, readonly=True)
        try:
            return store.load(), store.footprint()
        finally:
            store.close()
    except HubStoreError as exc:
        return str(exc), EXIT_NO_DAEMON


def cmd_hub_status(args: argparse.Namespace) -> int:
    from agentctl.evidence.contract.hub import HubDatabase
    from agentctl.hub.views import status_view

    loaded = _load(args)
    if isinstance(loaded[0], str):  # (message, exit code)
        return fail(*loaded)
    sessions, (size, oldest) = loaded
    view = status_view(sessions)
    view.database = HubDatabase(size_bytes=size, oldest_contact_at=oldest)
    if args.json:
        print_json(view)
    else:
        out(render_hub_status(view, stdout_color()))
    return EXIT_OK


def cmd_hub_report(args: argparse.Namespace) -> int:
    from agentctl.hub.views import report_view

    loaded = _load(args)
    if isinstance(loaded[0], str):  # (message, exit code)
        return fail(*loaded)
    sessions = loaded[0]
    session = sessions.get(args.session_id)
    if session is None:
        return fail(f"the hub has no session {args.session_id!r}", EXIT_FAILED)
    view = report_view(session, args.execution)
    if view is None:
        return fail(f"session {args.session_id!r} has no execution {args.execution!r}", EXIT_FAILED)
    if args.json:
        print_json(view)
    else:
        out(render_hub_report(view, stdout_color()))
    return EXIT_OK


def cmd_hub_migrate(args: argparse.Namespace) -> int:
    from agentctl.hub.migrate_command import cmd_hub_migrate as run

    return run(args)


def cmd_hub_schema(args: argparse.Namespace) -> int:
    import json

    from agentctl.upstream.protocol import frames_schema

    out(json.dumps(frames_schema(), indent=2, sort_keys=True) + "\n")
    return EXIT_OK


# ---- human output -------------------------------------------------------------------------------------


def _session_lines(session: HubSession, color: bool) -> list[str]:
    from agentctl.control.render import render_attempt
    from agentctl.present.words import when
    from agentctl.hub.views import daemon_link

    link = daemon_link(session.connected)
    lines = [
        f"session {session.session_id} (task {session.task_id})",
        f"  execution {session.current_execution_id} · {link} · last contact {when(session.last_contact_at)}",
    ]
    attempt = session.current_attempt
    if attempt is not None:
        lines.append(f"  attempt {attempt.attempt_id} ({attempt.origin})")
        lines += render_attempt(attempt, color)
    else:
        lines.append("  no attachment attempt yet")
    if session.agent is not None:
        agent = session.agent
        text = f"  agent {agent.name or '?'} {agent.state}"
        if agent.state == "exited" and agent.exit_reason:
            text += f" ({agent.exit_reason})"
        lines.append(text)
    if session.stale_rejected:
        lines.append(f"  rejected {session.stale_rejected} frame(s) from older executions")
    return lines


def render_hub_status(view: HubStatus, color: bool) -> str:
    view = neutralize_data(view)  # ids, names and summaries came from daemons' frames: no control characters
    footer = ""
    if view.database is not None:
        from agentctl.present.words import when

        db = view.database
        oldest = when(db.oldest_contact_at) if db.oldest_contact_at is not None else "none"
        footer = f"database {db.size_bytes / 1e6:.1f} MB · oldest session kept: last contact {oldest}\n"
    if not view.sessions:
        return "the hub has no sessions yet\n" + footer
    blocks = ["\n".join(_session_lines(session, color)) for session in view.sessions]
    return "\n\n".join(blocks) + "\n" + ("\n" + footer if footer else "")


def render_hub_report(view: HubSessionReport, color: bool) -> str:
    from agentctl.control.render import render_report
    from agentctl.present.words import when
    from agentctl.hub.views import daemon_link

    view = neutralize_data(view)  # ids, names and summaries came from daemons' frames: no control characters
    lines = [f"session {view.session.session_id} (task {view.session.task_id})", "executions, newest first:"]
    for execution in view.executions:
        flags = ["current" if execution.current else "superseded"]
        flags.append(daemon_link(execution.connected))
        if execution.rejected_frames:
            flags.append(f"{execution.rejected_frames} frame(s) rejected")
        lines.append(f"  {execution.execution_id} ({', '.join(flags)}), last contact {when(execution.last_contact_at)}")
    text = "\n".join(lines) + "\n\n"
    if view.history is None:
        return text + "no snapshot received for this execution yet\n"
    return text + render_report(view.history, color)
