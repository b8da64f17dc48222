"""Execution spec: typed decoding, value-free errors naming file and field."""

from __future__ import annotations

import json

import pytest

from agentctl.spec import SpecError, allowed_values, parse_spec
from agentctl.spec_loader import load_spec

CANARY = "CANARY-s3cr3t-9f8e7d"

MINIMAL = b"""
[identity]
task_id = "t1"
session_id = "s1"
agent_id = "a1"
agent_profile_id = "p1"
"""


def _err(text: str | bytes, fmt: str = "toml") -> str:
    raw = text.encode() if isinstance(text, str) else text
    with pytest.raises(SpecError) as info:
        parse_spec(raw, source="spec.toml", fmt=fmt)
    return str(info.value)


def test_minimal_spec_gets_defaults_and_no_agent():
    spec = parse_spec(MINIMAL)
    assert spec.agent is None
    assert spec.mcp.listen == "127.0.0.1:0"
    assert spec.mcp.profile == "task"
    assert spec.mcp.builtin_name == "kandev"
    assert spec.identity.execution_id is None


def test_json_spec_decodes_like_toml(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(
        json.dumps(
            {
                "identity": {"task_id": "t", "session_id": "s", "agent_id": "a", "agent_profile_id": "p"},
                "agent": {"command": ["sh", "--flag"], "protocol": "acp"},
                "mcp": {"servers": [{"name": "docs", "type": "http", "url": "https://h.example/mcp"}]},
            }
        )
    )
    spec = load_spec(path)
    assert spec.agent.command == ["sh", "--flag"]
    assert spec.mcp.servers[0].name == "docs"


def test_unknown_key_is_rejected_with_its_path():
    msg = _err(MINIMAL.decode() + "\n[mcp]\nlisten = '127.0.0.1:0'\nbogus = 1\n")
    assert msg.startswith("spec.toml: mcp")
    assert "bogus" in msg


def test_missing_required_identity_field_names_the_field():
    msg = _err("[identity]\ntask_id='t'\nsession_id='s'\nagent_id='a'\n")
    assert "identity" in msg and "agent_profile_id" in msg


def test_wrong_type_names_the_field_path():
    msg = _err(MINIMAL.decode() + "\n[agent]\ncommand = 'not-a-list'\n")
    assert msg.startswith("spec.toml: agent.command:")


def test_bad_literal_does_not_echo_the_value():
    msg = _err(MINIMAL.decode() + f"\n[[mcp.servers]]\nname='x'\ntype='{CANARY}'\nurl='http://h'\n")
    assert "mcp.servers[0].type" in msg
    assert CANARY not in msg


def test_header_value_of_wrong_type_is_not_echoed():
    msg = _err(
        MINIMAL.decode()
        + "\n[[mcp.servers]]\nname='x'\ntype='http'\nurl='http://h'\nheaders = { Authorization = 12345 }\n"
    )
    assert "mcp.servers[0].headers" in msg
    assert "12345" not in msg


def test_invalid_url_error_does_not_echo_credentials():
    msg = _err(MINIMAL.decode() + f"\n[[mcp.servers]]\nname='x'\ntype='http'\nurl='ftp://u:{CANARY}@h/p'\n")
    assert "mcp.servers[0].url" in msg
    assert CANARY not in msg


def test_url_user_info_is_accepted_and_kept_only_in_memory():
    spec = parse_spec(MINIMAL + f"\n[[mcp.servers]]\nname='x'\ntype='sse'\nurl='https://u:{CANARY}@h/sse'\n".encode())
    assert spec.mcp.servers[0].type == "sse"


def test_stdio_server_requires_command():
    msg = _err(MINIMAL.decode() + "\n[[mcp.servers]]\nname='x'\ntype='stdio'\n")
    assert msg == ('spec.toml: mcp.servers[0].command: required for type = "stdio": a program ("npx") or an argv '
                   'list (["npx", "-y", "server"])')


def test_http_server_requires_url():
    msg = _err(MINIMAL.decode() + "\n[[mcp.servers]]\nname='x'\ntype='http'\n")
    assert "mcp.servers[0].url" in msg


def test_listen_must_be_loopback():
    msg = _err(MINIMAL.decode() + "\n[mcp]\nlisten = '0.0.0.0:8080'\n")
    assert msg.startswith("spec.toml: mcp.listen:")


def test_strategy_only_allowed_for_passthrough():
    msg = _err(MINIMAL.decode() + "\n[agent]\ncommand=['x']\nstrategy='claude'\n")
    assert "agent.strategy" in msg


def test_toml_syntax_error_is_one_line():
    msg = _err("[identity\n")
    assert msg.startswith("spec.toml: (syntax): invalid TOML")
    assert "\n" not in msg


def test_json_syntax_error_is_reported(tmp_path):
    msg = _err(b"{not json", fmt="json")
    assert "invalid JSON" in msg


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "nope.toml")


def test_identity_ids_with_path_characters_are_refused():
    msg = _err(MINIMAL.decode().replace('task_id = "t1"', 'task_id = "../etc"'))
    assert msg.startswith("spec.toml: identity.task_id:")


