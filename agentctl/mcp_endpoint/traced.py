"""Tracing of the built-in MCP endpoint: SDK middleware that puts each request of an attempt in its trace.

The span itself is agentctl.tracing.otel's; this middleware finds the attempt (the bearer token's, as
observe.py does), the trace context the request carries (`params._meta.traceparent`, else the HTTP
`traceparent` header) and the outcome as `error.type` only: the JSON-RPC error code, `tool_error` for a tool
result marked as an error, or the exception's class name. Never an argument, a result or an exception's text.
A no-op when tracing is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

from agentctl import tracing
from agentctl.mcp_endpoint.observe import SCOPE_ATTEMPT, scope_of

if TYPE_CHECKING:
    from agentctl.evidence.ledger import Ledger

_HEADERS = (b"traceparent", b"tracestate")


class TraceMiddleware:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        tracer = tracing.tracer_for(self.ledger)
        scope = scope_of(ctx) if tracer is not None else None
        attempt_id = scope.get(SCOPE_ATTEMPT) if scope is not None else None
        if tracer is None or scope is None or not isinstance(attempt_id, str) or ctx.request_id is None:
            return await call_next(ctx)
        name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
        carriers: list[Mapping[str, Any]] = [ctx.meta] if isinstance(ctx.meta, dict) else []
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ()) if k in _HEADERS}
        if headers:
            carriers.append(headers)
        with tracer.request_span(attempt_id, ctx.method, ctx.protocol_version,
                                 name if isinstance(name, str) else None, carriers) as span:
            try:
                result = await call_next(ctx)
            except MCPError as exc:
                if span is not None:
                    span.failed(str(exc.error.code))
                raise
            except Exception as exc:
                if span is not None:
                    span.failed(type(exc).__qualname__)
                raise
            if span is not None and ctx.method == "tools/call" and _is_tool_error(result):
                span.failed("tool_error")
            return result


def _is_tool_error(result: Any) -> bool:
    if isinstance(result, dict):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True
