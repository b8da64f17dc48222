"""The bodies of the client commands over the control socket, loaded only when one of them runs (no aiohttp: a
health probe may run every few seconds): `status`, `report`, `health`, `stop`, `wait` (their parsers:
agentctl.commands.daemon_commands) and session new|load|reset, prompt, cancel, mcp-config, mcp profile,
stderr (agentctl.commands.session_commands)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from agentctl.cli_support import (
    EXIT_FAILED,
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_UNHEALTHY,
    call,
    client_exit,
    command,
    connect,
    fail,
    out,
    persisted_report,
    print_json,
    stdout_color,
)
from agentctl.commands.daemon_commands import WAIT_POLL
from agentctl.commands.host_daemons import stop_and_wait
from agentctl.control.client import ControlClientError, ControlRefused, ControlUnavailable
from agentctl.control.render import render_health, render_report, render_status
from agentctl.evidence.contract.control import (
    AttachedGate,
    CancelResult,
    HealthResponse,
    McpConfig,
    ProfileResult,
    SessionResult,
    StatusResponse,
    StderrView,
    StopResult,
)
from agentctl.evidence.contract.report import AttachmentHistory
from agentctl.evidence.required import gate_lines
from agentctl.exit_codes import EXIT_NOT_ATTACHED
from agentctl.safetext import neutralize


def show(args: argparse.Namespace, body: Any, render: Any) -> int:
    """Print a struct as JSON (--json) or through `render(body, color)`."""
    if args.json:
        print_json(body)
    else:
        out(render(body, stdout_color()))
    return EXIT_OK


@command
def cmd_status(args: argparse.Namespace) -> int:
    return show(args, call(args, "GET", "/v1/status", StatusResponse), render_status)


@command
def cmd_report(args: argparse.Namespace) -> int:
    if getattr(args, "state_dir", None):
        history = persisted_report(args)
    else:
        history = call(args, "GET", "/v1/report", AttachmentHistory)
    return show(args, history, render_report)


@command
def cmd_health(args: argparse.Namespace) -> int:
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
        out(render_health(health, args.ready, stdout_color()))
    return EXIT_OK if healthy else EXIT_UNHEALTHY


@command
def cmd_wait(args: argparse.Namespace) -> int:
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
    client = connect(args)
    try:
        result = client.call("POST", "/v1/stop", StopResult, None, (200, 202))
    except ControlClientError as exc:
        return fail(str(exc), client_exit(exc))
    return stop_and_wait(args, client, result)


# ---- the session ---------------------------------------------------------------------------------------

SECRET_NOTICE = "# SECRET: this bearer token lets an MCP client act as the current attempt; do not paste it anywhere."


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
    out(neutralize(line) + "\n")
    return EXIT_FAILED


@command
def cmd_prompt(args: argparse.Namespace) -> int:
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
