"""The ACP side of the reference agent (a plain class: `acp.Agent` is a Protocol, not a base).

The ACP SDK's router calls these methods with the request's fields as keyword
arguments; anything it does not find answers -32601. A `RequestError` raised here
goes back to the client as the JSON-RPC error (code, message, data).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import acp
from acp import RequestError
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    ToolCallUpdate,
)

from agentctl import __version__
from agentctl.testing import _hostile_echo as H
from agentctl.testing import _ref_mcp as M

log = logging.getLogger("agentctl.reference_agent")
# refuse-auth writes this on stderr before refusing: text agentctl cannot know, so a test can tell that the
# agent's output reached the terminal and nothing that is recorded.
REFUSAL_CANARY = "REFUSAL-CANARY-4f1d9e"

_GARBAGE = [
    b"reference-agent garbage-stdout: this line is not JSON",
    b"{this is not json either",
    b"\xff\xfe binary-ish garbage \x01\x02",
    b"<<< garbage >>> " + b"g" * 70_000,  # longer than asyncio's default 64 KiB line limit
]


@dataclass
class _Session:
    id: str
    cwd: str
    entries: list[M.ServerEntry]
    conns: dict[str, M.McpConnection] = field(default_factory=dict)
    attempted: bool = False
    cancelled: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The W3C trace context the client sent in the session request's `_meta` (traceparent, tracestate).
    trace: dict[str, str] = field(default_factory=dict)


def _trace_of(meta: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in meta.items() if k in ("traceparent", "tracestate") and isinstance(v, str)}


@contextlib.contextmanager
def _in_trace(carrier: dict[str, str]) -> Any:
    """Run the MCP client inside the client's trace: the MCP SDK injects the current trace context into every
    request's `params._meta` (as an agent that continues the ACP meta-propagation convention does)."""
    if not carrier:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


