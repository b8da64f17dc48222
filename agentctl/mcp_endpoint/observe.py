"""Observation of the built-in MCP endpoint: SDK middleware that turns requests into attempt evidence.

What is recorded, for the attempt whose bearer token authenticated the request (auth.py puts it in
the ASGI scope; the SDK hands the scope back as `ctx.request.scope`):

- `initialize_observed`: a legacy `initialize` that succeeded (client name/version, requested and
  negotiated protocol version, era "legacy", the connection id); for the modern era, `server/discover`
  and the first request of each distinct client (name, version, protocol version) per attempt (era
  "modern", no connection id).
- `tools_list_observed`: tool count and the bounded catalog (evidence/catalog.py) with token estimates
  when their counts are known (evidence/estimates.py: a cache, else a helper process; the daemon never
  loads the vocabulary); `CatalogEstimates.lookup()` never blocks, and the catalog is built once per
  distinct tool set, off the request path. A list recorded while its counts are computed is recorded
  again, with estimates, when they arrive.
- `tool_call_observed`: the tool name (only if it is a well-formed tool name) and the outcome, never
  arguments or results.
- `explicit_error`: only for a failed legacy `initialize` or a failed `tools/list` (reason code and the
  JSON-RPC error code, never the message: messages can quote what the client sent). An `initialize`
  without `clientInfo` and a `tools/list` with a non-string cursor are such failures. It is failure
  evidence only until a later success of the same attempt: every successful initialize, tools/list and
  tool call is recorded too, and the reducer shows the row's newest attachment observation.
- `connection_closed`: when a legacy connection ends (see below).

Connection identity (legacy era only). A legacy connection is a streamable-HTTP session or an SSE stream
that completed `initialize`. The SDK gives middleware no public handle on it; `ctx.session._connection`
(private, mcp==2.3.0 pinned exactly) is the per-connection `Connection`, whose public `state` dict holds
our opaque connection id (agentctl.identity.new_connection_id, never derived from the SDK's session id)
and whose public `exit_stack` runs our close callback when the connection ends: DELETE, idle timeout,
SSE stream drop, shutdown. tests/mcp_endpoint/test_endpoint_sdk_contract.py fails loudly if that changes.
If the hook is missing at runtime, observation degrades to no connection id (never a crash).

Modern era (2026-07-28): every request is self-contained and the SDK builds a fresh `Connection` per
request, so there is no connection id and no `connection_closed` is ever invented.

A modern-era client on the legacy SSE transport (`Client(mode="auto")` over `/sse` negotiates
2026-07-28 on the stream) is attributed exactly like a modern client on `/mcp`: per request, to the
attempt of the token on the POST that carried the request, era "modern", no connection id, and no
`connection_closed` when the stream ends. The stream is only a carrier there: the SDK serves each of
its requests on a fresh per-request connection, so a connection id would describe nothing the protocol
has, and inventing its end would claim a disconnect the modern era does not define.

Nothing here awaits anything but the SDK's own `call_next`: evidence is handed to `Ledger.record` via
`loop.call_soon` (FIFO, so a connection's close is never folded before its opening) and exceptions in
observation are logged and swallowed; the request never waits on, or fails because of, observation.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import msgspec
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentctl.evidence import reasons
from agentctl.evidence.catalog import build_catalog
from agentctl.evidence.encoding import REASON_ESTIMATOR_LOADING
from agentctl.evidence.estimates import CatalogEstimates
from agentctl.evidence.contract.report import ClientInfo, EvidenceKind, ToolCatalog
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.sanitize import bounded_text
from agentctl.identity import new_connection_id
from agentctl.logs import log_failure
from agentctl.mcp_endpoint.latency import RequestLatency

log = logging.getLogger(__name__)

# ASGI scope keys the HTTP layer (server.py) sets and middleware reads.
SCOPE_ATTEMPT: Final = "agentctl.attempt_id"
SCOPE_REACHED: Final = "agentctl.reached_sdk"  # set by middleware: the request was not refused before it

CONNECTION_STATE_KEY: Final = "agentctl.connection_id"

MAX_CLIENT_FIELD: Final = 128
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.\-/]{1,128}")
_VERSION_TEXT: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
MAX_MODERN_CLIENTS: Final = 512
MAX_CATALOG_CACHE: Final = 8
# tools/list results waiting for the estimator (the newest per attempt); attempts are bounded already.
MAX_PENDING_LISTS: Final = 64
INITIALIZE_FAILED: Final = reasons.code("initialize_failed")
TOOLS_LIST_FAILED: Final = reasons.code("tools_list_failed")

_encode = msgspec.json.Encoder().encode


def scope_of(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    """The ASGI scope of the HTTP request that carried this message (None off HTTP, e.g. in-process)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    return scope if isinstance(scope, dict) else None


