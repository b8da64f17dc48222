"""The built-in row's catalog hash as a real SDK client produces it: one hash per tool set, in both eras, kept
by a superseded attempt after its catalog is dropped, and equal to the hash of what the client was served."""

from __future__ import annotations

from agentctl.evidence.catalog import catalog_hash
from tests.mcp_endpoint.conftest import MODERN, Harness


async def _listed(harness: Harness, mode: str) -> tuple[str, list[dict]]:
    attempt, token = harness.new_attempt()
    async with harness.client(token, mode=mode) as client:
        served = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
    await harness.wait_events(attempt, "tools_list_observed")
    return attempt, served


async def test_both_eras_give_one_hash_for_one_tool_set_and_it_is_the_hash_of_what_was_served(make_harness) -> None:
    harness: Harness = await make_harness(profile="task")
    legacy, served = await _listed(harness, "legacy")
    modern, _ = await _listed(harness, MODERN)
    first, second = harness.row(legacy), harness.row(modern)
    assert first.catalog_hash is not None and first.catalog_hash == second.catalog_hash
    assert first.catalog is None, "the first attempt was superseded: its catalog is dropped, the hash is kept"
    assert first.tool_count == second.tool_count == len(served)
    assert second.catalog is not None and second.catalog.hash == second.catalog_hash
    assert catalog_hash(served) == second.catalog_hash


async def test_another_tool_set_has_another_hash(make_harness) -> None:
    task = await make_harness(profile="task")
    config = await make_harness(profile="config")
    a, _ = await _listed(task, MODERN)
    b, _ = await _listed(config, MODERN)
    assert task.row(a).catalog_hash != config.row(b).catalog_hash
