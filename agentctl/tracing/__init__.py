"""Attachment attempts as OpenTelemetry traces: whether tracing is on, and the daemon's no-op when it is off.

Tracing is off unless the standard exporter variables name an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off again).
When off, nothing of the OpenTelemetry SDK or exporter is imported: this module is all the daemon loads, and
every hook below answers at once. When on, agentctl.tracing.otel (the `[otel]` extra) does the work.

The hooks are keyed by the daemon's ledger (one daemon, one ledger, one tracer), so several daemons in one
process (the tests) never share a trace.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentctl.evidence.ledger import Ledger

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class AttemptTracer(Protocol):
    def session_meta(self, attempt_id: str, method: str) -> dict[str, str]: ...

    def request_span(self, attempt_id: str, method: str, protocol_version: str | None, tool: str | None,
                     carriers: list[Mapping[str, Any]]) -> Any: ...

    def shutdown(self) -> None: ...


_tracers: weakref.WeakKeyDictionary[Any, AttemptTracer] = weakref.WeakKeyDictionary()


def enabled(environ: Mapping[str, str]) -> bool:
    """True when the standard variables configure an OTLP trace exporter."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def start(ledger: Ledger, environ: Mapping[str, str], *, version: str) -> AttemptTracer | None:
    """The ledger's tracer when tracing is configured (None when off, or when the `[otel]` extra is missing: then
    one warning says so and the daemon runs untraced)."""
    if not enabled(environ):
        return None
    try:
        from agentctl.tracing.otel import OtelAttemptTracer
    except ImportError as exc:
        log.warning("an OTLP endpoint is configured but traces are off: the OpenTelemetry SDK is not installed "
                    "(install agentctl[otel]; missing module %s)", getattr(exc, "name", None) or "?")
        return None
    tracer = OtelAttemptTracer(ledger, environ, version=version)
    _tracers[ledger] = tracer
    return tracer


def stop(ledger: Ledger) -> None:
    tracer = _tracers.pop(ledger, None)
    if tracer is not None:
        tracer.shutdown()


def session_meta(ledger: Ledger, attempt_id: str, method: str) -> dict[str, str]:
    """The `_meta` keys to send with an ACP session request (`traceparent`, `tracestate`): empty when off."""
    tracer = _tracers.get(ledger)
    if tracer is None:
        return {}
    try:
        return tracer.session_meta(attempt_id, method)
    except Exception:  # tracing never fails a session
        log.debug("starting the ACP session span failed", exc_info=True)
        return {}


def tracer_for(ledger: Ledger) -> AttemptTracer | None:
    return _tracers.get(ledger)
