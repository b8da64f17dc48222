"""Dynamic tools: a profile switch notifies open sessions and the next tools/list serves the new set."""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.subscriptions import ToolsListChanged

from agentctl.mcp_endpoint import profiles as P
from tests.mcp_endpoint.conftest import MODERN, Harness, eventually


class Notifications:
    """A message_handler that keeps the notifications the client saw."""

    def __init__(self) -> None:
        self.tools_changed = asyncio.Event()
        self.seen: list[str] = []

    async def __call__(self, message: object) -> None:
        method = getattr(message, "method", None)
        if method is None:
            method = getattr(getattr(message, "root", None), "method", None)
        if isinstance(method, str):
            self.seen.append(method)
            if method == "notifications/tools/list_changed":
                self.tools_changed.set()


async def test_legacy_initialize_advertises_that_the_tool_list_can_change(harness: Harness):
    _, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as client:
        caps = client.server_capabilities
        assert caps.tools is not None and caps.tools.list_changed is True


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_profile_switch_sends_list_changed_to_legacy_sessions_and_the_next_list_is_the_new_set(
    harness: Harness, transport: str
):
    attempt, token = harness.new_attempt()
    seen = Notifications()
    opener = harness.client if transport == "streamable-http" else harness.sse
    async with opener(token, mode="legacy", message_handler=seen) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert before == set(P.PROFILES["task"])
        await harness.wait_events(attempt, "initialize_observed")
        if transport == "streamable-http":
            # The client opens its GET stream (where list_changed travels) in the background.
            await eventually(lambda: harness.endpoint.bridge.open_exchanges >= 1, 5.0, what="the GET stream")

        assert harness.endpoint.set_profile("config") == len(P.PROFILES["config"])
        await asyncio.wait_for(seen.tools_changed.wait(), 5)
        after = {t.name for t in (await client.list_tools()).tools}
        assert after == set(P.PROFILES["config"])
    lists = await harness.wait_events(attempt, "tools_list_observed", 2)
    assert [e.tool_count for e in lists] == [len(P.PROFILES["task"]), len(P.PROFILES["config"])]
    assert harness.row(attempt).tool_count == len(P.PROFILES["config"])


async def test_a_modern_client_sees_the_new_set_on_its_next_list_and_on_its_listen_stream(harness: Harness):
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=MODERN) as client:
        assert len((await client.list_tools()).tools) == len(P.PROFILES["task"])
        async with client.listen(tools_list_changed=True) as subscription:
            harness.endpoint.set_profile("task-title")
            event = await asyncio.wait_for(subscription.__anext__(), 5)
            assert isinstance(event, ToolsListChanged)
        names = {t.name for t in (await client.list_tools()).tools}
    assert names == set(P.PROFILES["task-title"])
    lists = await harness.wait_events(attempt, "tools_list_observed", 2)
    assert lists[-1].tool_count == len(P.PROFILES["task-title"])


async def test_an_unknown_profile_is_refused_and_changes_nothing(harness: Harness):
    _, token = harness.new_attempt()
    with pytest.raises(ValueError):
        harness.endpoint.set_profile("no-such-profile")
    assert harness.endpoint.profile == "task"
    async with harness.client(token, mode=MODERN) as client:
        assert len((await client.list_tools()).tools) == len(P.PROFILES["task"])


async def test_the_endpoint_starts_with_the_profile_it_was_given(make_harness):
    harness: Harness = await make_harness(profile="external")
    _, token = harness.new_attempt()
    async with harness.client(token, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert names == set(P.PROFILES["external"])
