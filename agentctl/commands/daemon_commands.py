"""The parsers of the client commands over the control socket: `status`, `report`, `health`, `stop`, `wait`
and the host's `ls`. Their targets (agentctl.commands.targets) are agentctl.commands.client_actions and
agentctl.commands.host_daemons, imported only when the command runs.

Each is `func(args) -> exit code` (agentctl.cli_support's table: `health` is 4 when unhealthy, that is not
live, not ready with --ready, or a daemon that answers but not sensibly). Errors are one line on stderr,
prefixed `agentctl: `, never a traceback.

Import cost matters here (a health probe may run every few seconds): no aiohttp.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentctl.cli_support import (
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_STILL_RUNNING,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
    add_main_command,
    add_offline_option,
    daemon_options,
    positive_seconds,
)
from agentctl.commands.targets import target
from agentctl.exit_codes import EXIT_NOT_ATTACHED

WAIT_ATTACHED = 60.0  # `wait --attached` with no --timeout: past real agents' start-up and the default 30 s gate
WAIT_POLL = 0.1
LIST_TIMEOUT = 2.0  # `ls`: per daemon; they are asked side by side
STOP_WAIT = 10.0  # `stop --wait` with no number
STOP_WAIT_MAX = 3600.0


def add_client_commands(subparsers: Any) -> None:
    """Register status, report, health, stop and ls on an argparse subparsers action."""
    options = daemon_options()
    p = add_main_command(
        subparsers, "status", parents=(options,), help="show the MCP attachment status of the current attempt",
        description=("The MCP attachment status of the daemon's current attempt.",
                     "One row per server with its display state and a plain-language line. Which daemon: --socket, "
                     "else --execution, else $AGENTCTL_SOCKET, else the only one under the runtime dir."),
    )
    p.set_defaults(func=target("status"))

    p = add_main_command(
        subparsers, "report", parents=(options,),
        help="print the whole attachment report (current and previous attempts)",
        description=("The whole attachment report: current and previous attempts.",
                     "From the running daemon, or read a persisted one offline with --state-dir DIR --execution ID."),
    )
    add_offline_option(p)
    p.set_defaults(func=target("report"), command_name="report")

    p = subparsers.add_parser(
        "health",
        parents=[options],
        help=f"exit {EXIT_OK} when healthy, {EXIT_NO_DAEMON} when the daemon cannot be reached, "
        f"{EXIT_UNHEALTHY} when unhealthy",
        description="Liveness (or readiness with --ready) of the daemon. Exit codes: "
        f"{EXIT_OK} healthy, {EXIT_USAGE} bad arguments, {EXIT_NO_DAEMON} cannot connect, {EXIT_UNHEALTHY} unhealthy.",
    )
    p.add_argument("--ready", action="store_true", help="check readiness instead of liveness")
    p.set_defaults(func=target("health"))

    p = add_main_command(
        subparsers, "stop", parents=(options,),
        help="ask the daemon to stop (it drains, then exits); --wait until it is gone",
        description=("Ask the daemon to stop, and with --wait wait until it is gone.",
                     "It drains (the agent stopped, the report persisted) and exits. Returns at once, or with --wait "
                     "once the daemon's process has exited and its socket is gone. Exit codes: "
                     f"{EXIT_OK} asked (or gone, with --wait), {EXIT_NO_DAEMON} no daemon to stop, "
                     f"{EXIT_STILL_RUNNING} still there when the wait ended."),
    )
    add_stop_wait(p)
    p.set_defaults(func=target("stop"))

    p = add_main_command(
        subparsers, "wait", parents=(daemon_options(timeout=False),),
        help="--attached: wait until every required server is attached (hold the first prompt until then)",
        description=("Wait until every server the spec marks required is attached, for an executor driving `serve`.",
                     "Attached: the built-in server observed active on its endpoint, a third-party one reported "
                     "connected by the agent. Each required server is named with its evidence. Exit codes: "
                     f"{EXIT_OK} all attached, {EXIT_NOT_ATTACHED} one failed, was not attached within the "
                     f"spec's [mcp] required_timeout, or the wait ended first, {EXIT_NO_DAEMON} no daemon."),
    )
    p.add_argument("--attached", action="store_true", required=True,
                   help="wait for the required servers (the one thing `wait` waits for)")
    p.add_argument("--timeout", metavar="SECONDS", type=positive_seconds(3600), default=WAIT_ATTACHED,
                   help=f"give up after this many seconds (default {WAIT_ATTACHED:g})")
    p.set_defaults(func=target("wait"))

    add_host_commands(subparsers)


def add_host_commands(subparsers: Any) -> None:
    """Register `ls` (and its alias `ps`)."""
    p = add_main_command(
        subparsers, "ls", aliases=("ps",), parents=(_ls_options(),),
        help="list the daemons on this host: execution, task, session, agent, state, socket",
        description=("The daemons on this host, one line each.",
                     "The daemons under the runtime dir ($AGENTCTL_RUNTIME_DIR, $RUNTIME_DIRECTORY or the user "
                     "runtime dir), and the one $AGENTCTL_SOCKET names. Each is asked in parallel with its own "
                     "timeout: a hung daemon is shown as `unresponsive`, a socket nobody listens on as `dead` (left "
                     "in place), another user's as `not yours` (not asked)."),
    )
    p.set_defaults(func=target("ls"))


def _ls_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--json", action="store_true", help="print the listing as JSON (DaemonListing)")
    options.add_argument("--timeout", metavar="SECONDS", type=positive_seconds(60), default=LIST_TIMEOUT,
                         help=f"how long each daemon may take to answer ({LIST_TIMEOUT:g})")
    return options


def add_stop_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", metavar="SECONDS", nargs="?", const=STOP_WAIT, type=positive_seconds(STOP_WAIT_MAX), default=None,
        help=f"return once the daemon is gone (its process exited, its socket gone or dead), waiting at most "
        f"SECONDS ({STOP_WAIT:g}); exit {EXIT_STILL_RUNNING} if it is still there",
    )
