"""Client commands for diagnostics: `test-endpoint NAME`, `diagnostics`, `tools [NAME]`.

Exit codes are agentctl.cli_support's table; `test-endpoint` is 3 when the test ran and the server was not
reachable.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from agentctl.cli_support import (
    EXIT_FAILED,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_TEST_FAILED,
    add_offline_option,
    call,
    command,
    daemon_options,
    out,
    persisted_report,
    positive_seconds,
    print_json,
    stdout_color,
)
from agentctl.evidence.contract.control import EndpointTestResponse
from agentctl.evidence.contract.diagnostics import Diagnostics, ToolDetail, ToolsView

MAX_TEST_TIMEOUT = 60.0


def add_diagnostics_commands(subparsers: Any) -> None:
    # test-endpoint's --timeout is the test's own bound, not the client's.
    p = subparsers.add_parser(
        "test-endpoint",
        parents=[daemon_options(timeout=False)],
        help="test whether a configured MCP server is reachable from the daemon (reachability, not attachment)",
        description="Run a bounded MCP initialize + tools/list (http, sse) or start the stored command (stdio) "
        "for the server NAME of the current configuration, from the daemon. Only the name is sent: the "
        "URL, headers, command and environment are the daemon's own. Exit codes: "
        f"{EXIT_OK} reachable, {EXIT_FAILED} refused (unknown name, already running), {EXIT_NO_DAEMON} cannot "
        f"connect to the daemon, {EXIT_TEST_FAILED} the test failed.",
    )
    p.add_argument("name", metavar="NAME", help="a server name from `agentctl status`")
    p.add_argument(
        "--timeout", metavar="S", type=positive_seconds(MAX_TEST_TIMEOUT), default=None,
        help="give the test this long (default 10, max 60)",
    )
    p.set_defaults(func=cmd_test_endpoint)

    options = daemon_options()
    p = subparsers.add_parser(
        "diagnostics",
        parents=[options],
        help="a sanitized report to paste into a bug: attempts, per-server checklists, endpoint tests, agent exit",
        description="A sanitized report to paste into a bug: attempts, per-server checklists, endpoint tests, the "
        "agent's exit; never agent output, prompts, arguments, header or env values, tokens or full URLs. From the "
        "running daemon, or from its persisted report once it is gone (--state-dir DIR --execution ID, as "
        "`report` reads it; the daemon's readiness and upstream link are not in a report).",
    )
    add_offline_option(p)
    p.set_defaults(func=cmd_diagnostics, command_name="diagnostics")

    p = subparsers.add_parser(
        "tools",
        parents=[options],
        help="the built-in server's tool catalog as the agent saw it (with ~token estimates), or one tool",
    )
    p.add_argument("tool", metavar="NAME", nargs="?", help="show this tool's description and arguments")
    p.set_defaults(func=cmd_tools)


@command
def cmd_test_endpoint(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {"name": args.name}
    if args.timeout is not None:
        payload["timeout"] = args.timeout
    # The client waits for the test's own bound plus the daemon's stop of a stdio tree.
    args.timeout = (args.timeout or 10.0) + 10.0
    response = call(args, "POST", "/v1/test-endpoint", EndpointTestResponse, body=payload)
    if args.json:
        print_json(response)
    else:
        from agentctl.diagnostics.render import render_endpoint_test

        out(render_endpoint_test(response, stdout_color()))
    return EXIT_OK if response.result.succeeded else EXIT_TEST_FAILED


# Offline, the line that would say "not configured": a report does not record the daemon's upstream link.
OFFLINE_UPSTREAM = "Upstream: not recorded in the persisted report (read offline, the daemon is not asked)"


@command
def cmd_diagnostics(args: argparse.Namespace) -> int:
    from agentctl.diagnostics.render import render_diagnostics

    if args.state_dir:
        from datetime import UTC, datetime

        from agentctl.diagnostics.diagnostics import persisted_diagnostics
        from agentctl.diagnostics.render import upstream_lines

        diagnostics = persisted_diagnostics(persisted_report(args), datetime.now(UTC))
        if args.json:
            print_json(diagnostics)
        else:
            text = render_diagnostics(diagnostics, stdout_color(), with_readiness=False)
            out(text.replace(upstream_lines(None)[0], OFFLINE_UPSTREAM, 1))
        return EXIT_OK
    diagnostics = call(args, "GET", "/v1/diagnostics", Diagnostics)
    if args.json:
        print_json(diagnostics)
    else:
        out(render_diagnostics(diagnostics, stdout_color()))
    return EXIT_OK


@command
def cmd_tools(args: argparse.Namespace) -> int:
    if not args.tool:
        view = call(args, "GET", "/v1/tools", ToolsView)
        if args.json:
            print_json(view)
        else:
            from agentctl.diagnostics.render import render_tools

            out(render_tools(view, stdout_color()))
        return EXIT_OK
    detail = call(args, "GET", "/v1/tools/" + quote(args.tool, safe=""), ToolDetail)
    if args.json:
        print_json(detail)
    else:
        from agentctl.diagnostics.render import render_tool

        out(render_tool(detail, stdout_color()))
    return EXIT_OK
