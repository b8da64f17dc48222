"""Owns the set of values that must never leave the daemon: secret-bearing values, their meaningful parts,
and the daemon's own minted tokens. Pure: no I/O; the compiled pattern is built by `sanitize`.

A value is registered whole and split into the parts an error message is likely to echo on its own:
- the credential after an auth scheme word (`Bearer X`, `Token X`, `Basic X` and the user and password
  that X decodes to), and the values of `name=value` items (`Digest username="u", response="r"`);
- the value after `=` in an argument or assignment (`--token=X`, `KEY=X`);
- a URL's user, password, path segments, query values and fragment (percent-encoded and decoded);
- the words of a value with spaces, and the items of `,` `;` `&` lists.

Too generic to be a secret, whoever registers it: a URL path made only of the route words every MCP URL
has (`/mcp`, `/sse`, `/api/v1/mcp`), and anything inside a `public` string (a target's host, a server name,
an executable's basename: what every report shows anyway). The sanitizer matches the rest by fragment
(agentctl.evidence.fragments).

Lengths (see MIN_SECRET_LENGTH and MIN_PART_LENGTH): a whole value someone declared secret is registered
from 4 characters; a part, which is only our guess at the value's structure, from 6 characters and only
when it is not one of the route and format words every MCP URL and command line has ("messages", "stream").
A shorter part tells an attacker at most ~30 bits of one field (62^5 values: an offline search of seconds),
so revealing it gains nothing over guessing, while registering it would shred ordinary words ("user",
"admin", "api", "mcp") in every summary.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import unquote, unquote_plus, urlsplit

if TYPE_CHECKING:  # pragma: no cover - the sanitizer builds the matcher; the registry only keeps it
    from agentctl.evidence.fragments import FragmentMatcher

__all__ = [
    "MAX_TOKENS",
    "MIN_PART_LENGTH",
    "MIN_SECRET_LENGTH",
    "SecretRegistry",
    "generic",
    "url_parts",
    "value_parts",
]

# Shorter "secrets" would shred ordinary words in every summary and protect nothing worth protecting.
MIN_SECRET_LENGTH = 4
MIN_PART_LENGTH = 6
# Minted tokens remembered for redaction after their attempt left history: each reset and each endpoint
# test mints one, and a dead token is worthless, so the oldest may be forgotten.
MAX_TOKENS = 256
# One value cannot blow the registry up (a hostile spec value of a thousand `a=b` items).
_MAX_PARTS_PER_VALUE = 64
_MAX_DEPTH = 6

# Conventional words of MCP URLs, command lines and formats: never secret, and common in every message.
_ORDINARY_PARTS = frozenset(
    {
        "message", "messages", "stream", "streams", "events", "server", "servers", "default", "latest",
        "public", "streamable", "streamable-http", "stream-json", "v1beta", "v1alpha", "localhost",
        "session", "sessions", "health", "status", "index.html", "index.js", "package", "module",
        # The auth scheme words themselves: the credential after them is the secret.
        "bearer", "basic", "token", "digest", "negotiate", "apikey", "api-key", "sharedkey",
    }
)
# Route segments every MCP server's URL may have: a path made only of these says nothing about the server.
_ROUTE_WORDS = _ORDINARY_PARTS | {
    "mcp", "sse", "api", "rpc", "http", "v1", "v2", "v3", "v4", "latest", "stable", "beta", "alpha", "ws",
}
_AUTH_SCHEME = re.compile(
    r"(?i)(?P<scheme>bearer|basic|token|digest|negotiate|ntlm|apikey|api-key|key|hmac|dpop|oauth|sharedkey)"
    r"\s+(?P<credential>\S.*)",
    re.S,
)
_ITEM_SEPARATORS = re.compile(r"[,;&\s]+")
_QUOTES = "\"'"


def _basic_parts(credential: str) -> list[str]:
    try:
        decoded = base64.b64decode(credential, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return []
    user, sep, password = decoded.partition(":")
    return [decoded, user, password] if sep else []


def url_parts(text: str) -> list[str]:
    """A URL's secret-bearing fields: user, password, path, query and fragment (split further as parts).
    Its scheme and host are not among them: they are the target every report shows. A URL that does not
    parse is one opaque value."""
    try:
        parts = urlsplit(text)
        user, password = parts.username, parts.password
    except ValueError:
        return [text]
    fields = [user, password, parts.query, parts.fragment, parts.path if parts.path not in ("", "/") else None]
    return [field for field in fields if field]


def _path_segments(url: str) -> list[str]:
    # A URL's path segments, not a file path's: an argument naming a script would otherwise make every
    # directory name (and the agent's own package name) a "secret" shredded out of every summary.
    try:
        path = urlsplit(url).path
    except ValueError:
        return []
    return [segment for segment in path.split("/") if segment]


def _direct_parts(text: str) -> list[str]:
    """The parts one level down: what the rules of this module's docstring take out of `text`."""
    stripped = text.strip()
    found = [stripped] if stripped != text else []
    if len(stripped) > 1 and stripped[0] in _QUOTES and stripped[-1] == stripped[0]:
        return [*found, stripped[1:-1]]
    if "://" in stripped and not any(ch.isspace() for ch in stripped):
        # A URL's own structure only: decoding or splitting it whole would invent parts across its fields.
        return found + url_parts(stripped) + _path_segments(stripped)
    scheme = _AUTH_SCHEME.fullmatch(stripped)
    if scheme:
        credential = scheme.group("credential").strip()
        found.append(credential)
        if scheme.group("scheme").lower() == "basic":
            found += _basic_parts(credential)
        return found
    items = [item for item in _ITEM_SEPARATORS.split(stripped) if item]
    if len(items) > 1:
        return found + items
    for decode in (unquote, unquote_plus):
        if (decoded := decode(stripped)) != stripped:
            found.append(decoded)
    name, sep, value = stripped.partition("=")
    if sep and name and value:
        found.append(value)
    return found


