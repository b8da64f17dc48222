"""Owns the endpoint's witness route (POST /witness): what agentctl's stdio witnesses report, into the ledger.

A witness (agentctl/agent/mcp_witness.py) reports with the bearer token of the attempt that delivered it, so
its evidence lands in that attempt, by credential, like every request to the endpoint. It may only speak of a
third-party stdio row that attempt delivered: never the built-in row, never a name agentctl did not deliver.
Each event is checked field by field; only fixed words, counts, bounded names and a hash are recorded, and
the server's self-description is redacted like any client-chosen text. The route answers 401 to an unknown
token (the witness then stays silent for good), 4xx to a bad report, 204 once recorded.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any, Final

from aiohttp import web

from agentctl.evidence.contract.report import ClientInfo, ToolCatalog, ToolSummary
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.reducer import find_attempt, find_row
from agentctl.evidence.sanitize import bounded_text
from agentctl.mcp_endpoint import auth

WITNESS_PATH: Final = "/witness"
MAX_BODY: Final = 1024 * 1024
MAX_EVENTS: Final = 512
MAX_AGE: Final = 24 * 3600.0
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_VERSION = re.compile(r"^[\x20-\x7e]{1,64}$")
_HASH = re.compile(r"^[a-z0-9]+:[a-z0-9-]+:[0-9a-f]{16,128}$")
# The failures a witness can name: it could not start the server, or the server ended before initialize.
NOT_STARTED: Final = "witness_server_not_started"
EXITED_EARLY: Final = "witness_server_exited"


class BadReport(ValueError):
    """A report that does not have the witness's shape: refused whole, nothing recorded."""


def mount(app: web.Application, ledger: Ledger, on_tcp: Any) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        if not on_tcp(request):
            raise web.HTTPNotFound()
        attempt_id = auth.attempt_of(request, ledger.tokens)
        if attempt_id is None:
            return auth.unauthorized()
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return web.Response(status=413, text="the witness report is too large\n")
        try:
            record(ledger, attempt_id, raw)
        except BadReport as exc:
            return web.Response(status=400, text=f"{exc}\n")
        return web.Response(status=204)

    app.router.add_post(WITNESS_PATH, handle)


def record(ledger: Ledger, attempt_id: str, raw: bytes) -> int:
    """Check one report and fold its events into the attempt; the count recorded."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadReport("the witness report is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("server"), str) or not isinstance(
            body.get("events"), list) or len(body["events"]) > MAX_EVENTS:
        raise BadReport("the witness report has no server or events")
    server = body["server"]
    attempt = find_attempt(ledger.history, attempt_id)
    row = find_row(attempt, server) if attempt is not None else None
    if row is None or row.source != "profile" or row.transport != "stdio":
        raise BadReport("the witness report names no stdio server this attempt delivered")
    checked = [_event(e, ledger.secrets) for e in body["events"]]
    now = ledger.now()
    for kind, age, fields in checked:
        ledger.record(kind, attempt_id, server, source="profile", observed_by="witness",  # type: ignore[arg-type]
                      occurred_at=now - timedelta(seconds=age), **fields)
    return len(checked)


def _event(event: Any, secrets: Any) -> tuple[str, float, dict[str, Any]]:
    if not isinstance(event, dict):
        raise BadReport("a witness event is not an object")
    age = event.get("age", 0)
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age <= MAX_AGE:
        raise BadReport("a witness event has no valid age")
    kind = event.get("kind")
    if kind == "initialize_observed":
        fields: dict[str, Any] = {}
        version = event.get("protocol_version")
        if isinstance(version, str) and _VERSION.fullmatch(version):
            fields["protocol_version"] = version
        name = bounded_text(event.get("server_name"), 64, secrets)
        if name is not None:
            fields["server_info"] = ClientInfo(name=name,
                                               version=bounded_text(event.get("server_version"), 64, secrets))
        return kind, float(age), fields
    if kind == "tools_list_observed":
        count, names = event.get("tool_count"), event.get("tool_names")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 1_000_000:
            raise BadReport("a tools/list event has no valid tool count")
        if not isinstance(names, list) or len(names) > count or not all(
                isinstance(n, str) and _TOOL_NAME.fullmatch(n) for n in names):
            raise BadReport("a tools/list event has invalid tool names")
        digest = event.get("catalog_hash")
        digest = digest if isinstance(digest, str) and _HASH.fullmatch(digest) else None
        catalog = ToolCatalog(tools=[ToolSummary(name=n) for n in names], truncated=len(names) < count, hash=digest)
        return kind, float(age), {"tool_count": count, "catalog": catalog}
    if kind == "tool_call_observed":
        name, outcome = event.get("tool_name"), event.get("outcome")
        if outcome not in ("ok", "error"):
            raise BadReport("a tools/call event has no valid outcome")
        tool = name if isinstance(name, str) and _TOOL_NAME.fullmatch(name) else "?"
        return kind, float(age), {"tool_name": tool, "outcome": outcome}
    if kind == "explicit_error":
        named = event.get("reason")
        if named not in (NOT_STARTED, EXITED_EARLY):
            raise BadReport("a witness error has an unknown reason")
        reason = NOT_STARTED if named == NOT_STARTED else EXITED_EARLY
        summary = event.get("summary")
        text = bounded_text(summary, 200, secrets) if isinstance(summary, str) else None
        return kind, float(age), {"reason_code": reason, "summary": text or reason}
    if kind == "server_exited":
        code = event.get("exit_code")
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            raise BadReport("a server_exited event has no valid exit code")
        return kind, float(age), {"exit_code": code}
    raise BadReport("a witness event has an unknown kind")
