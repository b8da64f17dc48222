"""`agentctl spec check SPEC` (validate a spec as `run` and `serve` load it, starting nothing) and `agentctl spec
schema` (the spec's JSON Schema, generated from its typed definition in agentctl.spec, for editors): their
parsers; their bodies are agentctl.commands.spec_actions, loaded only when one of them runs."""

from __future__ import annotations

import argparse
from typing import Any

from agentctl.cli_support import EXIT_NO_DAEMON, EXIT_OK, EXIT_USAGE, FILE_COMPLETION, fail, wrapped
from agentctl.commands.targets import target


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
    a.set_defaults(func=target("spec check"))
    a = actions.add_parser("schema", help="print the spec's JSON Schema (for editors; generated from the code)")
    a.set_defaults(func=target("spec schema"))
    p.set_defaults(func=lambda args: fail("spec needs an action: check or schema", EXIT_USAGE))
