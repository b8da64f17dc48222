"""Client commands that act on the session: session new|load|reset, prompt, cancel, mcp-config, mcp profile, stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentctl.cli_support import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    call,
    client_exit,
    command,
    connect,
    daemon_options,
    fail,
    out,
    print_json,
    wrapped,
)
from agentctl.evidence.contract.control import CancelResult, McpConfig, ProfileResult, SessionResult, StderrView

SECRET_NOTICE = "# SECRET: this bearer token lets an MCP client act as the current attempt; do not paste it anywhere."


def add_session_commands(subparsers: Any) -> None:
    common = daemon_options()
    p = subparsers.add_parser("session", help="open, load or reset the agent session (each is a new attempt)")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("new", parents=[common], help="ACP session/new (MCP-only: a new attempt, no agent)")
    a.set_defaults(func=cmd_session, route="/v1/session/new")
    a = actions.add_parser("load", parents=[common], help="ACP session/load of an earlier ACP session id")
    a.add_argument("session_id", metavar="ACP_SESSION_ID")
    a.set_defaults(func=cmd_session, route="/v1/session/load")
    a = actions.add_parser("reset", parents=[common], help="abandon the session and open a new one (new attempt)")
    a.set_defaults(func=cmd_session, route="/v1/session/reset")
    p.set_defaults(func=lambda args: fail("session needs an action: new, load or reset", EXIT_USAGE))

    p = subparsers.add_parser("prompt", parents=[common], help="send a prompt; the agent's updates stream here")
    p.add_argument("text", metavar="TEXT")
    p.set_defaults(func=cmd_prompt)

    p = subparsers.add_parser("cancel", parents=[common], help="cancel the running prompt")
    p.set_defaults(func=cmd_cancel)

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
    p.set_defaults(func=cmd_mcp_config)

    p = subparsers.add_parser("mcp", help="the built-in MCP server")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("profile", parents=[common], help="switch the tool profile at runtime")
    a.add_argument("name", metavar="PROFILE", help="task, task-title, config or external")
    a.set_defaults(func=cmd_mcp_profile)
    p.set_defaults(func=lambda args: fail("mcp needs an action: profile", EXIT_USAGE))

    p = subparsers.add_parser(
        "stderr", parents=[common], help="recent agent output, on demand (may contain sensitive data; never stored)"
    )
    p.set_defaults(func=cmd_stderr)


# Why a session was not opened, by reason code. "Refused" only when the agent answered with a refusal: a
# timeout, a dead agent or an unusable answer is not the agent's decision.
_NOT_OPENED = {
    "session_rejected": "the agent refused the session",
    "session_timeout": "the agent did not answer the session request in time",
    "agent_exited": "the agent exited before answering the session request",
    "agent_not_running": "the agent is not running",
    "session_error": "the agent's answer to the session request was unusable",
    "agent_start_failed": "the agent could not be started",
    "materialize_failed": "the agent was not started: its MCP configuration could not be written",
}


@command
def cmd_session(args: argparse.Namespace) -> int:
    payload = {"session_id": args.session_id} if getattr(args, "session_id", None) else None
    # session/new may wait for the agent (it often connects to its MCP servers before answering).
    args.timeout = max(args.timeout, 120.0)
    result = call(args, "POST", args.route, SessionResult, body=payload)
    if args.json:
        print_json(result)
        return EXIT_OK if result.accepted or not result.with_agent else EXIT_FAILED
    if not result.with_agent:
        out(f"attempt {result.attempt_id} opened (no agent: MCP only; see `agentctl mcp-config`)\n")
        return EXIT_OK
    if result.accepted:
        acp_session = result.acp_session_id
        out(f"attempt {result.attempt_id}: " + (f"session accepted ({acp_session})\n" if acp_session else "agent started\n"))
        return EXIT_OK
    failed = ", ".join(result.failed_servers)
    code = result.reason_code
    line = f"attempt {result.attempt_id}: {_NOT_OPENED.get(code or '', 'the session was not opened')}: {code}"
    if result.summary:
        line += f" ({result.summary})"
    if failed:
        line += f"; failed servers: {failed}"
    from agentctl.safetext import neutralize

    out(neutralize(line) + "\n")
    return EXIT_FAILED


@command
def cmd_prompt(args: argparse.Namespace) -> int:
    from agentctl.control.client import ControlClientError

    client = connect(args)
    code = EXIT_OK
    try:
        for item in client.stream("/v1/prompt", {"text": args.text}, timeout=max(args.timeout, 300.0)):
            if args.json:
                print_json(item)
            if item.type == "error":
                code = EXIT_FAILED
                if not args.json:
                    fail(item.summary or item.reason_code or "prompt failed", code)
            elif not args.json:
                if item.type == "agent_message_chunk":
                    out(item.text or "")
                elif item.type == "tool_call":
                    out(f"\n[tool] {item.title or ''}\n")
                elif item.type == "done":
                    dropped = item.dropped_updates
                    note = f"; {dropped} updates dropped (the reader was too slow)" if dropped else ""
                    out(f"\n[{item.stop_reason}{note}]\n")
    except ControlClientError as exc:
        return fail(str(exc), client_exit(exc))
    return code


@command
def cmd_cancel(args: argparse.Namespace) -> int:
    result = call(args, "POST", "/v1/cancel", CancelResult)
    print_json(result) if args.json else out("cancel sent\n")
    return EXIT_OK


@command
def cmd_mcp_config(args: argparse.Namespace) -> int:
    config = call(args, "GET", "/v1/mcp-config", McpConfig)
    if args.json:
        print_json(config)
        return EXIT_OK
    out(SECRET_NOTICE + "\n")
    out(f"name:     {config.name}\nattempt:  {config.attempt_id}\nurl:      {config.url}\n")
    out(f"sse url:  {config.sse_url}\n")
    for name, value in config.headers.items():
        out(f"header:   {name}: {value}\n")
    return EXIT_OK


@command
def cmd_mcp_profile(args: argparse.Namespace) -> int:
    result = call(args, "POST", "/v1/mcp/profile", ProfileResult, body={"name": args.name})
    print_json(result) if args.json else out(f"profile {result.profile}: {result.tool_count} tools\n")
    return EXIT_OK


@command
def cmd_stderr(args: argparse.Namespace) -> int:
    view = call(args, "GET", "/v1/stderr", StderrView)
    if args.json:
        print_json(view)
        return EXIT_OK
    print(f"warning: {view.warning}", file=sys.stderr)
    if view.empty:
        state = view.agent_state
        out("the agent has written nothing to stderr" + (f" (agent {state})" if state else " (no agent)") + "\n")
        return EXIT_OK
    if view.agent_state == "exited":
        out("(the agent has exited; this is its last output)\n")
    if view.truncated:
        out("(older output dropped: at most 50 lines and 16 KiB are kept)\n")
    out("\n".join(view.lines) + "\n")
    return EXIT_OK
