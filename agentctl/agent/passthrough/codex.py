"""The `codex` strategy: Codex CLI gets its servers as repeated `-c mcp_servers.<name>.<key>=<value>`.

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
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from agentctl.agent.manager import DAEMON_SECRET_ENV_PREFIXES
from agentctl.agent.delivery import ServerEntry, drop
from agentctl.agent.passthrough.base import (
    CliReceiver,
    Materialization,
    MaterializeRequest,
    plan_materialization,
    unsupported,
)
from agentctl.agent.refusal_hints import RefusalHint
from agentctl.runtime import SERVICE_MANAGER_ENV_PREFIXES

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
    failure_hints = FAILURE_HINTS

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
