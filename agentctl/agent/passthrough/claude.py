"""The `claude` strategy: Claude Code reads the servers from a JSON file passed with `--mcp-config FILE`.

Format (Claude Code docs, https://code.claude.com/docs/en/mcp and the CLI reference
https://code.claude.com/docs/en/cli-reference, "--mcp-config: load MCP servers from JSON files or strings"):

    {"mcpServers": {"<name>": {"type": "http" | "sse", "url": "...", "headers": {...}}
                    "<name>": {"type": "stdio", "command": "...", "args": [...], "env": {...}}}}

Claude Code speaks all three transports, so nothing is filtered for transport. The file is written 0600
into the attempt's private temporary directory and removed at stop; `--mcp-config FILE` is appended to
the agent's argv (before a `--`, if any). `--strict-mcp-config` is not added: the user's own servers stay.

With `agent.report = "request"`, a print-mode run (`-p`) that chose no output format also gets
`--output-format stream-json --verbose`, so Claude Code's init event reports each server's status (read by
agentctl/agent/reported/feed.py). The output is agentctl's to drain either way: nothing downstream parses it.
"""

from __future__ import annotations

from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    dump_json,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import write_private
from agentctl.agent.reported.feed import claude_request_args

FILE_NAME = "claude-mcp.json"


class ClaudeStrategy:
    name = "claude"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}))

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        servers: dict[str, dict] = {}
        for entry in plan.delivered:
            if entry.transport == "stdio":
                servers[entry.name] = {"type": "stdio", "command": entry.command, "args": entry.args, "env": entry.env}
            else:
                servers[entry.name] = {"type": entry.transport, "url": entry.url, "headers": entry.headers}
        path = write_private(req.tmpdir, FILE_NAME, dump_json({"mcpServers": servers}))
        plan.files.append(path)
        plan.argv = ["--mcp-config", str(path)]
        agent = req.spec.agent
        if agent is not None and agent.report == "request":
            plan.argv += claude_request_args(agent.command)
        return plan


STRATEGY = ClaudeStrategy()
