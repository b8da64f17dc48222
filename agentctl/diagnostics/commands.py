"""Client commands for diagnostics: `test-endpoint NAME`, `diagnostics`, `tools [NAME]`.

Exit codes follow control/commands.py (0 ok, 1 bad arguments or a refused request, 2 cannot connect),
plus 3 for `test-endpoint` when the test ran and the server was not reachable.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import quote

from agentctl.control.commands import EXIT_OK, _call, _out, _print_json

EXIT_TEST_FAILED = 3
MAX_TEST_TIMEOUT = 60.0


def _test_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= MAX_TEST_TIMEOUT:
        raise argparse.ArgumentTypeError(f"must be greater than 0 and at most {MAX_TEST_TIMEOUT:g}: {text!r}")
    return value


def add_diagnostics_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    # test-endpoint's --timeout is the test's own bound, so it cannot share `common` (whose --timeout is the
    # client's): the same socket options, declared again.
    locate = argparse.ArgumentParser(add_help=False)
    locate.add_argument("--socket", metavar="PATH", help="control socket path")
    locate.add_argument("--execution", metavar="ID", help="execution id (finds <runtime dir>/<ID>/control.sock)")
    locate.add_argument("--json", action="store_true", help="print the daemon's JSON instead of text")

    p = subparsers.add_parser(
        "test-endpoint",
        parents=[locate],
        help="test whether a configured MCP server is reachable from the daemon (reachability, not attachment)",
        description="Run a bounded MCP initialize + tools/list (http, sse) or start the stored command (stdio) "
        "for the server NAME of the current configuration, from the daemon. Only the name is sent: the "
        "URL, headers, command and environment are the daemon's own. Exit codes: 0 reachable, 1 refused "
        "(unknown name, already running), 2 cannot connect to the daemon, 3 the test failed.",
    )
    p.add_argument("name", metavar="NAME", help="a server name from `agentctl status`")
    p.add_argument(
        "--timeout", metavar="S", type=_test_timeout, default=None, help="give the test this long (default 10, max 60)"
    )
    p.set_defaults(func=cmd_test_endpoint)

    p = subparsers.add_parser(
        "diagnostics",
        parents=[common],
        help="a sanitized report to paste into a bug: attempts, per-server checklists, endpoint tests, agent exit",
    )
    p.set_defaults(func=cmd_diagnostics)

    p = subparsers.add_parser(
        "tools",
        parents=[common],
        help="the built-in server's tool catalog as the agent saw it (with ~token estimates), or one tool",
    )
    p.add_argument("tool", metavar="NAME", nargs="?", help="show this tool's description and arguments")
    p.set_defaults(func=cmd_tools)


def _color() -> bool:
    from agentctl.control.render import use_color

    return use_color(sys.stdout)


def cmd_test_endpoint(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {"name": args.name}
    if args.timeout is not None:
        payload["timeout"] = args.timeout
    # The client waits for the test's own bound plus the daemon's stop of a stdio tree.
    args.timeout = (args.timeout or 10.0) + 10.0
    body = _call(args, "POST", "/v1/test-endpoint", body=payload)
    if isinstance(body, int):
        return body
    ok = bool((body.get("result") or {}).get("succeeded"))
    if args.json:
        _print_json(body)
    else:
        from agentctl.diagnostics.render import render_endpoint_test

        _out(render_endpoint_test(body, _color()))
    return EXIT_OK if ok else EXIT_TEST_FAILED


def cmd_diagnostics(args: argparse.Namespace) -> int:
    body = _call(args, "GET", "/v1/diagnostics")
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
    else:
        from agentctl.diagnostics.render import render_diagnostics

        _out(render_diagnostics(body, _color()))
    return EXIT_OK


def cmd_tools(args: argparse.Namespace) -> int:
    if not args.tool:
        body = _call(args, "GET", "/v1/tools")
        if isinstance(body, int):
            return body
        if args.json:
            _print_json(body)
        else:
            from agentctl.diagnostics.render import render_tools

            _out(render_tools(body, _color()))
        return EXIT_OK
    body = _call(args, "GET", "/v1/tools/" + quote(args.tool, safe=""))
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
    else:
        from agentctl.diagnostics.render import render_tool

        _out(render_tool(body, _color()))
    return EXIT_OK

