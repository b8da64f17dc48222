"""Delivery planning: what each attempt sends to the agent, and why anything is left out."""

from __future__ import annotations

import pytest

from agentctl.agent.delivery import plan_delivery
from agentctl.evidence.contract import McpCapabilities
from agentctl.spec import parse_spec

BASE = """
[identity]
task_id = "t"
session_id = "s"
agent_id = "a"
agent_profile_id = "p"
"""

SERVERS = """
[[mcp.servers]]
name = "web"
type = "http"
url = "https://user:pw@web.example:8443/mcp?key=1"
headers = { Authorization = "Bearer web-secret" }

[[mcp.servers]]
name = "stream"
type = "sse"
url = "https://sse.example/sse"

[[mcp.servers]]
name = "local"
type = "stdio"
command = "/usr/local/bin/local-mcp"
args = ["--token", "arg-secret"]
env = { LOCAL_KEY = "env-secret" }
"""


def _plan(extra: str = SERVERS, caps: McpCapabilities = McpCapabilities(http=True, sse=True)):
    spec = parse_spec((BASE + extra).encode())
    return plan_delivery(spec, caps, builtin_base="http://127.0.0.1:4000", token="tok-123")


def test_builtin_goes_over_http_with_the_attempt_token_when_http_is_advertised():
    plan = _plan("")
    [builtin] = plan.delivered
    assert (builtin.name, builtin.transport, builtin.target) == ("kandev", "http", "http://127.0.0.1:4000")
    assert builtin.entry == {
        "type": "http",
        "name": "kandev",
        "url": "http://127.0.0.1:4000/mcp",
        "headers": [{"name": "Authorization", "value": "Bearer tok-123"}],
    }


def test_builtin_falls_back_to_sse_when_only_sse_is_advertised():
    plan = _plan("", McpCapabilities(http=False, sse=True))
    assert plan.delivered[0].entry["url"].endswith("/sse") and plan.delivered[0].transport == "sse"


def test_builtin_is_filtered_when_the_agent_advertises_no_remote_transport():
    plan = _plan("", McpCapabilities())
    assert plan.delivered == []
    assert [(o.name, o.reason_code) for o in plan.filtered] == [("kandev", "no_supported_transport")]


@pytest.mark.parametrize(
    "caps, expected",
    [
        (McpCapabilities(http=True, sse=True), {"web": "delivered", "stream": "delivered", "local": "delivered"}),
        (McpCapabilities(http=False, sse=True), {"web": "http_unsupported", "stream": "delivered", "local": "delivered"}),
        (McpCapabilities(http=True, sse=False), {"web": "delivered", "stream": "sse_unsupported", "local": "delivered"}),
        (McpCapabilities(), {"web": "http_unsupported", "stream": "sse_unsupported", "local": "delivered"}),
    ],
)
def test_profile_servers_are_filtered_by_the_agents_transports_and_stdio_always_goes(caps, expected):
    plan = _plan(caps=caps)
    got = {p.name: "delivered" for p in plan.delivered if p.name != "kandev"}
    got.update({o.name: o.reason_code for o in plan.filtered if o.name != "kandev"})
    assert got == expected


def test_policy_denies_transports_the_executor_does_not_allow():
    plan = _plan(SERVERS + '\n[policy]\ntransports = ["http"]\n')
    reasons = {o.name: o.reason_code for o in plan.filtered}
    assert reasons == {"stream": "policy_denied", "local": "policy_denied"}


def test_duplicate_names_are_filtered_including_a_clash_with_the_builtin():
    extra = SERVERS + '\n[[mcp.servers]]\nname = "kandev"\ntype = "http"\nurl = "https://x.example"\n'
    extra += '\n[[mcp.servers]]\nname = "web"\ntype = "http"\nurl = "https://y.example"\n'
    plan = _plan(extra)
    dups = [o.name for o in plan.filtered if o.reason_code == "duplicate_name"]
    assert dups == ["kandev", "web"]
    assert sum(1 for p in plan.delivered if p.name == "web") == 1


def test_entries_always_carry_headers_args_and_env_lists():
    plan = _plan()
    for planned in plan.delivered:
        if planned.transport == "stdio":
            assert planned.entry["args"] == ["--token", "arg-secret"]
            assert planned.entry["env"] == [{"name": "LOCAL_KEY", "value": "env-secret"}]
        else:
            assert isinstance(planned.entry["headers"], list)


def test_targets_never_carry_secrets_paths_or_arguments():
    plan = _plan()
    targets = {p.name: p.target for p in plan.delivered}
    assert targets["web"] == "https://web.example:8443"
    assert targets["local"] == "local-mcp"
    blob = repr(plan)
    for secret in ("web-secret", "arg-secret", "env-secret", "tok-123", "pw@"):
        assert secret not in blob, "entries (which hold secrets) stay out of repr"