def value_parts(value: str) -> set[str]:
    """`value`'s meaningful parts (not `value` itself), of every length: the caller applies the minimum."""
    parts: set[str] = set()
    pending = [(part, 1) for part in _direct_parts(value)]
    while pending and len(parts) < _MAX_PARTS_PER_VALUE:
        part, depth = pending.pop()
        if part in parts or part == value:
            continue
        parts.add(part)
        if depth < _MAX_DEPTH:
            pending += [(sub, depth + 1) for sub in _direct_parts(part)]
    return parts


def generic(value: str) -> bool:
    """Whether `value` is only route words (`/mcp`, `sse`, `/api/v1/mcp/`): never a secret, and shared by
    every MCP URL, so redacting it would shred ordinary agent text ("Run /mcp for the error.")."""
    segments = [segment for segment in value.strip().lower().split("/") if segment]
    return all(segment in _ROUTE_WORDS for segment in segments)


def _meaningful_part(part: str) -> bool:
    return len(part) >= MIN_PART_LENGTH and part.lower() not in _ORDINARY_PARTS and not generic(part)


class SecretRegistry:
    """The values redaction must remove, whole and by part, plus minted tokens; iterable as strings.

    `version` changes whenever the set does, so a compiled pattern can be cached against it.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._whole: set[str] = set()
        self._parts: set[str] = set()
        self._tokens: deque[str] = deque(maxlen=MAX_TOKENS)
        self._public: set[str] = set()
        self.version = 0
        self.compiled: tuple[int, FragmentMatcher | None] | None = None  # (version, pattern): the sanitizer's cache
        self.extend(values)

    def add(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            return
        before = len(self._whole) + len(self._parts)
        if len(value) >= MIN_SECRET_LENGTH and not generic(value):
            self._whole.add(value)
        self._parts.update(part for part in value_parts(value) if _meaningful_part(part))
        if len(self._whole) + len(self._parts) != before:
            self.version += 1

    def add_parts(self, value: str) -> None:
        """Register `value`'s parts but not `value` itself (a server URL: its scheme and host are the target
        every report shows; its fields are registered whole by whoever knows them to be secret)."""
        if not isinstance(value, str) or not value:
            return
        before = len(self._parts)
        self._parts.update(part for part in value_parts(value) if _meaningful_part(part))
        if len(self._parts) != before:
            self.version += 1

    def extend(self, values: Iterable[str]) -> None:
        if isinstance(values, str):
            # A bare string would iterate as characters, all below the minimum, silently redacting nothing.
            values = (values,)
        for value in values:
            self.add(value)

    def add_token(self, token: str) -> None:
        """A secret the daemon minted (an attempt's bearer token): registered whole, kept after it expires."""
        if isinstance(token, str) and len(token) >= MIN_SECRET_LENGTH and token not in self._tokens:
            self._tokens.append(token)
            self.version += 1

    def add_public(self, text: str) -> None:
        """Text every report shows anyway (a target's host, a server name): no fragment inside it is
        redacted, even when a registered value contains it."""
        if isinstance(text, str) and text and text not in self._public:
            self._public.add(text)
            self.version += 1

    def public(self) -> set[str]:
        return set(self._public)

    def values(self) -> set[str]:
        """Every registered string: whole values, parts and tokens."""
        return self._whole | self._parts | set(self._tokens)

    def __iter__(self) -> Iterator[str]:
        return iter(self.values())

    def __len__(self) -> int:
        return len(self.values())
