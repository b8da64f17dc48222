"""Control routes that act on the session: session new/load/reset, prompt, cancel, mcp-config, profile, stderr.

They live under /v1/ so the control guard (AF_UNIX, same uid or root) protects them like the rest.
Prompt text and the agent's answers pass through the response stream only; nothing here logs or stores them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Annotated

import msgspec
from aiohttp import web

from agentctl.agent.outcome import AgentError, SessionOutcome
from agentctl.http_answers import BodyError, decode_body, error_response, json_response
from agentctl.present.output import STDERR_WARNING
from agentctl.context import DaemonContext
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.control import (
    CancelResult,
    McpConfig,
    ProfileResult,
    PromptStreamItem,
    SessionResult,
    StderrView,
)
from agentctl.evidence.contract.report import AttemptOrigin

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.acp import AcpRuntime
    from agentctl.agent.component import AcpAgent, PassthroughAgent

MAX_PROMPT_BYTES = 256 * 1024
# Updates waiting for a slow prompt reader; beyond this they are dropped and counted (see _UpdateStream).
MAX_PENDING_UPDATES = 1024

log = logging.getLogger(__name__)


class _LoadBody(msgspec.Struct, forbid_unknown_fields=True):
    session_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class _PromptBody(msgspec.Struct, forbid_unknown_fields=True):
    text: str


class _ProfileBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str


class _UpdateStream:
    """A prompt's updates on their way to the caller: a bounded queue the ACP side never waits on.

    The ACP SDK runs one task per session/update; a sink that awaited the caller's socket would let those
    tasks pile up behind a slow reader. `put` never blocks: beyond the bound an update is dropped and
    counted, and the final line says how many. One pump task writes what is queued, in order.
    """

    def __init__(self, response: web.StreamResponse, limit: int = MAX_PENDING_UPDATES) -> None:
        self._response = response
        self._limit = limit
        self._items: deque[PromptStreamItem] = deque()
        self._wake = asyncio.Event()
        self._finished = False
        self.dropped = 0
        self.gone = False  # the caller went away: nothing more is written

    def put(self, item: PromptStreamItem) -> None:
        if self.gone:
            return
        if len(self._items) >= self._limit:
            self.dropped += 1
            return
        self._items.append(item)
        self._wake.set()

    def finish(self) -> None:
        self._finished = True
        self._wake.set()

    async def pump(self) -> None:
        """Write queued updates until finish() and the queue is empty, or until the caller is gone."""
        while True:
            while self._items:
                item = self._items.popleft()
                try:
                    await self._response.write(encode(item) + b"\n")
                except (ConnectionError, RuntimeError):
                    self.gone = True
                    self._items.clear()
                    return
            if self._finished:
                return
            self._wake.clear()
            await self._wake.wait()


def _result(outcome: SessionOutcome) -> SessionResult:
    return SessionResult(
        attempt_id=outcome.attempt_id,
        accepted=outcome.accepted,
        with_agent=True,
        acp_session_id=outcome.acp_session_id,
        reason_code=outcome.reason_code,
        summary=outcome.summary,
        failed_servers=list(outcome.failed_servers),
    )


def install_agent_routes(app: web.Application, ctx_key: web.AppKey[DaemonContext]) -> None:
    def ctx_of(request: web.Request) -> DaemonContext:
        return request.app[ctx_key]

    def acp_agent(ctx: DaemonContext) -> AcpAgent | None:
        # By the component's kind, not by its runtime: an ACP agent that is still starting has no runtime yet,
        # and must not be taken for MCP-only mode.
        agent = ctx.agent
        return agent if agent is not None and agent.kind == "acp" else None

    def refused(exc: AgentError, status: int = 409) -> web.Response:
        return error_response(status, exc.reason_code, exc.summary)

    async def restarted(agent: PassthroughAgent) -> web.Response:
        """A passthrough CLI has no session to open: a new attempt is a new process start."""
        attempt_id = await agent.restart()
        if attempt_id is None:
            return error_response(409, "daemon_stopping", "the daemon is stopping")
        error = agent.start_error
        return json_response(
            SessionResult(
                attempt_id=attempt_id,
                accepted=error is None,
                with_agent=True,
                reason_code=error.reason_code if error else None,
                summary=error.summary if error else None,
            )
        )

    async def open_session(request: web.Request, origin: AttemptOrigin) -> web.Response:
        ctx = ctx_of(request)
        agent = ctx.agent
        if agent is not None and agent.kind == "passthrough":
            # Not a "manual" attempt: that would supersede the running CLI's attempt behind its back.
            return await restarted(agent)
        if agent is None:
            # MCP-only mode: an attempt with no agent, so a person can attach an MCP client by hand.
            assert ctx.open_attempt is not None
            attempt_id, _ = ctx.open_attempt(origin)
            return json_response(SessionResult(attempt_id=attempt_id, accepted=False, with_agent=False))
        try:
            # Waits for the agent's initialize: delivery is planned from what the agent declared.
            acp = await agent.session_runtime()
        except AgentError as exc:
            return refused(exc)
        return json_response(_result(await (acp.reset() if origin == "reset" else acp.new_session())))

    async def session_new(request: web.Request) -> web.Response:
        return await open_session(request, "manual")

    async def session_reset(request: web.Request) -> web.Response:
        return await open_session(request, "reset")

    async def session_load(request: web.Request) -> web.Response:
        try:
            body = await decode_body(request, _LoadBody)
        except BodyError as exc:
            return exc.response()
        agent = acp_agent(ctx_of(request))
        if agent is None:
            return error_response(409, "no_acp_agent",
                                  "session load needs an ACP agent; this daemon has none (MCP only or passthrough)")
        try:
            acp = await agent.session_runtime()
        except AgentError as exc:
            return refused(exc)
        return json_response(_result(await acp.load_session(body.session_id)))

    def runtime_now(ctx: DaemonContext, what: str) -> AcpRuntime | web.Response:
        """The ACP runtime for prompt and cancel, or the 409 response that says why there is none."""
        agent = acp_agent(ctx)
        if agent is None:
            return error_response(409, "no_acp_agent",
                                  f"{what} needs an ACP agent; this daemon has none (MCP only or passthrough)")
        try:
            return agent.runtime_now()
        except AgentError as exc:
            return refused(exc)

    async def prompt(request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > MAX_PROMPT_BYTES:
            return error_response(413, "body_too_large", f"prompt over {MAX_PROMPT_BYTES} bytes")
        try:
            body = await decode_body(request, _PromptBody, max_bytes=MAX_PROMPT_BYTES)
        except BodyError as exc:
            if exc.status == 413:
                return error_response(413, "body_too_large", f"prompt over {MAX_PROMPT_BYTES} bytes")
            return exc.response()
        acp = runtime_now(ctx_of(request), "prompt")
        if isinstance(acp, web.Response):
            return acp
        try:
            acp.check_prompt()
        except AgentError as exc:
            return refused(exc)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        stream = _UpdateStream(response)
        pump = asyncio.create_task(stream.pump(), name="prompt-updates")
        try:
            try:
                stop_reason = await acp.prompt(body.text, stream.put)
                final = PromptStreamItem(type="done", stop_reason=stop_reason)
            except AgentError as exc:
                final = PromptStreamItem(type="error", reason_code=exc.reason_code, summary=exc.summary)
            except Exception as exc:  # the stream is open: end it with a line, never a traceback with content
                log.warning("prompt failed: %s", type(exc).__name__)
                final = PromptStreamItem(type="error", reason_code="internal_error", summary=type(exc).__name__)
            stream.finish()
            await pump  # what is queued (at most the bound) goes out before the final line
        finally:
            if not pump.done():  # this handler was cancelled: the pump must not outlive it
                pump.cancel()
        final.dropped_updates = stream.dropped
        if stream.gone:
            return response  # the caller went away; the prompt itself completed
        try:
            await response.write(encode(final) + b"\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def cancel(request: web.Request) -> web.Response:
        acp = runtime_now(ctx_of(request), "cancel")
        if isinstance(acp, web.Response):
            return acp
        try:
            await acp.cancel()
        except AgentError as exc:
            return refused(exc, 504 if exc.reason_code == "cancel_timeout" else 409)
        return json_response(CancelResult(cancelled=True))

    async def mcp_config(request: web.Request) -> web.Response:
        ctx = ctx_of(request)
        attempt_id = ctx.ledger.current_attempt_id
        token = ctx.ledger.tokens.token_of(attempt_id) if attempt_id else None
        if attempt_id is None or token is None or ctx.mcp_base is None:
            return error_response(404, "no_attempt", "no current attempt yet: run `agentctl session new` first")
        return json_response(
            McpConfig(
                name=ctx.spec.mcp.builtin_name,
                attempt_id=attempt_id,
                url=f"{ctx.mcp_base}/mcp",
                sse_url=f"{ctx.mcp_base}/sse",
                headers={"Authorization": f"Bearer {token}"},
            )
        )

    async def mcp_profile(request: web.Request) -> web.Response:
        try:
            body = await decode_body(request, _ProfileBody)
        except BodyError as exc:
            return exc.response()
        endpoint = ctx_of(request).endpoint
        if endpoint is None:
            return error_response(409, "endpoint_not_listening", "the MCP endpoint is not running")
        try:
            count = endpoint.set_profile(body.name)
        except ValueError as exc:
            return error_response(400, "unknown_profile", str(exc))
        return json_response(ProfileResult(profile=body.name, tool_count=count))

    async def stderr(request: web.Request) -> web.Response:
        ctx = ctx_of(request)
        agent = ctx.agent
        state = ctx.ledger.history.agent.state if ctx.ledger.history.agent else None
        if agent is None or agent.supervisor.process is None:
            view = StderrView(warning=STDERR_WARNING, agent_state=state, lines=[], truncated=False,
                              total_bytes_seen=0, empty=True)
        else:
            window = agent.supervisor.stderr_snapshot()
            view = StderrView(warning=STDERR_WARNING, agent_state=state, lines=list(window.lines),
                              truncated=window.truncated, total_bytes_seen=window.total_bytes_seen,
                              empty=window.empty)
        return json_response(view)

    app.router.add_post("/v1/session/new", session_new)
    app.router.add_post("/v1/session/load", session_load)
    app.router.add_post("/v1/session/reset", session_reset)
    app.router.add_post("/v1/prompt", prompt)
    app.router.add_post("/v1/cancel", cancel)
    app.router.add_get("/v1/mcp-config", mcp_config, allow_head=False)
    app.router.add_post("/v1/mcp/profile", mcp_profile)
    app.router.add_get("/v1/stderr", stderr, allow_head=False)
