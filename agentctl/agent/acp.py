"""The ACP side of the agent: initialize, and every session/new, session/load and reset as an attempt.

Each session operation creates the new attempt *before* delivery, records configured / filtered /
delivered, then the agent's answer: session_accepted, or an explicit error that is server-specific only
when it names a server. Prompts stream the agent's updates to the caller and are never recorded. A session
notice the agent sends (agentctl/agent/acp_notices.py) is kept on its session's attempt as a report-level
line, and an adapter's own report of its MCP servers is read by agentctl/agent/reported/acp_tap.py; an agent
whose module gates delivery (`acp_gate`: Gemini CLI in a folder it does not trust gets no server,
agentctl/agent/clis/gemini.py) has each session's plan filtered by it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import acp
import acp.meta
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    HttpMcpServer,
    Implementation,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    RequestPermissionResponse,
    SseMcpServer,
)

from agentctl import __version__, tracing
from agentctl.agent import acp_auth, acp_notices, clis
from agentctl.agent.attribution import attribute, error_text
from agentctl.agent.delivery import DeliveryPlan, Planned, plan_delivery
from agentctl.agent.outcome import AgentError, SessionOutcome
from agentctl.agent.reported.acp_tap import AcpReportTap, ReportSink
from agentctl.agent.transports import AgentStdioTransport
from agentctl.bundled import self_command
from agentctl.evidence.contract.control import PromptStreamItem
from agentctl.evidence.contract.report import AttemptOrigin, McpCapabilities
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.evidence.reducer import find_attempt
from agentctl.evidence.sanitize import bounded_text, opaque_id, summarize
from agentctl.evidence.secret_registry import SecretRegistry
from agentctl.spec import Spec

if TYPE_CHECKING:  # pragma: no cover
    from acp.client.connection import ClientSideConnection

log = logging.getLogger(__name__)

# Called synchronously from the SDK's per-update task and must never block: the SDK starts one task per
# session/update, so a sink that waits on a slow reader lets them pile up without bound.
UpdateSink = Callable[[PromptStreamItem], None]
CANCEL_TIMEOUT = 5.0
MAX_HELD_NOTICES = 16  # notices with a not-yet-known id held while session/new is in flight; more are dropped

_ACP_DIR = os.path.dirname(os.path.abspath(acp.__file__)) + os.sep
# The only arguments the SDK's log lines may keep: protocol method names (an agent-chosen one is content).
_KNOWN_METHODS = frozenset(acp.meta.CLIENT_METHODS.values()) | frozenset(acp.meta.AGENT_METHODS.values())


class _SdkLogScrubber(logging.Filter):
    """The ACP SDK logs through the root logger with full tracebacks, and a pydantic ValidationError's text
    quotes its input: one malformed session/update from the agent would put the agent's output (and so
    prompt or file content) in the daemon's log. Keep the SDK's line and the exception's type only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.pathname.startswith(_ACP_DIR):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        args = record.args if isinstance(record.args, tuple) else ()
        # Arguments are agent-chosen (a JSON-RPC method name): keep only the protocol's own names.
        safe = tuple(a if isinstance(a, str) and a in _KNOWN_METHODS else "<other>" for a in args)
        try:
            text = str(record.msg) % safe if safe else str(record.msg)
        except (TypeError, ValueError):
            text = str(record.msg).split("%", 1)[0].strip()
        record.msg = f"ACP SDK: {text}" + (f" ({type(exc).__name__})" if exc is not None else "")
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


_SCRUBBER = _SdkLogScrubber()


def install_sdk_log_scrubber() -> None:
    root = logging.getLogger()
    if _SCRUBBER not in root.filters:
        root.addFilter(_SCRUBBER)


class _DaemonClient:
    """The ACP client object the SDK dispatches agent requests to.

    A plain class, not a subclass of `acp.Client`: that is a typing Protocol whose inherited stub methods
    would answer an agent's unsupported request with `null` instead of a -32601 "method not found"."""

    def __init__(self, runtime: AcpRuntime) -> None:
        self._runtime = runtime

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await self._runtime._on_update(session_id, update)

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        return await self._runtime._on_permission(options)


