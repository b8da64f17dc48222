"""The parsers of the client commands that act on the session: session new|load|reset, prompt, cancel, mcp-config,
mcp profile, stderr (their bodies: agentctl.commands.client_actions, loaded only when one of them runs)."""

from __future__ import annotations

import argparse
from typing import Any

from agentctl.cli_support import EXIT_USAGE, daemon_options, fail, wrapped
from agentctl.commands.targets import target

def add_session_commands(subparsers: Any) -> None:
    common = daemon_options()
    p = subparsers.add_parser("session", help="open, load or reset the agent session (each is a new attempt)")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("new", parents=[common], help="ACP session/new (MCP-only: a new attempt, no agent)")
    a.set_defaults(func=target("session"), route="/v1/session/new")
    a = actions.add_parser("load", parents=[common], help="ACP session/load of an earlier ACP session id")
    a.add_argument("session_id", metavar="ACP_SESSION_ID")
    a.set_defaults(func=target("session"), route="/v1/session/load")
    a = actions.add_parser("reset", parents=[common], help="abandon the session and open a new one (new attempt)")
    a.set_defaults(func=target("session"), route="/v1/session/reset")
    p.set_defaults(func=lambda args: fail("session needs an action: new, load or reset", EXIT_USAGE))

    p = subparsers.add_parser("prompt", parents=[common], help="send a prompt; the agent's updates stream here")
    p.add_argument("text", metavar="TEXT")
    p.set_defaults(func=target("prompt"))

    p = subparsers.add_parser("cancel", parents=[common], help="cancel the running prompt")
    p.set_defaults(func=target("cancel"))

    p = subparsers.add_parser(
        "mcp-config", parents=[common], help="print the built-in server's URL and headers: prints a SECRET token",
        description=wrapped(
            "Print the built-in MCP server's URL and headers for the current attempt, for an MCP client to "
            "connect to it as this attempt.",
            "The output includes a SECRET: the bearer token in its Authorization header lets whoever has it act "
            "as the current attempt. Do not paste it into a bug report, a log or a chat: `agentctl diagnostics` "
            "is the report to share."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=target("mcp-config"))

    p = subparsers.add_parser("mcp", help="the built-in MCP server")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("profile", parents=[common], help="switch the tool profile at runtime")
    a.add_argument("name", metavar="PROFILE", help="task, task-title, config or external")
    a.set_defaults(func=target("mcp profile"))
    p.set_defaults(func=lambda args: fail("mcp needs an action: profile", EXIT_USAGE))

    p = subparsers.add_parser(
        "stderr", parents=[common], help="recent agent output, on demand (may contain sensitive data; never stored)"
    )
    p.set_defaults(func=target("stderr"))
