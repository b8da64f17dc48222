"""Passthrough mode of the reference agent: read MCP configuration the way a CLI agent would.

Formats (what agentctl's passthrough strategies materialize):

- claude: `--mcp-config FILE` (repeatable; `--mcp-config=FILE`; an inline JSON string is
  accepted too, as Claude Code does). Content: `{"mcpServers": {name: {"type": "http" |
  "sse" | "stdio", "url", "headers", "command", "args", "env"}}}`; `type` defaults to
  stdio when `command` is set, http when only `url` is.
- codex: repeated `-c`/`--config` `mcp_servers.<name>.<key>=<value>`; the value is parsed
  as TOML, falling back to the raw string (Codex does the same). Keys: `url`,
  `http_headers` (inline table), `bearer_token_env_var`, `env_http_headers`, `command`,
  `args`, `env`, `env_vars` (names, or `{name, source = "local"}`, forwarded from this
  process's environment), `enabled`; others are ignored. `mcp_servers.<name>={...}` sets a whole
  table. Codex has no SSE transport: `url` means streamable HTTP.

The agent connects to every server, lists tools, calls one tool on the built-in server,
prints one JSON line to stdout and stays alive until stdin closes or SIGTERM. As claude with
`--output-format stream-json`, it first prints Claude Code's `system/init` event (the shape Claude Code
2.1.332 prints: `mcp_servers` as `{name, status, source}`, MCP tools as `mcp__<server>__<tool>`).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from agentctl.testing._ref_mcp import ServerEntry

_CODEX_PREFIX = "mcp_servers."


def _entry_from_mapping(name: str, cfg: dict[str, Any], *, default_http: str = "http") -> ServerEntry:
    kind = cfg.get("type") or cfg.get("transport")
    if not kind:
        kind = "stdio" if cfg.get("command") else default_http
    if kind == "streamable-http":
        kind = "http"
    return ServerEntry(
        name=name,
        transport=str(kind),
        url=str(cfg.get("url") or ""),
        headers={str(k): str(v) for k, v in (cfg.get("headers") or {}).items()},
        command=str(cfg.get("command") or ""),
        args=[str(a) for a in (cfg.get("args") or [])],
        env={str(k): str(v) for k, v in (cfg.get("env") or {}).items()},
    )


def parse_claude_args(argv: list[str]) -> list[ServerEntry]:
    """Servers from every `--mcp-config FILE|JSON` in argv, later files overriding earlier names."""
    sources: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--mcp-config" and i + 1 < len(argv):
            sources.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--mcp-config="):
            sources.append(arg.split("=", 1)[1])
        i += 1
    servers: dict[str, ServerEntry] = {}
    for src in sources:
        text = src if src.lstrip().startswith("{") else Path(src).read_text(encoding="utf-8")
        doc = json.loads(text)
        for name, cfg in (doc.get("mcpServers") or {}).items():
            servers[name] = _entry_from_mapping(name, cfg)
    return list(servers.values())


def _split_dotted(key: str) -> list[str]:
    """Split a TOML dotted key, honouring double-quoted segments."""
    parts: list[str] = []
    cur = ""
    quoted = False
    for ch in key:
        if ch == '"':
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def _toml_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_codex_args(argv: list[str], environ: dict[str, str] | None = None) -> list[ServerEntry]:
    """Servers from every `-c mcp_servers.<name>.<key>=<value>` in argv."""
    env_source = os.environ if environ is None else environ
    tables: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        item = None
        if arg in ("-c", "--config") and i + 1 < len(argv):
            item = argv[i + 1]
            i += 2
        else:
            if arg.startswith("--config="):
                item = arg.split("=", 1)[1]
            i += 1
        if item is None or "=" not in item:
            continue
        key, _, raw = item.partition("=")
        path = _split_dotted(key.strip())
        if len(path) < 2 or path[0] != "mcp_servers":
            continue
        value = _toml_value(raw.strip())
        table = tables.setdefault(path[1], {})
        if len(path) == 2:
            if isinstance(value, dict):
                table.update(value)
            continue
        target = table
        for seg in path[2:-1]:
            target = target.setdefault(seg, {})
        target[path[-1]] = value
    entries: list[ServerEntry] = []
    for name, cfg in tables.items():
        if cfg.get("enabled") is False:
            continue
        headers = {str(k): str(v) for k, v in (cfg.get("http_headers") or {}).items()}
        for header, var in (cfg.get("env_http_headers") or {}).items():
            if env_source.get(str(var)):
                headers[str(header)] = env_source[str(var)]
        if cfg.get("bearer_token_env_var") and env_source.get(str(cfg["bearer_token_env_var"])):
            headers["Authorization"] = f"Bearer {env_source[str(cfg['bearer_token_env_var'])]}"
        env = {str(k): str(v) for k, v in (cfg.get("env") or {}).items()}
        for item in cfg.get("env_vars") or []:
            var = item.get("name") if isinstance(item, dict) and item.get("source", "local") == "local" else item
            if isinstance(var, str) and var in env_source:
                env[var] = env_source[var]
        kind = "stdio" if cfg.get("command") else "http"
        entry = _entry_from_mapping(name, {**cfg, "headers": headers, "env": env, "type": kind})
        entries.append(entry)
    return entries


def wants_stream_json(argv: list[str]) -> bool:
    """Whether Claude Code's arguments ask for stream-json output (`--output-format stream-json` or `=`)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return False
        if arg == "--output-format=stream-json" or (arg == "--output-format" and argv[i + 1 : i + 2] == ["stream-json"]):
            return True
    return False


def claude_init_line(servers: list[dict[str, Any]]) -> str:
    """Claude Code's init event for `servers` (`{name, connected, tools?}` as the reference agent found them)."""
    tools = ["Task", "Bash", "Read"]
    for server in servers:
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in server["name"])
        tools += [f"mcp__{name}__{tool}" for tool in server.get("tools", [])]
    listed = [{"name": s["name"], "status": "connected" if s["connected"] else "failed", "source": "dynamic"}
              for s in servers]
    event = {"type": "system", "subtype": "init", "cwd": os.getcwd(), "tools": tools, "mcp_servers": listed,
             "model": "reference", "claude_code_version": "reference"}
    return json.dumps(event, separators=(",", ":"))
