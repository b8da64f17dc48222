"""Codex CLI, everything agentctl knows of it: its passthrough strategy, its app-server report reader, the
codex-acp adapter's relay, its display name and hints (`AGENT`).

The `codex` strategy: Codex CLI gets its servers as repeated `-c mcp_servers.<name>.<key>=<value>`.

Format (Codex MCP docs, https://developers.openai.com/codex/mcp, and the config reference
https://developers.openai.com/codex/config-reference; `-c key=value` overrides a config.toml key, the
value parsed as TOML):

- streamable HTTP: `url`, `bearer_token_env_var` (the NAME of an env var holding the token; Codex
  refuses an inline token), `http_headers` (literal values), `env_http_headers` (header -> env var name);
- stdio: `command`, `args`, `env` (literal values), `env_vars` (names of variables Codex forwards from
  its own environment to the server).

Codex has no legacy HTTP+SSE transport, so an sse server is `filtered` (`sse_unsupported_by_strategy`).
Codex accepts server names of letters, digits, `-` and `_` only (`codex mcp add` refuses others, and tool
names are built from them), so any other name is filtered (`name_unsupported_by_strategy`).

No file is written: argv is readable by every user (/proc/PID/cmdline), the environment only by the
owner (/proc/PID/environ), so no secret goes into argv. The attempt token and every header value travel
in the agent's environment instead (`bearer_token_env_var`, `env_http_headers`), and so do a stdio
server's env values: set in Codex's environment under their own names and forwarded by name
(`env_vars`). Codex passes only a fixed allow-list plus `env_vars` on to a stdio server, so values do
not leak to the other servers. Forwarding by name cannot give two servers different values for one name,
and must not change Codex's own environment (a server's HOME or PATH would become Codex's); such a
server is `filtered` (`env_unsupported_by_strategy`) rather than handed a wrong or intrusive value.
A stdio server's args stay in argv: they are its command line, visible in its own process anyway.

Report: Codex's app-server protocol: `mcpServer/startupStatus/updated` notifications and `mcpServerStatus/list` answers.

`codex app-server` speaks JSON lines on stdio (JSON-RPC without the `"jsonrpc"` member). After
`initialize`, `initialized` and `thread/start` it notifies each configured server's startup:
`{"method":"mcpServer/startupStatus/updated","params":{"name","status","error","failureReason",...}}` with
status `starting`, `ready`, `failed` or `cancelled` (failureReason `reauthenticationRequired` or null). The
request `mcpServerStatus/list` is answered with `{"result":{"data":[{"name","runtimeStatus","tools",
"toolsError",...}]}}`, runtimeStatus `notStarted`, `starting`, `connected`, `authenticationRequired`,
`failed`, `cancelled` or `disabled`, and `tools` a map by tool name. Measured with Codex 0.171.0 (its own
`codex app-server generate-json-schema`). `codex exec --json` emits none of this.

Error texts name the server and embed URLs and Rust type paths: only a redacted, bounded summary is kept (the
URL reduced to its origin), and only for delivered servers.

The ACP adapter `@agentclientprotocol/codex-acp` (2.6.0, dist/index.js, `McpStartupReporter`) relays Codex's
startup outcome for the servers its client gave it as a synthetic ACP `tool_call` update, once the startup
settled: `toolCallId` `mcp_startup.<encodeURIComponent(name)>.<uuid>`, title `mcp__<name>__startup`, status
`failed` and one text content, `[codex-acp forwarded startup error] MCP server `NAME` failed to start: ERROR`,
`... startup was cancelled.`, or `[codex-acp] MCP server `NAME` was not started, because the Codex config
already defines ...`. 2.6.0 relays failures only; a `completed` status (a later version's success) reads as
connected. Read as `codex-acp:mcp-startup` (the contract's source names allow no underscore).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import msgspec

from agentctl.agent.agent_cli import AcpRelay, AgentCli
from agentctl.agent.delivery import ServerEntry, drop
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    plan_materialization,
    unsupported,
)
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.agent.reported.base import ReportReader, ServerReport, exposed_names
from agentctl.agent.reported.feed import ReportPlan
from agentctl.evidence.contract.report import ReportedState
from agentctl.evidence.sanitize import summarize
from agentctl.evidence.secret_registry import SecretRegistry
from agentctl.runtime import DAEMON_SECRET_ENV_PREFIXES, SERVICE_MANAGER_ENV_PREFIXES

SOURCE = "codex:app-server"
STARTUP_METHOD = "mcpServer/startupStatus/updated"
MAX_LINE = 1024 * 1024  # a status list carries every tool's schema: far more than a notification
STARTUP_STATES: dict[str, ReportedState] = {
    "starting": "pending",
    "ready": "connected",
    "failed": "failed",
    "cancelled": "cancelled",
}
RUNTIME_STATES: dict[str, ReportedState] = {
    "notStarted": "pending",
    "starting": "pending",
    "connected": "connected",
    "authenticationRequired": "needs_auth",
    "failed": "failed",
    "cancelled": "cancelled",
    "disabled": "disabled",
}
REASON_FAILED = "agent_reported_failed"
REASON_NEEDS_AUTH = "agent_reported_needs_auth"
ACP_SOURCE = "codex-acp:mcp-startup"
ACP_TOOL_CALL_PREFIX = "mcp_startup."
ACP_STATES: dict[str, ReportedState] = {"failed": "failed", "completed": "connected"}
_ACP_CANCELLED = "startup was cancelled."
_ACP_PREFIX = re.compile(r"^\[codex-acp[^\]]{0,48}\]\s*")
# `Transport [codex_rmcp_client::tool_list_changes::ToolListChanges<...>]`: a type path, not a reason.
_RUST_TYPE = re.compile(r"\s*\[[A-Za-z_]\w*(?:::\w+)+(?:<[^\[\]]*>)?\]")


class _Message(msgspec.Struct):
    # Any, not the expected types: an unexpected shape is skipped, never a decode failure.
    method: Any = None
    params: Any = None
    result: Any = None


_decoder = msgspec.json.Decoder(_Message)


def is_app_server(argv: Sequence[str]) -> bool:
    """Whether a Codex command line runs `codex app-server` (its first positional argument)."""
    args, i = list(argv[1:]), 0
    while i < len(args):
        if args[i] in ("-c", "--config"):  # the options Codex takes a value with, as the strategy writes them
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i] == "app-server"
    return False


def parse_message(
    line: bytes, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = (), builtin: str | None = None
) -> list[ServerReport] | None:
    """The reports of one app-server line, or None when it is neither a startup notification nor a
    status list answer."""
    try:
        message = _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if message.method == STARTUP_METHOD and isinstance(message.params, dict):
        report = _startup(message.params, delivered, secrets)
        return [report] if report is not None else []
    result = message.result
    if message.method is None and isinstance(result, dict) and isinstance(result.get("data"), list):
        entries = [e for e in result["data"] if isinstance(e, dict) and "runtimeStatus" in e]
        if entries or not result["data"]:
            return [r for r in (_runtime(e, delivered, secrets, builtin) for e in entries) if r is not None]
    return None


def _startup(params: dict[str, Any], delivered: Collection[str], secrets: Any) -> ServerReport | None:
    name, raw = params.get("name"), params.get("status")
    if not isinstance(name, str) or name not in delivered or not isinstance(raw, str):
        return None
    state = STARTUP_STATES.get(raw, "unknown")
    if state == "failed" and params.get("failureReason") == "reauthenticationRequired":
        state = "needs_auth"
    return _report(name, state, raw, None, params.get("error"), secrets)


def _runtime(
    entry: dict[str, Any], delivered: Collection[str], secrets: Any, builtin: str | None
) -> ServerReport | None:
    name, raw = entry.get("name"), entry.get("runtimeStatus")
    if not isinstance(name, str) or name not in delivered or not isinstance(raw, str):
        return None
    state = RUNTIME_STATES.get(raw, "unknown")
    tools = entry.get("tools")
    count = len(tools) if state == "connected" and isinstance(tools, dict) else None
    report = _report(name, state, raw, count, entry.get("toolsError"), secrets)
    # agentctl's own tools, as Codex lists them: the exposure check.
    if name == builtin and isinstance(tools, dict) and count is not None:
        report = replace(report, exposed_tools=exposed_names(tools))
    return report


def _report(name: str, state: ReportedState, raw: str, count: int | None, error: Any, secrets: Any) -> ServerReport:
    reason = summary = None
    if state in ("failed", "needs_auth"):
        reason = REASON_NEEDS_AUTH if state == "needs_auth" else REASON_FAILED
        if isinstance(error, str) and error:
            summary = summarize(reason, _RUST_TYPE.sub("", error), secrets).summary or None
    return ServerReport(name=name, state=state, raw_state=raw, tool_count=count, reason_code=reason, summary=summary)


def parse_acp_update(
    update: Any, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = ()
) -> tuple[str, list[ServerReport]] | None:
    """(source, reports) of one ACP `session/update` payload when it is codex-acp's `mcp_startup` tool call,
    else None. The server is the tool call id's (URL-decoded); the row is set from the status alone."""
    if not isinstance(update, dict) or update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
        return None
    call_id = update.get("toolCallId")
    if not isinstance(call_id, str) or not call_id.startswith(ACP_TOOL_CALL_PREFIX):
        return None
    encoded, dot, _uuid = call_id[len(ACP_TOOL_CALL_PREFIX):].rpartition(".")
    name = unquote(encoded) if dot else None
    raw = update.get("status")
    if name is None or name not in delivered or not isinstance(raw, str) or raw not in ACP_STATES:
        return ACP_SOURCE, []  # its shape, about no delivered server (or a status that says nothing yet)
    text = _first_text(update.get("content"))
    state: ReportedState = ACP_STATES[raw]
    if state == "failed" and text is not None and text.rstrip().endswith(_ACP_CANCELLED):
        state = "cancelled"
    if text is not None:
        text = _ACP_PREFIX.sub("", text[:4096])
    return ACP_SOURCE, [_report(name, state, raw, None, text, secrets)]


