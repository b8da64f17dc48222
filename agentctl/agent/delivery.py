"""What an attempt delivers: the one pure planner of which MCP servers reach the agent, over which transport, and why each other one is left out.

Both receiving sides use it, each described by a `Receiver`: an ACP agent (`AcpReceiver`, from what it
advertised in agentCapabilities.mcpCapabilities) and a passthrough CLI (`CliReceiver` in
agentctl/agent/passthrough/base.py, from what its configuration format can express and the names it
accepts). Given the spec, the attempt's built-in endpoint and the receiver, every server is delivered (a
`ServerEntry`) or filtered (an `Omitted` with a stable reason code), by the same rules in the same order:
duplicate name, executor policy, transport the receiver cannot take, name the receiver refuses. No I/O:
the caller records the evidence and sends or writes the entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from agentctl.evidence.contract.report import McpCapabilities, Transport
from agentctl.evidence.sanitize import target_for_command, target_for_url
from agentctl.spec import Spec
from agentctl.spec import witnessed as witnessed_spec

# Stable reason codes for `filtered` evidence.
HTTP_UNSUPPORTED = "http_unsupported"
SSE_UNSUPPORTED = "sse_unsupported"
POLICY_DENIED = "policy_denied"
DUPLICATE_NAME = "duplicate_name"
NO_SUPPORTED_TRANSPORT = "no_supported_transport"

# The built-in server's transports, preferred first. To an agent that takes neither, it goes as a stdio
# server whose command is agentctl's bridge to the same endpoint (`bridged`).
BUILTIN_TRANSPORTS: tuple[Transport, ...] = ("http", "sse")
# The bridge's environment: where the endpoint is and the attempt's bearer token (agentctl/agent/mcp_bridge.py).
BRIDGE_ENV_URL = "AGENTCTL_BRIDGE_URL"
BRIDGE_ENV_TOKEN = "AGENTCTL_BRIDGE_TOKEN"
# The witness's environment: where it reports (the endpoint's witness route) and the attempt's bearer token
# (agentctl/agent/mcp_witness.py). It takes both out before it starts the server, which gets exactly its own.
WITNESS_ENV_URL = "AGENTCTL_WITNESS_URL"
WITNESS_ENV_TOKEN = "AGENTCTL_WITNESS_TOKEN"
WITNESS_PATH = "/witness"


@dataclass(frozen=True)
class BuiltinEndpoint:
    """The daemon's built-in server as this attempt reaches it. `token` is the attempt's bearer token."""

    name: str
    url: str  # streamable HTTP (both MCP eras): <base>/mcp
    sse_url: str  # legacy HTTP+SSE: <base>/sse
    token: str = field(repr=False)
    # argv of agentctl's stdio bridge (agentctl/agent/mcp_bridge.py), or empty: without it, an agent that takes
    # no remote transport policy allows gets no built-in server.
    bridge: tuple[str, ...] = ()
    # argv of agentctl's stdio witness (`mcp-witness`), or empty: without it every stdio server goes direct.
    witness: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerEntry:
    """One server to hand to the agent. Holds secrets (headers, env, args): it goes to the agent only."""

    name: str
    source: str  # "builtin" | "profile"
    transport: Transport
    target: str
    url: str = field(default="", repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    command: str = field(default="", repr=False)
    args: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Omitted:
    """A server deliberately left out of an attempt (ACP delivery or a passthrough strategy), and why."""

    name: str
    reason_code: str
    summary: str


class Refusal(NamedTuple):
    """Why a receiver cannot take a server: a stable reason code and a sanitized summary."""

    reason_code: str
    summary: str


class Receiver(Protocol):
    """What the receiving side can take, and how it words what it cannot."""

    @property
    def transports(self) -> frozenset[str]: ...

    def transport_refused(self, transport: str) -> Refusal:
        """Why a profile server of `transport` (one not in `transports`) is left out."""
        ...

    def builtin_refused(self, wanted: str) -> Refusal:
        """Why the built-in server is left out when policy allows `wanted` (its first remote transport)
        but the receiver takes none of the remote transports policy allows."""
        ...

    def name_refused(self, name: str) -> Refusal | None:
        """Why a server of this name cannot be handed over, or None: the name is accepted."""
        ...


@dataclass(frozen=True)
class AcpReceiver:
    """An ACP agent: stdio always, http and sse when advertised; any name."""

    caps: McpCapabilities

    @property
    def transports(self) -> frozenset[str]:
        return frozenset({"stdio", *(["http"] if self.caps.http else []), *(["sse"] if self.caps.sse else [])})

    def transport_refused(self, transport: str) -> Refusal:
        return Refusal(
            reason_code=HTTP_UNSUPPORTED if transport == "http" else SSE_UNSUPPORTED,
            summary=f"the agent does not advertise {transport} MCP",
        )

    def builtin_refused(self, wanted: str) -> Refusal:
        return Refusal(
            reason_code=NO_SUPPORTED_TRANSPORT, summary="the agent advertises neither http nor sse MCP transport"
        )

    def name_refused(self, name: str) -> Refusal | None:
        return None


@dataclass
class ServerPlan:
    """What goes to the agent (in order, the built-in server first) and what is left out, and why."""

    delivered: list[ServerEntry] = field(default_factory=list)
    filtered: list[Omitted] = field(default_factory=list)


def plan_servers(spec: Spec, builtin: BuiltinEndpoint, receiver: Receiver) -> ServerPlan:
    """The built-in server (http preferred, else sse) and the profile's servers, by policy and by what
    the receiver takes; everything left out is `filtered` with a reason."""
    plan = ServerPlan()
    allowed = set(spec.policy.transports)
    supported = receiver.transports
    auth = {"Authorization": f"Bearer {builtin.token}"}
    for transport, url in zip(BUILTIN_TRANSPORTS, (builtin.url, builtin.sse_url), strict=True):
        if transport in allowed and transport in supported:
            plan.delivered.append(
                ServerEntry(builtin.name, "builtin", transport, target_for_url(url), url=url, headers=auth)
            )
            break
    else:
        wanted = [t for t in BUILTIN_TRANSPORTS if t in allowed]
        if wanted and builtin.bridge and "stdio" in allowed and "stdio" in supported:
            plan.delivered.append(bridged(builtin))
        elif not wanted and supported & set(BUILTIN_TRANSPORTS):
            plan.filtered.append(Omitted(builtin.name, POLICY_DENIED, "executor policy allows neither http nor sse"))
        else:
            refusal = receiver.builtin_refused((wanted or ["http"])[0])
            plan.filtered.append(Omitted(builtin.name, refusal.reason_code, refusal.summary))

    seen = {builtin.name}
    for server in spec.mcp.servers:
        if server.name in seen:
            plan.filtered.append(Omitted(server.name, DUPLICATE_NAME, "another server already uses this name"))
            continue
        seen.add(server.name)
        if server.type not in allowed:
            plan.filtered.append(Omitted(server.name, POLICY_DENIED, f"executor policy does not allow {server.type}"))
            continue
        if server.type not in supported:
            refusal = receiver.transport_refused(server.type)
            plan.filtered.append(Omitted(server.name, refusal.reason_code, refusal.summary))
            continue
        if server.type == "stdio":
            entry = ServerEntry(
                server.name, "profile", "stdio", target_for_command(server.program or ""),
                command=server.program or "", args=list(server.args), env=dict(server.env),
            )
            plan.delivered.append(witnessed(entry, builtin) if builtin.witness and witnessed_spec(
                server, spec.mcp) else entry)
        else:
            plan.delivered.append(ServerEntry(
                server.name, "profile", server.type, target_for_url(server.url or ""),
                url=server.url or "", headers=dict(server.headers),
            ))

    # Last, over every server still planned (the built-in one included), so a name is never the reason
    # for a server that policy or the transport already left out.
    for entry in list(plan.delivered):
        named = receiver.name_refused(entry.name)
        if named is not None:
            drop(plan, entry, named.reason_code, named.summary)
    return plan


def bridged(builtin: BuiltinEndpoint) -> ServerEntry:
    """The built-in server as a stdio server: agentctl's bridge, which reaches the endpoint over streamable
    HTTP. The URL and the attempt's token go in its environment, never in its arguments (argv is public)."""
    return ServerEntry(builtin.name, "builtin", "stdio", target_for_url(builtin.url),
                       command=builtin.bridge[0], args=list(builtin.bridge[1:]),
                       env={BRIDGE_ENV_URL: builtin.url, BRIDGE_ENV_TOKEN: builtin.token})


