"""What the daemon's surfaces need from its agent component, whichever kind it is: an ACP agent or a passthrough CLI.

The control routes, diagnostics, the upstream's requests and `agentctl run` see the agent only through these
Protocols and tell the two kinds apart by `kind` (a Literal, so a type checker narrows `Agent` on it), never by
probing for attributes. An ACP agent that is still starting has no runtime yet and is an ACP agent all the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover - the implementations import the agent's machinery; the surfaces need none of it
    from agentctl.agent.acp import AcpRuntime
    from agentctl.agent.outcome import AgentError
    from agentctl.agent.supervisor import Supervisor

AgentKind = Literal["acp", "passthrough"]


class AgentComponent(Protocol):
    """Both kinds: started and stopped by the composition root, their process under a supervisor."""

    supervisor: Supervisor
    # Why the last start failed (the daemon stays up: a failing agent is evidence), None when it did not.
    start_error: AgentError | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class AcpAgent(AgentComponent, Protocol):
    """An ACP agent: sessions are opened, loaded, reset and prompted through its runtime."""

    @property
    def kind(self) -> Literal["acp"]: ...

    async def session_runtime(self) -> AcpRuntime:
        """The runtime once the agent answered initialize (AgentError when it cannot have one)."""
        ...

    def runtime_now(self) -> AcpRuntime:
        """The runtime without waiting (AgentError while the agent is still starting or is gone)."""
        ...


class PassthroughAgent(AgentComponent, Protocol):
    """A passthrough CLI: no session to open; a new attempt is a new process start."""

    @property
    def kind(self) -> Literal["passthrough"]: ...

    async def restart(self) -> str | None:
        """Stop the CLI and start it again; the new attempt's id, None when the daemon is stopping."""
        ...

    async def output_drained(self, timeout: float = 2.0) -> None:
        """Return once the CLI's stdout reached its end (at most `timeout`), so what it printed last can be said."""
        ...


Agent = AcpAgent | PassthroughAgent
