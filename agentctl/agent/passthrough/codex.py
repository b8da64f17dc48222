"""The `codex` strategy: Codex CLI gets its servers as repeated `-c mcp_servers.<name>.<key>=<value>`.

Format (Codex MCP docs, https://developers.openai.com/codex/mcp, and the config reference
https://developers.openai.com/codex/config-reference; `-c key=value` overrides a config.toml key, the
value parsed as TOML):

- streamable HTTP: `url`, `bearer_token_env_var` (the NAME of an env var holding the token; Codex
  refuses an inline token), `http_headers` (literal values), `env_http_headers` (header -> env var name);
- stdio: `command`, `args`, `env`.

Codex has no legacy HTTP+SSE transport, so an sse server is `filtered` (`sse_unsupported_by_strategy`).
Codex accepts server names of letters, digits, `-` and `_` only (`codex mcp add` refuses others, and tool
names are built from them), so any other name is filtered (`name_unsupported_by_strategy`).

No file is written: argv is visible in the process table, so no secret goes there. The attempt token
and every header value travel in the agent's environment instead (`bearer_token_env_var`,
`env_http_headers`); Codex passes only a fixed allow-list of variables on to its stdio servers, so
they do not leak further. A stdio server's own `env` values are inline, as Codex documents them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentctl.agent.passthrough.base import (
    NAME_UNSUPPORTED,
    Materialization,
    MaterializeRequest,
    drop,
    plan_servers,
)

TOKEN_ENV = "AGENTCTL_MCP_BEARER_TOKEN"
HEADER_ENV = "AGENTCTL_MCP_HEADER_{server}_{header}"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


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


class CodexStrategy:
    name = "codex"
    transports = frozenset({"http", "stdio"})

    def materialize(self, req: MaterializeRequest) -> Materialization:
        plan = plan_servers(req, self.transports)
        for entry in list(plan.delivered):
            if not _BARE_KEY.match(entry.name):
                drop(plan, entry, NAME_UNSUPPORTED, "Codex server names allow only letters, digits, '-' and '_'")
        argv: list[str] = []

        def setting(server: str, key: str, value: Any) -> None:
            argv.extend(["-c", f"mcp_servers.{server}.{key}={toml_value(value)}"])

        for i, entry in enumerate(plan.delivered):
            if entry.transport == "stdio":
                setting(entry.name, "command", entry.command)
                setting(entry.name, "args", entry.args)
                if entry.env:
                    setting(entry.name, "env", entry.env)
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
        return plan


STRATEGY = CodexStrategy()
