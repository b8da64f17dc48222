"""The composition root: builds every component, starts them in order, stops them in reverse.

`Daemon` is an async context manager: each start step pushes its own stop on an AsyncExitStack, so the stop
order is the reverse of the start order by construction. One aiohttp AppRunner serves one application on
two sites: TCP loopback (MCP, /livez, /readyz) and the control Unix socket (/v1/...; the control guard
refuses those paths over TCP). The shutdown trigger is `DaemonContext.request_stop()`, which signals,
`agentctl stop` and tests all use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from agentctl import __version__, tracing
from agentctl.backend.embedded import EmbeddedBackend, TaskStoreError
from agentctl.control.agent_routes import install_agent_routes
from agentctl.control.attach_routes import install_attach_routes
from agentctl.control.server import build_health, install_control_routes
from agentctl.control.socket import (
    CONTROL_CONNECTIONS,
    cleanup_socket_path,
    prepare_socket_path,
    resolve_socket_path,
    start_unix_site,
)
from agentctl.context import CTX_KEY, DaemonContext, current_terminal, runs_on_terminal
from agentctl.daemon.health import install_health_routes
from agentctl.daemon.metrics import DaemonMetrics, install_metrics_route
from agentctl.daemon.servers import configured_servers
from agentctl.daemon.gate_record import GateRecorder
from agentctl.daemon.transitions import Transitions
from agentctl.daemon.systemd import Notifier
from agentctl.diagnostics.diagnostics import build_diagnostics, build_tools_view, find_tool
from agentctl.diagnostics.endpoint_test import EndpointTester
from agentctl.diagnostics.routes import install_diagnostics_routes
from agentctl.evidence.estimates import CatalogEstimates
from agentctl.evidence.contract.control import DaemonReady
from agentctl.evidence.contract.report import AttemptOrigin, Identity
from agentctl.evidence.ledger import Clock, Ledger, utcnow
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.store import (
    Persister,
    StateDirError,
    ensure_state_dir,
    lock_execution,
    report_path,
    resolve_state_dir,
)
from agentctl.exit_codes import EXIT_OK, EXIT_SIGNAL_BASE
from agentctl.identity import new_execution_id, new_instance_id
from agentctl.listener_guard import (
    HTTP_REFUSAL,
    WRITE_TIMEOUT,
    GuardedSite,
    ListenerGuard,
    connection_caps,
    fd_limit,
    install_accept_error_log,
    track_requests,
)
from agentctl.lifecycle import Signals, Stopper, StopStack, serve_until_signalled
from agentctl.logs import http_server_logging
from agentctl.mcp_endpoint.server import McpEndpoint
from agentctl.runtime import freeze_startup_heap
from agentctl.spec import Spec, listen_address, secret_registry, secret_values
from agentctl.unix_socket import ControlSocketError

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.component import Agent
    from agentctl.upstream.tunnel import TunnelBackend

log = logging.getLogger("agentctl.daemon")

# MCP connections when the descriptor limit allows (connection_caps shrinks it under a low one): 100 MCP
# clients of both eras hold about 200 at once.
MCP_CONNECTIONS = 512

# A forced exit's bounds (abort()): the killed agent's exit status, then the last report write.
ABORT_EXIT_WAIT = 0.5
ABORT_PERSIST_WAIT = 1.0


class StartupError(Exception):
    """A start-up failure phrased for one line (the CLI prints it and exits non-zero)."""


def describe_error(exc: BaseException, spec: Spec | None = None) -> str:
    """An exception as one redacted line: its type and a bounded, secret-free summary of its text."""
    secrets = secret_values(spec) if spec is not None else []
    text = summarize("error", str(exc), secrets).summary
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Daemon:
    """One execution's daemon. `async with Daemon(spec) as daemon:` starts it and stops it; `serve()` runs it
    until a signal or `agentctl stop`."""

    def __init__(
        self,
        spec: Spec,
        *,
        socket_path: str | Path | None = None,
        clock: Clock = utcnow,
        environ: dict[str, str] | None = None,
        metrics_listen: tuple[str, int] | None = None,
    ) -> None:
        self.spec = spec
        self.metrics_listen = metrics_listen  # (host, port) of the metrics-only listener, when asked for
        self.metrics: DaemonMetrics | None = None
        ident = spec.identity
        identity = Identity(
            task_id=ident.task_id,
            session_id=ident.session_id,
            execution_id=ident.execution_id or new_execution_id(),
            instance_id=new_instance_id(),
            agent_id=ident.agent_id,
            agent_profile_id=ident.agent_profile_id,
        )
        self.environ = dict(os.environ if environ is None else environ)
        ledger = Ledger(identity, clock, secret_registry(spec))
        self.ctx = DaemonContext(
            spec=spec,
            ledger=ledger,
            state_dir=resolve_state_dir(spec.state.dir),
            control_socket=resolve_socket_path(str(socket_path) if socket_path else None, identity.execution_id),
        )
        self.notifier = Notifier(self.environ)
        self._stops: StopStack | None = None  # the stops of what started, while running
        self._runner: web.AppRunner | None = None
        self.listeners: dict[str, ListenerGuard] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self.persister: Persister | None = None
        self.backend: EmbeddedBackend | None = None
        self.endpoint: McpEndpoint | None = None
        self.tunnel: TunnelBackend | None = None  # when there is an upstream
        # Where evidence goes: the spec's [upstream] socket, or the in-process hub `run` starts (use_upstream).
        self.upstream_socket: str | None = spec.upstream.socket
        self.agent: Agent | None = None
        self.ctx.open_attempt = self.open_attempt

    def use_upstream(self, socket: str, *, embedded: bool) -> None:
        """Before start: publish to the hub at `socket` (`embedded`: the in-process hub of `agentctl run`,
        which the logs name as such) instead of the spec's [upstream]."""
        self.upstream_socket = socket
        self.ctx.embedded_hub = embedded

    @property
    def ledger(self) -> Ledger:
        return self.ctx.ledger

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> DaemonReady:
        """Start every component in order, each step pushing its own stop; on any failure stop what started,
        in reverse, and raise."""
        self._stops = StopStack(log)
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            # The socket probe comes first: a second daemon for the same execution must be refused before
            # it touches that execution's report. Its stop, the socket file's removal, is therefore the last.
            ("control socket", self._probe_socket),
            ("state directory and task store", self._start_state),
            # What a daemon killed with SIGKILL left (a merged workspace file holding its token, private
            # config files) is put right before anything new is written.
            ("recovery of killed daemons' leftovers", self._recover_leftovers),
            # Traces before anything opens an attempt, so the first attempt's trace starts with it.
            ("traces", self._start_traces),
            ("HTTP listener", self._start_http),
            ("metrics listener", self._start_metrics_listener),
            # Upstream before MCP: it stops after the endpoint, so the endpoint's last evidence (closed
            # connections) still goes out in the publisher's final snapshot, and the tunnel exists before
            # the first tool call.
            ("upstream publisher", self._start_upstream),
            ("MCP endpoint", self._start_mcp),
            ("control socket", self._start_control),
            ("agent", self._start_agent),
        ]
        try:
            for name, step in steps:
                try:
                    await step()
                except (StartupError, ControlSocketError, StateDirError, TaskStoreError):
                    raise  # already one line naming what failed
                except Exception as exc:
                    raise StartupError(f"cannot start the {name}: {describe_error(exc, self.spec)}") from exc
        except BaseException:
            await self.stop()
            raise
        freeze_startup_heap()
        self.notifier.notify("READY=1", f"STATUS=serving execution {self.ctx.identity.execution_id}")
        if self.notifier.watchdog_interval:
            self._watchdog = asyncio.create_task(self.notifier.watchdog(), name="agentctl-watchdog")
        transitions = Transitions(self.ctx)
        self._on_stop("transition log", transitions.close)
        transitions.start()
        gate = GateRecorder(self.ctx)
        self._on_stop("required-server gate", gate.close)  # before the final report: its last reading is in it
        gate.start()  # "ready" now, or once every check is true
        return self.ready_info()

    def ready_info(self) -> DaemonReady:
        ident = self.ctx.identity
        return DaemonReady(
            control_socket=str(self.ctx.control_socket),
            mcp_url=self.ctx.mcp_url,
            instance_id=ident.instance_id,
            execution_id=ident.execution_id,
            pid=os.getpid(),
        )

    async def stop(self) -> None:
        """Stop in reverse order of start (the stack's order); idempotent."""
        ctx = self.ctx
        ctx.readiness.stopping = True
        if self.notifier.enabled:
            self.notifier.notify("STOPPING=1")
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        stops, self._stops = self._stops, None
        if stops is not None:
            await stops.aclose()

    async def _start_traces(self) -> None:
        """Attempt traces when the OTEL_EXPORTER_OTLP_* variables configure them (agentctl.tracing)."""
        ledger = self.ledger
        if tracing.start(ledger, self.environ, version=__version__) is not None:
            self._on_stop("traces", lambda: asyncio.to_thread(tracing.stop, ledger))

    def _on_stop(self, name: str, stopper: Stopper) -> None:
        """Push the stop of the start step that just made one necessary."""
        assert self._stops is not None, "a start step runs only inside start()"
        self._stops.push(name, stopper)

    async def serve(
        self,
        on_ready: Callable[[DaemonReady], None] | None = None,
        *,
        install_signals: bool = True,
        signals: Signals | None = None,
    ) -> int:
        """Run until the shutdown trigger fires (SIGTERM/SIGINT, `agentctl stop`, or a test), then drain.

        Signals are captured before start-up too (`signals`, installed by the CLI before its imports): a
        stop during start-up drains from wherever the start was. Exit status 0 after a drain, also one cut
        short by `shutdown_timeout`; 128 + N when a second signal N forced the exit."""
        async def main(info: DaemonReady) -> None:
            if on_ready is not None:
                on_ready(info)
            await self.ctx.stop_event.wait()
            log.info("stopping")

        outcome = await serve_until_signalled(
            start=self.start,
            main=main,
            stop=self.stop,
            abort=self.abort,
            shutdown_timeout=self.spec.daemon.shutdown_timeout,
            signals=signals if install_signals else Signals(capture=False),
        )
        return EXIT_SIGNAL_BASE + outcome.forced_by if outcome.forced_by is not None else EXIT_OK

    async def abort(self) -> None:
        """The fast end of a drain cut short: the agent's tree SIGKILLed (its shim finishes the job after
        us), the report written once as it stands, the control socket file removed. A merged workspace
        file is left to its journal: the next start, or `agentctl recover`, puts it back."""
        ctx = self.ctx
        ctx.readiness.stopping = True
        supervisor = self.agent.supervisor if self.agent is not None else None
        if supervisor is not None:
            supervisor.kill_now()
            if supervisor.running:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(supervisor.wait_exit(), ABORT_EXIT_WAIT)  # so the report says how it ended
        if self.persister is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.persister.flush(), ABORT_PERSIST_WAIT)
        self._remove_socket_file()

    # -- components --------------------------------------------------------------------------------

    async def _probe_socket(self) -> None:
        prepare_socket_path(self.ctx.control_socket)
        self._on_stop("control socket file", self._remove_socket_file)

    def _remove_socket_file(self) -> None:
        """The control socket's file, once the runner has closed the site, and only if this daemon bound it."""
        if self.ctx.readiness.checks.get("control_socket"):
            cleanup_socket_path(self.ctx.control_socket)

    async def _start_state(self) -> None:
        ctx = self.ctx
        exec_dir = ensure_state_dir(ctx.state_dir, ctx.identity.execution_id)
        # The checked real path from now on: no symbolic link on the way is followed again.
        ctx.state_dir = exec_dir.parent
        # Before anything touches this execution's files: a second daemon of it is refused here.
        lock = lock_execution(exec_dir, ctx.identity.execution_id)
        self._on_stop("execution lock", lambda: os.close(lock))  # stopped after the final report
        ctx.report_path = report_path(ctx.state_dir, ctx.identity.execution_id)
        self.persister = Persister(ctx.ledger, ctx.report_path, delay=self.spec.daemon.persist_delay,
                                   on_health=ctx.readiness.persistence_health)
        ctx.readiness.persistence_health(None, None)
        self.persister.start()
        self._on_stop("persistence", self.persister.stop)
        self._open_task_store()

    async def _recover_leftovers(self) -> None:
        from agentctl.agent.passthrough.recovery import log_outcomes, recover

        log_outcomes(await asyncio.to_thread(recover, self.ctx.state_dir))

    def _open_task_store(self) -> None:
        spec, ctx = self.spec, self.ctx
        ident = ctx.identity
        self.backend = EmbeddedBackend(
            ctx.state_dir / "tasks.sqlite3",
            agents_info={
                "agents": [
                    {
                        "agent_id": ident.agent_id,
                        "agent_profile_id": ident.agent_profile_id,
                        "protocol": spec.agent.protocol if spec.agent else None,
                    }
                ]
            },
            mcp_info=self.server_seeds(),
            execution_info={"instance_id": ident.instance_id, "execution_id": ident.execution_id},
        )
        self._on_stop("task store", self._close_backend)

    async def _start_http(self) -> None:
        ctx = self.ctx
        self._guard_listeners()
        app = web.Application(client_max_size=1024 * 1024, middlewares=[track_requests])
        runner_logging = http_server_logging(app, "daemon")  # the MCP port and the control socket
        app[CTX_KEY] = ctx
        install_control_routes(app, CTX_KEY)
        install_agent_routes(app, CTX_KEY)
        install_attach_routes(app, lambda: runs_on_terminal(ctx), lambda: current_terminal(ctx))
        ctx.endpoint_tester = EndpointTester(ctx)
        install_diagnostics_routes(app, ctx.endpoint_tester, diagnostics=lambda: build_diagnostics(ctx),
                                   tools=lambda: build_tools_view(ctx), tool=lambda name: find_tool(ctx, name))
        install_health_routes(app, lambda: ctx.readiness.ready, lambda: build_health(ctx))
        self.metrics = install_metrics_route(app, ctx)
        self.endpoint = self._build_endpoint()
        self.endpoint.mount(app)
        ctx.endpoint = self.endpoint
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0, **runner_logging)
        await runner.setup()
        self._runner = runner
        # Closes every site of the runner (the control socket's too), then its connections.
        self._on_stop("http", runner.cleanup)
        host, port = listen_address(self.spec)
        site = GuardedSite(runner, self.listeners["mcp"], host=host, port=port)
        try:
            await site.start()
        except OSError as exc:
            raise StartupError(f"cannot listen on {self.spec.mcp.listen}: {exc.strerror or exc}") from None
        bound = site.addresses[0]
        host_txt = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        ctx.mcp_base = f"http://{host_txt}:{bound[1]}"
        ctx.mcp_url = f"{ctx.mcp_base}/mcp"
        self.endpoint.set_listen(bound[0], bound[1])
        ctx.readiness.set("mcp_listener", True)

    async def _start_metrics_listener(self) -> None:
        if self.metrics_listen is None or self.metrics is None:
            return
        from agentctl.daemon.metrics_listener import MetricsListener

        host, port = self.metrics_listen
        listener = MetricsListener(self.metrics, host, port)
        try:
            await listener.start()
        except OSError as exc:
            raise StartupError(f"cannot listen on --metrics-listen {host}:{port}: {exc.strerror or exc}") from None
        self._on_stop("metrics listener", listener.stop)

    def _guard_listeners(self) -> None:
        """Connection caps from the descriptor limit, and failed accepts logged once per interval."""
        nofile = fd_limit()
        caps = connection_caps(nofile, {"mcp": MCP_CONNECTIONS, "control": CONTROL_CONNECTIONS})
        if caps["mcp"] < MCP_CONNECTIONS:
            log.warning("the file descriptor limit is %d: at most %d MCP and %d control connections at once "
                        "(raise LimitNOFILE= or ulimit -n for more)", nofile, caps["mcp"], caps["control"])
        # The control socket's own user may pause a terminal (attach) on purpose: its answers wait as long.
        self.listeners = {name: ListenerGuard(name, cap, refusal=HTTP_REFUSAL,
                                              write_timeout=WRITE_TIMEOUT if name == "mcp" else None)
                          for name, cap in caps.items()}
        self._on_stop("accept error log", install_accept_error_log())

    def _build_endpoint(self) -> McpEndpoint:
        spec, ctx = self.spec, self.ctx
        return McpEndpoint(
            ctx.ledger,
            builtin_name=spec.mcp.builtin_name,
            profile=spec.mcp.profile,
            backend_getter=lambda: self.tunnel or self.backend,
            estimator_loader=CatalogEstimates(),
        )

    async def _close_backend(self) -> None:
        # close() waits for the store's lock (an in-flight write): not on the event loop.
        if self.backend is not None:
            await asyncio.to_thread(self.backend.close)

    async def _start_mcp(self) -> None:
        assert self.endpoint is not None
        await self.endpoint.start()
        # Stopped before the runner: open SSE streams end first, so runner cleanup does not wait on them.
        self._on_stop("mcp endpoint", self.endpoint.stop)
        self.ctx.readiness.set("mcp_endpoint", True)

    async def _start_upstream(self) -> None:
        if not self.upstream_socket:
            return  # no upstream: the embedded backend answers the tools
        from agentctl.upstream.publisher import Publisher
        from agentctl.upstream.tunnel import TunnelBackend

        publisher = Publisher(self.ctx, self.upstream_socket)
        self.tunnel = TunnelBackend(publisher, local=self.backend)
        self.ctx.upstream = publisher
        # Never awaits the upstream: an absent one means "buffering", and readiness stays true.
        publisher.start()
        self._on_stop("upstream", publisher.stop)

    async def _start_agent(self) -> None:
        if self.spec.agent is None:
            return
        agent: Agent
        if self.spec.agent.protocol == "passthrough":
            from agentctl.agent import clis
            from agentctl.agent.passthrough.manager import PassthroughManager

            agent = PassthroughManager(self.ctx, self.server_seeds, clis.get(self.spec.agent.strategy))
        else:
            from agentctl.agent.manager import AgentManager

            agent = AgentManager(self.ctx, self.server_seeds)
        self.agent = self.ctx.agent = agent
        self._on_stop("agent", agent.stop)  # before its start: a start cancelled midway is stopped too
        await agent.start()

    async def _start_control(self) -> None:
        ctx = self.ctx
        assert self._runner is not None
        # The runner's cleanup closes this site; the probe's stop removes the file after everything else.
        await start_unix_site(self._runner, ctx.control_socket, self.listeners["control"])
        ctx.readiness.set("control_socket", True)

    # -- attempts ---------------------------------------------------------------------------------

    def server_seeds(self) -> list[ServerSeed]:
        """The configured servers of a new attempt (agentctl.daemon.servers)."""
        return configured_servers(self.spec, self.ctx.mcp_base)

    def open_attempt(self, origin: AttemptOrigin) -> tuple[str, str]:
        """A new current attempt (before any delivery) seeded with the configured servers; returns (id, token)."""
        return self.ledger.begin_attempt(origin, self.server_seeds())