def _first_text(content: Any) -> str | None:
    """The text of the first `{"type":"content","content":{"type":"text","text"}}` item."""
    if not isinstance(content, list):
        return None
    for item in content[:4]:
        inner = item.get("content") if isinstance(item, dict) else None
        text = inner.get("text") if isinstance(inner, dict) else None
        if isinstance(text, str):
            return text
    return None


class CodexAppServerReader(ReportReader):
    """Reads `codex app-server` stdout incrementally; returns the reports of each status line it completes."""

    markers = (b"mcpServer/startupStatus", b"runtimeStatus")

    def __init__(
        self, delivered: Collection[str], secrets: Iterable[str] | SecretRegistry = (), max_line: int = MAX_LINE,
        builtin: str | None = None,
    ) -> None:
        super().__init__(delivered, max_line)
        self._secrets = secrets
        self.builtin = builtin

    def parse_line(self, line: bytes) -> list[ServerReport] | None:
        return parse_message(line, self.delivered, self._secrets, self.builtin)

# ---- the passthrough strategy ----------------------------------------------------------------------

TOKEN_ENV = "AGENTCTL_MCP_BEARER_TOKEN"
HEADER_ENV = "AGENTCTL_MCP_HEADER_{server}_{header}"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # with fullmatch: `$` would also accept a trailing line break
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_UNSUPPORTED = unsupported("env")
# Ours (the token and header variables), or stripped from every agent environment by the supervisor.
_RESERVED_ENV = ("AGENTCTL_", *SERVICE_MANAGER_ENV_PREFIXES)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """A TOML literal. JSON string escapes are valid TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML literal for {type(value).__name__}")


def _refused_name(name: str) -> str | None:
    return None if _BARE_KEY.fullmatch(name) else "Codex server names allow only letters, digits, '-' and '_'"


# Why `codex exec` fails, as Codex 0.171 says it: a CODEX_HOME that does not exist ("Error finding codex home:
# CODEX_HOME points to ..., but that path does not exist", exit 1, before anything else); no credentials.
FAILURE_HINTS = (
    RefusalHint(
        "home_missing",
        ("error finding codex home", "codex_home points to"),
        "Codex's CODEX_HOME does not exist: create that directory (owned by the user agentctl runs as), or "
        "point CODEX_HOME in [agent] env at one that does.",
    ),
    RefusalHint(
        "not_logged_in",
        ("not logged in", "401 unauthorized", "missing bearer", "incorrect api key", "invalid_api_key"),
        "Codex has no usable credentials: set OPENAI_API_KEY in [agent] env, or run `codex login` with the "
        "same CODEX_HOME as the user agentctl runs as.",
    ),
    RefusalHint(
        "rate_limited",
        ("usage limit", "rate limit", "429 too many requests"),
        "OpenAI refused for rate or usage limits: wait, or use another key or plan.",
    ),
)


class CodexStrategy:
    name = "codex"
    receiver = CliReceiver(frozenset({"http", "stdio"}), refuse_name=_refused_name)

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_materialization(req, self.receiver)
        forwarded = _forward_env(plan, req)
        argv: list[str] = []

        def setting(server: str, key: str, value: Any) -> None:
            argv.extend(["-c", f"mcp_servers.{server}.{key}={toml_value(value)}"])

        for i, entry in enumerate(plan.delivered):
            if entry.transport == "stdio":
                setting(entry.name, "command", entry.command)
                setting(entry.name, "args", entry.args)
                if entry.env:
                    setting(entry.name, "env_vars", sorted(entry.env))
                continue
            setting(entry.name, "url", entry.url)
            if entry.source == "builtin":
                plan.env[TOKEN_ENV] = req.builtin.token
                setting(entry.name, "bearer_token_env_var", TOKEN_ENV)
                continue
            names: dict[str, str] = {}
            for j, (header, value) in enumerate(entry.headers.items()):
                var = HEADER_ENV.format(server=i, header=j)
                plan.env[var] = value
                names[header] = var
            if names:
                setting(entry.name, "env_http_headers", names)
        plan.argv = argv
        plan.env.update(forwarded)
        return plan


def _forward_env(plan: Materialization, req: MaterializeRequest) -> dict[str, str]:
    """The variables to set in Codex's environment so `env_vars` forwards each stdio server's values.

    A server whose env cannot be forwarded that way is dropped from the plan with ENV_UNSUPPORTED.
    """
    cli_env = _cli_environment(req)
    claimed: dict[str, str] = {}
    for entry in [e for e in plan.delivered if e.transport == "stdio" and e.env]:
        problem = _env_problem(entry, cli_env, claimed)
        if problem is not None:
            drop(plan, entry, ENV_UNSUPPORTED, problem)
            continue
        claimed.update(entry.env)
    return {name: value for name, value in claimed.items() if cli_env.get(name) != value}


def _env_problem(entry: ServerEntry, cli_env: Mapping[str, str], claimed: Mapping[str, str]) -> str | None:
    for name, value in entry.env.items():
        if not _ENV_NAME.fullmatch(name) or name.startswith(_RESERVED_ENV):
            return "Codex forwards env by variable name: an env name here is not one it can forward"
        if name in claimed and claimed[name] != value:
            return f"Codex forwards env by name: another server already needs a different {name}"
        if name in cli_env and cli_env[name] != value:
            return f"Codex forwards env by name: this server's {name} would replace Codex's own"
    return None


def _cli_environment(req: MaterializeRequest) -> dict[str, str]:
    """What Codex itself will inherit before our additions (the daemon's own secrets are never passed)."""
    base = os.environ if req.environ is None else req.environ
    env = {k: v for k, v in base.items() if not k.startswith(DAEMON_SECRET_ENV_PREFIXES)}
    if req.spec.agent is not None:
        env.update(req.spec.agent.env)
    return env


STRATEGY = CodexStrategy()


# ---- which report a run gives ----------------------------------------------------------------------------

def plan_report(argv: Sequence[str]) -> ReportPlan | None:
    return ReportPlan(source=SOURCE) if is_app_server(argv) else None


def _open_reader(source: str, delivered: Collection[str], builtin: str | None, secrets: Any) -> ReportReader | None:
    return CodexAppServerReader(delivered, secrets, builtin=builtin) if source == SOURCE else None


def _relay_candidate(update: dict[str, Any]) -> bool:
    return (str(update.get("sessionUpdate", "")).startswith("tool_call")
            and str(update.get("toolCallId", "")).startswith(ACP_TOOL_CALL_PREFIX))


AGENT = AgentCli(
    name="codex",
    display_name="Codex",
    strategy=STRATEGY,
    reporters={"codex": "Codex", "codex-acp": "codex-acp"},
    failure_hints=FAILURE_HINTS,
    plan_report=plan_report,
    no_report="Codex's exec mode prints no MCP server status (only `codex app-server` does: run that, with a "
              "client driving it, and agentctl reads its startup notifications): no agent report is available "
              "for this run",
    open_reader=_open_reader,
    acp_relay=AcpRelay(_relay_candidate, parse_acp_update),
)