def test_upstream_socket_path_over_af_unix_limit_is_refused():
    msg = _err(MINIMAL.decode() + "\n[upstream]\nsocket = '/" + "a" * 120 + "'\n")
    assert "upstream.socket" in msg and "107" in msg


@pytest.mark.parametrize("field, extra", [
    ("identity.task_id", ""),
    ("mcp.builtin_name", '\n[mcp]\nbuiltin_name = "kandev\\n"\n'),
    ("mcp.servers[0].name", '\n[[mcp.servers]]\nname = "docs\\n"\ntype = "stdio"\ncommand = "x"\n'),
])
def test_an_id_or_name_ending_in_a_line_break_is_refused(field, extra):
    text = MINIMAL.decode() + extra
    if field == "identity.task_id":
        text = text.replace('task_id = "t1"', 'task_id = "t1\\n"')
    msg = _err(text)
    assert msg.startswith(f"spec.toml: {field}: must be 1-") and "\n" not in msg


@pytest.mark.parametrize("section, field, allowed", [
    ("[agent]\ncommand = ['a']\nprotocol", "agent.protocol", "acp, passthrough"),
    ("[agent]\ncommand = ['a']\npermission", "agent.permission", "allow, ask, deny"),
    ("[mcp]\nprofile", "mcp.profile", "config, external, task, task-title"),
    ("[policy]\ntransports = ['http', 'CANARY']\n#", "policy.transports[1]", "http, sse, stdio"),
    ("[[mcp.servers]]\nname = 'x'\nurl = 'http://h'\ntype", "mcp.servers[0].type", "http, sse, stdio"),
])
def test_an_enum_error_lists_the_allowed_values_without_the_value(section, field, allowed):
    msg = _err(MINIMAL.decode() + f"\n{section} = '{CANARY}'\n")
    assert msg == f"spec.toml: {field}: not one of the allowed values: {allowed}"
    assert CANARY not in msg


def test_allowed_values_come_from_the_literal_of_any_field_and_none_for_a_non_enum():
    assert allowed_values("$.agent.strategy") == ["claude", "codex", "cursor", "gemini", "opencode", "none"]
    assert allowed_values("$.mcp.servers[3].type") == ["http", "sse", "stdio"]
    assert allowed_values("$.agent.command[0]") is None
    assert allowed_values("$.agent.nope") is None
    assert allowed_values("$.identity.task_id") is None


def _agent_spec(tmp_path, command: str, extra: str = ""):
    path = tmp_path / "spec.toml"
    path.write_text(MINIMAL.decode() + f"\n[agent]\ncommand = [{command}, '--token', '{CANARY}']\n{extra}")
    return path