class AcpRuntime:
    """One ACP connection to the supervised agent and the attempts it opens."""

    def __init__(
        self,
        spec: Spec,
        ledger: Ledger,
        *,
        builtin_base: Callable[[], str],
        seeds: Callable[[], list[ServerSeed]],
        gone: Callable[[], str] | None = None,
        agent_env: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        assert spec.agent is not None
        self.spec = spec
        self.agent_spec = spec.agent
        self.ledger = ledger
        self._builtin_base = builtin_base
        self._seeds = seeds
        # Why there is no usable agent, for an attempt that cannot be delivered (the manager knows how it ended).
        self._gone = gone or (lambda: "no ACP connection")
        # The environment the agent runs with: read for variable names (and to register a chosen credential
        # as a secret), never stored.
        self._agent_env = agent_env or (lambda: self.agent_spec.env)
        self._conn: ClientSideConnection | None = None
        self._transport: AgentStdioTransport | None = None
        self.caps = McpCapabilities()
        # Until the agent answers initialize, `caps` is a default, not the agent's decision: nothing may be
        # planned (or filtered) from it.
        self.initialized = False
        self.close_supported = False
        self.acp_session_id: str | None = None
        self._sink: UpdateSink | None = None
        self._session_lock = asyncio.Lock()
        self._prompt_lock = asyncio.Lock()
        # The delivery whose session/new or session/load frame is on its way: recorded as `delivered`
        # only once the frame was written to the agent's stdin (see _on_sent).
        self._pending_delivery: tuple[str, list[Planned], list[Planned]] | None = None
        # The attempt of the session/new or session/load in flight (and the id it loads), and the attempt of
        # the accepted session: where a session notice is kept.
        self._opening: tuple[str, str | None] | None = None
        self._session_attempt: str | None = None
        # Notices naming an id not yet known while session/new is in flight: decided when its answer comes.
        self._held: list[tuple[str, dict[str, Any]]] = []
        self.agent_name: str | None = None  # as the agent declared it in initialize (raw: for matching only)
        # The agent module's filter of each session's plan (Gemini CLI's folder trust), decided once when the
        # agent has answered initialize: Gemini reads its trusted-folders file once per process.
        self._gates: list[Callable[[DeliveryPlan], None]] = []
        install_sdk_log_scrubber()

    # -- connection ------------------------------------------------------------------------------

    async def connect(self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader) -> None:
        """ACP initialize over the agent's pipes; records what the agent declared about itself."""
        notices = acp_notices.NoticeTap(self._on_notice).take
        reports = AcpReportTap(self._report_target, ReportSink(self.ledger), self._known(),
                               builtin=self.spec.mcp.builtin_name, agents=clis.agents()).take
        self._transport = AgentStdioTransport(
            stdout, stdin, on_sent=self._on_sent, on_eof=self._on_eof,
            outgoing=acp_notices.advertise,
            intercept=lambda message: self._note_new_session(message) or reports(message) or notices(message),
        )
        # The SDK dispatches to whichever client methods exist (a missing one answers -32601), while its Client
        # Protocol lists every method: _DaemonClient has only the two the daemon serves (its docstring says why).
        self._conn = acp.connect_to_agent(_DaemonClient(self), self._transport,  # type: ignore[arg-type]
                                          use_unstable_protocol=True)
        try:
            resp = await asyncio.wait_for(
                self._conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION,
                    client_info=Implementation(name="agentctl", version=__version__),
                ),
                timeout=self.agent_spec.initialize_timeout,
            )
        except TimeoutError:
            await self.close()
            raise AgentError("initialize_timeout", "the agent did not answer ACP initialize in time") from None
        except acp.RequestError as exc:
            await self.close()
            raise AgentError("initialize_rejected", self._summary(str(exc))) from None
        except (ConnectionError, OSError):
            await self.close()
            raise AgentError(
                "agent_exited_before_initialize", "the agent closed its stdout before answering ACP initialize"
            ) from None
        except Exception as exc:  # an answer the SDK could not validate: the agent is not usable
            await self.close()
            raise AgentError("initialize_invalid", f"unusable initialize answer ({type(exc).__name__})") from None
        caps = resp.agent_capabilities
        mcp_caps = caps.mcp_capabilities if caps is not None else None
        self.caps = McpCapabilities(http=bool(mcp_caps and mcp_caps.http), sse=bool(mcp_caps and mcp_caps.sse))
        session_caps = getattr(caps, "session_capabilities", None) if caps is not None else None
        self.close_supported = bool(session_caps is not None and getattr(session_caps, "close", None))
        info = resp.agent_info
        self.agent_name = info.name if info is not None and isinstance(info.name, str) else None
        command, env = self.agent_spec.command, self.agent_spec.env
        self._gates = [gate for agent in clis.agents() if agent.acp_gate is not None
                       and (gate := agent.acp_gate(self.agent_name, command, self._cwd(), env)) is not None]
        await self._authenticate(resp.auth_methods)
        self.ledger.update_agent(
            state="running",
            name=bounded_text(info.name, secrets=self._known()) if info is not None else None,
            version=bounded_text(info.version, secrets=self._known()) if info is not None else None,
            protocol_version=resp.protocol_version,
            mcp_capabilities=self.caps,
        )
        self.initialized = True

    async def _authenticate(self, advertised: Any) -> None:
        fields = await authenticate(self._conn, advertised, self.agent_spec.auth_method, self._agent_env(),
                                    self._known(), self.agent_spec.initialize_timeout)
        if fields:
            self.ledger.update_agent(**fields)

    @property
    def connected(self) -> bool:
        t = self._transport
        return self._conn is not None and t is not None and not t.closed and not t.eof

    @property
    def _open_conn(self) -> ClientSideConnection:
        """The ACP connection, for a step taken only while `connected`."""
        assert self._conn is not None, "checked `connected` first"
        return self._conn

    @property
    def skipped_stdout_lines(self) -> int:
        return self._transport.skipped_lines if self._transport is not None else 0

    def _on_eof(self) -> None:
        # The count is final once stdout ended; record it even when the daemon lingers without a stop.
        self.ledger.update_agent(stdout_skipped_lines=self.skipped_stdout_lines)

    async def close(self) -> None:
        """Close the ACP connection: pending requests fail, the receive loop and handler tasks end."""
        transport, conn = self._transport, self._conn
        if transport is None:
            return
        if transport.skipped_lines:
            self.ledger.update_agent(stdout_skipped_lines=transport.skipped_lines)
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), timeout=5.0)
            except Exception:  # closing is best effort; the process is stopped by the supervisor anyway
                log.debug("closing the ACP connection failed")
        await transport.close()

    # -- sessions --------------------------------------------------------------------------------

    async def new_session(self, origin: AttemptOrigin = "session_new") -> SessionOutcome:
        async with self._session_lock:
            return await self._open(origin, load_id=None)

    async def load_session(self, acp_session_id: str) -> SessionOutcome:
        async with self._session_lock:
            return await self._open("session_load", load_id=acp_session_id)

    async def reset(self) -> SessionOutcome:
        """ACP has no reset: close (when the agent supports it) or abandon the session, then open a new one.

        The new attempt becomes current before anything is sent, so a slow or failed reset can never keep
        the old attempt's evidence green.
        """
        async with self._session_lock:
            old = self.acp_session_id
            attempt_id, token = self.ledger.begin_attempt("reset", self._seeds())
            if old is not None and self.close_supported and self.connected:
                try:
                    await asyncio.wait_for(self._open_conn.close_session(session_id=old), timeout=5.0)
                except Exception:  # closing is a courtesy; the old session is abandoned either way
                    log.debug("closing the previous ACP session failed")
            self.acp_session_id = None
            return await self._deliver(attempt_id, token, load_id=None)

    async def _open(self, origin: AttemptOrigin, *, load_id: str | None) -> SessionOutcome:
        attempt_id, token = self.ledger.begin_attempt(origin, self._seeds())
        return await self._deliver(attempt_id, token, load_id=load_id)

    async def _deliver(self, attempt_id: str, token: str, *, load_id: str | None) -> SessionOutcome:
        ledger = self.ledger
        if not (self.initialized and self.connected):
            # Nothing is planned for an agent that is gone or never answered initialize: it decided nothing
            # about transports, so no row may say `filtered`. The rows stay `configured`; one report-level
            # error says why.
            summary = self._summary(self._gone())
            ledger.record("explicit_error", attempt_id, reason_code="agent_not_running", summary=summary)
            return SessionOutcome(attempt_id, False, reason_code="agent_not_running", summary=summary)
        plan = plan_delivery(self.spec, self.caps, builtin_base=self._builtin_base(), token=token,
                             bridge=(*self_command(), "mcp-bridge"), witness=(*self_command(), "mcp-witness"))
        cwd = self._cwd()
        for gate in self._gates:
            gate(plan)
        for omitted in plan.filtered:
            ledger.record("filtered", attempt_id, omitted.name, reason_code=omitted.reason_code, summary=omitted.summary)
        sent: list[Planned] = []
        self._pending_delivery = (attempt_id, sent, plan.delivered)
        self._opening = (attempt_id, load_id)
        try:
            servers = [_to_model(p) for p in plan.delivered]
            # The attempt's trace context as `_meta.traceparent` (empty when tracing is off).
            # Any: the SDK takes extra keywords as the request's `_meta` (typed str, they would be checked
            # against its named parameters too).
            meta: dict[str, Any] = tracing.session_meta(ledger, attempt_id,
                                                        "session/new" if load_id is None else "session/load")
            call: Coroutine[Any, Any, NewSessionResponse | LoadSessionResponse]
            if load_id is None:
                call = self._open_conn.new_session(cwd=cwd, mcp_servers=servers, **meta)
            else:
                call = self._open_conn.load_session(cwd=cwd, session_id=load_id, mcp_servers=servers, **meta)
            resp = await asyncio.wait_for(call, timeout=self.agent_spec.session_timeout)
        except TimeoutError:
            return self._session_failed(attempt_id, sent, "session_timeout", "the agent did not answer in time")
        except acp.RequestError as exc:
            return self._session_failed(attempt_id, sent, "session_rejected", str(exc), getattr(exc, "data", None))
        except (ConnectionError, OSError):
            return self._session_failed(attempt_id, sent, "agent_exited", "the agent closed the connection")
        except Exception as exc:  # e.g. an answer the SDK could not validate: not tied to any server
            return self._session_failed(attempt_id, sent, "session_error", f"unusable answer ({type(exc).__name__})")
        finally:
            self._pending_delivery = None
            self._opening = None
            held, self._held = self._held, []
        session_id = load_id if load_id is not None else getattr(resp, "session_id", None)
        self.acp_session_id = session_id
        self._session_attempt = attempt_id
        ledger.record("session_accepted", attempt_id, acp_session_id=opaque_id(session_id, secrets=self._known()))
        for held_id, update in held:  # in arrival order, after the acceptance they depend on
            self._keep_notice(attempt_id, update) if held_id == session_id else self._drop_notice()
        return SessionOutcome(attempt_id, True, acp_session_id=session_id)

    def _attempt_of(self, session_id: str | None) -> Any:
        """The attempt an adapter's structured MCP report is about, by rule, whatever the timing: the accepted
        session's; the one being opened for the id it loads or its session/new answer named (read off the
        wire before the SDK hands the answer on); before that answer, for an id that is not the accepted
        session's, since only the new session's id is not known yet (adapters report their servers' start-up
        while session/new is in flight). A frame without a session id is about no attempt. Free-text notices
        are stricter (`_on_notice`): one naming an id that is not yet known is held until the answer."""
        if session_id is None:
            return None
        attempt_id = None
        opening = self._opening
        if opening is not None and (session_id == opening[1] or (opening[1] is None and session_id != self.acp_session_id)):
            attempt_id = opening[0]
        elif session_id == self.acp_session_id:
            attempt_id = self._session_attempt
        return find_attempt(self.ledger.history, attempt_id) if attempt_id else None

    def _note_new_session(self, message: dict[str, Any]) -> bool:
        """The answer to the session/new in flight names its session: from that frame on, that id (and no
        other unknown one) is the opening attempt's. Never consumes the frame."""
        opening = self._opening
        result = message.get("result") if "id" in message else None
        if opening is not None and opening[1] is None and isinstance(result, dict):
            session_id = result.get("sessionId")
            if isinstance(session_id, str):
                self._opening = (opening[0], session_id)
        return False

    def _report_target(self, session_id: str | None) -> tuple[str, list[str]] | None:
        """agentctl/agent/reported/acp_tap.py's resolver: the attempt and the servers it delivered."""
        attempt = self._attempt_of(session_id)
        if attempt is None:
            return None
        return attempt.attempt_id, [row.name for row in attempt.servers if row.delivered_at is not None]

    def _on_notice(self, session_id: str | None, update: dict[str, Any]) -> None:
        """A session notice belongs to the session whose id it names, decided by that id, never by when it came:

        - the accepted session's id: that session's attempt; the id session/load is loading: that attempt;
        - another id while session/new is in flight: held (at most MAX_HELD_NOTICES) until the answer, then kept
          on the new attempt if the answer gave that id, else dropped;
        - no id, or an id of no session agentctl opened or is opening: dropped.
        A dropped notice is counted (`AgentState.notices_dropped`), never kept or logged."""
        opening = self._opening
        if session_id is None:
            self._drop_notice()
        elif session_id == self.acp_session_id and self._session_attempt is not None:
            self._keep_notice(self._session_attempt, update)
        elif opening is not None and opening[1] is not None and session_id == opening[1]:
            self._keep_notice(opening[0], update)
        elif opening is not None and opening[1] is None and len(self._held) < MAX_HELD_NOTICES:
            self._held.append((session_id, update))
        else:
            self._drop_notice()

    def _drop_notice(self) -> None:
        agent = self.ledger.history.agent
        self.ledger.update_agent(notices_dropped=(agent.notices_dropped if agent else 0) + 1)

    def _keep_notice(self, attempt_id: str, update: dict[str, Any]) -> None:
        attempt = find_attempt(self.ledger.history, attempt_id)
        if attempt is None:  # the attempt has left the bounded history
            self._drop_notice()
            return
        names = [row.name for row in attempt.servers if row.status != "filtered"]  # a notice names a delivered one
        notice = acp_notices.parse_notice(update, names, self.ledger.now(), self._known())
        self.ledger.add_notice(attempt.attempt_id, notice)

    def _on_sent(self, message: dict[str, Any]) -> None:
        """The session request reached the agent's stdin: now, and only now, its servers are delivered."""
        pending = self._pending_delivery
        if pending is None or message.get("method") not in ("session/new", "session/load"):
            return
        attempt_id, sent, planned = pending
        if sent:
            return
        for p in planned:
            self.ledger.record("delivered", attempt_id, p.name, transport=p.transport, target=p.target)
        sent.extend(planned)

    def _session_failed(
        self, attempt_id: str, delivered: list[Planned], reason_code: str, message: str, data: Any = None
    ) -> SessionOutcome:
        """An error that names delivered servers fails those rows; one that names none is report-level.

        Which servers it names is agentctl.agent.attribution's exact rule: structured data first (each
        server with its own reason), else the error's text (message and data.details) where it names a
        server as a server; several servers in free text, or a name that is only a word, name none.
        """
        found = attribute(message, data, [p.name for p in delivered])
        text = error_text(message, data)
        summary = self._summary(text)
        if found.servers:
            for name in found.servers:
                reason = self._summary(found.reasons.get(name) or text)
                self.ledger.record("explicit_error", attempt_id, name, reason_code=reason_code, summary=reason)
        else:
            self.ledger.record("explicit_error", attempt_id, reason_code=reason_code, summary=summary)
        self.acp_session_id = None
        for _ in self._held:  # the refused session/new gave no id: none of them can be tied to a session
            self._drop_notice()
        self._held = []
        return SessionOutcome(
            attempt_id, False, reason_code=reason_code, summary=summary, failed_servers=found.servers
        )

    # -- prompts ---------------------------------------------------------------------------------

    @property
    def prompt_running(self) -> bool:
        return self._prompt_lock.locked()

    def check_prompt(self) -> None:
        """Raise the AgentError a prompt would fail with right now (so the route can answer 409 up front)."""
        if not self.connected:
            raise AgentError("agent_not_running", self._summary(f"the agent is not running ({self._gone()})"))
        if self.acp_session_id is None:
            raise AgentError("no_session", "no accepted ACP session: run `agentctl session new` first")
        if self.prompt_running:
            raise AgentError("prompt_busy", "a prompt is already running: wait for it or `agentctl cancel`")

    async def prompt(self, text: str, sink: UpdateSink | None = None) -> str:
        """Send a prompt to the current ACP session; updates go to `sink` only (never logged or stored)."""
        self.check_prompt()
        async with self._prompt_lock:
            session_id = self.acp_session_id
            if session_id is None:  # the session was reset while this prompt waited for the lock
                raise AgentError("no_session", "no accepted ACP session: run `agentctl session new` first")
            self._sink = sink
            try:
                resp = await self._open_conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])
            except acp.RequestError as exc:
                # Goes to the prompt's caller only (never recorded): the agent's reason helps them.
                raise AgentError("prompt_rejected", self._summary(str(exc))) from None
            except (ConnectionError, OSError):
                raise AgentError("agent_exited", "the agent closed the connection during the prompt") from None
            finally:
                self._sink = None
        return bounded_text(str(getattr(resp, "stop_reason", None) or "end_turn"), 32) or "end_turn"

    async def cancel(self) -> None:
        """Send session/cancel. An agent that stopped reading its stdin cannot hold the caller forever."""
        if self.connected and self.acp_session_id is not None:
            try:
                await asyncio.wait_for(self._open_conn.cancel(session_id=self.acp_session_id), CANCEL_TIMEOUT)
            except TimeoutError:
                raise AgentError("cancel_timeout", "the agent did not take the cancel in time") from None
            except (ConnectionError, OSError):
                raise AgentError("agent_exited", "the agent closed the connection") from None

    async def _on_update(self, session_id: str, update: Any) -> None:
        sink = self._sink
        if sink is None or session_id != self.acp_session_id:
            return
        kind = str(getattr(update, "session_update", None) or "unknown")
        item = PromptStreamItem(type=kind)
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            content = getattr(update, "content", None)
            item.text = getattr(content, "text", "") or ""
        elif kind in ("tool_call", "tool_call_update"):
            item.title = getattr(update, "title", None)
            item.status = getattr(update, "status", None)
        try:
            sink(item)
        except Exception:  # the caller went away (closed the stream): keep the prompt, drop the output
            if self._sink is sink:
                self._sink = None

    async def _on_permission(self, options: Any) -> Any:
        """Spec policy: allow picks the first allow option; deny (the default) and ask-without-upstream cancel."""
        agent = self.ledger.history.agent
        requests = (agent.permission_requests if agent else 0) + 1
        granted = agent.permissions_granted if agent else 0
        choice = None
        if self.agent_spec.permission == "allow":
            for option in options or []:
                if str(getattr(option, "kind", "")).startswith("allow"):
                    choice = option.option_id
                    break
        if choice is not None:
            granted += 1
        self.ledger.update_agent(permission_requests=requests, permissions_granted=granted)
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    # -- helpers ---------------------------------------------------------------------------------

    def _cwd(self) -> str:
        workdir = self.agent_spec.workdir
        return str(Path(workdir).resolve() if workdir else Path.cwd())

    def _known(self) -> SecretRegistry:
        return self.ledger.secrets

    def _summary(self, text: str) -> str:
        return summarize("x", text, self._known()).summary


