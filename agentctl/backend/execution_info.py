"""The `config.*` ops: this execution's agents, MCP servers and identity, answered from memory.

The daemon knows them first hand, so they need no store and no upstream: every backend answers them from
here (the tool tunnel too, while the upstream is away). What the agent receives is a deep, JSON-safe copy,
never daemon state, and a server is described only by its configured seed (agentctl.daemon.servers): its
target is scheme://host[:port] or an executable's basename, never a URL path, header, argument or env value.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentctl.evidence.contract.report import Identity
from agentctl.evidence.seeds import ServerSeed


def json_copy(value: Any) -> Any:
    """A deep, JSON-safe copy (what the agent receives must never alias daemon state)."""
    return msgspec.json.decode(msgspec.json.encode(value))


class ExecutionInfo:
    """The answers to config.agents, config.mcp and config.execution for one execution."""

    def __init__(self, *, agents_info: dict[str, Any], mcp_info: list[ServerSeed],
                 execution_info: dict[str, Any]) -> None:
        self._agents = json_copy(agents_info)
        # Sanitized where they are derived (agentctl.daemon.servers): listed as they are.
        self._servers = [{k: v for k, v in msgspec.structs.asdict(seed).items() if v is not None} for seed in mcp_info]
        self._execution = json_copy(execution_info)

    def agents(self) -> dict[str, Any]:
        info: dict[str, Any] = json_copy(self._agents)
        info.setdefault("agents", [])
        return info

    def mcp(self) -> dict[str, Any]:
        return {"servers": json_copy(self._servers)}

    def execution(self, identity: Identity) -> dict[str, Any]:
        execution = json_copy(self._execution)
        execution.update(msgspec.structs.asdict(identity))
        return {"execution": execution}
