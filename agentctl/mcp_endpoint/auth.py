"""Bearer authorization of the built-in MCP endpoint: the token names the attachment attempt.

Every MCP route (`/mcp`, `/sse`, `/messages/`) requires `Authorization: Bearer <token>` where the
token is one an attempt minted (`Ledger.begin_attempt`). The check runs in the aiohttp handler, before
the SDK sees a byte of the request; a missing, malformed or unknown token is answered 401 here.

The attempt a token maps to is the attempt every observation of that request is recorded in
(attribution by credential, not by time: docs/design.md, "Ownership and attempts"): an older attempt's
token keeps working, and its evidence lands in that older attempt, so it can never make the current
attempt green. The lookup compares the presented token against every known token in constant time
(`TokenRegistry.attempt_for`).

The attempt also becomes the SDK's notion of the request's principal (`scope["user"]`): the SDK binds a
legacy session (streamable HTTP `Mcp-Session-Id`, SSE `session_id`) to the principal that opened it and
answers 404 to any other one. So a legacy connection, and its connection id, never spans two attempts.
The token itself is never stored in the scope, the principal, a log line or the evidence.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from agentctl.identity import TokenRegistry

# Longer than anything identity.new_token() mints (43 characters), short enough that a flood of huge
# headers costs nothing to refuse.
MAX_TOKEN_LENGTH: Final = 256

WWW_AUTHENTICATE: Final = 'Bearer realm="agentctl"'


def bearer_token(request: web.BaseRequest) -> str | None:
    """The token of a single well-formed `Authorization: Bearer` header, else None."""
    values = request.headers.getall("Authorization", ())
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return token


def attempt_of(request: web.BaseRequest, tokens: TokenRegistry) -> str | None:
    """The attempt whose token authenticates this request, or None (answer 401)."""
    return tokens.attempt_for(bearer_token(request))


_PRINCIPALS: dict[str, AuthenticatedUser] = {}
_MAX_PRINCIPALS: Final = 64


def principal(attempt_id: str) -> AuthenticatedUser:
    """The SDK principal for an attempt: sessions are bound to it (see the module docstring).

    `token` is deliberately empty: the SDK only compares client ids, and nothing secret is kept.
    Cached per attempt (a handful per daemon); the SDK never mutates it.
    """
    user = _PRINCIPALS.get(attempt_id)
    if user is None:
        if len(_PRINCIPALS) >= _MAX_PRINCIPALS:
            _PRINCIPALS.clear()
        user = _PRINCIPALS[attempt_id] = AuthenticatedUser(AccessToken(token="", client_id=attempt_id, scopes=[]))
    return user


def unauthorized() -> web.Response:
    return web.Response(
        status=401,
        text="unauthorized: a bearer token of this execution is required\n",
        headers={"WWW-Authenticate": WWW_AUTHENTICATE, "Cache-Control": "no-store"},
    )
