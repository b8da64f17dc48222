"""Delivery planning: what each attempt sends to the agent, and why anything is left out."""

from __future__ import annotations

import pytest

from agentctl.agent.delivery import AcpReceiver, BuiltinEndpoint, plan_delivery, plan_servers
from agentctl.agent.passthrough.base import CliReceiver
from agentctl.evidence.contract.report import McpCapabilities
from agentctl.spec import parse_spec
from tests.conftest import spec_toml

BASE = spec_toml(execution_id=None)

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


BRIDGE = ("/usr/bin/python3", "-m", "agentctl.cli", "mcp-bridge")


def test_builtin_goes_over_stdio_through_the_bridge_to_an_agent_that_advertises_no_remote_transport():
    spec = parse_spec(BASE.encode())
    plan = plan_delivery(spec, McpCapabilities(), builtin_base="http://127.0.0.1:4000", token="tok-123", bridge=BRIDGE)
    [builtin] = plan.delivered
    assert (builtin.name, builtin.transport, builtin.target) == ("kandev", "stdio", "http://127.0.0.1:4000")
    assert builtin.entry == {
        "name": "kandev",
        "command": "/usr/bin/python3",
        "args": ["-m", "agentctl.cli", "mcp-bridge"],
        "env": [{"name": "AGENTCTL_BRIDGE_URL", "value": "http://127.0.0.1:4000/mcp"},
                {"name": "AGENTCTL_BRIDGE_TOKEN", "value": "tok-123"}],
    }
    assert "tok-123" not in " ".join(builtin.entry["args"]), "the token is never an argument"
    assert plan.filtered == []


@pytest.mark.parametrize("policy, caps, expected", [
    ('["stdio"]', McpCapabilities(), "no_supported_transport"),  # policy allows no remote transport to bridge to
    ('["http", "sse"]', McpCapabilities(), "no_supported_transport"),  # the agent could not spawn the bridge
])
def test_the_bridge_is_not_used_when_policy_rather_than_the_agent_leaves_the_builtin_out(policy, caps, expected):
    spec = parse_spec((BASE + f"\n[policy]\ntransports = {policy}\n").encode())
    plan = plan_delivery(spec, caps, builtin_base="http://127.0.0.1:4000", token="tok-123", bridge=BRIDGE)
    assert [(o.name, o.reason_code) for o in plan.filtered if o.name == "kandev"] == [("kandev", expected)]
    assert all(p.name != "kandev" for p in plan.delivered)


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


# -- one planner, two kinds of receiver ------------------------------------------------------------

ACP_ALL = AcpReceiver(McpCapabilities(http=True, sse=True))
ACP_SSE = AcpReceiver(McpCapabilities(http=False, sse=True))
ACP_NONE = AcpReceiver(McpCapabilities())
CLI_ALL = CliReceiver(frozenset({"http", "sse", "stdio"}))
CLI_NO_SSE = CliReceiver(frozenset({"http", "stdio"}))
CLI_SSE_ONLY = CliReceiver(frozenset({"sse", "stdio"}))
CLI_NAMES = CliReceiver(frozenset({"http", "stdio"}), refuse_name=lambda n: "no dots" if "." in n else None)


def _outcomes(receiver, extra: str = SERVERS, head: str = "") -> dict[str, str]:
    spec = parse_spec((BASE + head + extra).encode())
    builtin = BuiltinEndpoint(spec.mcp.builtin_name, "http://127.0.0.1:4000/mcp", "http://127.0.0.1:4000/sse", "tok")
    plan = plan_servers(spec, builtin, receiver)
    got = {e.name: f"delivered {e.transport}" for e in plan.delivered}
    for omitted in plan.filtered:
        assert omitted.name not in got, "a server is delivered or filtered, never both"
        got.setdefault(omitted.name, omitted.reason_code)
    return got


POLICY = '\n[policy]\ntransports = [{}]\n'
DOTTED = '\n[[mcp.servers]]\nname = "git.hub"\ntype = "http"\nurl = "https://git.example"\n'
DOTTED_SSE = '\n[[mcp.servers]]\nname = "ev.sse"\ntype = "sse"\nurl = "https://ev.example"\n'


