"""Where the stdio witness wraps a server (agentctl/agent/delivery.py `plan_servers`, the one planner both ACP and
every passthrough strategy use), and the spec's switches for it."""

from __future__ import annotations

import pytest

from agentctl.agent.delivery import WITNESS_ENV_TOKEN, WITNESS_ENV_URL, WITNESS_PATH, plan_delivery
from agentctl.evidence.contract.report import McpCapabilities
from agentctl.mcp_endpoint.witness_route import WITNESS_PATH as ROUTE_PATH
from agentctl.spec import SpecError, parse_spec
from tests.conftest import spec_toml

BASE = spec_toml(execution_id=None)
WITNESS = ("/usr/bin/python3", "-m", "agentctl.cli", "mcp-witness")


def _spec(mcp: str = "", observe: str = 'observe = "witness"'):
    return parse_spec((BASE + f"""
[mcp]
{mcp}
[[mcp.servers]]
name = "files"
type = "stdio"
command = ["npx", "-y", "server-filesystem"]
args = ["/srv"]
env = {{ API_KEY = "keyCANARY" }}
{observe}
[[mcp.servers]]
name = "plain"
type = "stdio"
command = "plain-server"
""").encode())


def _entries(spec):
    plan = plan_delivery(spec, McpCapabilities(http=True), builtin_base="http://127.0.0.1:4000", token="tok-1",
                         witness=WITNESS)
    return {p.name: p for p in plan.delivered}


def test_a_server_marked_observe_witness_is_delivered_as_the_witness_running_exactly_its_command():
    entries = _entries(_spec())
    files = entries["files"]
    assert files.entry["command"] == "/usr/bin/python3"
    assert files.entry["args"] == ["-m", "agentctl.cli", "mcp-witness", "files", "--", "npx", "-y",
                                   "server-filesystem", "/srv"]
    assert files.entry["env"] == [{"name": "API_KEY", "value": "keyCANARY"},
                                  {"name": WITNESS_ENV_URL, "value": "http://127.0.0.1:4000/witness"},
                                  {"name": WITNESS_ENV_TOKEN, "value": "tok-1"}]
    assert "tok-1" not in " ".join(files.entry["args"]), "the attempt's token is never an argument"
    assert files.target == "npx", "the row names the server's own command, never the witness"
    assert entries["plain"].entry["command"] == "plain-server", "the default stays direct"
    assert WITNESS_PATH == ROUTE_PATH


def test_the_spec_wide_switch_wraps_every_stdio_server_and_a_server_may_opt_out():
    entries = _entries(_spec('observe_stdio = "witness"', 'observe = "direct"'))
    assert entries["files"].entry["command"] == "npx"
    assert entries["plain"].entry["args"][-3:] == ["plain", "--", "plain-server"]


def test_without_a_witness_command_every_server_goes_direct():
    plan = plan_delivery(_spec(), McpCapabilities(http=True), builtin_base="http://127.0.0.1:4000", token="tok-1")
    assert {p.name: p.entry["command"] for p in plan.delivered if p.name != "kandev"} == {
        "files": "npx", "plain": "plain-server"}


def test_observe_is_refused_on_a_remote_server():
    with pytest.raises(SpecError, match="observe.*only stdio servers"):
        parse_spec((BASE + '\n[[mcp.servers]]\nname = "w"\ntype = "http"\nurl = "http://127.0.0.1:1/mcp"\n'
                    'observe = "witness"\n').encode())


def test_a_witnessed_server_may_be_required_where_no_agent_report_could_prove_it():
    agent = '\n[agent]\ncommand = ["x"]\nprotocol = "passthrough"\nstrategy = "gemini"\n'
    server = '\n[[mcp.servers]]\nname = "w"\ntype = "stdio"\ncommand = "s"\nrequired = true\n'
    with pytest.raises(SpecError, match="cannot be required"):
        parse_spec((BASE + agent + server).encode())
    assert parse_spec((BASE + agent + server + 'observe = "witness"\n').encode()).mcp.servers[0].required
