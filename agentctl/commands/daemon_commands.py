"""The client commands over the control socket: `status`, `report`, `health`, `stop`, `wait` (and `ls`, registered here
from agentctl.commands.host_daemons).

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
    call,
    client_exit,
    command,
    connect,
    daemon_options,
    fail,
    out,
    persisted_report,
    positive_seconds,
    print_json,
    stdout_color,
)
from agentctl.evidence.contract.control import AttachedGate, HealthResponse, StatusResponse, StopResult
from agentctl.evidence.contract.report import AttachmentHistory
from agentctl.exit_codes import EXIT_NOT_ATTACHED

WAIT_ATTACHED = 60.0  # `wait --attached` with no --timeout: past real agents' start-up and the default 30 s gate
WAIT_POLL = 0.1


def add_client_commands(subparsers: Any) -> None:
    """Register status, report, health, stop and ls on an argparse subparsers action."""
    from agentctl.commands.host_daemons import add_host_commands, add_stop_wait

    options = daemon_options()
    p = add_main_command(
        subparsers, "status", parents=(options,), help="show the MCP attachment status of the current attempt",
        description=("The MCP attachment status of the daemon's current attempt.",
                     "One row per server with its display state and a plain-language line. Which daemon: --socket, "
                     "else --execution, else $AGENTCTL_SOCKET, else the only one under the runtime dir."),
    )
    p.set_defaults(func=cmd_status)

    p = add_main_command(
        subparsers, "report", parents=(options,),
        help="print the whole attachment report (current and previous attempts)",
        description=("The whole attachment report: current and previous attempts.",
                     "From the running daemon, or read a persisted one offline with --state-dir DIR --execution ID."),
    )
    add_offline_option(p)
    p.set_defaults(func=cmd_report, command_name="report")

    p = subparsers.add_parser(
        "health",
        parents=[options],
        help=f"exit {EXIT_OK} when healthy, {EXIT_NO_DAEMON} when the daemon cannot be reached, "
        f"{EXIT_UNHEALTHY} when unhealthy",
        description="Liveness (or readiness with --ready) of the daemon. Exit codes: "
        f"{EXIT_OK} healthy, {EXIT_USAGE} bad arguments, {EXIT_NO_DAEMON} cannot connect, {EXIT_UNHEALTHY} unhealthy.",
    )
    p.add_argument("--ready", action="store_true", help="check readiness instead of liveness")
    p.set_defaults(func=cmd_health)

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
    p.set_defaults(func=cmd_stop)

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
    p.set_defaults(func=cmd_wait)

    add_host_commands(subparsers)


def show(args: argparse.Namespace, body: Any, render: Any) -> int:
    """Print a struct as JSON (--json) or through `render(body, color)`."""
    if args.json:
        print_json(body)
    else:
        out(render(body, stdout_color()))
    return EXIT_OK


@command
def cmd_status(args: argparse.Namespace) -> int:
    from agentctl.control.render import render_status

    return show(args, call(args, "GET", "/v1/status", StatusResponse), render_status)


@command
def cmd_report(args: argparse.Namespace) -> int:
    from agentctl.control.render import render_report

    if getattr(args, "state_dir", None):
        history = persisted_report(args)
    else:
        history = call(args, "GET", "/v1/report", AttachmentHistory)
    return show(args, history, render_report)


@command
def cmd_health(args: argparse.Namespace) -> int:
    from agentctl.control.client import ControlClientError, ControlRefused, ControlUnavailable

    try:
        health = connect(args).call("GET", "/v1/health", HealthResponse)
    except ControlUnavailable as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    except ControlRefused as exc:
        return fail(str(exc), EXIT_NO_DAEMON if exc.error.status == 403 else EXIT_UNHEALTHY)
    except ControlClientError as exc:  # connected, but it did not answer sensibly: that daemon is not healthy
        return fail(str(exc), EXIT_UNHEALTHY)
    healthy = health.ready if args.ready else health.live
    if args.json:
        print_json(health)
    else:
        from agentctl.control.render import render_health

        out(render_health(health, args.ready, stdout_color()))
    return EXIT_OK if healthy else EXIT_UNHEALTHY


@command
def cmd_wait(args: argparse.Namespace) -> int:
    import time

    from agentctl.evidence.required import gate_lines

    from agentctl.control.client import ControlClientError

    deadline = time.monotonic() + args.timeout
    client = connect(args, timeout=5.0)  # each answer's own bound; --timeout bounds the whole wait
    while True:
        try:
            gate = client.call("GET", "/v1/attached", AttachedGate)
        except ControlClientError as exc:
            return fail(str(exc), client_exit(exc))
        if gate.state != "waiting" or time.monotonic() >= deadline:
            break
        time.sleep(min(WAIT_POLL, max(deadline - time.monotonic(), 0.0)))  # a poll with a deadline
    if args.json:
        print_json(gate)
    else:
        ended = " (the wait ended first)" if gate.state == "waiting" else ""
        out("\n".join([f"required servers: {gate.state}{ended}", *("  " + line for line in gate_lines(gate))]))
    return EXIT_OK if gate.state == "open" else EXIT_NOT_ATTACHED


@command
def cmd_stop(args: argparse.Namespace) -> int:
    from agentctl.commands.host_daemons import stop_and_wait
    from agentctl.control.client import ControlClientError

    client = connect(args)
    try:
        result = client.call("POST", "/v1/stop", StopResult, None, (200, 202))
    except ControlClientError as exc:
        return fail(str(exc), client_exit(exc))
    return stop_and_wait(args, client, result)
