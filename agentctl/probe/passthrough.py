"""The `probe passthrough` flow: a sentinel MCP server materialized with a passthrough strategy, the CLI run bounded.

Steps, each its own finding (the ProbePassthroughReport contract type):
1. start the HTTP sentinel on loopback (agentctl/probe/sentinel.py, the `probe mcp` one) with a fresh credential;
2. materialize it as the CLI's built-in server with the strategy, in a private 0700 directory, exactly as the
   daemon does (configuration written: temporary files, merged workspace files, or filtered and why);
3. spawn the CLI under the daemon's Supervisor (stdin closed, stdout drained through the strategy's report
   parser and never shown), and watch until it exits or the window ends. `codex app-server` is the one CLI
   the probe speaks to (agentctl/probe/codex_app.py): it starts MCP servers only for a client's thread, and
   reports each one's startup (`codex:app-server`); it is stopped once it has reported the sentinel;
4. stop it (the whole process tree), remove the temporary files, restore the workspace and check each merged
   file is back byte for byte; stop the sentinel.

Initialize, tools/list and tool use are what the sentinel observed; the agent-reported status is what the CLI
printed through its provider contract (or why it has none). Nothing of the CLI's output is kept: only parsed
states and counts. A merge is not journaled: a probe killed by SIGKILL mid-run can leave a merged workspace file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentctl.agent.delivery import BuiltinEndpoint
from agentctl.agent.spawn import resolve_command
from agentctl.runtime import DAEMON_SECRET_ENV_PREFIXES
from agentctl.agent.clis import get_strategy, open_reader, plan_report
from agentctl.agent.passthrough.base import Materialization, MaterializeError, MaterializeRequest, insert_args
from agentctl.agent.passthrough.recovery import PrivateDir
from agentctl.agent.passthrough.workspace import cleanup
from agentctl.agent.reported.base import ReportReader, ServerReport
from agentctl.agent.clis.codex import SOURCE as CODEX_SOURCE, CodexAppServerReader
from agentctl.agent.supervisor import AgentStartError, Supervisor
from agentctl.evidence.contract.probe import (
    ProbeAgentReport,
    ProbeConfiguration,
    ProbePassthroughReport,
)
from agentctl.evidence.contract.report import CONTRACT_VERSION, AgentState, ErrorSummary
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry
from agentctl.exit_codes import EXIT_NO_DAEMON, EXIT_OK
from agentctl.identity import new_token
from agentctl.logs import log_failure
from agentctl.probe import codex_app, sentinel as S
from agentctl.probe.run import Recorder
from agentctl.spec import AgentSpec, IdentitySpec, McpSpec, Spec, StrategyName

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

log = logging.getLogger(__name__)
EXIT_COULD_NOT_RUN = EXIT_NO_DAEMON  # 2, as for `probe mcp`


@dataclass
class PassthroughOptions:
    strategy: StrategyName
    command: list[str]
    timeout: float
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    stop_grace: float = 2.0


class _CouldNotRun(Exception):
    def __init__(self, error: ErrorSummary) -> None:
        super().__init__(error.summary)
        self.error = error


class PassthroughProbe:
    def __init__(self, opts: PassthroughOptions) -> None:
        self.opts = opts
        self.workdir = Path(os.path.realpath(opts.workdir or os.getcwd()))
        self.rec = Recorder(None, _utc_now)
        self.credential = new_token()
        self.secrets = SecretRegistry([self.credential, *opts.env.values(), *opts.command[1:]])
        names = [name for name in os.environ if name.startswith(DAEMON_SECRET_ENV_PREFIXES)]
        self.supervisor = Supervisor(secret_env_names=names)
        self.agent = AgentState(protocol="passthrough", state="starting")
        self.config = ProbeConfiguration(strategy=opts.strategy, server_name=S.SERVER_NAME)
        self.report = ProbeAgentReport()
        self._sentinel: S.HttpSentinel | None = None
        self._mat: Materialization | None = None
        self._private: PrivateDir | None = None
        self._reader: ReportReader | None = None
        self._timed_out = False
        self._app_server = False
        self._settled = asyncio.Event()

    async def run(self) -> tuple[ProbePassthroughReport, int]:
        error = None
        try:
            await self._materialize()
            await self._run_cli()
        except _CouldNotRun as exc:
            error = exc.error
        finally:
            await self._stop()
        return self._result(error), EXIT_OK if error is None else EXIT_COULD_NOT_RUN

    def _spec(self) -> Spec:
        agent = AgentSpec(command=self.opts.command, protocol="passthrough", strategy=self.opts.strategy,
                          workdir=str(self.workdir), env=self.opts.env)
        identity = IdentitySpec(task_id="probe", session_id="probe", agent_id="probe", agent_profile_id="probe")
        return Spec(identity=identity, agent=agent, mcp=McpSpec(builtin_name=S.SERVER_NAME, profile="task"))

    async def _materialize(self) -> None:
        strategy = get_strategy(self.opts.strategy)
        if strategy is None:  # the command line refuses unknown names first
            raise _CouldNotRun(ErrorSummary(reason_code="no_passthrough_strategy", summary="unknown strategy"))
        self._sentinel = S.HttpSentinel(self.rec.contact, self.credential)
        await self._sentinel.start()
        builtin = BuiltinEndpoint(S.SERVER_NAME, self._sentinel.url, self._sentinel.sse_url, self.credential)

        def write() -> tuple[PrivateDir, Materialization]:
            private = PrivateDir()
            try:
                return private, strategy.materialize(MaterializeRequest(self._spec(), builtin, self.workdir, private.path))
            except BaseException:
                private.remove()
                raise

        try:
            self._private, mat = await asyncio.to_thread(write)
        except MaterializeError as exc:
            raise _CouldNotRun(summarize(exc.reason_code, exc.summary, self.secrets)) from None
        except OSError as exc:
            raise _CouldNotRun(ErrorSummary(reason_code="materialize_failed",
                                            summary=f"cannot create a private directory: {exc.strerror}")) from None
        self._mat, config = mat, self.config
        config.written_at, config.written_elapsed_s = self.rec.stamp()
        entry = next((e for e in mat.delivered if e.name == S.SERVER_NAME), None)
        config.delivered, config.transport = entry is not None, entry.transport if entry else None
        omitted = next((o for o in mat.filtered if o.name == S.SERVER_NAME), None)
        if omitted is not None:
            config.filtered = summarize(omitted.reason_code, omitted.summary, self.secrets)
        config.temporary_files = len(mat.files)
        config.workspace_files = ["/".join(r.parts) for r in mat.restores]

    async def _run_cli(self) -> None:
        assert self._mat is not None
        argv = insert_args(resolve_command(self.opts.command), self._mat.argv)
        delivered = [S.SERVER_NAME] if self.config.delivered else []
        plan = plan_report(self.opts.strategy, argv)
        self._app_server = plan.source == CODEX_SOURCE  # the probe drives `codex app-server` as its client
        if self._app_server:
            self._reader = CodexAppServerReader(delivered, self.secrets) if delivered else None
        else:
            self._reader = open_reader(plan, delivered)
        self.report.source, self.report.note = plan.source, plan.note
        self.agent.started_at = self.rec.stamp()[0]
        try:
            await self.supervisor.start(argv, cwd=str(self.workdir), env=self.opts.env, extra_env=self._mat.env)
        except AgentStartError as exc:
            raise _CouldNotRun(summarize("agent_start_failed", str(exc), self.secrets)) from None
        process = self.supervisor.process
        assert process is not None
        self.agent.state = "running"
        if self._app_server:  # Codex's app-server starts its servers only for a client: the probe is one
            reader = self._reader
            drain = asyncio.ensure_future(codex_app.drive(process.stdin, process.stdout, str(self.workdir),
                                                         lambda line: self._take(reader.feed(line) if reader else [])))
        else:
            with contextlib.suppress(Exception):
                process.stdin.close()
            drain = asyncio.ensure_future(self._drain(process.stdout))
        try:
            exited = asyncio.ensure_future(self.supervisor.wait_exit())
            settled = asyncio.ensure_future(self._settled.wait())
            done, _ = await asyncio.wait({exited, settled}, timeout=self.opts.timeout, return_when=asyncio.FIRST_COMPLETED)
            exited.cancel()
            settled.cancel()
            if not done:
                self._timed_out = True  # stopped by the probe: what it did so far is the finding
                return
            if exited not in done:
                return  # a server that never exits by itself (app-server) has reported: enough
            with contextlib.suppress(asyncio.TimeoutError):  # the rest of its output (a child may hold the pipe)
                await asyncio.wait_for(asyncio.shield(drain), 2.0)
        finally:
            drain.cancel()
            with contextlib.suppress(BaseException):
                await drain

    async def _drain(self, stdout: asyncio.StreamReader) -> None:
        while chunk := await stdout.read(65536):
            self._take(self._reader.feed(chunk) if self._reader is not None else [])
        if self._reader is not None:
            self._take(self._reader.close())

    def _take(self, reports: list[ServerReport]) -> None:
        for item in reports:
            report = self.report
            report.state, report.raw_state, report.tool_count = item.state, item.raw_state, item.tool_count
            report.at, report.elapsed_s = self.rec.stamp()
            if self._app_server and item.state != "pending":
                self._settled.set()  # app-server's startup of the sentinel is over, one way or the other

    async def _stop(self) -> None:
        try:
            if self.supervisor.process is not None:
                info = await self.supervisor.stop(grace=self.opts.stop_grace)
                agent = self.agent
                agent.state, agent.exited_at = "exited", self.rec.stamp()[0]
                agent.exit_code, agent.exit_signal, agent.exit_reason = info.returncode, info.signal, info.reason
                agent.stopped_by_daemon = info.stopped
            if self._mat is not None or self._private is not None:
                self.config.restored = await asyncio.to_thread(_remove_and_check, self._mat, self._private)
            if self._sentinel is not None:
                await self._sentinel.stop()
        except Exception as exc:  # the report must still be produced
            log_failure(log, "stopping the passthrough probe failed", exc, logging.WARNING)

    def _result(self, error: ErrorSummary | None) -> ProbePassthroughReport:
        rec = self.rec
        return ProbePassthroughReport(
            version=CONTRACT_VERSION, started_at=rec.started_at, finished_at=rec.stamp()[0], timeout_s=self.opts.timeout,
            ran=error is None, error=error, agent=self.agent if self.agent.started_at else None,
            configuration=self.config if self.config.written_at else None, first_contact=rec.first_contact,
            initialize=rec.initialize, tools_list=rec.tools_list, tool_call=rec.tool_call, contacts=rec.contacts,
            contacts_dropped=rec.dropped, agent_report=self.report if self._mat is not None else None,
            timed_out=self._timed_out,
        )


def _utc_now() -> datetime:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _remove_and_check(mat: Materialization | None, private: PrivateDir | None) -> bool:
    """Remove what was written and restore the workspace; True when every merged file is back as it was."""
    restores = list(mat.restores) if mat is not None else []
    if mat is not None:
        cleanup(mat)
    if private is not None:
        private.remove()
    for restore in restores:
        path = restore.workdir.joinpath(*restore.parts)
        try:
            now = path.read_bytes()
        except FileNotFoundError:
            now = None
        if now != restore.original:
            return False
        if any(restore.workdir.joinpath(*d).exists() for d in restore.created_dirs):
            return False
    return True


async def run_passthrough_probe(opts: PassthroughOptions) -> tuple[ProbePassthroughReport, int]:
    return await PassthroughProbe(opts).run()
