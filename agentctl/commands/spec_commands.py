"""`agentctl spec check SPEC` (validate a spec as `run` and `serve` load it, starting nothing) and `agentctl spec
schema` (the spec's JSON Schema, generated from its typed definition in agentctl.spec, for editors)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentctl.cli_support import (
    EXIT_NO_DAEMON,
    EXIT_OK,
    EXIT_USAGE,
    FILE_COMPLETION,
    command,
    fail,
    out,
    wrapped,
)


def add_spec_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "spec", help="check an execution spec without starting anything, or print its JSON Schema",
        description="Execution specs: `spec check SPEC` validates one exactly as `run` and `serve` load it "
        "(fields, values, the agent's executable and working directory) and starts nothing; `spec schema` "
        "prints the JSON Schema of the spec for editors.",
    )
    actions = p.add_subparsers(title="actions", metavar="ACTION", dest="action")
    a = actions.add_parser(
        "check", help="validate a spec as run and serve load it, starting nothing",
        description=wrapped(
            "Validate a spec as `run` and `serve` load it, starting nothing.",
            "The same loader: TOML or JSON, every field and value, then the agent's working directory and "
            "executable (on PATH, as the agent's start finds it). A problem is one line naming the file and the "
            "field, never a value of the spec. Exit codes: "
            f"{EXIT_OK} the spec is valid, {EXIT_NO_DAEMON} it is not (as `run` and `serve` refuse it)."),
        epilog="examples:\n  agentctl spec check spec.toml && agentctl run spec.toml\n"
        "  agentctl spec schema > agentctl-spec.schema.json   # for an editor's TOML/JSON schema support",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("spec", metavar="SPEC", help="execution spec (TOML or JSON)").complete = FILE_COMPLETION
    a.set_defaults(func=cmd_spec_check)
    a = actions.add_parser("schema", help="print the spec's JSON Schema (for editors; generated from the code)")
    a.set_defaults(func=cmd_spec_schema)
    p.set_defaults(func=lambda args: fail("spec needs an action: check or schema", EXIT_USAGE))


@command
def cmd_spec_check(args: argparse.Namespace) -> int:
    from agentctl.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    out(f"{args.spec}: ok: {summary(spec)}\n")
    return EXIT_OK


def summary(spec: Any) -> str:
    """What the spec runs, in one line of names only: no argument, URL, header or environment value."""
    from agentctl.safetext import neutralize

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
    from agentctl.spec import spec_schema

    out(json.dumps(spec_schema(), indent=2, sort_keys=True) + "\n")
    return EXIT_OK
