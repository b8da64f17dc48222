"""The spec accepts a passthrough strategy only by a registered name, and says which names exist."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from typing import get_args

import pytest

from agentctl.agent import clis
from agentctl.agent.clis import strategy_names
from agentctl.spec import SpecError, StrategyName, parse_spec
from tests.passthrough.support import IDENTITY


def agent(body: str) -> bytes:
    return f"{IDENTITY}\n[agent]\ncommand = [\"cli\"]\n{body}\n".encode()


@pytest.mark.parametrize("name", strategy_names())
def test_every_registered_strategy_is_accepted(name):
    assert parse_spec(agent(f'protocol = "passthrough"\nstrategy = "{name}"')).agent.strategy == name


def test_an_unknown_strategy_is_one_clear_line_naming_the_known_ones():
    with pytest.raises(SpecError) as info:
        parse_spec(agent('protocol = "passthrough"\nstrategy = "aider-secret-x"'), source="spec.toml")
    msg = str(info.value)
    assert msg == "spec.toml: agent.strategy: not one of the allowed values: claude, codex, cursor, gemini, opencode, none"
    assert "aider-secret-x" not in msg


def test_passthrough_without_a_strategy_is_refused_with_a_hint_to_say_none():
    with pytest.raises(SpecError) as info:
        parse_spec(agent('protocol = "passthrough"'), source="spec.toml")
    assert str(info.value) == (
        'spec.toml: agent.strategy: required with protocol = "passthrough" (one of claude, codex, cursor, gemini, '
        'opencode; strategy = "none" runs the CLI without MCP configuration, if that is intended)')


def test_strategy_none_is_a_passthrough_without_mcp_configuration_reported_unavailable_at_run_time():
    assert parse_spec(agent('protocol = "passthrough"\nstrategy = "none"')).agent.strategy == "none"
    assert clis.get_strategy("none") is None


def test_the_specs_strategy_names_are_the_registrys_and_every_strategy_module_is_registered():
    modules = {m.name for m in pkgutil.iter_modules(clis.__path__)
               if getattr(importlib.import_module(f"{clis.__name__}.{m.name}").AGENT, "strategy", None) is not None}
    assert get_args(StrategyName) == strategy_names()
    assert set(strategy_names()) == modules


def test_a_strategy_of_the_wrong_type_is_named_without_its_value():
    with pytest.raises(SpecError) as info:
        parse_spec(agent('protocol = "passthrough"\nstrategy = 12345'), source="spec.toml")
    assert str(info.value) == "spec.toml: agent.strategy: Expected `str | null`, got `int`"


def test_validating_a_passthrough_spec_imports_nothing_from_the_agent_package():
    raw = agent('protocol = "passthrough"\nstrategy = "codex"')
    code = (f"import sys; from agentctl.spec import parse_spec; parse_spec({raw!r}); "
            "print(sorted(m for m in sys.modules if m.startswith('agentctl.agent')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