def _load_err(path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return str(info.value)


def test_a_bare_agent_name_not_on_path_is_named_at_load(tmp_path):
    msg = _load_err(_agent_spec(tmp_path, "'no-such-agent-xyz'"))
    assert msg == f"{tmp_path / 'spec.toml'}: agent.command: executable 'no-such-agent-xyz' not found on PATH"
    assert CANARY not in msg


def test_a_missing_or_non_executable_agent_path_is_named_at_load(tmp_path):
    assert _load_err(_agent_spec(tmp_path, "'/nonexistent/bin/agent'")).endswith(
        "agent.command: executable '/nonexistent/bin/agent' does not exist")
    plain = tmp_path / "agent.sh"
    plain.write_text("#!/bin/sh\n")
    assert _load_err(_agent_spec(tmp_path, f"'{plain}'")).endswith(f"agent.command: '{plain}' is not an executable file")
    assert _load_err(_agent_spec(tmp_path, f"'{tmp_path}'")).endswith("is not an executable file")


def test_a_relative_agent_path_resolves_in_the_workdir_and_names_on_path_or_bundled_load(tmp_path):
    tool = tmp_path / "bin" / "agent"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert load_spec(_agent_spec(tmp_path, "'./bin/agent'", f"workdir = '{tmp_path}'\n")).agent.command[0] == "./bin/agent"
    assert load_spec(_agent_spec(tmp_path, "'sh'")).agent is not None
    assert load_spec(_agent_spec(tmp_path, "'agentctl-reference-agent'")).agent is not None


def test_a_stdio_server_command_may_be_an_argv_list_its_rest_going_before_args_and_into_the_secrets():
    from agentctl.spec import secret_values

    spec = parse_spec(MINIMAL + b"""
[[mcp.servers]]
name = "fs"
type = "stdio"
command = ["npx", "-y", "server-CANARY-s3cr3t-9f8e7d"]
args = ["--root", "/srv"]
""")
    server = spec.mcp.servers[0]
    assert (server.command, server.args) == ("npx", ["-y", f"server-{CANARY}", "--root", "/srv"])
    assert f"server-{CANARY}" in secret_values(spec)  # an argument, wherever it was written
    as_json = json.dumps({"identity": {"task_id": "t", "session_id": "s", "agent_id": "a", "agent_profile_id": "p"},
                          "mcp": {"servers": [{"name": "fs", "type": "stdio", "command": ["uvx", "srv"]}]}})
    assert parse_spec(as_json.encode(), fmt="json").mcp.servers[0].args == ["srv"]


@pytest.mark.parametrize("command, where", [("[]", "command"), ('[""]', "command"), ("5", "command"),
                                            ("[1]", "command[0]")])
def test_a_stdio_server_command_of_another_shape_names_the_accepted_forms(command, where):
    msg = _err(MINIMAL.decode() + f"\n[[mcp.servers]]\nname='x'\ntype='stdio'\ncommand={command}\n")
    assert msg.startswith(f"spec.toml: mcp.servers[0].{where}: "), msg
    assert ("argv list" in msg) or ("str | array" in msg) or ("Expected `str`" in msg), msg


def test_the_agent_workdir_is_checked_at_load_and_named_in_the_error(tmp_path):
    missing = tmp_path / "no-such-checkout"
    assert _load_err(_agent_spec(tmp_path, "'sh'", f"workdir = '{missing}'\n")) == (
        f"{tmp_path / 'spec.toml'}: agent.workdir: directory '{missing}' does not exist")
    afile = tmp_path / "a-file"
    afile.write_text("")
    assert _load_err(_agent_spec(tmp_path, "'sh'", f"workdir = '{afile}'\n")).endswith(
        f"agent.workdir: '{afile}' is not a directory")
    assert _load_err(_agent_spec(tmp_path, "'sh'", "workdir = ''\n")).endswith("agent.workdir: must be a directory path "
                                                                           "(leave it out to run the agent where "
                                                                           "agentctl runs)")
    assert load_spec(_agent_spec(tmp_path, "'sh'", f"workdir = '{tmp_path}'\n")).agent.workdir == str(tmp_path)


def test_the_spec_schema_comes_from_the_structs_and_refuses_unknown_keys_as_the_loader_does():
    from agentctl.spec import Spec, spec_schema

    schema = spec_schema()
    defs = schema["$defs"]
    assert set(defs["Spec"]["properties"]) == set(Spec.__struct_fields__)
    assert all(d.get("additionalProperties") is False for d in defs.values() if d.get("type") == "object")
    command = defs["ServerSpec"]["properties"]["command"]["anyOf"]
    assert {"type": "string"} in command and {"type": "array", "items": {"type": "string"}} in command
    assert defs["AgentSpec"]["properties"]["protocol"]["enum"] == ["acp", "passthrough"]


def test_an_auth_method_is_an_acp_method_id_and_only_for_an_acp_agent():
    spec = parse_spec(MINIMAL.decode().encode() + b"\n[agent]\ncommand = ['x']\nauth_method = 'api-key'\n")
    assert spec.agent.auth_method == "api-key"
    msg = _err(MINIMAL.decode() + "\n[agent]\ncommand = ['x']\nauth_method = 'a b " + CANARY + "'\n")
    assert msg.startswith("spec.toml: agent.auth_method:") and CANARY not in msg
    msg = _err(MINIMAL.decode() + "\n[agent]\ncommand = ['x']\nprotocol = 'passthrough'\nstrategy = 'claude'\n"
               "auth_method = 'api-key'\n")
    assert msg.startswith("spec.toml: agent.auth_method:") and "acp" in msg


_REQUIRED_DOCS = """
[[mcp.servers]]
name = "docs"
type = "http"
url = "https://h.example/mcp"
required = true
"""


def test_a_required_builtin_server_and_the_gates_timeout_are_read_with_a_30_s_default():
    spec = parse_spec(MINIMAL + b"\n[mcp]\nbuiltin_required = true\n")
    assert (spec.mcp.builtin_required, spec.mcp.required_timeout) == (True, 30.0)
    assert "must be > 0" in _err(MINIMAL.decode() + "\n[mcp]\nrequired_timeout = 0\n")


def test_a_required_third_party_server_under_an_acp_agent_is_accepted_its_report_can_prove_it():
    spec = parse_spec(MINIMAL + b'\n[agent]\ncommand = ["agent"]\n' + _REQUIRED_DOCS.encode())
    assert spec.mcp.servers[0].required is True


@pytest.mark.parametrize("agent, why", [
    ("", "no [agent] runs under this daemon"),
    ('[agent]\ncommand = ["gemini"]\nprotocol = "passthrough"\nstrategy = "gemini"\n', "no known MCP status output"),
    ('[agent]\ncommand = ["claude"]\nprotocol = "passthrough"\nstrategy = "claude"\nreport = "off"\n',
     'agent.report = "off"'),
    ('[agent]\ncommand = ["claude"]\nprotocol = "passthrough"\nstrategy = "none"\n', "without MCP configuration"),
], ids=["no agent", "a CLI with no status output", "reports switched off", "no strategy"])
def test_a_required_third_party_server_nothing_could_prove_attached_is_refused_at_load_saying_why(agent, why):
    msg = _err(MINIMAL.decode() + "\n" + agent + _REQUIRED_DOCS)
    assert msg.startswith("spec.toml: mcp.servers[0].required: cannot be required: "), msg
    assert why in msg
