"""Client commands that act on the session: session new|load|reset, prompt, cancel, mcp-config, mcp profile, stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentctl.control.commands import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    _call,
    _err,
    _out,
    _print_json,
    _Usage,
    locate_socket,
)

SECRET_NOTICE = "# SECRET: this bearer token lets an MCP client act as the current attempt; do not paste it anywhere."


def add_session_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("session", help="open, load or reset the agent session (each is a new attempt)")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("new", parents=[common], help="ACP session/new (MCP-only: a new attempt, no agent)")
    a.set_defaults(func=cmd_session, route="/v1/session/new")
    a = actions.add_parser("load", parents=[common], help="ACP session/load of an earlier ACP session id")
    a.add_argument("session_id", metavar="ACP_SESSION_ID")
    a.set_defaults(func=cmd_session, route="/v1/session/load")
    a = actions.add_parser("reset", parents=[common], help="abandon the session and open a new one (new attempt)")
    a.set_defaults(func=cmd_session, route="/v1/session/reset")
    p.set_defaults(func=lambda args: _err("session needs an action: new, load or reset", EXIT_USAGE))

    p = subparsers.add_parser("prompt", parents=[common], help="send a prompt; the agent's updates stream here")
    p.add_argument("text", metavar="TEXT")
    p.set_defaults(func=cmd_prompt)

    p = subparsers.add_parser("cancel", parents=[common], help="cancel the running prompt")
    p.set_defaults(func=cmd_cancel)

    p = subparsers.add_parser(
        "mcp-config", parents=[common], help="the built-in server's URL and headers for the current attempt (SECRET)"
    )
    p.set_defaults(func=cmd_mcp_config)

    p = subparsers.add_parser("mcp", help="the built-in MCP server")
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser("profile", parents=[common], help="switch the tool profile at runtime")
    a.add_argument("name", metavar="PROFILE", help="task, task-title, config or external")
    a.set_defaults(func=cmd_mcp_profile)
    p.set_defaults(func=lambda args: _err("mcp needs an action: profile", EXIT_USAGE))

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


def cmd_session(args: argparse.Namespace) -> int:
    payload = {"session_id": args.session_id} if getattr(args, "session_id", None) else None
    # session/new may wait for the agent (it often connects to its MCP servers before answering).
    args.timeout = max(args.timeout, 120.0)
    body = _call(args, "POST", args.route, body=payload)
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
        return EXIT_OK if body.get("accepted") or not body.get("with_agent") else EXIT_USAGE
    if not body.get("with_agent"):
        _out(f"attempt {body['attempt_id']} opened (no agent: MCP only; see `agentctl mcp-config`)\n")
        return EXIT_OK
    if body.get("accepted"):
        acp_session = body.get("acp_session_id")
        _out(f"attempt {body['attempt_id']}: " + (f"session accepted ({acp_session})\n" if acp_session else "agent started\n"))
        return EXIT_OK
    failed = ", ".join(body.get("failed_servers") or [])
    code = body.get("reason_code")
    line = f"attempt {body['attempt_id']}: {_NOT_OPENED.get(code, 'the session was not opened')}: {code}"
    if body.get("summary"):
        line += f" ({body['summary']})"
    if failed:
        line += f"; failed servers: {failed}"
    from agentctl.safetext import neutralize

    _out(neutralize(line) + "\n")
    return EXIT_USAGE


def cmd_prompt(args: argparse.Namespace) -> int:
    from agentctl.control.client import ControlClient, ControlError, ControlUnavailable

    try:
        client = ControlClient(locate_socket(args), timeout=args.timeout)
    except _Usage as exc:
        return _err(str(exc), EXIT_USAGE)
    code = EXIT_OK
    try:
        for item in client.stream("/v1/prompt", {"text": args.text}, timeout=max(args.timeout, 300.0)):
            if args.json:
                _print_json(item)
            kind = item.get("type")
            if kind == "error":
                code = EXIT_USAGE
                if not args.json:
                    _err(item.get("summary") or item.get("error") or item.get("reason_code") or "prompt failed", code)
            elif not args.json:
                if kind == "agent_message_chunk":
                    _out(item.get("text", ""))
                elif kind == "tool_call":
                    _out(f"\n[tool] {item.get('title') or ''}\n")
                elif kind == "done":
                    dropped = item.get("dropped_updates")
                    note = f"; {dropped} updates dropped (the reader was too slow)" if dropped else ""
                    _out(f"\n[{item.get('stop_reason')}{note}]\n")
    except ControlUnavailable as exc:
        return _err(str(exc), EXIT_UNREACHABLE)
    except ControlError as exc:
        return _err(str(exc), EXIT_USAGE)
    return code


def cmd_cancel(args: argparse.Namespace) -> int:
    body = _call(args, "POST", "/v1/cancel")
    if isinstance(body, int):
        return body
    _print_json(body) if args.json else _out("cancel sent\n")
    return EXIT_OK


def cmd_mcp_config(args: argparse.Namespace) -> int:
    body = _call(args, "GET", "/v1/mcp-config")
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
        return EXIT_OK
    _out(SECRET_NOTICE + "\n")
    _out(f"name:     {body['name']}\nattempt:  {body['attempt_id']}\nurl:      {body['url']}\n")
    _out(f"sse url:  {body['sse_url']}\n")
    for name, value in body.get("headers", {}).items():
        _out(f"header:   {name}: {value}\n")
    return EXIT_OK


def cmd_mcp_profile(args: argparse.Namespace) -> int:
    body = _call(args, "POST", "/v1/mcp/profile", body={"name": args.name})
    if isinstance(body, int):
        return body
    _print_json(body) if args.json else _out(f"profile {body['profile']}: {body['tool_count']} tools\n")
    return EXIT_OK


def cmd_stderr(args: argparse.Namespace) -> int:
    body = _call(args, "GET", "/v1/stderr")
    if isinstance(body, int):
        return body
    if args.json:
        _print_json(body)
        return EXIT_OK
    print(f"warning: {body['warning']}", file=sys.stderr)
    if body.get("empty"):
        state = body.get("agent_state")
        _out("the agent has written nothing to stderr" + (f" (agent {state})" if state else " (no agent)") + "\n")
        return EXIT_OK
    if body.get("agent_state") == "exited":
        _out("(the agent has exited; this is its last output)\n")
    if body.get("truncated"):
        _out("(older output dropped: at most 50 lines and 16 KiB are kept)\n")
    _out("\n".join(body.get("lines", [])) + "\n")
    return EXIT_OK