def witnessed(entry: ServerEntry, builtin: BuiltinEndpoint) -> ServerEntry:
    """A stdio server wrapped in agentctl's witness: the agent spawns the witness with the server's own
    environment plus where to report and the attempt's token (never in argv); the witness spawns the server
    with exactly its command, arguments, environment and working directory. The row's target stays the
    server's own command. Every passthrough strategy and ACP delivery plan through here, so all wrap alike."""
    base = builtin.url.removesuffix("/mcp")
    return ServerEntry(entry.name, entry.source, "stdio", entry.target,
                       command=builtin.witness[0],
                       args=[*builtin.witness[1:], entry.name, "--", entry.command, *entry.args],
                       env={**entry.env, WITNESS_ENV_URL: f"{base}{WITNESS_PATH}", WITNESS_ENV_TOKEN: builtin.token})


def drop(plan: ServerPlan, entry: ServerEntry, reason_code: str, summary: str) -> None:
    """Move a planned server from delivered to filtered."""
    plan.delivered.remove(entry)
    plan.filtered.append(Omitted(entry.name, reason_code, summary))


# -- ACP: the plan as session/new mcpServers entries ------------------------------------------------


@dataclass(frozen=True)
class Planned:
    name: str
    transport: Transport
    target: str
    # The ACP McpServer entry as a plain dict (camelCase wire shape). It holds secrets (headers, env,
    # the attempt token): it goes to the agent and nowhere else.
    entry: dict[str, Any] = field(repr=False)


