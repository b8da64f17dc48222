"""Cursor, everything agentctl knows of it (`AGENT`): its passthrough strategy and display name.

The `cursor` strategy: merge the servers into the project file `<workdir>/.cursor/mcp.json`.

Format (Cursor docs, https://cursor.com/docs/context/mcp — the project file `.cursor/mcp.json` and the
global `~/.cursor/mcp.json` share it; the Cursor CLI reads the same files):

    {"mcpServers": {"<name>": {"url": "...", "headers": {...}},
                    "<name>": {"command": "...", "args": [...], "env": {...}}}}

A `url` server is streamable HTTP or legacy SSE (Cursor supports both; an SSE server is given by its SSE
endpoint URL), a `command` server is stdio, so nothing is filtered for transport.

The user's own entries and every other key are kept; an entry with the same name as one of ours is
replaced for the run (the executor's configuration wins, and the original comes back at stop). The file
is written 0600, atomically, never through a symlink; at stop the original is restored byte for byte
with its mode, or the file (and a `.cursor` directory we created) is removed when it did not exist.
The global file is never touched. A file that is not JSON (comments are tolerated) is left untouched
and the materialization fails.
"""

from __future__ import annotations

from typing import Any

from agentctl.agent.agent_cli import AgentCli
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    json_section,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import merge_workspace_json

PARTS = (".cursor", "mcp.json")


class CursorStrategy:
    name = "cursor"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}))

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)

        def mutate(doc: dict[str, Any]) -> None:
            servers = json_section(doc, "mcpServers", "/".join(PARTS))
            for entry in plan.delivered:
                if entry.transport == "stdio":
                    servers[entry.name] = {"command": entry.command, "args": entry.args, "env": entry.env}
                else:
                    servers[entry.name] = {"url": entry.url, "headers": entry.headers}

        plan.restores.append(merge_workspace_json(req.workdir, PARTS, mutate, journal=req.journal))
        return plan


STRATEGY = CursorStrategy()

AGENT = AgentCli(
    name="cursor",
    display_name="Cursor",
    strategy=STRATEGY,
    reporters={"cursor": "Cursor"},
    no_report="Cursor's agent CLI was not measured here: no agent report is read for it",
)
