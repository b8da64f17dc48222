"""The spec accepts a passthrough strategy only by a registered name, and says which names exist."""

from __future__ import annotations

import pytest

from agentctl.agent.passthrough import STRATEGY_NAMES
from agentctl.spec import SpecError, parse_spec
from tests.passthrough.support import IDENTITY


def agent(body: str) -> bytes:
    return f"{IDENTITY}\n[agent]\ncommand = [\"cli\"]\n{body}\n".encode()


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_registered_strategy_is_accepted(name):
    assert parse_spec(agent(f'protocol = "passthrough"\nstrategy = "{name}"')).agent.strategy == name


def test_an_unknown_strategy_is_one_clear_line_naming_the_known_ones():
    with pytest.raises(SpecError) as info:
        parse_spec(agent('protocol = "passthrough"\nstrategy = "aider-secret-x"'), source="spec.toml")
    msg = str(info.value)
    assert msg == "spec.toml: agent.strategy: unknown passthrough strategy (known: claude, codex, cursor, gemini, opencode)"
    assert "aider-secret-x" not in msg


def test_passthrough_without_a_strategy_is_valid_and_reported_unavailable_at_run_time():
    assert parse_spec(agent('protocol = "passthrough"')).agent.strategy is None
