"""Claude Code, everything agentctl knows of it: its passthrough strategy, its report reader, the
claude-agent-acp adapter's relay, its display name and hints (`AGENT`).

The `claude` strategy: Claude Code reads the servers from a JSON file passed with `--mcp-config FILE`.

Format (Claude Code docs, https://code.claude.com/docs/en/mcp and the CLI reference
https://code.claude.com/docs/en/cli-reference, "--mcp-config: load MCP servers from JSON files or strings"):

    {"mcpServers": {"<name>": {"type": "http" | "sse", "url": "...", "headers": {...}}
                    "<name>": {"type": "stdio", "command": "...", "args": [...], "env": {...}}}}

Claude Code speaks all three transports, so nothing is filtered for transport. The file is written 0600
into the attempt's private temporary directory and removed at stop; `--mcp-config FILE` is appended to
the agent's argv (before a `--`, if any). `--strict-mcp-config` is not added: the user's own servers stay.

With `agent.report = "request"`, a print-mode run (`-p`) that chose no output format also gets
`--output-format stream-json --verbose`, so Claude Code's init event reports each server's status (read by
`ClaudeInitReader` below). The output is agentctl's to drain either way: nothing downstream parses it.

When the run fails, `readable_lines` turns those stream-json events into words for `agentctl run`'s explanation
and FAILURE_HINTS names Claude Code's own causes (agentctl/agent/passthrough/explain.py).

Report: Claude Code's stream-json `system/init` event: each MCP server's status and its tools, as the CLI reports.

`claude -p TEXT --output-format stream-json --verbose` prints, before anything else and once every server has
settled or timed out, one JSON line `{"type":"system","subtype":"init",...}` with `mcp_servers` (a list of
`{"name","status"}`; statuses `connected`, `failed`, `needs-auth`, `pending`, `disabled`) and `tools`, where an
MCP tool is `mcp__<server>__<tool>` with the server's name normalized as Claude Code does (every character
outside `[A-Za-z0-9_-]` becomes `_`). Measured with Claude Code 2.1.332. A server Claude Code could not
parse is absent from the list: absence is not failure, so it gets no report.

Only delivered servers are reported (a name the CLI lists that agentctl did not deliver is the user's own,
or invented: it is ignored). The tool count is given for a connected server: a tool whose name fits two
servers' prefixes (`a` and `a__b` both listed) belongs to the longer name, and two names that normalize alike
have no count (nothing says whose a tool is).
The init event carries no error text, so a reported failure has no summary. For the built-in server (and only
it: agentctl's own tools) the init event's tool names are kept, so its exposure can be compared with what the
endpoint served.

The ACP adapter `@agentclientprotocol/claude-agent-acp` (0.101.0, dist/acp-agent.js,
`reportMcpServerStartupFailures`) relays the same init statuses for the servers its client gave it, once per
server per session, only `failed` and `needs-auth`: to a client that opted into session notices as a notice
titled exactly `MCP server "NAME" failed to start` or `MCP server "NAME" needs authentication`
(`claude-agent-acp:notice`), otherwise as an `agent_message_chunk` whose `_meta.claudeCode` is
`{"kind":"mcpServerStatus","server","status"}` (`claude-agent-acp:meta`). Both are the adapter's fixed
shapes, so both set the row; any other notice text stays a weak line (agentctl/agent/acp_notices.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

import msgspec

from agentctl.agent.agent_cli import AcpRelay, AgentCli
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    dump_json,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import write_private
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.base import ReportReader, ServerReport, exposed_names
from agentctl.agent.reported.feed import ReportPlan, is_print_mode, option_value, options
from agentctl.evidence.contract.report import ReportedState

SOURCE = "claude:stream-json-init"
ACP_NOTICE_SOURCE = "claude-agent-acp:notice"
REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
_ACP_REASONS = {"failed": REASON_FAILED, "needs_auth": REASON_NEEDS_AUTH}
ACP_META_SOURCE = "claude-agent-acp:meta"
# The adapter's two notice titles, whole: a title that merely contains such words is free text.
_ACP_TITLE = re.compile(r'MCP server "(?P<name>[^"]{1,256})" (?P<what>failed to start|needs authentication)')
_ACP_TITLE_STATES: dict[str, tuple[ReportedState, str]] = {
    "failed to start": ("failed", "failed"),
    "needs authentication": ("needs_auth", "needs-auth"),
}

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


def parse_init(line: bytes, delivered: Collection[str], builtin: str | None = None) -> list[ServerReport] | None:
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
        exposed = _exposed(event.tools, name, set(listed) | set(delivered)) if name == builtin else None
        reports.append(ServerReport(name=name, state=state, raw_state=raw,
                                    tool_count=counts.get(name) if state == "connected" else None,
                                    exposed_tools=exposed if state == "connected" else None))
    return reports


def split_tool(tool: str, names: Collection[str]) -> tuple[str, str] | None:
    """(server, tool) of an `mcp__SERVER__TOOL` name, by the configured names: the longest normalized server
    name that prefixes it wins, so `a` and `a__b` both configured cannot take each other's tools. None when
    no name fits, or two names normalize alike (nothing certain)."""
    if not tool.startswith("mcp__"):
        return None
    fits: dict[str, list[str]] = {}
    for name in names:
        prefix = f"mcp__{normalized_name(name)}__"
        if tool.startswith(prefix) and len(tool) > len(prefix):
            fits.setdefault(prefix, []).append(name)
    if not fits:
        return None
    prefix = max(fits, key=len)
    if len(fits[prefix]) != 1:
        return None
    return fits[prefix][0], tool[len(prefix):]


def _exposed(tools: Any, server: str, names: set[str]) -> list[str] | None:
    """The built-in server's tools in the agent's list (their MCP names), bounded; None without a list."""
    if not isinstance(tools, list):
        return None
    found = (split_tool(tool, names) if isinstance(tool, str) else None for tool in tools)
    return exposed_names(split[1] for split in found if split is not None and split[0] == server)


def parse_acp_update(update: Any, delivered: Collection[str]) -> tuple[str, list[ServerReport]] | None:
    """(source, reports) of one ACP `session/update` payload when it is claude-agent-acp's MCP status relay,
    else None. Only the adapter's fixed shapes count; a delivered name only."""
    if not isinstance(update, dict):
        return None
    kind = update.get("sessionUpdate")
    if kind == "notice":
        title = update.get("title")
        found = _ACP_TITLE.fullmatch(title) if isinstance(title, str) else None
        if found is None:
            return None
        state, raw = _ACP_TITLE_STATES[found["what"]]
        name = found["name"]
        return ACP_NOTICE_SOURCE, ([_acp_report(name, state, raw)] if name in delivered else [])
    meta = update.get("_meta")
    relay = meta.get("claudeCode") if isinstance(meta, dict) else None
    if kind != "agent_message_chunk" or not isinstance(relay, dict) or relay.get("kind") != "mcpServerStatus":
        return None
    server, status = relay.get("server"), relay.get("status")
    if not isinstance(server, str) or not isinstance(status, str) or server not in delivered:
        return ACP_META_SOURCE, []
    return ACP_META_SOURCE, [_acp_report(server, STATES.get(status, "unknown"), status)]


