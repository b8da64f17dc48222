"""`[agent] terminal`: off unless a spec says so, and only for a passthrough CLI."""

from __future__ import annotations

import json
import sys

import pytest

from agentctl.spec import SpecError, parse_spec

EXE = json.dumps(sys.executable)  # an executable that exists: the loader names a missing one
IDENTITY = """
[identity]
task_id = "t"
session_id = "s"
agent_id = "a"
agent_profile_id = "p"
"""


def test_a_passthrough_agent_is_headless_unless_its_spec_asks_for_a_terminal():
    spec = parse_spec((IDENTITY + f'[agent]\ncommand = [{EXE}]\nprotocol = "passthrough"\nstrategy = "claude"\n').encode())
    assert spec.agent is not None and spec.agent.terminal is False
    spec = parse_spec((IDENTITY + f'[agent]\ncommand = [{EXE}]\nprotocol = "passthrough"\nstrategy = "claude"\nterminal = true\n').encode())
    assert spec.agent is not None and spec.agent.terminal is True


def test_a_terminal_for_an_acp_agent_is_refused_by_name():
    with pytest.raises(SpecError, match=r"agent\.terminal: only valid with protocol = \"passthrough\""):
        parse_spec((IDENTITY + f'[agent]\ncommand = [{EXE}]\nterminal = true\n').encode())


def test_a_terminal_that_is_not_a_boolean_is_refused_by_name():
    with pytest.raises(SpecError, match=r"agent\.terminal"):
        parse_spec((IDENTITY + f'[agent]\ncommand = [{EXE}]\nprotocol = "passthrough"\nstrategy = "none"\nterminal = "yes"\n').encode())
