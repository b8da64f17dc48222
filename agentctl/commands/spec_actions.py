"""The bodies of `agentctl spec check` and `agentctl spec schema` (their parsers: agentctl.commands.spec_commands)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentctl.cli_support import EXIT_NO_DAEMON, EXIT_OK, command, fail, out
from agentctl.safetext import neutralize
from agentctl.spec import SpecError, spec_schema
from agentctl.spec_loader import load_spec


@command
def cmd_spec_check(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    out(f"{args.spec}: ok: {summary(spec)}\n")
    return EXIT_OK


def summary(spec: Any) -> str:
    """What the spec runs, in one line of names only: no argument, URL, header or environment value."""
    ident = spec.identity
    parts = [f"execution {ident.execution_id or '(a new id at each start)'}, task {ident.task_id}"]
    agent = spec.agent
    if agent is None:
        parts.append("no agent (MCP only)")
    else:
        how = agent.protocol + (f", strategy {agent.strategy}" if agent.strategy else "")
        parts.append(f"agent {agent.command[0]} ({how})")
    servers = [f"{s.name} ({s.type})" for s in spec.mcp.servers]
    parts.append(f"servers: {spec.mcp.builtin_name} (built-in)" + "".join(", " + s for s in servers))
    return neutralize("; ".join(parts))


@command
def cmd_spec_schema(args: argparse.Namespace) -> int:
    out(json.dumps(spec_schema(), indent=2, sort_keys=True) + "\n")
    return EXIT_OK