def _acp_report(name: str, state: ReportedState, raw: str) -> ServerReport:
    # The adapter sends no error text ("Run /mcp for the error"): the reason is the state's own.
    reason = _ACP_REASONS.get(state)
    return ServerReport(name=name, state=state, raw_state=raw, reason_code=reason)


def _tool_counts(tools: Any, names: set[str]) -> dict[str, int | None]:
    """Tools per server, each tool given to the longest configured name that prefixes it (`split_tool`);
    None for servers whose names normalize alike (one prefix, two owners: no count is certain)."""
    if not isinstance(tools, list):
        return {}
    owners: dict[str, list[str]] = {}
    for name in names:
        owners.setdefault(normalized_name(name), []).append(name)
    counts: dict[str, int | None] = {name: 0 for name in names}
    for same in owners.values():
        if len(same) > 1:
            for owner in same:
                counts[owner] = None
    for tool in tools:
        found = split_tool(tool, names) if isinstance(tool, str) else None
        counted = counts[found[0]] if found is not None else None
        if found is not None and counted is not None:
            counts[found[0]] = counted + 1
    return counts


class ClaudeInitReader(ReportReader):
    """Reads Claude Code's stdout incrementally; returns the reports of each init event it completes."""

    markers = (b'"init"',)  # the init event's own value: any line without it is dropped at its newline, undecoded

    def __init__(self, delivered: Collection[str], max_line: int = MAX_LINE, builtin: str | None = None) -> None:
        super().__init__(delivered, max_line)
        self.builtin = builtin

    def parse_line(self, line: bytes) -> list[ServerReport] | None:
        return parse_init(line, self.delivered, self.builtin)

# ---- the passthrough strategy ----------------------------------------------------------------------

FILE_NAME = "claude-mcp.json"


# Why a print-mode run fails, as Claude Code 2.1 says it (with no key: "Not logged in · Please run /login",
# exit 1; in stream-json the assistant event's `error` is "authentication_failed").
FAILURE_HINTS = (
    RefusalHint(
        "not_logged_in",
        ("not logged in", "please run /login", "authentication_failed", "invalid api key"),
        "Claude Code is not logged in: set ANTHROPIC_API_KEY in [agent] env, or run `claude` once as the "
        "user agentctl runs as and log in with /login.",
    ),
    RefusalHint(
        "rate_limited",
        ("rate_limit", "rate limit", "usage limit", "overloaded_error", "api error: 429", "api error: 529"),
        "Anthropic's API refused for rate limits, usage limits or load: wait, or use another key or plan.",
    ),
)


