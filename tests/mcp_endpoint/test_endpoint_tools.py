"""Every tool in every profile, called once over real HTTP through the endpoint, with a real result."""

from __future__ import annotations

import json

import pytest

from agentctl.mcp_endpoint.profiles import PROFILE_NAMES, PROFILES
from tests.mcp_endpoint.conftest import MODERN, Harness
from tests.mcp_endpoint.test_tools import CALLS, make_backend, text_of


@pytest.mark.parametrize("mode", ["legacy", MODERN])
@pytest.mark.parametrize("profile", PROFILE_NAMES)
async def test_every_tool_in_every_profile_answers_over_http_and_each_call_is_observed(
    make_harness, tmp_path, profile: str, mode: str
):
    harness: Harness = await make_harness(profile=profile)
    old = harness.backend_box["backend"]
    harness.backend_box["backend"] = make_backend(tmp_path / f"calls-{profile}-{mode}.sqlite")
    old.close()
    attempt, token = harness.new_attempt()
    called: list[str] = []
    async with harness.client(token, mode=mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == PROFILES[profile]
        for name, args, check in CALLS:
            if name not in names:
                continue
            result = await client.call_tool(name, args)
            assert result.is_error is False, (name, text_of(result))
            assert check(result.structured_content), (name, result.structured_content)
            assert json.loads(text_of(result)) == result.structured_content
            called.append(name)
    assert set(called) == names
    calls = await harness.wait_events(attempt, "tool_call_observed", len(called))
    assert [(c.tool_name, c.outcome) for c in calls] == [(n, "ok") for n in called]
    row = harness.row(attempt)
    assert row.status == "active" and row.tool_count == len(names) and row.tool_calls == len(called)