@pytest.mark.parametrize(
    "receiver, extra, expected",
    [
        # every transport taken: all delivered, the built-in over http
        (ACP_ALL, SERVERS, {"kandev": "delivered http", "web": "delivered http", "stream": "delivered sse",
                            "local": "delivered stdio"}),
        (CLI_ALL, SERVERS, {"kandev": "delivered http", "web": "delivered http", "stream": "delivered sse",
                            "local": "delivered stdio"}),
        # a transport the receiver cannot take, in each side's own words
        (ACP_SSE, SERVERS, {"kandev": "delivered sse", "web": "http_unsupported", "stream": "delivered sse",
                            "local": "delivered stdio"}),
        (CLI_NO_SSE, SERVERS, {"kandev": "delivered http", "web": "delivered http",
                               "stream": "sse_unsupported_by_strategy", "local": "delivered stdio"}),
        # the built-in server when no remote transport policy allows is taken
        (ACP_NONE, SERVERS + POLICY.format('"http", "stdio"'),
         {"kandev": "no_supported_transport", "web": "http_unsupported", "stream": "policy_denied",
          "local": "delivered stdio"}),
        (CLI_SSE_ONLY, SERVERS + POLICY.format('"http", "stdio"'),
         {"kandev": "http_unsupported_by_strategy", "web": "http_unsupported_by_strategy",
          "stream": "policy_denied", "local": "delivered stdio"}),
        # executor policy allowing no remote transport: the built-in server is the policy's
        (ACP_ALL, SERVERS + POLICY.format('"stdio"'),
         {"kandev": "policy_denied", "web": "policy_denied", "stream": "policy_denied", "local": "delivered stdio"}),
        (CLI_ALL, SERVERS + POLICY.format('"stdio"'),
         {"kandev": "policy_denied", "web": "policy_denied", "stream": "policy_denied", "local": "delivered stdio"}),
        # names: refused by a receiver with a name rule, last (policy and transport reasons come first)
        (ACP_ALL, DOTTED + DOTTED_SSE, {"kandev": "delivered http", "git.hub": "delivered http",
                                        "ev.sse": "delivered sse"}),
        (CLI_NAMES, DOTTED + DOTTED_SSE, {"kandev": "delivered http", "git.hub": "name_unsupported_by_strategy",
                                          "ev.sse": "sse_unsupported_by_strategy"}),
        (CLI_NAMES, DOTTED + POLICY.format('"sse", "stdio"'), {"kandev": "sse_unsupported_by_strategy",
                                                                "git.hub": "policy_denied"}),
    ],
)
def test_one_planner_applies_the_same_rules_to_an_acp_agent_and_a_cli(receiver, extra, expected):
    assert _outcomes(receiver, extra) == expected


@pytest.mark.parametrize("receiver", [ACP_ALL, CLI_NAMES], ids=["acp", "cli"])
def test_a_duplicate_is_filtered_before_policy_or_transport_on_either_side(receiver):
    extra = SERVERS + '\n[[mcp.servers]]\nname = "stream"\ntype = "sse"\nurl = "https://other.example/sse"\n'
    extra += '\n[[mcp.servers]]\nname = "kandev"\ntype = "stdio"\ncommand = "x"\n' + POLICY.format('"http", "stdio"')
    spec = parse_spec((BASE + extra).encode())
    plan = plan_servers(spec, BuiltinEndpoint("kandev", "http://h/mcp", "http://h/sse", "t"), receiver)
    assert [(o.name, o.reason_code) for o in plan.filtered] == [
        ("stream", "policy_denied"), ("stream", "duplicate_name"), ("kandev", "duplicate_name"),
    ]


def test_the_builtin_server_itself_is_refused_by_a_name_rule_like_any_other():
    head = '\n[mcp]\nbuiltin_name = "kandev.local"\n'
    assert _outcomes(CLI_NAMES, "", head) == {"kandev.local": "name_unsupported_by_strategy"}
    assert _outcomes(ACP_ALL, "", head) == {"kandev.local": "delivered http"}


def test_an_acp_plan_and_a_cli_plan_of_the_same_transports_deliver_the_same_servers():
    spec = parse_spec((BASE + SERVERS).encode())
    acp_plan = plan_delivery(spec, McpCapabilities(http=True, sse=True), builtin_base="http://127.0.0.1:4000", token="tok")
    cli_plan = plan_servers(spec, BuiltinEndpoint("kandev", "http://127.0.0.1:4000/mcp",
                                                  "http://127.0.0.1:4000/sse", "tok"), CLI_ALL)
    assert [(p.name, p.transport, p.target) for p in acp_plan.delivered] == [
        (e.name, e.transport, e.target) for e in cli_plan.delivered
    ]
    assert acp_plan.filtered == cli_plan.filtered == []
