"""What an attempt delivers to the agent: pure planning of ACP mcpServers entries and the omissions' reasons.

Given the spec, the agent's advertised MCP transports and the executor policy, decide for every server
whether it is delivered (and as what) or filtered (with a stable reason code). No I/O: the caller records
the evidence and sends the entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentctl.evidence.contract import McpCapabilities, Transport
from agentctl.evidence.sanitize import target_for_command, target_for_url
from agentctl.spec import Spec

# Stable reason codes for `filtered` evidence.
HTTP_UNSUPPORTED = "http_unsupported"
SSE_UNSUPPORTED = "sse_unsupported"
POLICY_DENIED = "policy_denied"
DUPLICATE_NAME = "duplicate_name"
NO_SUPPORTED_TRANSPORT = "no_supported_transport"


@dataclass(frozen=True)
class Planned:
    name: str
    transport: Transport
    target: str
    # The ACP McpServer entry as a plain dict (camelCase wire shape). It holds secrets (headers, env,
    # the attempt token): it goes to the agent and nowhere else.
    entry: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Omitted:
    """A server deliberately left out of an attempt (ACP delivery or a passthrough strategy), and why."""

    name: str
    reason_code: str
    summary: str


@dataclass
class DeliveryPlan:
    delivered: list[Planned] = field(default_factory=list)
    filtered: list[Omitted] = field(default_factory=list)


def plan_delivery(spec: Spec, caps: McpCapabilities, *, builtin_base: str, token: str) -> DeliveryPlan:
    plan = DeliveryPlan()
    allowed = set(spec.policy.transports)
    builtin = spec.mcp.builtin_name
    headers = [{"name": "Authorization", "value": f"Bearer {token}"}]

    # The built-in server: http when advertised, else sse; it is never a stdio server.
    if caps.http and "http" in allowed:
        url = f"{builtin_base}/mcp"
        plan.delivered.append(Planned(builtin, "http", target_for_url(url), _http_entry("http", builtin, url, headers)))
    elif caps.sse and "sse" in allowed:
        url = f"{builtin_base}/sse"
        plan.delivered.append(Planned(builtin, "sse", target_for_url(url), _http_entry("sse", builtin, url, headers)))
    elif (caps.http or caps.sse) and not ({"http", "sse"} & allowed):
        plan.filtered.append(Omitted(builtin, POLICY_DENIED, "executor policy allows neither http nor sse"))
    else:
        plan.filtered.append(
            Omitted(builtin, NO_SUPPORTED_TRANSPORT, "the agent advertises neither http nor sse MCP transport")
        )

    seen = {builtin}
    for server in spec.mcp.servers:
        if server.name in seen:
            plan.filtered.append(Omitted(server.name, DUPLICATE_NAME, "another server already uses this name"))
            continue
        seen.add(server.name)
        if server.type not in allowed:
            plan.filtered.append(Omitted(server.name, POLICY_DENIED, f"executor policy does not allow {server.type}"))
            continue
        if server.type == "http" and not caps.http:
            plan.filtered.append(Omitted(server.name, HTTP_UNSUPPORTED, "the agent does not advertise http MCP"))
            continue
        if server.type == "sse" and not caps.sse:
            plan.filtered.append(Omitted(server.name, SSE_UNSUPPORTED, "the agent does not advertise sse MCP"))
            continue
        if server.type == "stdio":
            entry = {
                "name": server.name,
                "command": server.command,
                "args": list(server.args),
                "env": [{"name": k, "value": v} for k, v in server.env.items()],
            }
            plan.delivered.append(Planned(server.name, "stdio", target_for_command(server.command or ""), entry))
        else:
            hdrs = [{"name": k, "value": v} for k, v in server.headers.items()]
            entry = _http_entry(server.type, server.name, server.url or "", hdrs)
            plan.delivered.append(Planned(server.name, server.type, target_for_url(server.url or ""), entry))
    return plan


def _http_entry(kind: str, name: str, url: str, headers: list[dict[str, str]]) -> dict[str, Any]:
    # Always send `headers`: the ACP SDK silently drops an entry without it.
    return {"type": kind, "name": name, "url": url, "headers": headers}
