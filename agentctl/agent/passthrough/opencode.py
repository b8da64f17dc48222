"""The `opencode` strategy: opencode reads an extra config file named by the `OPENCODE_CONFIG` env var.

Format (opencode docs, https://opencode.ai/docs/mcp-servers/ and https://opencode.ai/docs/config/ —
`OPENCODE_CONFIG` is the "custom config" layer, loaded after the global one and merged with it):

    {"$schema": "https://opencode.ai/config.json",
     "mcp": {"<name>": {"type": "remote", "url": "...", "headers": {...}, "enabled": true},
             "<name>": {"type": "local", "command": ["cmd", "arg", ...], "environment": {...},
                        "enabled": true}}}

The servers sit directly under `mcp` (the V1 layout): opencode 2 still reads it
(https://opencode.ai/docs/migrate-v1/), while 2's own `mcp.servers` layout would not reach opencode 1.
So a server literally named `servers` is filtered (`name_unsupported_by_strategy`).

A `remote` server is tried as streamable HTTP, then as legacy SSE at the same URL (opencode's
packages/opencode/src/mcp/index.ts), so http and sse servers are both expressed as `remote`. The
built-in server sets `"oauth": false`: it authenticates with the attempt's bearer token and must not
start opencode's OAuth discovery. The file is written 0600 into the attempt's private temporary
directory and removed at stop. A user's own OPENCODE_CONFIG is replaced for this agent (opencode reads
one custom file); their global and project configs still apply.
"""

from __future__ import annotations

from typing import Any

from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    dump_json,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import write_private
from agentctl.agent.refusal_hints import RefusalHint

FILE_NAME = "opencode.json"
ENV_NAME = "OPENCODE_CONFIG"
SCHEMA = "https://opencode.ai/config.json"


def _refused_name(name: str) -> str | None:
    return "opencode 2 reads mcp.servers as its own server table" if name == "servers" else None


# Why `opencode run` fails, as OpenCode 1.18 says it: its default model's provider out of reach ("Error: Cannot
# connect to API: Unable to connect. ...", exit 1, after about 80 s of retries); a provider with no key.
FAILURE_HINTS = (
    RefusalHint(
        "provider_unreachable",
        ("cannot connect to api", "unable to connect"),
        "OpenCode cannot reach its model's provider: check the network and proxy variables of the agent's "
        "process, or pick a model (--model) whose provider is reachable and set its key in [agent] env.",
    ),
    RefusalHint(
        "api_key_missing",
        ("api key is missing", "apikey", "no api key", "invalid x-api-key", "authentication"),
        "OpenCode's provider wants a key: set it in [agent] env (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...), or "
        "run `opencode auth login` as the user agentctl runs as.",
    ),
)


class OpencodeStrategy:
    name = "opencode"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}), refuse_name=_refused_name)
    failure_hints = FAILURE_HINTS

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        servers: dict[str, dict[str, Any]] = {}
        for entry in plan.delivered:
            if entry.transport == "stdio":
                servers[entry.name] = {
                    "type": "local",
                    "command": [entry.command, *entry.args],
                    "environment": entry.env,
                    "enabled": True,
                }
                continue
            cfg: dict[str, Any] = {"type": "remote", "url": entry.url, "headers": entry.headers, "enabled": True}
            if entry.source == "builtin":
                cfg["oauth"] = False
            servers[entry.name] = cfg
        path = write_private(req.tmpdir, FILE_NAME, dump_json({"$schema": SCHEMA, "mcp": servers}))
        plan.files.append(path)
        plan.env[ENV_NAME] = str(path)
        return plan


STRATEGY = OpencodeStrategy()
