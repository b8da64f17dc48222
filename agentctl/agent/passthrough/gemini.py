"""The `gemini` strategy: merge the servers into the workspace settings `<workdir>/.gemini/settings.json`.

Format (Gemini CLI docs, https://github.com/google-gemini/gemini-cli/blob/main/docs/tools/mcp-server.md
and docs/get-started/configuration.md — the project settings file is `.gemini/settings.json` in the
workspace, merged over the user's `~/.gemini/settings.json`):

    {"mcpServers": {"<name>": {"httpUrl": "...", "headers": {...}},    streamable HTTP
                    "<name>": {"url": "...", "headers": {...}},        legacy SSE
                    "<name>": {"command": "...", "args": [...], "env": {...}}}}   stdio

All three transports are expressible. The workspace file's own server filters are honoured: a server
listed in `mcp.excluded` (or the older `excludeMCPServers`), or missing from a present `mcp.allowed`
(`allowMCPServers`), would be skipped by the CLI, so it is `filtered` (`excluded_by_workspace_settings`)
rather than claimed as delivered. Filters in the user's global settings are not read.

Merging and restoring work as for cursor: the user's entries and every other setting are kept, ours
replace same-named entries for the run, the file is written 0600 atomically and never through a symlink,
and at stop the original is restored byte for byte (or removed with a `.gemini` directory we created).
Gemini CLI starts no MCP server at all (the workspace's or the user's) in a folder it does not trust.
Before writing anything the strategy decides trust as the CLI would (agentctl/agent/gemini_trust.py: its
environment, `--skip-trust`, settings and trusted-folders file); in an untrusted folder every server is
`filtered` (`untrusted_folder`, with how to trust the folder the CLI's own way) and no file is written:
nothing would read it. agentctl never writes the user's Gemini settings to change the answer. A trust
file Gemini would refuse stops the CLI before any server starts; the servers are then delivered as usual
and the CLI's exit is the report-level error.
"""

from __future__ import annotations

from typing import Any

from agentctl.agent import gemini_trust
from agentctl.agent.delivery import drop
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    json_section,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import merge_workspace_json
from agentctl.agent.refusal_hints import RefusalHint

PARTS = (".gemini", "settings.json")
EXCLUDED = "excluded_by_workspace_settings"
UNTRUSTED = gemini_trust.REASON_UNTRUSTED


def trust_of(req: MaterializeRequest) -> gemini_trust.TrustDecision:
    """Gemini's own answer for this run: the inherited environment with the spec's env over it."""
    agent = req.spec.agent
    return gemini_trust.decide_for_agent(req.workdir, agent.env if agent else {}, list(agent.command) if agent else [],
                                         req.environ)


def _names(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, list) else None


# Why a headless run (`gemini -p`) fails, as Gemini CLI 0.61 says it: no credentials, "Please set an Auth
# method ...", exit 41 (FatalAuthenticationError); an untrusted folder, "Gemini CLI is not running in a trusted
# directory ...", exit 55.
FAILURE_HINTS = (
    RefusalHint(
        "api_key_missing",
        ("please set an auth method", "api key is missing", "exited with code 41"),
        "Gemini CLI has no credentials: set GEMINI_API_KEY in [agent] env, or an auth method in the Gemini "
        "settings of the user agentctl runs as.",
    ),
    RefusalHint(
        "untrusted_folder",
        ("not running in a trusted directory", "exited with code 55"),
        "Gemini CLI does not trust the agent's workdir: set GEMINI_CLI_TRUST_WORKSPACE=true in [agent] env, add "
        "--skip-trust to the command, or trust the folder in ~/.gemini/trustedFolders.json.",
    ),
)


class GeminiStrategy:
    name = "gemini"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}))
    failure_hints = FAILURE_HINTS

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        decision = trust_of(req)
        if decision.trusted is False:
            summary = gemini_trust.untrusted_summary(decision)
            for entry in list(plan.delivered):
                drop(plan, entry, UNTRUSTED, summary)
            return plan

        def mutate(doc: dict[str, Any]) -> None:
            given = doc.get("mcp")
            mcp = given if isinstance(given, dict) else {}
            excluded = _names(mcp.get("excluded")) or _names(doc.get("excludeMCPServers")) or []
            allowed = _names(mcp.get("allowed"))
            if allowed is None:
                allowed = _names(doc.get("allowMCPServers"))
            for entry in list(plan.delivered):
                if entry.name in excluded or (allowed is not None and entry.name not in allowed):
                    drop(plan, entry, EXCLUDED, "the workspace settings exclude this server")
            servers = json_section(doc, "mcpServers", "/".join(PARTS))
            for entry in plan.delivered:
                if entry.transport == "stdio":
                    servers[entry.name] = {"command": entry.command, "args": entry.args, "env": entry.env}
                elif entry.transport == "http":
                    servers[entry.name] = {"httpUrl": entry.url, "headers": entry.headers}
                else:
                    servers[entry.name] = {"url": entry.url, "headers": entry.headers}

        plan.restores.append(merge_workspace_json(req.workdir, PARTS, mutate, journal=req.journal))
        return plan


STRATEGY = GeminiStrategy()
