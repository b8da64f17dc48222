"""Which delivered MCP server an agent's error is about: exactly, or none (then it is a report-level error).

Pure: text and data in, server names out. The order of preference:

1. Structured data. An ACP error's `data` naming servers (`server`, `mcpServer`, `serverName`, or
   `servers: [{name, reason|message} | name]`) decides, each server with its own reason. A structured
   answer naming no delivered server names none; the free text is not consulted then.
2. Free text: the error's message plus `data.details` / `data.message` (where the ACP SDK puts an uncaught
   exception's text), never any other part of `data` (an agent may echo the whole request there, and that
   names every server). A name counts only where the text names it as a server, in the phrasings agents
   use (seen in claude-code-acp, codex-acp, fast-agent, gemini-cli and the ACP SDK):
   - quoted exactly ('docs', "docs" or `docs`) right after "server" (`MCP server 'docs' unreachable`,
     `MCP Server: 'docs': Failed to initialize`, `server: "docs"`) or "client for" (`MCP client for
     `docs` failed`), or right before "server" / "MCP server" (`the "docs" MCP server`);
   - unquoted in the same places (`MCP server docs-api failed`, `The err500 MCP server is not logged in`)
     only when the name cannot be an ordinary word: a name of letters only ("docs", "closed", "research")
     is ambiguous unquoted, so it counts only quoted.
   A name inside a URL, host, path, `key="value"` pair or longer identifier never counts: a quoted name
   must be the whole quoted text, an unquoted one must stand alone.
3. Several different servers named in free text is ambiguous (a cause and an effect, an echo): none.

Names compare exactly (case included): `Docs` is not `docs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# Keys of an ACP error's `data` that name one server, and the one that lists several.
SERVER_KEYS = ("server", "mcpServer", "mcp_server", "serverName", "server_name")
SERVERS_KEY = "servers"
# Keys of `data` that carry the error's own text (the SDK's str(exc) goes to `details`).
TEXT_KEYS = ("details", "message")
MAX_LISTED = 64
MAX_TEXT = 16 * 1024  # only the start of a huge message is read (a traceback can be long)

_QUOTES = ("'", '"', "`")
# The phrase words match in any case ("MCP Server:"); the name itself only exactly.
_BEFORE_NAME = r"(?i:\bserver\s*[:=]?\s*|\bclient\s+for\s+)"  # "MCP server ", "MCP Server: ", "server: ", "client for "
_AFTER_NAME = r"(?i:\s+(?:MCP\s+)?server\b)"  # " MCP server", " server"
# An unquoted name stands alone: no identifier, path, host or URL character touches it (a final full stop,
# or a colon before a space, still ends a sentence).
_LEFT = r"(?<![\w.\-/@:=\\])"
_RIGHT = r"(?![\w\-/@\\]|[.:=][^\s])"


@dataclass(frozen=True)
class Attribution:
    """The servers an error names (empty: a report-level error) and how that was decided."""

    servers: tuple[str, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)  # per-server reason from structured data
    by: Literal["structured", "text", "none"] = "none"
    ambiguous: bool = False


def word_like(name: str) -> bool:
    """A name that could be an ordinary word in an error message ("docs", "closed"): letters only."""
    return name.isalpha()


def error_text(message: str, data: Any) -> str:
    """The error's free text: its message plus the data's own text fields (never the rest of data)."""
    parts = [message] if message else []
    if isinstance(data, Mapping):
        parts += [data[key] for key in TEXT_KEYS if isinstance(data.get(key), str) and data[key] not in parts]
    return ": ".join(parts)[:MAX_TEXT]


def structured_reasons(data: Any) -> dict[str, str]:
    """Per-server reasons from a structured error's data; {} when it names no server."""
    out: dict[str, str] = {}
    if not isinstance(data, Mapping):
        return out
    reason = data.get("reason") or data.get("message") or data.get("details") or ""
    for key in SERVER_KEYS:
        if isinstance(data.get(key), str):
            out[data[key]] = str(reason)
    servers = data.get(SERVERS_KEY)
    if isinstance(servers, list):
        for item in servers[:MAX_LISTED]:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                out[item["name"]] = str(item.get("reason") or item.get("message") or "")
            elif isinstance(item, str):
                out[item] = ""
    return out


def _patterns(name: str) -> list[re.Pattern[str]]:
    escaped = re.escape(name)
    found = []
    for q in _QUOTES:
        quoted = re.escape(q) + escaped + re.escape(q)
        found.append(re.compile(_BEFORE_NAME + quoted))
        found.append(re.compile(quoted + _AFTER_NAME))
    if not word_like(name):
        found.append(re.compile(_BEFORE_NAME + _LEFT + escaped + _RIGHT))
        found.append(re.compile(_LEFT + escaped + _RIGHT + _AFTER_NAME))
    return found


def names_as_server(text: str, name: str) -> bool:
    """Whether `text` names `name` as a server in one of the phrasings above."""
    if not name or name not in text:
        return False
    return any(p.search(text) for p in _patterns(name))


def attribute(message: str, data: Any, delivered: Sequence[str]) -> Attribution:
    """The delivered servers an agent's error names, by structured data first, else by its free text."""
    reasons = structured_reasons(data)
    if reasons:
        named = tuple(dict.fromkeys(n for n in delivered if n in reasons))
        return Attribution(named, {n: reasons[n] for n in named}, "structured")
    text = error_text(message, data)
    named = tuple(dict.fromkeys(n for n in delivered if names_as_server(text, n)))
    if len(named) > 1:
        return Attribution(by="text", ambiguous=True)
    return Attribution(named, {}, "text" if named else "none")
