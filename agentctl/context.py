"""What the daemon's components share: spec, identity, ledger, paths, readiness checks, the components the
surfaces reach, and the stop trigger.

Built once by the composition root (agentctl.daemon.app) and handed to each component; components never
reach for globals. The components' own modules are imported for their types only: importing this module
costs neither the MCP SDK nor the agent's machinery, and no component module imports another through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from agentctl.evidence.contract.report import AttemptOrigin, Identity
from agentctl.evidence.ledger import Ledger
from agentctl.spec import Spec

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.component import Agent
    from agentctl.agent.pty_host import PtyHost
    from agentctl.diagnostics.endpoint_test import EndpointTester
    from agentctl.mcp_endpoint.server import McpEndpoint
    from agentctl.upstream.publisher import Publisher


@dataclass
class Readiness:
    """Named readiness checks; /readyz is ready only while every check is true and no stop was requested.

    `degraded` names components that work but not fully (check name -> reason code): shown on every
    surface, never a cause of unreadiness (a daemon that cannot persist its report still serves MCP).
    """

    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)
    degraded: dict[str, str] = field(default_factory=dict)
    stopping: bool = False
    # Called once, the first time every check is true (agentctl.daemon.transitions logs "ready" then).
    on_ready: Callable[[], None] | None = None

    def set_degraded(self, name: str, reason_code: str | None) -> None:
        if reason_code:
            self.degraded[name] = reason_code
        else:
            self.degraded.pop(name, None)

    def persistence_health(self, reason_code: str | None, errno_name: str | None) -> None:
        """The report writer's state: always ready (a failed write is retried and the live report is whole);
        a failure is degraded with its reason code, and the check's detail names the errno."""
        self.set("persistence", True, f"{reason_code}: {errno_name}" if reason_code else "")
        self.set_degraded("persistence", reason_code)

    def set(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks[name] = ok
        if detail:
            self.details[name] = detail
        else:
            self.details.pop(name, None)
        if self.on_ready is not None and self.ready:
            on_ready, self.on_ready = self.on_ready, None
            on_ready()

    @property
    def ready(self) -> bool:
        return not self.stopping and bool(self.checks) and all(self.checks.values())


@dataclass
class DaemonContext:
    spec: Spec
    ledger: Ledger
    state_dir: Path
    control_socket: Path
    readiness: Readiness = field(default_factory=Readiness)
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    mcp_base: str | None = None  # http://host:port of the loopback listener
    mcp_url: str | None = None
    report_path: Path | None = None
    # Components the surfaces reach (None when absent: MCP-only mode has no agent, no [upstream] no publisher).
    agent: Agent | None = None
    endpoint: McpEndpoint | None = None
    upstream: Publisher | None = None
    embedded_hub: bool = False  # `run` with no [upstream]: the upstream is its own in-process hub, said so
    # Opens a new attempt seeded with the configured servers (MCP-only mode and passthrough use it).
    open_attempt: Callable[[AttemptOrigin], tuple[str, str]] | None = None
    # The one endpoint tester, made with the HTTP listener: the control route and the upstream's requests
    # share it (and its per-name lock).
    endpoint_tester: EndpointTester | None = None

    @property
    def identity(self) -> Identity:
        return self.ledger.identity

    def request_stop(self) -> None:
        """The shutdown trigger: signals, `agentctl stop` and tests all end up here."""
        self.readiness.stopping = True
        self.stop_event.set()


# Typed aiohttp application key: every component finds the shared context through it.
CTX_KEY = web.AppKey("agentctl_context", DaemonContext)


def runs_on_terminal(ctx: DaemonContext) -> bool:
    """Whether the daemon's agent is a passthrough CLI on a pseudo-terminal (`[agent] terminal = true`)."""
    agent = ctx.agent
    return agent is not None and agent.kind == "passthrough" and bool(ctx.spec.agent and ctx.spec.agent.terminal)


def current_terminal(ctx: DaemonContext) -> PtyHost | None:
    """The pseudo-terminal the agent's process runs on now, or None (no agent, or not started on one)."""
    agent = ctx.agent
    process = agent.supervisor.process if agent is not None else None
    return process.terminal if process is not None else None
