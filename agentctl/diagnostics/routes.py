"""Control routes for diagnostics: POST /v1/test-endpoint, GET /v1/diagnostics, GET /v1/tools[/{name}].

They live under /v1/, so the control guard (AF_UNIX, same uid or root) protects them like the rest. The
endpoint test takes a server NAME only: its body type refuses any other field, so no URL, command,
header, argument or environment value can ever come from the caller.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from aiohttp import web

from agentctl.http_answers import BodyError, decode_body, error_response, json_response
from agentctl.diagnostics.diagnostics import ToolLookupError
from agentctl.diagnostics.endpoint_test import EndpointTester, EndpointTestError
from agentctl.evidence.contract.diagnostics import Diagnostics, ToolDetail, ToolsView

MAX_BODY_BYTES = 4096


class _TestBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    timeout: float | None = None


def install_diagnostics_routes(app: web.Application, tester: EndpointTester, *, diagnostics: Callable[[], Diagnostics],
                               tools: Callable[[], ToolsView], tool: Callable[[str], ToolDetail]) -> None:
    """The diagnostics routes, given only what they use: `tester` is the daemon's one endpoint tester (its
    per-name lock is shared with the upstream's requests); the views are built when asked (`tool` raises
    ToolLookupError for a name no server has)."""
    async def test_endpoint(request: web.Request) -> web.Response:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return error_response(413, "body_too_large", f"request body over {MAX_BODY_BYTES} bytes")
        try:
            body = await decode_body(
                request, _TestBody, max_bytes=MAX_BODY_BYTES,
                hint=" (only a server name and an optional timeout are accepted)",
            )
        except BodyError as exc:
            return exc.response()
        try:
            response = await tester.test(body.name, body.timeout)
        except EndpointTestError as exc:
            return error_response(exc.status, exc.code, exc.message)
        return json_response(response)

    async def diagnostics_route(request: web.Request) -> web.Response:
        return json_response(diagnostics())

    async def tools_route(request: web.Request) -> web.Response:
        return json_response(tools())

    async def tool_route(request: web.Request) -> web.Response:
        try:
            return json_response(tool(request.match_info["name"]))
        except ToolLookupError as exc:
            return error_response(404, exc.reason_code, exc.message)

    app.router.add_post("/v1/test-endpoint", test_endpoint)
    app.router.add_get("/v1/diagnostics", diagnostics_route, allow_head=False)
    app.router.add_get("/v1/tools", tools_route, allow_head=False)
    app.router.add_get("/v1/tools/{name}", tool_route, allow_head=False)
