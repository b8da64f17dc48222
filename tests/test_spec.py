"""Execution spec: typed decoding, value-free errors naming file and field."""

from __future__ import annotations

import json

import pytest

from agentctl.spec import SpecError, load_spec, parse_spec

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
                "agent": {"command": ["agent", "--flag"], "protocol": "acp"},
                "mcp": {"servers": [{"name": "docs", "type": "http", "url": "https://h.example/mcp"}]},
            }
        )
    )
    spec = load_spec(path)
    assert spec.agent.command == ["agent", "--flag"]
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
    assert msg == 'spec.toml: mcp.servers[0].command: required for type = "stdio"'


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
