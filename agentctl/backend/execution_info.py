"""The `config.*` ops: this execution's agents, MCP servers and identity, answered from memory.

The daemon knows them first hand, so they need no store and no upstream: every backend answers them from
here (the tool tunnel too, while the upstream is away). What the agent receives is a deep, JSON-safe copy,
never daemon state, and a server is described only by sanitized fields: its target is scheme://host[:port]
or an executable's basename, never a URL path, header, argument or env value.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentctl.evidence.contract.report import Identity
from agentctl.evidence.sanitize import target_for_command, target_for_url

_MCP_KEYS = ("name", "transport", "target", "source", "status", "reason_code")


def json_copy(value: Any) -> Any:
    """A deep, JSON-safe copy (what the agent receives must never alias daemon state)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def sanitize_target(value: str) -> str:
    """A network target as scheme://host[:port]; anything else (a command) as its executable's basename."""
    return target_for_url(value) if "://" in value else target_for_command(value)


def _sanitize_server(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _MCP_KEYS:
        value = entry.get(key)
        if isinstance(value, str | bool | int):
            out[key] = value
    if "transport" not in out and isinstance(entry.get("type"), str):
        out["transport"] = entry["type"]
    target = out.get("target")
    if not isinstance(target, str):
        raw = entry.get("url") or entry.get("command")
        target = raw if isinstance(raw, str) else None
    if target:
        out["target"] = sanitize_target(target)
    else:
        out.pop("target", None)
    return out


class ExecutionInfo:
    """The answers to config.agents, config.mcp and config.execution for one execution."""

    def __init__(self, *, agents_info: dict[str, Any], mcp_info: list[dict[str, Any]],
                 execution_info: dict[str, Any]) -> None:
        self._agents = json_copy(agents_info)
        self._servers = [_sanitize_server(entry) for entry in mcp_info]
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
