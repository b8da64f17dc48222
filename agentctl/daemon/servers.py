"""Owns the configured servers of an attempt: one pure function from the spec (and the built-in endpoint's
base URL) to the sanitized seeds the ledger, the agent's delivery and `config.mcp` all start from. A target
is scheme://host[:port] for a URL, an executable's basename for a command: never a path, query, credential,
argument or environment value."""

from __future__ import annotations

from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.sanitize import target_for_command, target_for_url
from agentctl.spec import Spec


def configured_servers(spec: Spec, builtin_base: str | None) -> list[ServerSeed]:
    """The built-in server first (its target once the listener's base URL is known), then the profile's."""
    seeds = [ServerSeed(name=spec.mcp.builtin_name, source="builtin", transport="http",
                        target=target_for_url(builtin_base) if builtin_base else None)]
    for server in spec.mcp.servers:
        target = target_for_url(server.url) if server.url else target_for_command(server.program or "")
        seeds.append(ServerSeed(name=server.name, source="profile", transport=server.type, target=target))
    return seeds
