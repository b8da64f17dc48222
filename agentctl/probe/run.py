"""The probe flow: spawn the agent as the daemon does, ACP initialize, deliver the sentinel, watch, report.

Steps, each with its own finding and time (the ProbeReport contract type):
1. spawn the agent under the daemon's Supervisor (own process group, the daemon's environment handling,
   stderr drained into the bounded ring and never shown), ACP initialize over the daemon's hardened
   stdio transport; `agentCapabilities.mcpCapabilities` is recorded as advertised;
2. start the sentinel on the best advertised transport (http, else sse, else stdio, which every ACP
   agent must support) and deliver it in `session/new` with a real cwd (the resolved workdir);
3. the agent's answer: accepted, no answer in time, or its explicit error (sanitized);
4. with a prompt, send it (permission is granted only for the sentinel tool); without one, wait until
   the sentinel has served tools/list, or the window ends;
5. stop everything: the ACP connection, the agent's whole process tree (which includes a stdio
   sentinel), the sentinel server.

--timeout is the window from delivery to the end of watching (session/new and the prompt included).
ACP initialize gets the daemon's default initialize timeout (or --timeout when longer): an agent's
start-up time is not what the probe measures. Not being contacted in that window is reported as
"unobserved", never as a failure of the agent. The probe "could not run" (exit 2) only when the agent
cannot be started or does not complete ACP initialize. Raw frames are written only to --jsonl.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

import acp
import msgspec
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    EnvVariable,
    HttpHeader,
    HttpMcpServer,
    Implementation,
    McpServerStdio,
    RequestPermissionResponse,
    SseMcpServer,
)

from agentctl import __version__
from agentctl.agent.acp import authenticate, install_sdk_log_scrubber
from agentctl.agent.spawn import resolve_command
from agentctl.runtime import DAEMON_SECRET_ENV_PREFIXES
from agentctl.agent.supervisor import AgentStartError, Supervisor, build_agent_env
from agentctl.agent.transports import AgentStdioTransport
from agentctl.bundled import self_command
from agentctl.exit_codes import EXIT_NO_DAEMON, EXIT_OK
from agentctl.evidence.contract.probe import (
    ProbeContact,
    ProbeJsonlLine,
    ProbePrompt,
    ProbeReport,
    ProbeSession,
)
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    AgentState,
    ErrorSummary,
    McpCapabilities,
    Transport,
)
from agentctl.evidence.sanitize import bounded_text, opaque_id, summarize, target_for_command, target_for_url
from agentctl.evidence.secret_registry import SecretRegistry
from agentctl.identity import new_token
from agentctl.logs import log_failure
from agentctl.probe import sentinel as S
from agentctl.probe.defaults import DEFAULT_TIMEOUT
from agentctl.spec import AgentSpec

if TYPE_CHECKING:  # pragma: no cover
    from acp.client.connection import ClientSideConnection

log = logging.getLogger(__name__)

INITIALIZE_TIMEOUT = AgentSpec(command=["agent"]).initialize_timeout  # the daemon's default
DEFAULT_PROMPT = (
    f"This is an agentctl MCP probe. Please call the tool `{S.TOOL_NAME}` of the MCP server "
    f"`{S.SERVER_NAME}` once, with no arguments, and then reply with its result. Do nothing else."
)
MAX_CONTACTS = 64
EXIT_RAN = EXIT_OK
EXIT_COULD_NOT_RUN = EXIT_NO_DAEMON  # the agent could not be started or did not complete ACP initialize


@dataclass
class ProbeOptions:
    command: list[str]
    prompt: str | None = None  # None: no prompt; "" is refused by the CLI
    timeout: float = DEFAULT_TIMEOUT
    workdir: str | None = None
    jsonl: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    stop_grace: float = 2.0
    auth_method: str | None = None  # as `[agent] auth_method`: None picks by the agent's environment


class Recorder:
    """Times, the sentinel's contacts (the firsts kept apart), and the optional JSONL file."""

    def __init__(self, jsonl_fd: int | None, clock: Callable[[], datetime]) -> None:
        self._fd = jsonl_fd
        self._clock = clock
        self._t0 = time.monotonic()
        self.started_at = clock()
        self.contacts: list[ProbeContact] = []
        self.dropped = 0
        self.first_contact: ProbeContact | None = None
        self.initialize: ProbeContact | None = None
        self.tools_list: ProbeContact | None = None
        self.tool_call: ProbeContact | None = None
        self.changed = asyncio.Event()
        self._encode = msgspec.json.Encoder().encode

    def stamp(self) -> tuple[datetime, float]:
        return self._clock(), round(time.monotonic() - self._t0, 3)

    def _write(self, line: ProbeJsonlLine) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, self._encode(line) + b"\n")
        except (OSError, TypeError, ValueError):
            log.debug("writing a JSONL line failed", exc_info=True)

    def contact(self, kind: str, fields: dict[str, Any]) -> None:
        at, elapsed = self.stamp()
        item = msgspec.convert({**fields, "kind": kind, "at": at, "elapsed_s": elapsed}, ProbeContact)
        if self.first_contact is None and kind != "closed":
            self.first_contact = item
        if kind == "initialize" and self.initialize is None and item.outcome != "error":
            self.initialize = item
        elif kind == "tools_list" and self.tools_list is None:
            self.tools_list = item
        elif kind == "tool_call" and (self.tool_call is None or (
            self.tool_call.tool_name != S.TOOL_NAME and item.tool_name == S.TOOL_NAME
        )):
            self.tool_call = item
        if len(self.contacts) < MAX_CONTACTS:
            self.contacts.append(item)
        else:
            self.dropped += 1
        self._write(ProbeJsonlLine(type="sentinel", at=at, elapsed_s=elapsed, contact=item))
        self.changed.set()

    def frame(self, event: Any) -> None:
        """ACP SDK stream observer: the raw frame, both ways (only ever registered with --jsonl)."""
        at, elapsed = self.stamp()
        direction: Literal["to_agent", "from_agent"] = "to_agent" if getattr(event.direction, "value", event.direction) == "outgoing" else "from_agent"
        self._write(ProbeJsonlLine(type="acp", at=at, elapsed_s=elapsed, direction=direction, frame=event.message))

    def step(self, name: str, **detail: Any) -> tuple[datetime, float]:
        at, elapsed = self.stamp()
        self._write(ProbeJsonlLine(type="probe", at=at, elapsed_s=elapsed, step=name, detail=detail or None))
        return at, elapsed

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class _ProbeClient:
    """The ACP client side: updates are ignored (never recorded); permission only for the sentinel tool."""

    def __init__(self) -> None:
        self.permission_requests = 0
        self.permissions_granted = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        self.permission_requests += 1
        # The title names the tool (`agentctl-probe/agentctl_probe_sentinel`, `mcp__agentctl-probe__...`);
        # its input is not looked at, so a command that merely mentions the name is not allowed.
        title = getattr(tool_call, "title", None)
        choice = None
        if isinstance(title, str) and S.TOOL_NAME in title:
            kinds = {str(getattr(o, "kind", "")): o.option_id for o in options or []}
            choice = kinds.get("allow_once") or next((v for k, v in kinds.items() if k.startswith("allow")), None)
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        self.permissions_granted += 1
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))


