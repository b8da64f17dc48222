"""How every HTTP surface of agentctl answers: a JSON body, a refusal as a ControlError (status, reason code, one
line), and a request body decoded into a contract struct or refused. A leaf under the routes of the daemon's
control API, its diagnostics and the hub page, so none of them imports another's route module for it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.control import ControlError
from agentctl.evidence.decode_errors import describe_decode_error


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(body), status=status, content_type="application/json")


def error_response(status: int, reason_code: str, message: str) -> web.Response:
    """A refusal, as every route of the control API (and the hub page's API) answers one."""
    return json_response(ControlError(error=message, reason_code=reason_code, status=status), status=status)


# The reason code of a refusal aiohttp itself raised (no such route, a method the route does not take, a body
# over the application's limit), by HTTP status.
STATUS_REASONS = {400: "bad_request_body", 404: "unknown_route", 405: "wrong_method", 413: "body_too_large"}


def status_reason(status: int) -> str:
    return STATUS_REASONS.get(status, "request_refused")


class Refusal(Exception):
    """A request a route turns down: its HTTP status, reason code and one line, answered as a ControlError."""

    def __init__(self, status: int, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason_code = reason_code
        self.message = message

    def response(self) -> web.Response:
        return error_response(self.status, self.reason_code, self.message)


class BodyError(Refusal):
    """A request body a route cannot use (status 400 or 413)."""


_MAX_BODY_ERROR = 200


async def decode_body(request: web.Request, kind: type[Any], *, max_bytes: int | None = None, hint: str = "") -> Any:
    """The request's JSON body as `kind` (an empty body is `{}`), or BodyError.

    `max_bytes` is checked against the bytes actually read: a chunked body has no Content-Length.
    The message is one line whatever the caller sent (a key may hold a newline), and bounded.
    """
    raw = await request.read()
    if max_bytes is not None and len(raw) > max_bytes:
        raise BodyError(413, "body_too_large", f"request body over {max_bytes} bytes")
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        detail = describe_decode_error(exc).text(with_path=False, limit=_MAX_BODY_ERROR)
        raise BodyError(400, "bad_request_body", f"bad request body: {detail}{hint}") from None
    except msgspec.DecodeError:
        raise BodyError(400, "bad_request_body", "bad request body: not JSON") from None
