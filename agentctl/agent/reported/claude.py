"""Claude Code's stream-json `system/init` event: each MCP server's status and its tools, as the CLI reports.

`claude -p TEXT --output-format stream-json --verbose` prints, before anything else and once every server has
settled or timed out, one JSON line `{"type":"system","subtype":"init",...}` with `mcp_servers` (a list of
`{"name","status"}`; statuses `connected`, `failed`, `needs-auth`, `pending`, `disabled`) and `tools`, where an
MCP tool is `mcp__<server>__<tool>` with the server's name normalized as Claude Code does (every character
outside `[A-Za-z0-9_-]` becomes `_`). Measured with Claude Code 2.1.332. A server Claude Code could not
parse is absent from the list: absence is not failure, so it gets no report.

Only delivered servers are reported (a name the CLI lists that agentctl did not deliver is the user's own,
or invented: it is ignored). The tool count is given for a connected server when it is unambiguous: a tool
whose name fits two servers' prefixes (`a` and `a__b`, or two names that normalize alike) counts for none.
The init event carries no error text, so a reported failure has no summary.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import msgspec

from agentctl.agent.reported.base import ReportReader, ServerReport
from agentctl.evidence.contract import ReportedState

SOURCE = "claude:stream-json-init"
# Far above any init event (6 KiB with every built-in tool and skill; a server adds a few dozen bytes a tool).
MAX_LINE = 1024 * 1024
STATES: dict[str, ReportedState] = {
    "connected": "connected",
    "failed": "failed",
    "needs-auth": "needs_auth",
    "pending": "pending",
    "disabled": "disabled",
}
_NOT_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_-]")


class _Init(msgspec.Struct):
    # Any, not the expected types: an unexpected shape is skipped field by field, never a decode failure.
    type: Any = None
    subtype: Any = None
    mcp_servers: Any = None
    tools: Any = None


_decoder = msgspec.json.Decoder(_Init)


def normalized_name(name: str) -> str:
    """A server's name as Claude Code puts it into its tool names (`mcp__<this>__<tool>`)."""
    out = _NOT_NAME_CHAR.sub("_", name)
    if name.startswith("claude.ai "):
        out = re.sub(r"_+", "_", out).strip("_")
    return out


def parse_init(line: bytes, delivered: Collection[str]) -> list[ServerReport] | None:
    """The reports of one stdout line, or None when it is not a `system/init` event."""
    try:
        event = _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if event.type != "system" or event.subtype != "init":
        return None
    entries = event.mcp_servers if isinstance(event.mcp_servers, list) else []
    listed: dict[str, set[str]] = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("status"), str):
            listed.setdefault(entry["name"], set()).add(entry["status"])
    counts = _tool_counts(event.tools, set(listed) | set(delivered))
    reports = []
    for name, statuses in listed.items():
        if name not in delivered or len(statuses) != 1:
            continue  # not ours, or listed twice with different statuses: nothing certain to report
        (raw,) = statuses
        state = STATES.get(raw, "unknown")
        reports.append(ServerReport(name=name, state=state, raw_state=raw,
                                    tool_count=counts.get(name) if state == "connected" else None))
    return reports


def _tool_counts(tools: Any, names: set[str]) -> dict[str, int | None]:
    """Tools per server by prefix; None for a server with a tool another server's prefix also fits."""
    if not isinstance(tools, list):
        return {}
    prefixes: dict[str, list[str]] = {}
    for name in names:
        prefixes.setdefault(f"mcp__{normalized_name(name)}__", []).append(name)
    counts: dict[str, int | None] = {name: 0 for name in names}
    for prefix, owners in prefixes.items():
        if len(owners) > 1:
            for owner in owners:
                counts[owner] = None  # two servers share one prefix
    for tool in tools:
        if not isinstance(tool, str) or not tool.startswith("mcp__"):
            continue
        fits = [prefix for prefix in prefixes if tool.startswith(prefix) and len(tool) > len(prefix)]
        for prefix in fits:
            for owner in prefixes[prefix]:
                if len(fits) > 1:
                    counts[owner] = None
                elif counts[owner] is not None:
                    counts[owner] += 1
    return counts


class ClaudeInitReader(ReportReader):
    """Reads Claude Code's stdout incrementally; returns the reports of each init event it completes."""

    markers = (b'"init"',)  # the init event's own value: any line without it is dropped at its newline, undecoded

    def __init__(self, delivered: Collection[str], max_line: int = MAX_LINE) -> None:
        super().__init__(delivered, max_line)

    def parse_line(self, line: bytes) -> list[ServerReport] | None:
        return parse_init(line, self.delivered)
