"""The configured servers of an attempt, derived once from the spec: sanitized targets only."""

from __future__ import annotations

from agentctl.daemon.servers import configured_servers
from agentctl.spec import parse_spec
from tests.conftest import spec_toml

SECRET = "Seed-Canary-77c1"


def test_the_built_in_server_comes_first_then_the_profiles_reduced_to_host_or_basename():
    spec = parse_spec(spec_toml(servers=[
        {"name": "docs", "type": "sse", "url": f"http://{SECRET}:pw@[::1]:9000/sse?key={SECRET}"},
        {"name": "fs", "type": "stdio", "command": "/usr/bin/python3", "args": [SECRET], "env": {"K": SECRET}},
        {"name": "npx", "type": "stdio", "command": "npx"},
    ]).encode())
    seeds = configured_servers(spec, "http://127.0.0.1:4000")
    assert [(s.name, s.source, s.transport, s.target) for s in seeds] == [
        (spec.mcp.builtin_name, "builtin", "http", "http://127.0.0.1:4000"),
        ("docs", "profile", "sse", "http://[::1]:9000"),
        ("fs", "profile", "stdio", "python3"),
        ("npx", "profile", "stdio", "npx"),
    ]
    assert SECRET not in repr(seeds)


def test_before_the_listener_is_up_the_built_in_server_has_no_target_yet():
    (builtin,) = configured_servers(parse_spec(spec_toml().encode()), None)
    assert builtin.source == "builtin" and builtin.target is None