class _Event(msgspec.Struct):
    type: str = ""
    subtype: str | None = None
    message: Any = None  # an assistant event's message: {"content": [{"type": "text", "text": ...}]}
    error: str | None = None
    is_error: bool = False
    result: Any = None
    terminal_reason: str | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


def readable_lines(lines: list[str]) -> list[str]:
    """Claude Code's stream-json events as a person reads them: each event's kind and the words it carries
    (an error's text once, not again in the result event), instead of a JSON line cut in its middle. Any
    other line is kept as it is."""
    out: list[str] = []
    said: set[str] = set()
    for line in lines:
        try:
            event = _decode_event(line) if line.startswith("{") else None
        except msgspec.DecodeError:
            event = None
        if event is None or not event.type:
            out.append(line)
            continue
        kind = "/".join(filter(None, (event.type, event.subtype)))
        text = _result_text(event) if event.type == "result" else _message_text(event.message)
        tags = [tag for tag in (event.error, "is_error" if event.is_error else None, event.terminal_reason) if tag]
        head = f"[{kind}{': ' + ', '.join(tags) if tags else ''}]"
        out.append(f"{head} {text}" if text and text not in said else head)
        said.add(text)
    return out


def _message_text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return ""
    return " ".join(part["text"] for part in content
                    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str))


def _result_text(event: _Event) -> str:
    return event.result if isinstance(event.result, str) else ""


class ClaudeStrategy:
    name = "claude"
    receiver = CliReceiver(frozenset({"http", "sse", "stdio"}))

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        servers: dict[str, dict[str, Any]] = {}
        for entry in plan.delivered:
            if entry.transport == "stdio":
                servers[entry.name] = {"type": "stdio", "command": entry.command, "args": entry.args, "env": entry.env}
            else:
                servers[entry.name] = {"type": entry.transport, "url": entry.url, "headers": entry.headers}
        path = write_private(req.tmpdir, FILE_NAME, dump_json({"mcpServers": servers}))
        plan.files.append(path)
        plan.argv = ["--mcp-config", str(path)]
        agent = req.spec.agent
        if agent is not None and agent.report == "request":
            plan.argv += claude_request_args(agent.command)
        return plan


STRATEGY = ClaudeStrategy()


# ---- which report a run gives ----------------------------------------------------------------------------

def claude_stream_json(argv: Sequence[str]) -> bool:
    """Whether Claude Code run with `argv` prints stream-json (its init event needs `--verbose` with `-p`)."""
    args = options(argv)
    return option_value(args, "--output-format") == "stream-json" and "--verbose" in args and is_print_mode(args)


def claude_request_args(argv: Sequence[str]) -> list[str]:
    """What to add so a print-mode Claude Code run reports its servers; nothing when the user chose an
    output format already (theirs is kept) or the run is interactive (a TUI has no stream-json)."""
    args = options(argv)
    if not is_print_mode(args) or option_value(args, "--output-format") is not None:
        return []
    return ["--output-format", "stream-json"] + ([] if "--verbose" in args else ["--verbose"])


def plan_report(argv: Sequence[str]) -> ReportPlan:
    if claude_stream_json(argv):
        return ReportPlan(source=SOURCE)
    if not is_print_mode(argv):
        return ReportPlan(note="Claude Code runs interactively (no -p): its terminal UI carries no "
                               "machine-readable MCP status, so no agent report is available")
    return ReportPlan(note="Claude Code runs without `--output-format stream-json --verbose`: no agent "
                           "report is available (set agent.report = \"request\" to have agentctl add them)")


def _open_reader(source: str, delivered: Collection[str], builtin: str | None, secrets: Any) -> ReportReader | None:
    return ClaudeInitReader(delivered, builtin=builtin) if source == SOURCE else None


def _relay_candidate(update: dict[str, Any]) -> bool:
    kind = update.get("sessionUpdate")
    return kind == "notice" or (kind == "agent_message_chunk" and "_meta" in update)


# Why Claude Code (or claude-agent-acp around it) refuses a session: checked before the generic table.
REFUSAL_HINTS = (
    RefusalHint(
        "root_refused",
        ("cannot be used with root/sudo privileges", "--dangerously-skip-permissions cannot be used"),
        "Claude Code refuses to skip permission prompts as root: set IS_SANDBOX=1 in [agent] env if this "
        "is a sandbox, or run agentctl as an ordinary user.",
    ),
)

AGENT = AgentCli(
    name="claude",
    display_name="Claude Code",
    strategy=STRATEGY,
    reporters={"claude": "Claude Code", "claude-agent-acp": "claude-agent-acp"},
    failure_hints=FAILURE_HINTS,
    refusal_hints=REFUSAL_HINTS,
    readable_lines=readable_lines,
    plan_report=plan_report,
    open_reader=_open_reader,
    acp_relay=AcpRelay(_relay_candidate, lambda update, delivered, secrets: parse_acp_update(update, delivered)),
)