@dataclass
class DeliveryPlan:
    delivered: list[Planned] = field(default_factory=list)
    filtered: list[Omitted] = field(default_factory=list)


def plan_delivery(
    spec: Spec, caps: McpCapabilities, *, builtin_base: str, token: str, bridge: tuple[str, ...] = (),
    witness: tuple[str, ...] = (),
) -> DeliveryPlan:
    """The plan for an ACP agent with these capabilities, its entries in the ACP wire shape. With `bridge`
    (agentctl's own argv for `mcp-bridge`), an agent that advertises no remote transport gets the built-in
    server over stdio through it."""
    builtin = BuiltinEndpoint(spec.mcp.builtin_name, f"{builtin_base}/mcp", f"{builtin_base}/sse", token, bridge,
                              witness)
    plan = plan_servers(spec, builtin, AcpReceiver(caps))
    delivered = [Planned(e.name, e.transport, e.target, _acp_entry(e)) for e in plan.delivered]
    return DeliveryPlan(delivered, plan.filtered)


def _acp_entry(entry: ServerEntry) -> dict[str, Any]:
    if entry.transport == "stdio":
        return {
            "name": entry.name,
            "command": entry.command,
            "args": list(entry.args),
            "env": [{"name": k, "value": v} for k, v in entry.env.items()],
        }
    # Always send `headers`: the ACP SDK silently drops an entry without it.
    headers = [{"name": k, "value": v} for k, v in entry.headers.items()]
    return {"type": entry.transport, "name": entry.name, "url": entry.url, "headers": headers}
