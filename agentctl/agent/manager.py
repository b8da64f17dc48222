"""The agent as a daemon component: spawn under the supervisor, connect ACP, record lifecycle, stop in order."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from agentctl.agent.outcome import AgentError
from agentctl.agent.spawn import resolve_command
from agentctl.agent.supervisor import AgentStartError, ExitInfo, Supervisor, build_agent_env
from agentctl.context import DaemonContext
from agentctl.evidence.seeds import ServerSeed
from agentctl.runtime import DAEMON_SECRET_ENV_PREFIXES

if TYPE_CHECKING:
    from agentctl.agent.acp import AcpRuntime

log = logging.getLogger(__name__)

# The agent's stdout is read in chunks of at most this much: AgentStdioTransport joins a frame from
# chunks (up to its own frame cap), so a bigger reader buffer would only add memory, never capacity.
STDOUT_CHUNK_LIMIT = 1024 * 1024
EXIT_AFTER_EOF_WAIT = 2.0
# A session request that arrives while the agent starts waits for its initialize answer: at most the
# initialize timeout plus this, for the spawn and the ACP SDK's import before initialize is sent.
START_ALLOWANCE = 5.0


class AgentManager:
    """The ACP agent component (agentctl.agent.component.AcpAgent)."""

    kind: Literal["acp"] = "acp"

    def __init__(self, ctx: DaemonContext, seeds: Callable[[], list[ServerSeed]]) -> None:
        spec = ctx.spec
        assert spec.agent is not None
        self.ctx = ctx
        self.agent_spec = spec.agent
        secret_names = [name for name in os.environ if name.startswith(DAEMON_SECRET_ENV_PREFIXES)]
        # The Supervisor starts the agent under its shim: a SIGKILLed daemon takes the agent's whole tree along.
        self.supervisor = Supervisor(
            secret_env_names=secret_names, on_exit=self._on_exit, stdout_limit=STDOUT_CHUNK_LIMIT
        )
        self._seeds = seeds
        self.acp: AcpRuntime | None = None  # made in start(), once the agent is spawned
        self.start_error: AgentError | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._stopping = False
        self._exit: ExitInfo | None = None
        # Set once the agent's start is decided: initialize answered, or the start failed. The control
        # socket is up before the agent, so a session request can arrive before then.
        self._decided = asyncio.Event()

    @property
    def starting(self) -> bool:
        return not self._decided.is_set()

    async def session_runtime(self) -> AcpRuntime:
        """The ACP runtime, once the agent answered initialize or failed to start (AgentError if it is still
        starting after its initialize timeout): a session planned before that would use capabilities the
        agent never declared and show its servers as filtered."""
        if not self._decided.is_set():
            try:
                await asyncio.wait_for(self._decided.wait(), self.agent_spec.initialize_timeout + START_ALLOWANCE)
            except TimeoutError:
                raise AgentError("agent_starting", "the agent is still starting (no answer to ACP initialize yet); "
                                 "try again") from None
        return self.runtime_now()

    def runtime_now(self) -> AcpRuntime:
        """The ACP runtime without waiting: AgentError while the agent is still starting."""
        if not self._decided.is_set():
            raise AgentError("agent_starting", "the agent is still starting (no answer to ACP initialize yet)")
        if self.acp is None:  # the start failed before the ACP side existed
            raise AgentError("agent_not_running", self.gone_reason())
        return self.acp

    def gone_reason(self) -> str:
        """Why no session can be delivered: how the start failed or the process ended, in one line."""
        return self._exit_reason() or "the ACP connection is closed"

    async def start(self) -> None:
        """Spawn and initialize. A failing agent is evidence, not a daemon failure: the daemon stays up."""
        try:
            await self._start()
        finally:
            self._decided.set()

    async def _start(self) -> None:
        ledger = self.ctx.ledger
        ledger.update_agent(protocol=self.agent_spec.protocol, state="starting", started_at=ledger.now())
        self.ctx.readiness.set("agent", False, "starting")
        spawn_error: AgentStartError | None = None
        try:
            await self.supervisor.start(
                resolve_command(self.agent_spec.command), cwd=self.agent_spec.workdir, env=self.agent_spec.env
            )
        except AgentStartError as exc:
            spawn_error = exc
        except asyncio.CancelledError:
            # Stopped before the shim said it started the agent: closing its channel was the shim's cue to end
            # whatever it started (agentctl.agent.spawn), and no supervisor holds it to read how. The report
            # says so, never an agent still "starting" after the daemon's stop.
            if self.supervisor.process is None:
                self._on_exit(ExitInfo(None, None, "stopped by the daemon while it started (exit status not read)",
                                       stopped=True))
            raise
        # The ACP SDK's import (~0.4 s of pydantic schema) runs only now, while the agent starts up on another
        # core, instead of before the daemon's listeners; a daemon without an ACP agent never pays it.
        from agentctl.agent.acp import AcpRuntime

        ctx = self.ctx
        self.acp = AcpRuntime(
            ctx.spec, ledger, builtin_base=lambda: ctx.mcp_base or "", seeds=self._seeds, gone=self.gone_reason,
            agent_env=lambda: build_agent_env(self.agent_spec.env, secret_env_names=self.supervisor.secret_env_names),
        )
        if spawn_error is not None:
            self._failed("agent_start_failed", str(spawn_error))
            ledger.update_agent(state="exited", exited_at=ledger.now())
            return
        try:
            await self.acp.connect(self.supervisor.stdin, self.supervisor.stdout)
        except AgentError as exc:
            self._failed(exc.reason_code, exc.summary)
            if exc.reason_code == "agent_exited_before_initialize" and self.supervisor.running:
                # stdout ended first; the exit itself is usually a moment behind. Let it be the agent's own
                # exit (with its code) rather than one we caused.
                try:
                    await asyncio.wait_for(self.supervisor.wait_exit(), EXIT_AFTER_EOF_WAIT)
                except TimeoutError:
                    pass
            # Decided: a waiting session request is answered now, not after the stop below.
            self._decided.set()
            if self.supervisor.running:
                # Without ACP the process is of no use, and it must not outlive the evidence of why.
                await self.supervisor.stop(grace=min(self.agent_spec.stop_grace, 1.0))
            return
        if self.supervisor.running:
            self.ctx.readiness.set("agent", True)
        self._decided.set()

    def _failed(self, reason_code: str, summary: str) -> None:
        self.start_error = AgentError(reason_code, summary)
        reason = self._exit_reason()
        self.ctx.readiness.set("agent", False, f"exited: {reason}" if self._exit else reason)
        self.ctx.ledger.update_agent(exit_reason=reason, start_failure=reason_code)
        log.warning("agent did not start: %s", reason_code)

    def _exit_reason(self) -> str:
        """The start failure (if any) is the news; how the process ended is the detail. Same text whichever
        of the two the daemon noticed first."""
        parts = []
        if self.start_error is not None:
            parts.append(self.start_error.reason_code)
        if self._exit is not None:
            parts.append(self._exit.reason)
        elif self.start_error is not None and self.start_error.summary:
            parts[-1] += f": {self.start_error.summary}"
        return "; ".join(parts)

    def _on_exit(self, info: ExitInfo) -> None:
        ctx = self.ctx
        self._exit = info
        reason = self._exit_reason()
        ctx.ledger.update_agent(
            state="exited",
            exited_at=ctx.ledger.now(),
            exit_code=info.returncode,
            exit_signal=info.signal,
            exit_reason=reason,
            stopped_by_daemon=info.stopped,
            stdout_skipped_lines=self.acp.skipped_stdout_lines if self.acp is not None else 0,
        )
        ctx.readiness.set("agent", False, f"exited: {reason}")
        if self._stopping:
            return  # the daemon is stopping: the exit is the expected end, not news
        log.debug("agent %s", reason)  # the supervisor's line said how it ended
        attempt = ctx.ledger.current_attempt_id
        if attempt is not None and not info.stopped:
            # Report-level: an exit is not tied to one server, so it marks no row failed.
            ctx.ledger.record("explicit_error", attempt, reason_code="agent_exited", summary=info.reason)
        if self.agent_spec.linger is not None:
            # Whether it crashed or was stopped for failing to start, the agent is gone: linger, then stop.
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(self.agent_spec.linger, ctx.request_stop)

    async def stop(self) -> None:
        """Stop the process tree first (stdin close, grace, TERM, KILL, sweep), then drop the ACP connection.

        That order lets a well-behaved agent see EOF on stdin and answer what is pending before it goes.
        """
        self._stopping = True
        if self._linger is not None:
            self._linger.cancel()
        try:
            if self.supervisor.process is not None:
                await self.supervisor.stop(grace=self.agent_spec.stop_grace)
        finally:
            if self.acp is not None:
                await self.acp.close()
