"""The OpenTelemetry side of attempt tracing (the `[otel]` extra): one trace per attachment attempt, exported over
OTLP/HTTP to the endpoint the standard variables name.

The trace of an attempt:
- its root span (`attachment_attempt`), opened when the ledger makes the attempt current and ended when a newer
  attempt supersedes it or the daemon stops; each evidence event of the attempt is a span event on it (the kind
  and a closed set of fields: server name, reason code, transport, era, protocol version, tool name and count,
  outcome; never a summary, target, URL or argument);
- a CLIENT span for the ACP `session/new` or `session/load` that delivers the attempt's servers, whose context
  goes to the agent as `params._meta.traceparent` (the ACP meta-propagation convention, the same key MCP uses);
- a SERVER span for each request on the built-in endpoint authenticated by the attempt's token, named and
  attributed after the OpenTelemetry MCP conventions (`mcp.method.name`, `mcp.protocol.version`,
  `gen_ai.operation.name`, `gen_ai.tool.name`, `error.type`), child of the `traceparent` the request carries
  (`params._meta`, else the HTTP header) when it belongs to the attempt's trace, else of the root span with a
  link to the foreign context.

Sanitized at the source like every other sink: spans carry only the attributes named here, exceptions are never
recorded (only `error.type`: a JSON-RPC code, `tool_error`, a reason code or an exception class name), and the
status has no description. The provider is agentctl's own, never the global one, so the MCP SDK's built-in
middleware (which would record exception text) stays a no-op.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Span, SpanKind, StatusCode, get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agentctl.tracing import ENDPOINT_VARIABLES

if TYPE_CHECKING:
    from agentctl.evidence.contract.report import EvidenceEvent
    from agentctl.evidence.ledger import Ledger

# Evidence fields copied onto span events: closed vocabularies and names, never free text.
_EVENT_FIELDS = ("server", "reason_code", "transport", "era", "protocol_version", "tool_name", "tool_count",
                 "outcome")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,128}")
_METHOD = re.compile(r"[a-z][A-Za-z0-9_/]{0,63}")
_VERSION = re.compile(r"[0-9A-Za-z.\-]{1,32}")
# Attempts whose root context is kept for late requests (a superseded attempt's token may still be used).
_KEPT_ATTEMPTS = 64
_PROPAGATOR = TraceContextTextMapPropagator()
# How long a stopping daemon waits for its last spans to reach the receiver (a receiver that is down would
# otherwise hold the stop for the exporter's whole retry budget, OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default).
FLUSH_ON_STOP_MS = 3000
# The exporter's and the SDK's own log lines quote the endpoint URL and the receiver's answer: silenced, and
# QuietExporter says the same in one line of its own.
_SILENCED_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk")

log = logging.getLogger(__name__)


def traces_endpoint(environ: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL: the signal-specific variable as given, else the base with /v1/traces."""
    specific = environ.get(ENDPOINT_VARIABLES[0], "").strip()
    if specific:
        return specific
    return environ.get(ENDPOINT_VARIABLES[1], "").strip().rstrip("/") + "/v1/traces"


class QuietExporter(SpanExporter):
    """The OTLP exporter, its failures said once per streak in a line with no URL or receiver text."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.failing = False
        self._shut = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        failed = result is not SpanExportResult.SUCCESS
        if failed and not self.failing:
            log.warning("traces could not be exported to the OTLP receiver (%d spans dropped); the daemon goes on "
                        "and tries again with the next batch", len(spans))
        elif not failed and self.failing:
            log.info("traces are exported to the OTLP receiver again")
        self.failing = failed
        return result

    def shutdown(self) -> None:
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class RequestSpan:
    """One built-in endpoint request's span, as the middleware marks its outcome."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def failed(self, error_type: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(StatusCode.ERROR)


