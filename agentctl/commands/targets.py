"""Owns the CLI's one table of command targets: each command's function, named by module and attribute and
imported only when that command runs, and the modules that add commands to the parser.

Building the parser (every call, `--help`, completion) loads the parser modules alone; a command loads its
own module, whose imports are at its top, and nothing of the other commands'. A name here that no longer
resolves fails tests/test_cli_toolkit.py, not a user's command.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

TARGETS: dict[str, str] = {
    "fast path": "agentctl.fastpath:run",  # `health` and `status` before the parser is built
    # Hidden helpers, dispatched before argparse (agentctl.cli.main).
    "reference-agent": "agentctl.testing.reference_agent:main",
    "agent-shim": "agentctl.agent.shim:main",
    "mcp-bridge": "agentctl.agent.mcp_bridge:main",
    "mcp-witness": "agentctl.agent.mcp_witness:main",
    "estimate-tokens": "agentctl.evidence.estimate_helper:run",
    "serve": "agentctl.daemon.entry:cmd_serve",
    "run": "agentctl.daemon.entry:cmd_run",
    # What `serve` and `run` load once their signal handlers are in (a stop during start-up is a drain).
    "daemon": "agentctl.daemon.start:run_daemon",
    "run job": "agentctl.daemon.run:run_main_job",
    "schema": "agentctl.commands.local_actions:cmd_schema",
    "completion": "agentctl.completion:cmd_completion",
    "recover": "agentctl.commands.local_actions:cmd_recover",
    "status": "agentctl.commands.client_actions:cmd_status",
    "report": "agentctl.commands.client_actions:cmd_report",
    "health": "agentctl.commands.client_actions:cmd_health",
    "stop": "agentctl.commands.client_actions:cmd_stop",
    "wait": "agentctl.commands.client_actions:cmd_wait",
    "ls": "agentctl.commands.host_daemons:cmd_ls",
    "session": "agentctl.commands.client_actions:cmd_session",
    "prompt": "agentctl.commands.client_actions:cmd_prompt",
    "cancel": "agentctl.commands.client_actions:cmd_cancel",
    "mcp-config": "agentctl.commands.client_actions:cmd_mcp_config",
    "mcp profile": "agentctl.commands.client_actions:cmd_mcp_profile",
    "stderr": "agentctl.commands.client_actions:cmd_stderr",
    "spec check": "agentctl.commands.spec_actions:cmd_spec_check",
    "spec schema": "agentctl.commands.spec_actions:cmd_spec_schema",
}

# The functions that add commands to the parser, in the order `agentctl --help` lists them.
PARSERS: tuple[str, ...] = (
    "agentctl.commands.spec_commands:add_spec_commands",
    "agentctl.commands.daemon_commands:add_client_commands",
    "agentctl.commands.session_commands:add_session_commands",
    "agentctl.diagnostics.commands:add_diagnostics_commands",
    "agentctl.attach_command:add_attach_command",
    "agentctl.probe.commands:add_probe_commands",
    "agentctl.hub.commands:add_hub_commands",
)


def resolve(reference: str) -> Any:
    """`module:attribute`, imported now."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


class Target:
    """A command's function, imported at its first call (argparse's `func` default)."""

    def __init__(self, command: str) -> None:
        self.reference = TARGETS[command]

    def load(self) -> Callable[[argparse.Namespace], int]:
        return resolve(self.reference)  # type: ignore[no-any-return]

    def __call__(self, args: argparse.Namespace) -> int:
        return self.load()(args)

    def __repr__(self) -> str:
        return f"Target({self.reference!r})"


def target(command: str) -> Target:
    return Target(command)