def legacy_connection(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    """The per-connection object of a legacy session: the one private SDK detail we rely on."""
    connection = getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


def _version(value: Any) -> str | None:
    return value if isinstance(value, str) and _VERSION_TEXT.fullmatch(value) else None


def _client_info(raw: Any, secrets: Iterable[str] = ()) -> ClientInfo | None:
    """The client's self-description as evidence: client-chosen text, so redacted and bounded like any."""
    if not isinstance(raw, Mapping):
        return None
    name = bounded_text(raw.get("name"), MAX_CLIENT_FIELD, secrets)
    if name is None:
        return None
    return ClientInfo(name=name, version=bounded_text(raw.get("version"), MAX_CLIENT_FIELD, secrets))



def _error_code(exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}"
    return type(exc).__name__


class Observer:
    """The SDK middleware (`MCPServer(middleware=[observer])`) and the legacy connection registry."""

    def __init__(
        self,
        ledger: Ledger,
        server_name: str,
        estimator_loader: CatalogEstimates | None = None,
        *,
        advertise_list_changed: bool = True,
    ) -> None:
        self.ledger = ledger
        self.server_name = server_name
        self.estimator_loader = estimator_loader
        self.advertise_list_changed = advertise_list_changed
        # Open legacy connections by connection id (for notifications/tools/list_changed).
        self.connections: dict[str, Connection] = {}
        self._modern_seen: set[tuple[str, Any, Any, str]] = set()
        self._catalogs: dict[tuple[int, str | None], tuple[int, ToolCatalog]] = {}
        self._pending_lists: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {}
        self._estimates_awaited: set[tuple[str, ...]] = set()
        self.hook_missing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.latency = RequestLatency()  # every request's, by method (a closed label set)

    # ---- recording (never on the request path) -------------------------------------------------

    def defer(self, fn: Callable[..., None], *args: Any) -> None:
        """`fn(*args)` on the loop soon, never on the request path; an exception it raises is logged."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        try:
            loop.call_soon(self._safely, fn, args)
        except RuntimeError:  # loop closed: the daemon is gone, and so is anyone to report to
            pass

    def _safely(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception as exc:
            log_failure(log, "recording MCP evidence failed", exc)

    def _record(self, kind: EvidenceKind, attempt_id: str, fields: dict[str, Any]) -> None:
        self.ledger.record(kind, attempt_id, self.server_name, source="builtin", **fields)

    def record(self, kind: EvidenceKind, attempt_id: str, **fields: Any) -> None:
        """Stamp the time now, fold the event on the next loop iteration."""
        fields.setdefault("occurred_at", self.ledger.now())
        self.defer(self._record, kind, attempt_id, fields)

    # ---- the middleware ----------------------------------------------------------------------

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is None:
            return await self._observe(ctx, call_next)  # a notification: nothing answers it, nothing to time
        started = time.perf_counter()
        try:
            return await self._observe(ctx, call_next)
        finally:
            self.latency.observe(ctx.method, time.perf_counter() - started)

    async def _observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        scope = scope_of(ctx)
        if scope is None:
            return await call_next(ctx)
        scope[SCOPE_REACHED] = True
        attempt_id = scope.get(SCOPE_ATTEMPT)
        method = ctx.method
        if not isinstance(attempt_id, str) or ctx.request_id is None:
            return await call_next(ctx)  # not through our HTTP layer, or a notification
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._modern(ctx, call_next, attempt_id, method)
        return await self._legacy(ctx, call_next, attempt_id, method)

    async def _legacy(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, attempt_id: str, method: str
    ) -> HandlerResult:
        if method == "initialize":
            try:
                result = await call_next(ctx)
            except Exception as exc:
                self.record(
                    "explicit_error",
                    attempt_id,
                    reason_code=INITIALIZE_FAILED,
                    summary=f"the initialize request failed ({_error_code(exc)})",
                    era="legacy",
                )
                raise
            try:
                self._observe_initialize(ctx, attempt_id, result)
            except Exception as exc:
                log_failure(log, "observing initialize failed", exc)
            return result
        if method not in ("tools/list", "tools/call"):
            return await call_next(ctx)
        connection_id = self._connection_id(ctx, attempt_id)
        return await self._observe_tools(ctx, call_next, attempt_id, method, era="legacy", connection_id=connection_id)

    async def _modern(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, attempt_id: str, method: str
    ) -> HandlerResult:
        if method == "initialize":
            return await call_next(ctx)  # not a modern method: the SDK answers -32601; not an attachment error
        if method == "server/discover":
            result = await call_next(ctx)
            self._observe_modern_contact(ctx, attempt_id, always=True)
            return result
        if method in ("tools/list", "tools/call"):
            self._observe_modern_contact(ctx, attempt_id, always=False)
            return await self._observe_tools(ctx, call_next, attempt_id, method, era="modern", connection_id=None)
        result = await call_next(ctx)
        self._observe_modern_contact(ctx, attempt_id, always=False)
        return result

    # ---- legacy connections --------------------------------------------------------------------

    def _connection_id(self, ctx: ServerRequestContext[Any, Any], attempt_id: str) -> str | None:
        connection = legacy_connection(ctx)
        if connection is None:
            if not self.hook_missing:
                self.hook_missing = True
                log.warning("the MCP SDK no longer exposes the legacy connection; connection ids are off")
            return None
        connection_id = connection.state.get(CONNECTION_STATE_KEY)
        if isinstance(connection_id, str):
            return connection_id
        connection_id = new_connection_id()
        connection.state[CONNECTION_STATE_KEY] = connection_id
        self.connections[connection_id] = connection
        connection.exit_stack.callback(self._connection_ended, attempt_id, connection_id)
        return connection_id

    def _connection_ended(self, attempt_id: str, connection_id: str) -> None:
        self.connections.pop(connection_id, None)
        self.record("connection_closed", attempt_id, connection_id=connection_id, era="legacy")

    def _observe_initialize(self, ctx: ServerRequestContext[Any, Any], attempt_id: str, result: HandlerResult) -> None:
        params = ctx.params or {}
        negotiated = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(result, dict) and self.advertise_list_changed:
            # The tool list changes at runtime (profiles); say so, so clients act on list_changed.
            tools = (result.get("capabilities") or {}).get("tools")
            if isinstance(tools, dict):
                tools["listChanged"] = True
        connection_id = self._connection_id(ctx, attempt_id)
        self.record(
            "initialize_observed",
            attempt_id,
            connection_id=connection_id,
            era="legacy",
            protocol_version=_version(negotiated),
            requested_protocol_version=_version(params.get("protocolVersion")),
            client=_client_info(params.get("clientInfo"), self.ledger.secrets),
        )

    # ---- modern contact ------------------------------------------------------------------------

    def _observe_modern_contact(self, ctx: ServerRequestContext[Any, Any], attempt_id: str, *, always: bool) -> None:
        try:
            client_params = ctx.session.client_params
            info = client_params.client_info if client_params is not None else None
            name = info.name if info is not None else None
            client_version = info.version if info is not None else None
            version = ctx.protocol_version
            # Keyed on the raw values: the common case (already seen) costs one set lookup.
            key = (attempt_id, name, client_version, version)
            if not always and key in self._modern_seen:
                return
            if len(self._modern_seen) >= MAX_MODERN_CLIENTS:
                self._modern_seen.clear()
            self._modern_seen.add(key)
            self.record(
                "initialize_observed",
                attempt_id,
                era="modern",
                protocol_version=_version(version),
                requested_protocol_version=_version(version),
                client=_client_info({"name": name, "version": client_version}, self.ledger.secrets),
            )
        except Exception as exc:
            log_failure(log, "observing a modern request failed", exc)

    # ---- tools ---------------------------------------------------------------------------------

    async def _observe_tools(
        self,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        attempt_id: str,
        method: str,
        *,
        era: str,
        connection_id: str | None,
    ) -> HandlerResult:
        if method == "tools/call":
            params = ctx.params or {}
            name = params.get("name")
            tool_name = name if isinstance(name, str) and _TOOL_NAME.fullmatch(name) else None
            try:
                result = await call_next(ctx)
            except Exception:
                self.record(
                    "tool_call_observed",
                    attempt_id,
                    tool_name=tool_name,
                    outcome="error",
                    era=era,
                    connection_id=connection_id,
                )
                raise
            failed = isinstance(result, dict) and result.get("isError") is True
            self.record(
                "tool_call_observed",
                attempt_id,
                tool_name=tool_name,
                outcome="error" if failed else "ok",
                era=era,
                connection_id=connection_id,
            )
            return result
        # tools/list
        try:
            result = await call_next(ctx)
        except Exception as exc:
            self.record(
                "explicit_error",
                attempt_id,
                reason_code=TOOLS_LIST_FAILED,
                summary=f"the tools/list request failed ({_error_code(exc)})",
                era=era,
                connection_id=connection_id,
            )
            raise
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            occurred_at = self.ledger.now()
            # The catalog is built on the next loop iteration, not while the client waits.
            self.defer(self._record_tools_list, attempt_id, tools, era, connection_id, occurred_at)
        return result

    def _record_tools_list(
        self, attempt_id: str, tools: list[Any], era: str, connection_id: str | None, occurred_at: Any
    ) -> None:
        tool_count, catalog, estimate_key = self.catalog_for(tools)
        if catalog.estimator_unavailable_reason == REASON_ESTIMATOR_LOADING and estimate_key is not None:
            self._await_estimates(attempt_id, estimate_key, (attempt_id, tools, era, connection_id, occurred_at))
        self._record(
            "tools_list_observed",
            attempt_id,
            {
                "occurred_at": occurred_at,
                "tool_count": tool_count,
                "catalog": catalog,
                "era": era,
                "connection_id": connection_id,
            },
        )

    def _await_estimates(self, attempt_id: str, estimate_key: tuple[str, ...], args: tuple[Any, ...]) -> None:
        """Record this tools/list again, with estimates, once their counts are known.

        An agent may list its tools before the counts are (a cold cache, another profile's list), and
        may list them once per session: that one list must not stay without estimates. The repeat
        carries the original time, so the reducer keeps whichever list is newest, and only the newest
        pending list of each attempt is kept.
        """
        loader = self.estimator_loader
        loop = self._loop
        if loader is None or loop is None:
            return
        self._pending_lists.pop(attempt_id, None)
        if len(self._pending_lists) >= MAX_PENDING_LISTS:
            self._pending_lists.pop(next(iter(self._pending_lists)))
        self._pending_lists[attempt_id] = (estimate_key, args)
        if estimate_key in self._estimates_awaited:
            return
        self._estimates_awaited.add(estimate_key)

        def ready() -> None:  # on the loader's thread
            try:
                loop.call_soon_threadsafe(self._safely, self._record_pending_lists, (estimate_key,))
            except RuntimeError:  # loop closed: nobody is left to report to
                pass

        loader.when_ready(estimate_key, ready)

    def _record_pending_lists(self, estimate_key: tuple[str, ...]) -> None:
        self._estimates_awaited.discard(estimate_key)
        ready = [a for a, (key, _) in self._pending_lists.items() if key == estimate_key]
        for attempt_id in ready:
            _, args = self._pending_lists.pop(attempt_id)
            self._record_tools_list(*args)

    def catalog_for(self, tools: list[Any]) -> tuple[int, ToolCatalog, tuple[str, ...] | None]:
        """Build (or reuse) the bounded catalog of a tool list, and the key of its estimates; estimator
        state is part of the cache key."""
        loader = self.estimator_loader
        lookup = loader.lookup(tools) if loader is not None else None  # never blocks
        estimator = lookup.estimator if lookup is not None else None
        reason = lookup.unavailable_reason if lookup is not None else None
        estimate_key = lookup.key if lookup is not None else None
        try:
            fingerprint = hash(_encode(tools))
        except Exception:
            fingerprint = id(tools)
        key = (fingerprint, None if estimator is not None else (reason or "encoding_unavailable"))
        cached = self._catalogs.get(key)
        if cached is not None:
            return cached[0], copy.copy(cached[1]), estimate_key
        if reason is None and estimator is None:
            reason = "encoding_unavailable"
        if estimator is not None:
            built = build_catalog(tools, estimator)
        else:
            built = build_catalog(tools, None, unavailable_reason=reason or "encoding_unavailable")
        if len(self._catalogs) >= MAX_CATALOG_CACHE:
            self._catalogs.clear()
        self._catalogs[key] = built
        return built[0], copy.copy(built[1]), estimate_key