class OtelAttemptTracer:
    def __init__(self, ledger: Ledger, environ: Mapping[str, str], *, version: str) -> None:
        self.ledger = ledger
        ident = ledger.identity
        resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "agentctl",
                                    "service.version": version})
        for name in _SILENCED_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        self.provider = TracerProvider(resource=resource)
        self.exporter = QuietExporter(OTLPSpanExporter(endpoint=traces_endpoint(environ)))
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("agentctl", version)
        self._identity = {"agentctl.execution.id": ident.execution_id, "agentctl.instance.id": ident.instance_id}
        self._roots: dict[str, Span] = {}  # open root spans
        self._contexts: OrderedDict[str, Context] = OrderedDict()  # root contexts, open or ended
        self._sessions: dict[str, Span] = {}  # open ACP session spans
        self._current: str | None = None
        self._closed = False
        ledger.subscribe(self._on_change)
        self._on_change(None)

    # -- attempts ----------------------------------------------------------------------------------------------

    def _on_change(self, event: EvidenceEvent | None) -> None:
        current = self.ledger.current_attempt_id
        if current is not None and current != self._current and not self._closed:
            previous, self._current = self._current, current
            self._begin(current)
            if previous is not None:
                self._end(previous, superseded=True)
        if event is not None and event.attempt_id in self._roots:
            self._on_event(event)

    def _begin(self, attempt_id: str) -> None:
        history = self.ledger.history
        origin = getattr(history.current, "origin", None) if history.current is not None else None
        attributes = {"agentctl.attempt.id": attempt_id, **self._identity}
        if isinstance(origin, str):
            attributes["agentctl.attempt.origin"] = origin
        root = self.tracer.start_span("attachment_attempt", kind=SpanKind.INTERNAL, attributes=attributes,
                                      context=Context())
        self._roots[attempt_id] = root
        self._contexts[attempt_id] = set_span_in_context(root, Context())
        while len(self._contexts) > _KEPT_ATTEMPTS:
            self._contexts.popitem(last=False)

    def _end(self, attempt_id: str, *, superseded: bool = False) -> None:
        session = self._sessions.pop(attempt_id, None)
        if session is not None:
            session.end()
        root = self._roots.pop(attempt_id, None)
        if root is not None:
            root.set_attribute("agentctl.attempt.superseded", superseded)
            root.end()

    def _on_event(self, event: EvidenceEvent) -> None:
        attributes: dict[str, str | int | bool] = {}
        for name in _EVENT_FIELDS:
            value = getattr(event, name, None)
            if isinstance(value, (str, int, bool)):
                if name == "tool_name" and not (isinstance(value, str) and _TOOL_NAME.fullmatch(value)):
                    continue
                attributes[f"agentctl.{name}"] = value
        self._roots[event.attempt_id].add_event(event.kind, attributes)
        kind = event.kind
        session = self._sessions.get(event.attempt_id)
        if session is not None and kind in ("session_accepted", "explicit_error"):
            del self._sessions[event.attempt_id]
            if kind == "explicit_error":
                error = event.reason_code or "session_error"
                session.set_attribute("error.type", error)
                session.set_status(StatusCode.ERROR)
                root = self._roots[event.attempt_id]
                root.set_attribute("error.type", error)
                root.set_status(StatusCode.ERROR)
            session.end()

    # -- the ACP session request -------------------------------------------------------------------------------

    def session_meta(self, attempt_id: str, method: str) -> dict[str, str]:
        parent = self._contexts.get(attempt_id)
        if parent is None or self._closed:
            return {}
        span = self.tracer.start_span(method, kind=SpanKind.CLIENT, context=parent, attributes={
            "rpc.system": "jsonrpc", "rpc.method": method, "agentctl.attempt.id": attempt_id})
        old = self._sessions.pop(attempt_id, None)
        if old is not None:
            old.end()
        self._sessions[attempt_id] = span
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=set_span_in_context(span, Context()))
        return carrier

    # -- requests on the built-in endpoint ---------------------------------------------------------------------

    @contextmanager
    def request_span(self, attempt_id: str, method: str, protocol_version: str | None, tool: str | None,
                     carriers: list[Mapping[str, Any]]) -> Iterator[RequestSpan | None]:
        root = self._contexts.get(attempt_id)
        if root is None or self._closed or not _METHOD.fullmatch(method):
            yield None
            return
        trace_id = get_current_span(root).get_span_context().trace_id
        parent, links = root, []
        for carrier in carriers:
            ctx = _PROPAGATOR.extract(carrier)
            found = get_current_span(ctx).get_span_context()
            if found.is_valid:
                if found.trace_id == trace_id:
                    parent = ctx
                else:
                    links.append(Link(found))
                break
        attributes: dict[str, str] = {"mcp.method.name": method, "agentctl.attempt.id": attempt_id}
        if protocol_version and _VERSION.fullmatch(protocol_version):
            attributes["mcp.protocol.version"] = protocol_version
        name = method
        if method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
            if tool is not None and _TOOL_NAME.fullmatch(tool):
                attributes["gen_ai.tool.name"] = tool
                name = f"{method} {tool}"
        span = self.tracer.start_span(name, kind=SpanKind.SERVER, context=parent, attributes=attributes,
                                      links=links, record_exception=False, set_status_on_exception=False)
        try:
            yield RequestSpan(span)
        finally:
            span.end()

    # -- shutdown ----------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """End every open span and flush them to the receiver, for at most FLUSH_ON_STOP_MS: then an export still
        retrying is cut short and what it held is dropped."""
        self._closed = True
        self.ledger.unsubscribe(self._on_change)
        for attempt_id in list(self._roots):
            self._end(attempt_id)
        # The SDK's flush runs the export, retries included, in this thread and past its own timeout: a timer
        # shuts the exporter down, which ends a retry wait at once.
        cut = threading.Timer(FLUSH_ON_STOP_MS / 1000, self.exporter.shutdown)
        cut.daemon = True
        cut.start()
        try:
            self.provider.shutdown()
        finally:
            cut.cancel()
            self.exporter.shutdown()
