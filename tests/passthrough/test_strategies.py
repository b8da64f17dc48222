"""Each strategy's exact output in its CLI's documented format, read back the way that CLI reads it."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from agentctl.agent.clis import get_strategy, strategy_names
from agentctl.agent.passthrough.base import insert_args
from agentctl.agent.passthrough.workspace import cleanup
from agentctl.agent.clis.codex import HEADER_ENV, TOKEN_ENV
from agentctl.testing._ref_passthrough import parse_claude_args, parse_codex_args
from tests.passthrough.support import (
    ARG_CANARY, BASE, ENV_CANARY, HEADER_CANARY, SSE_CANARY, TOKEN, mode, request, spec_for, tree,
)

AUTH = {"Authorization": f"Bearer {TOKEN}"}
DOCS = "https://docs.example.com/mcp"
EVENTS = "https://events.example.com/sse"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    return wd


def reasons(mat) -> dict[str, str]:
    return {o.name: o.reason_code for o in mat.filtered}


def test_registry_names_every_strategy_and_nothing_else():
    assert strategy_names() == ("claude", "codex", "cursor", "gemini", "opencode")
    assert all(get_strategy(n).name == n for n in strategy_names())
    assert get_strategy(None) is None and get_strategy("aider") is None


def test_claude_writes_an_mcp_config_file_passed_with_the_flag(workdir):
    req = request(spec_for("claude"), workdir)
    mat = get_strategy("claude").materialize(req)
    path = req.tmpdir / "claude-mcp.json"
    assert mat.argv == ["--mcp-config", str(path)] and mat.env == {} and mat.files == [path]
    assert json.loads(path.read_text()) == {"mcpServers": {
        "kandev": {"type": "http", "url": f"{BASE}/mcp", "headers": AUTH},
        "docs": {"type": "http", "url": DOCS, "headers": {"X-Api-Key": HEADER_CANARY}},
        "events": {"type": "sse", "url": EVENTS, "headers": {"Authorization": f"Bearer {SSE_CANARY}"}},
        "fs": {"type": "stdio", "command": "/usr/bin/fs-server", "args": ["--root", ARG_CANARY], "env": {"FS_TOKEN": ENV_CANARY}},
    }}
    assert mode(path) == 0o600 and mat.filtered == []
    assert [(d.name, d.transport, d.target) for d in mat.delivered] == [
        ("kandev", "http", BASE), ("docs", "http", "https://docs.example.com"),
        ("events", "sse", "https://events.example.com"), ("fs", "stdio", "fs-server"),
    ]
    read = {e.name: e for e in parse_claude_args(["-p", "hi", *mat.argv])}  # as Claude Code reads it
    assert read["kandev"].headers == AUTH and read["events"].transport == "sse" and read["fs"].env == {"FS_TOKEN": ENV_CANARY}
    assert not any(TOKEN in a for a in mat.argv)
    cleanup(mat)
    assert not path.exists() and tree(workdir) == []


def test_codex_passes_repeated_config_overrides_and_keeps_secrets_out_of_argv(workdir):
    servers_extra = '\n[[mcp.servers]]\nname = "git.hub"\ntype = "http"\nurl = "https://git.example.com/mcp"\n'
    from tests.passthrough.support import SERVERS

    req = replace(request(spec_for("codex", servers=SERVERS + servers_extra), workdir), environ={"PATH": "/bin"})
    mat = get_strategy("codex").materialize(req)
    header_var = HEADER_ENV.format(server=1, header=0)
    assert mat.argv == [
        "-c", f'mcp_servers.kandev.url="{BASE}/mcp"',
        "-c", f'mcp_servers.kandev.bearer_token_env_var="{TOKEN_ENV}"',
        "-c", f'mcp_servers.docs.url="{DOCS}"',
        "-c", f'mcp_servers.docs.env_http_headers={{ X-Api-Key = "{header_var}" }}',
        "-c", 'mcp_servers.fs.command="/usr/bin/fs-server"',
        "-c", f'mcp_servers.fs.args=["--root", "{ARG_CANARY}"]',
        "-c", 'mcp_servers.fs.env_vars=["FS_TOKEN"]',
    ]
    # Values go through the environment (owner-only /proc/PID/environ), never argv (/proc/PID/cmdline).
    assert mat.env == {TOKEN_ENV: TOKEN, header_var: HEADER_CANARY, "FS_TOKEN": ENV_CANARY}
    assert reasons(mat) == {"events": "sse_unsupported_by_strategy", "git.hub": "name_unsupported_by_strategy"}
    assert mat.files == [] and mat.restores == [] and tree(workdir) == []
    assert not any(TOKEN in a or HEADER_CANARY in a or ENV_CANARY in a for a in mat.argv)
    for item in mat.argv[1::2]:  # every value is a TOML literal, as `-c` parses it
        tomllib.loads("v = " + item.split("=", 1)[1])
    read = {e.name: e for e in parse_codex_args(["exec", "go", *mat.argv], environ=mat.env)}  # as Codex reads it
    assert read["kandev"].url == f"{BASE}/mcp" and read["kandev"].headers == AUTH
    assert read["docs"].headers == {"X-Api-Key": HEADER_CANARY}
    assert (read["fs"].transport, read["fs"].args, read["fs"].env) == ("stdio", ["--root", ARG_CANARY], {"FS_TOKEN": ENV_CANARY})


def stdio(name: str, env: dict[str, str]) -> str:
    table = ", ".join(f'{k} = "{v}"' for k, v in env.items())
    return f'\n[[mcp.servers]]\nname = "{name}"\ntype = "stdio"\ncommand = "srv"\nenv = {{ {table} }}\n'


def test_codex_filters_a_stdio_server_whose_env_cannot_be_forwarded_by_name(workdir):
    servers = (
        stdio("a", {"SHARED": "one", "OWN": "x"}) + stdio("b", {"SHARED": "two"})  # same name, other value
        + stdio("c", {"HOME": "/srv/c"})  # would become Codex's own HOME
        + stdio("d", {"HOME": "/home/me", "SHARED": "one"})  # what Codex has anyway: forwarded as is
        + stdio("e", {"AGENTCTL_MCP_BEARER_TOKEN": "mine"}) + stdio("f", {"NOTIFY_SOCKET": "/run/x"})
    )
    spec = spec_for("codex", servers=servers, extra='[agent.env]\nHOME = "/home/me"\n')
    mat = get_strategy("codex").materialize(replace(request(spec, workdir), environ={"HOME": "/root"}))
    assert reasons(mat) == dict.fromkeys("bcef", "env_unsupported_by_strategy")
    assert mat.env == {TOKEN_ENV: TOKEN, "SHARED": "one", "OWN": "x"}  # HOME is already /home/me for Codex
    read = {e.name: e for e in parse_codex_args(mat.argv, environ={"HOME": "/home/me", **mat.env})}
    assert read["a"].env == {"SHARED": "one", "OWN": "x"} and read["d"].env == {"HOME": "/home/me", "SHARED": "one"}
    assert "one" not in " ".join(mat.argv) and "/home/me" not in " ".join(mat.argv)


def test_codex_cannot_reach_the_builtin_server_when_policy_allows_only_sse(workdir):
    spec = spec_for("codex", servers="", extra='[policy]\ntransports = ["sse", "stdio"]\n')
    mat = get_strategy("codex").materialize(request(spec, workdir))
    assert mat.delivered == [] and reasons(mat) == {"kandev": "sse_unsupported_by_strategy"}


def test_opencode_writes_a_custom_config_named_by_its_env_var(workdir):
    extra = '\n[[mcp.servers]]\nname = "servers"\ntype = "http"\nurl = "https://s.example.com/mcp"\n'
    from tests.passthrough.support import SERVERS

    req = request(spec_for("opencode", servers=SERVERS + extra), workdir)
    mat = get_strategy("opencode").materialize(req)
    path = req.tmpdir / "opencode.json"
    assert mat.env == {"OPENCODE_CONFIG": str(path)} and mat.argv == [] and mode(path) == 0o600
    assert json.loads(path.read_text()) == {"$schema": "https://opencode.ai/config.json", "mcp": {
        "kandev": {"type": "remote", "url": f"{BASE}/mcp", "headers": AUTH, "enabled": True, "oauth": False},
        "docs": {"type": "remote", "url": DOCS, "headers": {"X-Api-Key": HEADER_CANARY}, "enabled": True},
        "events": {"type": "remote", "url": EVENTS, "headers": {"Authorization": f"Bearer {SSE_CANARY}"}, "enabled": True},
        "fs": {"type": "local", "command": ["/usr/bin/fs-server", "--root", ARG_CANARY],
               "environment": {"FS_TOKEN": ENV_CANARY}, "enabled": True},
    }}
    assert reasons(mat) == {"servers": "name_unsupported_by_strategy"}
    cleanup(mat)
    assert not path.exists()


CURSOR_ORIGINAL = b"""// the user's own servers
{
  "mcpServers": {
    "mine": {"command": "my-server", "args": []},
    "docs": {"url": "https://old.example.com/mcp"}
  },
  "other": {"kept": true}
}
"""


def test_cursor_merges_into_the_project_file_and_restores_it_byte_for_byte(workdir):
    target = workdir / ".cursor" / "mcp.json"
    target.parent.mkdir()
    target.write_bytes(CURSOR_ORIGINAL)
    target.chmod(0o644)
    mat = get_strategy("cursor").materialize(request(spec_for("cursor"), workdir))
    assert mat.argv == [] and mat.env == {} and mat.files == [] and mat.filtered == []
    assert json.loads(target.read_text()) == {
        "mcpServers": {
            "mine": {"command": "my-server", "args": []},
            "docs": {"url": DOCS, "headers": {"X-Api-Key": HEADER_CANARY}},
            "kandev": {"url": f"{BASE}/mcp", "headers": AUTH},
            "events": {"url": EVENTS, "headers": {"Authorization": f"Bearer {SSE_CANARY}"}},
            "fs": {"command": "/usr/bin/fs-server", "args": ["--root", ARG_CANARY], "env": {"FS_TOKEN": ENV_CANARY}},
        },
        "other": {"kept": True},
    }
    assert mode(target) == 0o600  # secret-bearing while the agent runs
    cleanup(mat)
    assert target.read_bytes() == CURSOR_ORIGINAL and mode(target) == 0o644
    assert tree(workdir) == [".cursor", ".cursor/mcp.json"]


def test_cursor_removes_what_it_created_when_there_was_no_file(workdir):
    mat = get_strategy("cursor").materialize(request(spec_for("cursor"), workdir))
    assert set(json.loads((workdir / ".cursor" / "mcp.json").read_text())["mcpServers"]) == {"kandev", "docs", "events", "fs"}
    assert mode(workdir / ".cursor") == 0o700
    cleanup(mat)
    cleanup(mat)  # idempotent
    assert tree(workdir) == []


def test_cursor_keeps_a_directory_that_is_not_empty_at_stop(workdir):
    mat = get_strategy("cursor").materialize(request(spec_for("cursor"), workdir))
    (workdir / ".cursor" / "rules.md").write_text("the agent wrote this")
    cleanup(mat)
    assert tree(workdir) == [".cursor", ".cursor/rules.md"]


GEMINI_ORIGINAL = b"""{
  "theme": "Dracula", // comments are allowed here
  "mcp": {"excluded": ["events"]},
  "mcpServers": {"mine": {"httpUrl": "https://mine.example.com/mcp"}}
}"""


def test_gemini_merges_workspace_settings_honours_exclusions_and_restores(workdir):
    target = workdir / ".gemini" / "settings.json"
    target.parent.mkdir()
    target.write_bytes(GEMINI_ORIGINAL)
    mat = get_strategy("gemini").materialize(request(spec_for("gemini"), workdir))
    assert json.loads(target.read_text()) == {
        "theme": "Dracula",
        "mcp": {"excluded": ["events"]},
        "mcpServers": {
            "mine": {"httpUrl": "https://mine.example.com/mcp"},
            "kandev": {"httpUrl": f"{BASE}/mcp", "headers": AUTH},
            "docs": {"httpUrl": DOCS, "headers": {"X-Api-Key": HEADER_CANARY}},
            "fs": {"command": "/usr/bin/fs-server", "args": ["--root", ARG_CANARY], "env": {"FS_TOKEN": ENV_CANARY}},
        },
    }
    assert reasons(mat) == {"events": "excluded_by_workspace_settings"}
    cleanup(mat)
    assert target.read_bytes() == GEMINI_ORIGINAL


def test_gemini_writes_sse_servers_as_url(workdir):
    spec = spec_for("gemini", extra='[policy]\ntransports = ["sse"]\n')
    mat = get_strategy("gemini").materialize(request(spec, workdir))
    servers = json.loads((workdir / ".gemini" / "settings.json").read_text())["mcpServers"]
    assert servers == {
        "kandev": {"url": f"{BASE}/sse", "headers": AUTH},
        "events": {"url": EVENTS, "headers": {"Authorization": f"Bearer {SSE_CANARY}"}},
    }
    assert reasons(mat) == {"docs": "policy_denied", "fs": "policy_denied"}
    cleanup(mat)
    assert tree(workdir) == []


def test_additions_go_before_a_double_dash():
    assert insert_args(["cli", "-p", "x"], ["-c", "a"]) == ["cli", "-p", "x", "-c", "a"]
    assert insert_args(["cli", "run", "--", "file"], ["--mcp-config", "f"]) == ["cli", "run", "--mcp-config", "f", "--", "file"]


def test_codex_quotes_a_header_name_ending_in_a_line_break_so_its_config_still_parses(workdir):
    servers = '\n[[mcp.servers]]\nname = "docs"\ntype = "http"\nurl = "https://d.example/mcp"\n'
    servers += 'headers = { "X-Key\\n" = "v" }\n'
    mat = get_strategy("codex").materialize(request(spec_for("codex", servers=servers), workdir))
    [headers] = [a for a in mat.argv if a.startswith("mcp_servers.docs.env_http_headers=")]
    assert tomllib.loads("v = " + headers.split("=", 1)[1])["v"] == {"X-Key\n": HEADER_ENV.format(server=1, header=0)}
