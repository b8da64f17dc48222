"""A passthrough CLI agent as a daemon component: each process start is an attempt whose MCP configuration
is materialized in the CLI's own format, with honest evidence of what was written, passed or left out.

Same component interface as agentctl/agent/manager.py AgentManager (start, stop, start_error,
supervisor), plus `restart()`. Order per start: new attempt (configured, via the seeds) -> materialize
(filtered; or, when agentctl cannot write the configuration, one report-level explicit_error, the
servers `unavailable` and no process) -> spawn -> delivered; session_accepted only later, at the first
evidence of a running session (agentctl/agent/passthrough/acceptance.py). With no strategy every
server is `unavailable` (`no_passthrough_strategy`) and the CLI still runs, without MCP config.
Writing and removing configuration (fsync included) runs in a worker thread, never on the event loop.

The CLI runs non-interactively by default: stdin is closed at once (print-mode CLIs otherwise wait on it)
and its stdout is drained into the in-memory output window with its stderr (never logged or persisted).
With `[agent] terminal = true` it runs on a pseudo-terminal the daemon owns instead (agentctl/agent/pty_host.py):
the person attached types into it, and its output feeds the same window. When
the process ends, on its own or stopped, its temporary files are removed and merged workspace files are
restored, so the attempt token does not outlive the process on disk. A merge is journaled in the state
directory before the workspace changes, and the private directory is locked while this daemon lives, so
after a SIGKILL the next daemon (or `agentctl recover`) undoes what this one could not
(agentctl/agent/passthrough/recovery.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agentctl.agent.outcome import AgentError
from agentctl.agent.spawn import resolve_command
from agentctl.runtime import DAEMON_SECRET_ENV_PREFIXES
from agentctl.agent.delivery import BuiltinEndpoint, Omitted
from agentctl.agent.passthrough.base import (
    MATERIALIZE_FAILED,
    NO_PASSTHROUGH_STRATEGY,
    Materialization,
    MaterializeError,
    MaterializeRequest,
    insert_args,
    plan_materialization,
)
from agentctl.agent.passthrough.acceptance import watch_acceptance
from agentctl.agent.passthrough.journal import Journal
from agentctl.agent.passthrough.recovery import PrivateDir
from agentctl.agent.passthrough.workspace import cleanup
from agentctl.agent.pty_host import PtyHost, WindowSize
from agentctl.agent.reported.feed import NO_STRATEGY, NULL_FEED, REPORT_OFF, ReportFeed, ReportPlan
from agentctl.agent.supervisor import AgentProcess, AgentStartError, ExitInfo, Supervisor
from agentctl.bundled import self_command
from agentctl.context import DaemonContext
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.sanitize import summarize

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.agent_cli import AgentCli

log = logging.getLogger(__name__)

class PassthroughManager:
    kind: Literal["passthrough"] = "passthrough"

    def __init__(self, ctx: DaemonContext, seeds: Callable[[], list[ServerSeed]], cli: AgentCli | None) -> None:
        """`cli`: the agent the spec's `agent.strategy` names (agentctl/agent/clis/), None for no strategy."""
        spec = ctx.spec
        assert spec.agent is not None
        self.ctx = ctx
        self.agent_spec = spec.agent
        self.seeds = seeds
        self.cli = cli
        self.strategy = cli.strategy if cli is not None else None
        secret_names = [name for name in os.environ if name.startswith(DAEMON_SECRET_ENV_PREFIXES)]
        self.supervisor = Supervisor(secret_env_names=secret_names, on_exit=self._on_exit)
        self.start_error: AgentError | None = None
        self.attempt_id: str | None = None
        self._mat: Materialization | None = None
        self._tmpdir: PrivateDir | None = None
        self._cleanups: set[asyncio.Task[None]] = set()
        self._drain: asyncio.Task[None] | None = None
        self._feed: ReportFeed = NULL_FEED  # the current run's own report, read from its output
        self._unwatch: Callable[[], None] | None = None  # the current run's acceptance watch
        self._linger: asyncio.TimerHandle | None = None
        self._stopping = False
        self._lock = asyncio.Lock()

    # -- component interface ------------------------------------------------------------------------

    async def start(self) -> None:
        """Materialize and spawn. A failure is evidence, not a daemon failure: the daemon stays up."""
        ledger = self.ctx.ledger
        ledger.update_agent(protocol="passthrough", state="starting", started_at=ledger.now(),
                            terminal=self.agent_spec.terminal)
        async with self._lock:
            await self._launch()

    async def restart(self) -> str | None:
        """Stop the CLI (if it still runs) and start it again: a new attempt with a new token."""
        if self._linger is not None:  # the previous run's exit must not stop the daemon under the new one
            self._linger.cancel()
            self._linger = None
        async with self._lock:
            await self._halt()
            if self._stopping:
                return None
            self.start_error = None
            self.ctx.ledger.update_agent(
                state="starting", started_at=self.ctx.ledger.now(), exited_at=None, exit_code=None,
                exit_signal=None, exit_reason=None, stopped_by_daemon=False, start_failure=None,
            )
            await self._launch()
            return self.attempt_id

    async def stop(self) -> None:
        self._stopping = True
        if self._linger is not None:
            self._linger.cancel()
        async with self._lock:
            await self._halt()

    # -- one process start --------------------------------------------------------------------------

    async def _launch(self) -> None:
        ctx, ledger = self.ctx, self.ctx.ledger
        ctx.readiness.set("agent", False, "starting")
        seeds = self.seeds()
        attempt_id, token = ledger.begin_attempt("passthrough_start", seeds)
        self.attempt_id = attempt_id
        workdir = Path(self.agent_spec.workdir).resolve() if self.agent_spec.workdir else Path.cwd()
        argv = resolve_command(self.agent_spec.command)
        mat = Materialization()
        if self.strategy is None:
            for seed in seeds:
                ledger.record(
                    "unavailable", attempt_id, seed.name, reason_code=NO_PASSTHROUGH_STRATEGY,
                    summary="the passthrough agent has no strategy to hand it MCP configuration",
                )
        else:
            base = ctx.mcp_base or ""
            builtin = BuiltinEndpoint(ctx.spec.mcp.builtin_name, f"{base}/mcp", f"{base}/sse", token,
                                      witness=(*self_command(), "mcp-witness"))
            # The previous run's files (a merged workspace file above all) must be back before we write.
            await self._settle_cleanups()
            try:
                self._tmpdir, mat = await self._materialize_off_loop(builtin, workdir)
            except MaterializeError as exc:
                self._materialize_failed(attempt_id, builtin, workdir, exc.summary)
                return
            except OSError as exc:  # mkdtemp: the private directory itself
                summary = f"cannot create a private directory: {exc.strerror}"
                self._materialize_failed(attempt_id, builtin, workdir, summary)
                return
            self._mat = mat
            self._record_filtered(attempt_id, mat.filtered)
        argv = insert_args(argv, mat.argv)
        report = self._report_plan(argv)
        ledger.update_agent(report_source=report.source, report_note=report.note)
        try:
            await self.supervisor.start(
                argv, cwd=str(workdir), env=self.agent_spec.env,
                extra_env={**self._terminal_env(), **mat.env},
                terminal=WindowSize() if self.agent_spec.terminal else None,
            )
        except AgentStartError as exc:
            await self._cleanup()
            ledger.record("explicit_error", attempt_id, reason_code="agent_start_failed", summary=str(exc))
            self._failed("agent_start_failed", str(exc))
            return
        process = self.supervisor.process
        assert process is not None
        for entry in mat.delivered:
            ledger.record("delivered", attempt_id, entry.name, transport=entry.transport, target=entry.target)
        self._stop_watch()
        self._unwatch = watch_acceptance(ledger, attempt_id)
        delivered = [entry.name for entry in mat.delivered]
        self._feed = NULL_FEED if self.cli is None else self.cli.feed(ledger, attempt_id, report, delivered,
                                                                      builtin=ctx.spec.mcp.builtin_name)
        if process.terminal is not None:
            # On its terminal the CLI reads the keys of whoever is attached; its output reaches the window
            # through the terminal, and the report feed reads that same stream.
            self._tap_terminal(process.terminal)
        else:
            with contextlib.suppress(Exception):
                process.stdin.close()
            self._drain = asyncio.create_task(self._drain_stdout(process), name=f"passthrough-stdout-{process.pid}")
        if process.running:
            ledger.update_agent(state="running")
            ctx.readiness.set("agent", True)
        log.info("passthrough agent started (%s, %d servers delivered)", self.agent_spec.strategy, len(mat.delivered))

    def _report_plan(self, argv: list[str]) -> ReportPlan:
        """Whether this run's output will carry the CLI's own report (its agent module's rule), or why not."""
        if self.agent_spec.report == "off":
            return REPORT_OFF
        return NO_STRATEGY if self.cli is None else self.cli.report_for(argv)

    async def _materialize_off_loop(self, builtin: BuiltinEndpoint, workdir: Path) -> tuple[PrivateDir, Materialization]:
        """`_materialize` in a worker thread. A stop that cancels this (a signal during start-up) cannot stop
        the thread: what it writes is taken once it is done, so the stop undoes it like any attempt's files."""
        work = asyncio.ensure_future(asyncio.to_thread(self._materialize, builtin, workdir))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            try:
                self._tmpdir, self._mat = await work
            except Exception:
                pass  # nothing was written, or it was undone already
            raise

    def _materialize(self, builtin: BuiltinEndpoint, workdir: Path) -> tuple[PrivateDir, Materialization]:
        """In a worker thread: the private directory (0700, ours alone, locked while we live) and the strategy's
        files in it; a merged workspace file is journaled in the state directory before it changes."""
        assert self.strategy is not None
        private = PrivateDir()
        req = MaterializeRequest(self.ctx.spec, builtin, workdir, private.path, journal=Journal(self.ctx.state_dir))
        try:
            return private, self.strategy.materialize(req)
        except BaseException:
            private.remove()
            raise

    def _materialize_failed(self, attempt_id: str, builtin: BuiltinEndpoint, workdir: Path, summary: str) -> None:
        # agentctl could not write the configuration: its own failure, not an attachment error of any
        # server. One report-level explicit_error says why; the servers it would have delivered were never
        # exposed (`unavailable`); the ones policy or the CLI's format leave out are still `filtered`. The
        # CLI is not started without the configuration it was meant to get.
        ledger = self.ctx.ledger
        summary = summarize(MATERIALIZE_FAILED, summary, ledger.secrets).summary
        assert self.strategy is not None
        plan = plan_materialization(MaterializeRequest(self.ctx.spec, builtin, workdir, Path()), self.strategy.receiver)
        self._record_filtered(attempt_id, plan.filtered)
        ledger.record("explicit_error", attempt_id, reason_code=MATERIALIZE_FAILED, summary=summary)
        for entry in plan.delivered:
            ledger.record("unavailable", attempt_id, entry.name, reason_code=MATERIALIZE_FAILED, summary=summary)
        self._failed(MATERIALIZE_FAILED, summary)

    def _record_filtered(self, attempt_id: str, omitted: list[Omitted]) -> None:
        for item in omitted:
            self.ctx.ledger.record(
                "filtered", attempt_id, item.name, reason_code=item.reason_code, summary=item.summary
            )

    def _terminal_env(self) -> dict[str, str]:
        # A terminal program needs to know which terminal it draws on; a daemon under a service manager has no
        # TERM of its own to hand down. What the person's viewer emulates is an xterm, as nearly every one is.
        if self.agent_spec.terminal and "TERM" not in self.agent_spec.env and "TERM" not in os.environ:
            return {"TERM": "xterm-256color"}
        return {}

    def _tap_terminal(self, terminal: PtyHost) -> None:
        """The one place the terminal's output stream is handed to output parsers: this run's report feed (a
        later run has a terminal and a feed of its own). A terminal ends its lines with CR LF; the parsers take
        a line's trailing white space as JSON does."""
        terminal.add_tap(self._feed.feed)

    async def _drain_stdout(self, process: AgentProcess) -> None:
        # Nothing else reads a passthrough CLI's stdout; a full pipe would block it. Its output joins the
        # bounded in-memory window (`agentctl stderr`), never a log or a file, and passes the report feed.
        feed = self._feed  # this run's: a later run's output never reaches this feed
        with contextlib.suppress(Exception):
            while chunk := await process.stdout.read(65536):
                process.stderr_ring.feed(chunk)
                feed.feed(chunk)
        feed.close()

    async def output_drained(self, timeout: float = 2.0) -> None:
        """Return once the CLI's stdout reached its end (so the window holds its last words), or after `timeout`."""
        if self._drain is not None:
            await asyncio.wait([self._drain], timeout=timeout)

    # -- endings ------------------------------------------------------------------------------------

    async def _halt(self) -> None:
        self._stop_watch()
        if self.supervisor.process is not None:  # idempotent: a stopped process is not stopped twice
            await self.supervisor.stop(grace=self.agent_spec.stop_grace)
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(BaseException):
                await self._drain
            self._drain = None
        await self._cleanup()

    def _start_cleanup(self) -> asyncio.Task[None] | None:
        """Take this run's files (so a later run's are never touched) and remove them in a worker thread."""
        mat, tmpdir = self._mat, self._tmpdir
        self._mat = self._tmpdir = None
        if mat is None and tmpdir is None:
            return None
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(_remove, mat, tmpdir))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    async def _cleanup(self) -> None:
        self._start_cleanup()
        await self._settle_cleanups()

    async def _settle_cleanups(self) -> None:
        while self._cleanups:
            pending = list(self._cleanups)
            await asyncio.gather(*pending, return_exceptions=True)
            self._cleanups.difference_update(pending)

    def _failed(self, reason_code: str, summary: str) -> None:
        self.start_error = AgentError(reason_code, summary)
        self.ctx.readiness.set("agent", False, f"{reason_code}: {summary}")
        # No process was started for this attempt: the agent is not "starting" any more.
        self.ctx.ledger.update_agent(
            state="exited", exited_at=self.ctx.ledger.now(), exit_reason=summary, start_failure=reason_code
        )
        log.warning("passthrough agent did not start: %s", reason_code)

    def _on_exit(self, info: ExitInfo) -> None:
        ctx = self.ctx
        ctx.ledger.update_agent(
            state="exited",
            exited_at=ctx.ledger.now(),
            exit_code=info.returncode,
            exit_signal=info.signal,
            exit_reason=info.reason,
            stopped_by_daemon=info.stopped,
        )
        ctx.readiness.set("agent", False, f"exited: {info.reason}")
        # The process is gone: its configuration (and the token in it) goes with it.
        self._start_cleanup()
        if info.stopped or self._stopping:
            return
        log.debug("passthrough agent %s", info.reason)  # the supervisor logs the end once at default level
        if info.returncode != 0 and self.attempt_id is not None:
            # A print-mode CLI exiting 0 has simply finished; anything else is a report-level diagnostic.
            ctx.ledger.record("explicit_error", self.attempt_id, reason_code="agent_exited", summary=info.reason)
        if self.agent_spec.linger is not None:
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(self.agent_spec.linger, ctx.request_stop)


    def _stop_watch(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()


def _remove(mat: Materialization | None, private: PrivateDir | None) -> None:
    """Raises nothing: this runs in a task nobody may await (an exit's cleanup), and a file's trouble is one
    line (the journal keeps what a later `agentctl recover` needs), never a traceback."""
    try:
        if mat is not None:
            cleanup(mat)
    except Exception as exc:  # noqa: BLE001 - see above; cleanup() itself isolates each file
        log.warning("could not restore the workspace files at stop (%s); the journal keeps them for "
                    "`agentctl recover`", type(exc).__name__)
    if private is not None:
        try:
            private.remove()
        except Exception as exc:  # noqa: BLE001 - a dead daemon's directory is swept by the next start
            log.warning("could not remove the private config directory at stop (%s)", type(exc).__name__)