class CouldNotRun(Exception):
    def __init__(self, reason_code: str, summary: str) -> None:
        super().__init__(summary)
        self.error = ErrorSummary(reason_code=reason_code, summary=summary)


def open_jsonl(path: str) -> int:
    """The JSONL file, 0600 (it holds raw frames: prompts and the sentinel's credential). Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)
    return fd


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _seconds(value: float) -> str:
    return f"{value:g}" if value >= 1 else f"{value:.2g}"


class Probe:
    def __init__(self, opts: ProbeOptions, *, jsonl_fd: int | None = None, clock: Callable[[], datetime] = _utc_now) -> None:
        self.opts = opts
        self.workdir = os.path.realpath(opts.workdir or os.getcwd())
        if jsonl_fd is None and opts.jsonl:
            jsonl_fd = open_jsonl(opts.jsonl)
        self.rec = Recorder(jsonl_fd, clock)
        self.client = _ProbeClient()
        self.credential = new_token()
        # Everything secret-bearing the probe hands the agent, with its parts (see secret_registry).
        self.secrets = SecretRegistry([self.credential, *opts.env.values(), *opts.command[1:]])
        secret_names = [name for name in os.environ if name.startswith(DAEMON_SECRET_ENV_PREFIXES)]
        self.supervisor = Supervisor(secret_env_names=secret_names)
        self.agent = AgentState(protocol="acp", state="starting")
        self.advertised: tuple[datetime, float] | None = None
        self.session: ProbeSession | None = None
        self.prompt: ProbePrompt | None = None
        self._conn: ClientSideConnection | None = None
        self._transport: AgentStdioTransport | None = None
        self._sentinel: S.HttpSentinel | S.StdioReportServer | None = None
        self._window: tuple[float, bool] | None = None  # (seconds watched, reached the deadline)

    def _summary(self, reason_code: str, text: str) -> ErrorSummary:
        return summarize(reason_code, text, self.secrets)

    @property
    def _open_conn(self) -> ClientSideConnection:
        """The ACP connection: open from the agent's start on (the steps after it run only once it is)."""
        assert self._conn is not None, "the agent's connection is opened before any session step"
        return self._conn

    # ---- the flow ------------------------------------------------------------------------------

    async def run(self) -> tuple[ProbeReport, int]:
        error: ErrorSummary | None = None
        try:
            await self._start_and_initialize()
            await self._deliver_and_watch()
        except CouldNotRun as exc:
            error = exc.error
        finally:
            await self._stop()
        report = self._report(error)
        return report, EXIT_RAN if error is None else EXIT_COULD_NOT_RUN

    async def _start_and_initialize(self) -> None:
        opts = self.opts
        self.agent.started_at = self.rec.stamp()[0]
        try:
            await self.supervisor.start(resolve_command(opts.command), cwd=self.workdir, env=opts.env)
        except AgentStartError as exc:
            raise CouldNotRun("agent_start_failed", str(exc)) from None
        self.rec.step("agent_started")
        self._transport = AgentStdioTransport(self.supervisor.stdout, self.supervisor.stdin)
        observers = [self.rec.frame] if opts.jsonl else []
        install_sdk_log_scrubber()  # the SDK's own log lines may quote agent output
        # The SDK dispatches to whichever client methods exist (a missing one answers -32601), while its Client
        # Protocol lists every method: the probe's client has only the two it serves.
        self._conn = acp.connect_to_agent(self.client, self._transport,  # type: ignore[arg-type]
                                          use_unstable_protocol=True, observers=observers)
        try:
            resp = await asyncio.wait_for(
                self._conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_info=Implementation(name="agentctl-probe", version=__version__),
                ),
                timeout=max(opts.timeout, INITIALIZE_TIMEOUT),
            )
        except asyncio.TimeoutError:
            waited = max(opts.timeout, INITIALIZE_TIMEOUT)
            raise CouldNotRun(
                "initialize_timeout", f"the agent did not answer ACP initialize within {_seconds(waited)} s"
            ) from None
        except acp.RequestError as exc:
            raise CouldNotRun("initialize_rejected", self._summary("x", str(exc)).summary) from None
        except (ConnectionError, OSError):
            reason = await self._exit_reason()
            raise CouldNotRun("agent_exited", f"the agent {reason} before answering ACP initialize") from None
        caps = resp.agent_capabilities
        mcp_caps = caps.mcp_capabilities if caps is not None else None
        info = resp.agent_info
        self.agent.state = "running"
        self.agent.name = bounded_text(info.name, secrets=self.secrets) if info is not None else None
        self.agent.version = bounded_text(info.version, secrets=self.secrets) if info is not None else None
        self.agent.protocol_version = resp.protocol_version if isinstance(resp.protocol_version, int) else None
        self.agent.mcp_capabilities = McpCapabilities(http=bool(mcp_caps and mcp_caps.http), sse=bool(mcp_caps and mcp_caps.sse))
        self.advertised = self.rec.step("initialized")
        env = build_agent_env(opts.env, secret_env_names=self.supervisor.secret_env_names)
        auth = await authenticate(self._conn, resp.auth_methods, opts.auth_method, env, self.secrets,
                                  max(opts.timeout, INITIALIZE_TIMEOUT))
        for name, value in auth.items():
            setattr(self.agent, name, value)

    async def _exit_reason(self) -> str:
        with contextlib.suppress(asyncio.TimeoutError, RuntimeError):
            info = await asyncio.wait_for(self.supervisor.wait_exit(), 1.0)
            return info.reason
        return "closed its stdout"

    async def _start_sentinel(self, transport: Transport) -> tuple[Any, str]:
        """Start the sentinel for `transport`; returns the ACP mcpServers entry and its release-safe target."""
        if transport in ("http", "sse"):
            http = S.HttpSentinel(self.rec.contact, self.credential)
            self._sentinel = http
            await http.start()
            headers = [HttpHeader(name="Authorization", value=f"Bearer {self.credential}")]
            if transport == "http":
                return (HttpMcpServer(type="http", name=S.SERVER_NAME, url=http.url, headers=headers),
                        target_for_url(http.url))
            return (SseMcpServer(type="sse", name=S.SERVER_NAME, url=http.sse_url, headers=headers),
                    target_for_url(http.sse_url))
        stdio = S.StdioReportServer(self.rec.contact)
        self._sentinel = stdio
        await stdio.start()
        assert stdio.path is not None
        command, *args = self_command()
        args += ["probe", "stdio-sentinel", "--report", stdio.path, "--expect", S.credential_digest(self.credential)]
        entry = McpServerStdio(
            name=S.SERVER_NAME, command=command, args=args, env=[EnvVariable(name=S.CREDENTIAL_ENV, value=self.credential)]
        )
        return entry, target_for_command(command)

    async def _deliver_and_watch(self) -> None:
        opts = self.opts
        caps = self.agent.mcp_capabilities or McpCapabilities()
        transport: Transport = "http" if caps.http else "sse" if caps.sse else "stdio"
        entry, target = await self._start_sentinel(transport)
        loop = asyncio.get_running_loop()
        delivered_mono = loop.time()
        deadline = delivered_mono + opts.timeout
        at, elapsed = self.rec.step("delivered", transport=transport, server=S.SERVER_NAME)
        session = self.session = ProbeSession(
            server_name=S.SERVER_NAME, transport=transport, target=target, delivered_at=at, delivered_elapsed_s=elapsed
        )

        def left() -> float:
            return max(0.0, deadline - loop.time())

        def window(reached: bool) -> None:
            self._window = (opts.timeout if reached else loop.time() - delivered_mono, reached)

        try:
            resp = await asyncio.wait_for(self._open_conn.new_session(cwd=self.workdir, mcp_servers=[entry]), left())
        except asyncio.TimeoutError:
            session.error = ErrorSummary(
                reason_code="session_timeout",
                summary=f"the agent did not answer session/new within {_seconds(opts.timeout)} s",
            )
            window(True)
            return
        except acp.RequestError as exc:
            session.accepted = False
            session.error = self._summary("session_rejected", str(exc))
        except (ConnectionError, OSError):
            session.error = ErrorSummary(
                reason_code="agent_exited", summary=f"the agent {await self._exit_reason()} during session/new"
            )
        else:
            session.accepted = True
            session.acp_session_id = opaque_id(getattr(resp, "session_id", None), secrets=self.secrets)
        session.answered_at, session.answered_elapsed_s = self.rec.step(
            "session_answered", accepted=bool(session.accepted)
        )
        if not session.accepted:
            window(False)
            return
        if opts.prompt is not None:
            await self._prompt(resp.session_id, left)
            window(left() <= 0)
            return
        reached = await self._watch(left)
        window(reached)

    async def _prompt(self, session_id: str, left: Callable[[], float]) -> None:
        opts = self.opts
        at, elapsed = self.rec.step("prompt_sent")
        prompt = self.prompt = ProbePrompt(sent_at=at, sent_elapsed_s=elapsed, default_text=opts.prompt == DEFAULT_PROMPT)
        try:
            resp = await asyncio.wait_for(
                self._open_conn.prompt(session_id=session_id, prompt=[acp.text_block(opts.prompt or DEFAULT_PROMPT)]), left()
            )
            prompt.stop_reason = bounded_text(str(getattr(resp, "stop_reason", "") or ""), secrets=self.secrets)
        except asyncio.TimeoutError:
            prompt.error = ErrorSummary(
                reason_code="prompt_timeout", summary=f"the prompt did not finish within {_seconds(opts.timeout)} s"
            )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._open_conn.cancel(session_id=session_id), 1.0)
        except acp.RequestError as exc:
            prompt.error = self._summary("prompt_rejected", str(exc))
        except (ConnectionError, OSError):
            prompt.error = ErrorSummary(
                reason_code="agent_exited", summary=f"the agent {await self._exit_reason()} during the prompt"
            )
        prompt.finished_at, prompt.finished_elapsed_s = self.rec.step("prompt_finished")

    async def _watch(self, left: Callable[[], float]) -> bool:
        """Wait for tools/list (or a tool call) on the sentinel, the agent's exit, or the deadline.

        Returns True when the deadline was reached."""
        rec = self.rec
        exited = asyncio.ensure_future(self.supervisor.wait_exit())
        try:
            while rec.tools_list is None and rec.tool_call is None:
                if exited.done():
                    return False
                remaining = left()
                if remaining <= 0:
                    return True
                rec.changed.clear()
                changed = asyncio.ensure_future(rec.changed.wait())
                await asyncio.wait({changed, exited}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
            return False
        finally:
            exited.cancel()

    async def _stop(self) -> None:
        try:
            await self._stop_all()
        except Exception as exc:  # the report must still be produced; the supervisor has swept what it could
            log_failure(log, "stopping the probe failed", exc, logging.WARNING)
        self.rec.close()

    async def _stop_all(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), 2.0)
        elif self._transport is not None:
            await self._transport.close()
        if self.supervisor.process is not None:
            info = await self.supervisor.stop(grace=self.opts.stop_grace)
            agent = self.agent
            agent.state = "exited"
            agent.exited_at = self.rec.stamp()[0]
            agent.exit_code, agent.exit_signal, agent.exit_reason = info.returncode, info.signal, info.reason
            agent.stopped_by_daemon = info.stopped
            agent.stdout_skipped_lines = self._transport.skipped_lines if self._transport is not None else 0
        self.agent.permission_requests = self.client.permission_requests
        self.agent.permissions_granted = self.client.permissions_granted
        if self._sentinel is not None:
            with contextlib.suppress(Exception):
                await self._sentinel.stop()
        self.rec.step("stopped")

    def _report(self, error: ErrorSummary | None) -> ProbeReport:
        rec = self.rec
        unobserved = None
        if error is None and rec.first_contact is None and self._window is not None:
            waited, reached = self._window
            unobserved = f"unobserved: the agent did not contact the sentinel within {_seconds(round(waited, 2) if not reached else waited)} s"
        return ProbeReport(
            version=CONTRACT_VERSION,
            started_at=rec.started_at,
            finished_at=rec.stamp()[0],
            timeout_s=self.opts.timeout,
            ran=error is None,
            error=error,
            agent=self.agent if self.supervisor.process is not None else None,
            advertised_at=self.advertised[0] if self.advertised else None,
            advertised_elapsed_s=self.advertised[1] if self.advertised else None,
            session=self.session,
            prompt=self.prompt,
            first_contact=rec.first_contact,
            initialize=rec.initialize,
            tools_list=rec.tools_list,
            tool_call=rec.tool_call,
            contacts=rec.contacts,
            contacts_dropped=rec.dropped,
            unobserved=unobserved,
            raw_frames_recorded=self.opts.jsonl is not None,
        )


async def run_probe(opts: ProbeOptions, *, jsonl_fd: int | None = None) -> tuple[ProbeReport, int]:
    return await Probe(opts, jsonl_fd=jsonl_fd).run()