class ReferenceAgent:
    def __init__(self, opts: Any, writer: asyncio.StreamWriter) -> None:
        self._opts = opts
        self._writer = writer
        self._client: Any = None
        self._sessions: dict[str, _Session] = {}
        self._garbage_index = 0
        self._hostile_round = 0

    # ------------------------------------------------------------ helpers

    def on_connect(self, conn: Any) -> None:
        self._client = conn

    def send_notice(self, session: _Session) -> None:
        """send-notice: one ACP session notice (the Session Notices RFD's shape, which the SDK has no model for,
        so the frame is written as it is) naming the last delivered server, with its full URL and a header
        value in the text: what an agent's notice may carry and agentctl must not keep."""
        if not session.entries or self._writer.is_closing():
            return
        entry = session.entries[-1]
        header = next(iter(entry.headers.items()), ("X-None", "none"))
        update = {
            "sessionUpdate": "notice",
            "severity": "warning",
            "title": f"MCP server '{entry.name}' unavailable",
            "description": f"connecting to {entry.url or entry.command} with {header[0]}: {header[1]} failed; "
                           "continuing without its tools",
        }
        ids: list[str | None] = [None, "ref-no-such-session", session.id] if self._opts.stray_notices else [session.id]
        for session_id in ids:  # stray-notices: the two that name no session first, on the wire before the own one
            params = {"update": update} if session_id is None else {"sessionId": session_id, "update": update}
            frame = {"jsonrpc": "2.0", "method": "session/update", "params": params}
            self._writer.write(json.dumps(frame).encode() + b"\n")

    def hostile_echo(self, session: _Session) -> None:
        """hostile-echo: every handed secret in every form, on stderr and in this session's notices."""
        secrets = H.handed_secrets(session.entries)
        H.write_stderr(secrets)
        if not self._writer.is_closing():
            for frame in H.notice_frames(session.id, secrets, self._hostile_round):
                self._writer.write(frame)
        self._hostile_round += 1

    def garbage(self, text: str | None = None) -> None:
        """Write one non-JSON line straight to stdout (between frames: each frame is one write)."""
        if not self._opts.garbage_stdout or self._writer.is_closing():
            return
        if text is None:
            line = _GARBAGE[self._garbage_index % len(_GARBAGE)]
            self._garbage_index += 1
        else:
            line = text.encode()
        self._writer.write(line + b"\n")

    async def garbage_ticker(self) -> None:
        while True:
            self.garbage()
            await asyncio.sleep(0.2)

    def _deliverable(self, entries: list[M.ServerEntry]) -> list[M.ServerEntry]:
        """Drop duplicates and transports this agent did not advertise (strict: refuse them)."""
        allowed = {"stdio"}
        if self._opts.advertise_http:
            allowed.add("http")
        if self._opts.advertise_sse:
            allowed.add("sse")
        kept: list[M.ServerEntry] = []
        for e in entries:
            problem = None
            if any(k.name == e.name for k in kept):
                problem = "duplicate name"
            elif e.transport not in allowed:
                problem = f"transport {e.transport} not supported"
            if problem is None:
                kept.append(e)
            elif self._opts.strict:
                raise RequestError(-32602, f"MCP server '{e.name}' rejected: {problem}", {"server": e.name})
            else:
                log.warning("skipping MCP server '%s': %s", e.name, problem)
        return kept

    async def _connect(self, session: _Session) -> None:
        session.attempted = True
        if not session.entries:
            return
        conns, failures = await M.connect_all(
            session.entries,
            modern=self._opts.modern,
            client_name=M.AGENT_NAME,
            client_version=__version__,
            connect_timeout=self._opts.connect_timeout,
            call_timeout=self._opts.call_timeout,
        )
        if failures and self._opts.strict:
            await M.close_all(conns.values())
            raise RequestError(
                -32603,
                "; ".join(str(f) for f in failures),
                {"servers": [{"name": f.name, "reason": f.reason} for f in failures]},
            )
        session.conns = conns

    async def _open_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None, meta: dict[str, Any]
    ) -> _Session:
        entries = self._deliverable([M.entry_from_acp(s) for s in (mcp_servers or [])])
        session = _Session(id=session_id, cwd=cwd, entries=entries, trace=_trace_of(meta))
        names = ", ".join(f"'{e.name}' ({e.transport})" for e in entries) or "none"
        log.info("session %s: MCP servers delivered: %s", session_id, names)
        if self._opts.ignore_mcp:
            log.info("ignore-mcp: not connecting")
        elif self._opts.lazy:
            log.info("lazy: connecting on the first prompt")
        else:
            with _in_trace(session.trace):
                await self._connect(session)
        self._sessions[session_id] = session
        return session

    async def _drop_session(self, session_id: str) -> None:
        old = self._sessions.pop(session_id, None)
        if old is not None:
            await M.close_all(old.conns.values())

    async def shutdown(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(M.close_all(c for s in sessions for c in s.conns.values()), 5)

    # ------------------------------------------------------------ ACP methods

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kwargs: Any
    ) -> InitializeResponse:
        who = f"{client_info.name} {client_info.version}" if client_info else "unnamed client"
        log.info("initialize from %s (protocol %s)", who, protocol_version)
        if self._opts.delay_initialize:
            # A slow start-up (an agent loading its model or plugins): the client may ask for a session first.
            await asyncio.sleep(self._opts.delay_initialize)
        self.garbage()
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                mcp_capabilities=McpCapabilities(http=self._opts.advertise_http, sse=self._opts.advertise_sse),
                session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
            ),
            agent_info=Implementation(name=H.agent_name() if self._opts.hostile_echo else M.AGENT_NAME,
                                      title="agentctl reference agent", version=__version__),
            auth_methods=[],
        )

    async def new_session(
        self, cwd: str, additional_directories: Any = None, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        if self._opts.refuse_auth:
            os.write(2, f"reference-agent: refuse-auth: reading credentials of profile {REFUSAL_CANARY}\n"
                        "Error: ANTHROPIC_API_KEY is not set; run /login or set an API key\n".encode())
            raise RequestError.auth_required()
        session = await self._open_session(f"ref-{uuid.uuid4().hex}", cwd, mcp_servers, kwargs)
        if self._opts.send_notice:
            self.send_notice(session)  # before the answer: the client does not know the session's id yet
        if self._opts.hostile_echo:
            self.hostile_echo(session)
        self.garbage()
        return NewSessionResponse(session_id=session.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: Any = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        if self._opts.hostile_echo:
            self._hostile_round += 1
            raise H.refusal([M.entry_from_acp(s) for s in (mcp_servers or [])], self._hostile_round)
        await self._drop_session(session_id)  # no history to replay: reconnect with the new delivery
        await self._open_session(session_id, cwd, mcp_servers, kwargs)
        self.garbage()
        return LoadSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        await self._drop_session(session_id)
        return CloseSessionResponse()

    async def _ask_permission(self, session_id: str) -> str:
        """request-permission mode: ask the client before the turn; returns the option chosen or 'cancelled'."""
        response = await self._client.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=f"perm-{uuid.uuid4().hex[:12]}", title="reference-agent: read the task", kind="read"),
            options=[
                PermissionOption(option_id="allow-once", name="Allow once", kind="allow_once"),
                PermissionOption(option_id="reject-once", name="Reject", kind="reject_once"),
            ],
        )
        outcome = response.outcome
        return str(getattr(outcome, "option_id", None) or getattr(outcome, "outcome", "unknown"))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled = True

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        session.cancelled = False
        text = "".join(getattr(block, "text", "") for block in prompt if getattr(block, "type", "") == "text")
        self.garbage()
        permission = await self._ask_permission(session_id) if self._opts.request_permission else None
        if self._opts.ignore_mcp:
            answer = f"Ignoring MCP servers ({len(session.entries)} delivered); no tool called."
        else:
            with _in_trace(session.trace):
                async with session.lock:
                    if not session.attempted:
                        await self._connect(session)
                outcome = await M.perform_turn(session.conns, self._opts.builtin_name, text)
            if outcome["server"] and outcome["tool"]:
                await self._client.session_update(
                    session_id,
                    acp.start_tool_call(
                        f"call-{uuid.uuid4().hex[:12]}",
                        f"{outcome['server']}/{outcome['tool']}",
                        kind="read",
                        status="completed" if outcome["ok"] else "failed",
                    ),
                )
            answer = M.describe_turn(outcome)
        if permission is not None:
            answer = f"Permission {permission}. {answer}"
        self.garbage()
        await self._client.session_update(session_id, acp.update_agent_message_text(answer))
        self.garbage()
        return PromptResponse(stop_reason="cancelled" if session.cancelled else "end_turn")
