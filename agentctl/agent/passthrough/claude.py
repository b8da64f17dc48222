"""The `claude` strategy: Claude Code reads the servers from a JSON file passed with `--mcp-config FILE`.

Format (Claude Code docs, https://code.claude.com/docs/en/mcp and the CLI reference
https://code.claude.com/docs/en/cli-reference, "--mcp-config: load MCP servers from JSON files or strings"):

    {"mcpServers": {"<name>": {"type": "http" | "sse", "url": "...", "headers": {...}}
                    "<name>": {"type": "stdio", "command": "...", "args": [...], "env": {...}}}}

Claude Code speaks all three transports, so nothing is filtered for transport. The file is written 0600
into the attempt's private temporary directory and removed at stop; `--mcp-config FILE` is appended to
the agent's argv (before a `--`, if any). `--strict-mcp-config` is not added: the user's own servers stay.

With `agent.report = "request"`, a print-mode run (`-p`) that chose no output format also gets
`--output-format stream-json --verbose`, so Claude Code's init event reports each server's status (read by
agentctl/agent/reported/feed.py). The output is agentctl's to drain either way: nothing downstream parses it.

When the run fails, `readable_lines` turns those stream-json events into words for `agentctl run`'s explanation
and FAILURE_HINTS names Claude Code's own causes (agentctl/agent/passthrough/explain.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    dump_json,
    plan_materialization,
)
from agentctl.agent.passthrough.workspace import write_private
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.feed import claude_request_args

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
    failure_hints = FAILURE_HINTS
    readable_lines = staticmethod(readable_lines)

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