async def authenticate(conn: Any, advertised: Any, configured: str | None, env: Mapping[str, str],
                       secrets: SecretRegistry, timeout: float) -> dict[str, Any]:
    """ACP `authenticate` with the method agentctl/agent/acp_auth.py picks, for the daemon and the probe: the id
    only (the agent reads the credential from its own environment). Returns the AgentState fields to record
    (`auth_method`, `auth_result`, `auth_note`), empty when nothing was sent. A refusal is not fatal: the
    session's own answer says more."""
    decision = acp_auth.decide(acp_auth.advertised_methods(advertised), configured, acp_auth.present_names(env))
    if decision.not_advertised:
        return {"auth_method": configured, "auth_result": "not_advertised"}
    method_id = decision.method_id
    if method_id is None:
        return {}
    for var in decision.variables:
        if env.get(var, "").strip():
            secrets.add(env[var].strip())  # an echo of the key in any later text is scrubbed
    shown = bounded_text(method_id, 64, secrets=secrets)
    note = None
    try:
        await asyncio.wait_for(conn.authenticate(method_id=method_id), timeout)
    except TimeoutError:
        note = "the agent did not answer authenticate in time"
    except acp.RequestError as exc:
        note = summarize("x", error_text(str(exc), getattr(exc, "data", None)), secrets).summary
    except (ConnectionError, OSError):
        return {}  # the agent is gone: the session attempt says so
    except Exception as exc:  # an answer the SDK could not validate
        note = f"unusable authenticate answer ({type(exc).__name__})"
    if note is not None:
        log.info("the agent refused ACP authenticate (method %s)", shown)
        return {"auth_method": shown, "auth_result": "rejected", "auth_note": note}
    log.info("the agent accepted ACP authenticate (method %s)", shown)
    return {"auth_method": shown, "auth_result": "accepted", "auth_note": None}


def _to_model(planned: Planned) -> Any:
    entry = planned.entry
    if planned.transport == "http":
        return HttpMcpServer.model_validate(entry)
    if planned.transport == "sse":
        return SseMcpServer.model_validate(entry)
    return McpServerStdio.model_validate(entry)
