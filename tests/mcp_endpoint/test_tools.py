"""Behaviour of the built-in tools on the real MCPServer, called through the SDK's in-process client."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer

from agentctl.backend import BackendError, EmbeddedBackend
from agentctl.evidence.contract.report import MAX_DESCRIPTION_BYTES, Identity
from agentctl.evidence.seeds import ServerSeed
from agentctl.mcp_endpoint.profiles import ALL_TOOLS, DEFAULT_PROFILE, PROFILE_NAMES, PROFILES
from agentctl.mcp_endpoint.tools import apply_profile, current_profile, register_tools
from agentctl.spec import McpSpec
from tests.conftest import identity

IDENTITY = identity()
MODERN = "2026-07-28"
DOCS_TARGET = "https://docs.example"
ERAS = ["legacy", MODERN]

# One call per tool, in an order where each call can succeed, and what its real result must show.
CALLS: list[tuple[str, dict[str, Any], typing.Callable[[dict[str, Any]], bool]]] = [
    ("get_task", {}, lambda r: r["task"]["id"] == "task-1" and r["task"]["title"] == "Task task-1"),
    ("list_tasks", {}, lambda r: r["current_task_id"] == "task-1" and any(t["is_current"] for t in r["tasks"])),
    ("create_task", {"title": "Follow-up"}, lambda r: r["task"]["parent_id"] == "task-1"),
    ("update_task", {"status": "review"}, lambda r: r["task"]["id"] == "task-1" and r["task"]["status"] == "review"),
    ("set_task_title", {"title": "Renamed"}, lambda r: r["task"]["title"] == "Renamed"),
    ("post_task_message", {"text": "halfway"}, lambda r: r["message"]["text"] == "halfway"),
    ("ask_user", {"question": "Which DB?", "options": ["sqlite"]}, lambda r: r["question"]["status"] == "pending"),
    ("create_task_plan", {"steps": ["read", "write"]}, lambda r: r["plan"]["total_steps"] == 2),
    ("get_task_plan", {}, lambda r: [s["text"] for s in r["plan"]["steps"]] == ["read", "write"]),
    ("update_task_plan", {"summary": "two steps"}, lambda r: r["plan"]["summary"] == "two steps"),
    ("complete_plan_step", {"step": 1}, lambda r: r["plan"]["completed_steps"] == 1 and r["plan"]["steps"][0]["done"]),
    ("list_agents", {}, lambda r: r["agents"][0]["id"] == "agent-1"),
    ("list_mcp_servers", {}, lambda r: r["servers"] == [{"name": "docs", "source": "profile", "transport": "http",
                                                            "target": DOCS_TARGET}]),
    ("describe_execution", {}, lambda r: r["execution"]["task_id"] == "task-1" and "tool_profile" in r["execution"]),
]


def make_backend(path: Path) -> EmbeddedBackend:
    return EmbeddedBackend(
        path,
        agents_info={"agents": [{"id": "agent-1", "profiles": [{"id": "profile-1"}]}]},
        mcp_info=[ServerSeed(name="docs", source="profile", transport="http", target=DOCS_TARGET)],
        execution_info={"mcp_url": "http://127.0.0.1:4000/mcp"},
    )


def make_server(backend: object, *, deadline: float = 5.0) -> MCPServer:
    server = MCPServer("kandev")
    register_tools(server, lambda: backend, IDENTITY, deadline=deadline)  # type: ignore[arg-type,return-value]
    return server


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[EmbeddedBackend]:
    backend = make_backend(tmp_path / "tasks.sqlite")
    yield backend
    backend.close()


async def listed(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


def text_of(result: Any) -> str:
    return " ".join(block.text for block in result.content if getattr(block, "text", None))


class RecordingBackend:
    """Passes calls to the embedded backend and remembers (op, identity, args)."""

    def __init__(self, inner: EmbeddedBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Identity, dict[str, Any]]] = []

    async def call(self, op: str, identity: Identity, args: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        self.calls.append((op, identity, dict(args)))
        return await self.inner.call(op, identity, args, deadline=deadline)


class FailingBackend:
    def __init__(self, exc: BaseException | None = None, *, hang: bool = False, answer: Any = None) -> None:
        self.exc, self.hang, self.answer = exc, hang, answer

    async def call(self, op: str, identity: Identity, args: dict[str, Any], *, deadline: float) -> Any:
        if self.hang:
            await asyncio.Event().wait()  # ignores its deadline: the tool layer must cut it off
        if self.exc is not None:
            raise self.exc
        return self.answer


# ---- profiles --------------------------------------------------------------------------------------------


def test_the_profiles_cover_the_issue_and_match_the_spec() -> None:
    assert set(PROFILE_NAMES) >= {"task", "task-title", "config", "external"}
    assert set(typing.get_args(typing.get_type_hints(McpSpec)["profile"])) == set(PROFILE_NAMES)
    assert PROFILES["task-title"] == PROFILES["task"] | {"set_task_title"}
    assert PROFILES["external"] == PROFILES["config"] | {"create_task"}
    assert "set_task_title" not in PROFILES["task"]
    assert DEFAULT_PROFILE in PROFILES


async def test_registration_lists_every_tool_until_a_profile_is_applied(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    async with Client(server, mode="legacy") as client:
        assert await listed(client) == ALL_TOOLS
    assert current_profile(server) is None


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("profile", PROFILE_NAMES)
async def test_every_tool_in_every_profile_answers_with_a_real_result(tmp_path: Path, profile: str, era: str) -> None:
    backend = make_backend(tmp_path / "tasks.sqlite")
    server = make_server(backend)
    try:
        count = apply_profile(server, profile)
        async with Client(server, mode=era) as client:
            names = await listed(client)
            assert names == PROFILES[profile] and count == len(names)
            called = set()
            for name, args, check in CALLS:
                if name not in names:
                    continue
                result = await client.call_tool(name, args)
                assert result.is_error is False, (name, text_of(result))
                assert check(result.structured_content), (name, result.structured_content)
                assert json.loads(text_of(result)) == result.structured_content
                called.add(name)
            assert called == names
    finally:
        backend.close()


@pytest.mark.parametrize("era", ERAS)
async def test_switching_the_profile_changes_the_next_tools_list_of_an_open_session(
    embedded: EmbeddedBackend, era: str
) -> None:
    server = make_server(embedded)
    apply_profile(server, "task")
    async with Client(server, mode=era) as client:
        assert await listed(client) == PROFILES["task"]
        assert apply_profile(server, "task-title") == len(PROFILES["task"]) + 1
        assert await listed(client) == PROFILES["task-title"]
        assert apply_profile(server, "config") == 3
        assert await listed(client) == PROFILES["config"]
        assert apply_profile(server, "external") == 4
        assert await listed(client) == PROFILES["external"]
        described = await client.call_tool("describe_execution", {})
        assert described.structured_content["execution"]["tool_profile"] == "external"
    assert current_profile(server) == "external"


async def test_a_tool_outside_the_profile_cannot_be_called(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    apply_profile(server, "config")
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("create_task", {"title": "sneaky"})
        assert result.is_error is True and "Unknown tool" in text_of(result)
        apply_profile(server, "external")
        result = await client.call_tool("create_task", {"title": "allowed now"})
        assert result.is_error is False


async def test_reapplying_a_profile_keeps_the_listing_stable(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    apply_profile(server, "task")
    before = [t.name for t in await server.list_tools()]
    apply_profile(server, "task")
    assert [t.name for t in await server.list_tools()] == before


def test_an_unknown_profile_or_an_unregistered_server_is_refused(embedded: EmbeddedBackend) -> None:
    with pytest.raises(ValueError, match="unknown tool profile"):
        apply_profile(make_server(embedded), "everything")
    with pytest.raises(ValueError, match="register_tools"):
        apply_profile(MCPServer("bare"), "task")
    server = make_server(embedded)
    with pytest.raises(ValueError, match="already registered"):
        register_tools(server, lambda: embedded, IDENTITY)


# ---- identity --------------------------------------------------------------------------------------------


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set(node)
        for value in node.values():
            found |= _keys(value)
        return found
    if isinstance(node, list):
        return set().union(*(_keys(v) for v in node)) if node else set()
    return set()


async def test_no_input_schema_lets_the_agent_name_a_task_session_or_execution(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    forbidden = {"task_id", "taskId", "session_id", "sessionId", "execution_id", "executionId", "instance_id"}
    async with Client(server, mode="legacy") as client:
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == ALL_TOOLS
    for tool in tools:
        properties = set(tool.input_schema.get("properties", {}))
        assert not properties & forbidden, tool.name
        assert not _keys(tool.input_schema) & forbidden, tool.name


async def test_an_agent_supplied_task_id_is_ignored_and_the_daemon_identity_is_used(
    embedded: EmbeddedBackend,
) -> None:
    recording = RecordingBackend(embedded)
    server = make_server(recording)
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool(
            "post_task_message", {"text": "hi", "task_id": "task-999", "session_id": "session-999"}
        )
        assert result.is_error is False
        view = (await client.call_tool("get_task", {"task_id": "task-999"})).structured_content
    assert view["task"]["id"] == "task-1" and [m["text"] for m in view["recent_messages"]] == ["hi"]
    assert recording.calls[0] == ("task.message", IDENTITY, {"text": "hi"})
    listed_ids = {t["id"] for t in (await embedded.call("task.list", IDENTITY, {}, deadline=5))["tasks"]}
    assert "task-999" not in listed_ids


async def test_every_tool_call_carries_the_daemon_identity(embedded: EmbeddedBackend) -> None:
    recording = RecordingBackend(embedded)
    server = make_server(recording)
    async with Client(server, mode="legacy") as client:
        for name, args, _ in CALLS:
            assert (await client.call_tool(name, args)).is_error is False, name
    assert len(recording.calls) == len(CALLS)
    assert all(identity is IDENTITY for _, identity, _ in recording.calls)
    assert {op for op, _, _ in recording.calls} == {
        "task.get", "task.list", "task.create", "task.update", "task.set_title", "task.message", "task.ask_user",
        "plan.create", "plan.get", "plan.update", "plan.step_complete",
        "config.agents", "config.mcp", "config.execution",
    }  # fmt: skip


# ---- descriptions and schemas ----------------------------------------------------------------------------


async def test_every_tool_has_a_title_a_bounded_description_and_typed_schemas(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    for tool in await server.list_tools():
        assert tool.title and tool.description, tool.name
        assert len(tool.description.encode()) <= MAX_DESCRIPTION_BYTES, tool.name
        assert "\n" not in tool.description
        assert tool.input_schema["type"] == "object"
        for prop in tool.input_schema.get("properties", {}).values():
            assert prop.get("description"), tool.name
        assert tool.output_schema is not None, tool.name
        assert tool.annotations is not None and tool.annotations.open_world_hint is False


async def test_arguments_outside_the_schema_are_a_tool_error_the_model_can_correct(embedded: EmbeddedBackend) -> None:
    server = make_server(embedded)
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("update_task", {"status": "finished"})
        assert result.is_error is True and "status" in text_of(result)
        result = await client.call_tool("complete_plan_step", {"step": 0})
        assert result.is_error is True and "step" in text_of(result)


# ---- failures become tool errors -------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_backend_refusal_is_a_tool_error_with_the_backends_message(embedded: EmbeddedBackend, era: str) -> None:
    server = make_server(embedded)
    async with Client(server, mode=era) as client:
        result = await client.call_tool("update_task", {})
        assert result.is_error is True
        assert "nothing to update" in text_of(result)
        result = await client.call_tool("complete_plan_step", {"step": 1})
        assert result.is_error is True and "no plan yet" in text_of(result)


@pytest.mark.parametrize("era", ERAS)
async def test_a_backend_that_cannot_answer_gives_a_tool_error_not_a_protocol_error(era: str) -> None:
    server = make_server(FailingBackend(BackendError("the orchestrator is unreachable")))
    async with Client(server, mode=era) as client:
        result = await client.call_tool("get_task", {})
    assert result.is_error is True
    assert text_of(result) == "Error executing tool get_task: the orchestrator is unreachable"


@pytest.mark.parametrize("era", ERAS)
async def test_a_backend_that_hangs_gives_a_timeout_tool_error_within_the_deadline(era: str) -> None:
    server = make_server(FailingBackend(hang=True), deadline=0.2)
    async with Client(server, mode=era) as client:
        started = time.monotonic()
        result = await client.call_tool("list_tasks", {})
        elapsed = time.monotonic() - started
    assert result.is_error is True
    assert "did not answer within 0.2 s" in text_of(result)
    assert elapsed < 3.0


async def test_an_unexpected_backend_crash_is_a_generic_tool_error_and_logs_no_arguments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = make_server(FailingBackend(RuntimeError("boom with s3cret-argument")))
    caplog.set_level(logging.DEBUG)
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("post_task_message", {"text": "s3cret-argument"})
    assert result.is_error is True
    assert "failed unexpectedly" in text_of(result)
    assert "s3cret" not in text_of(result)
    assert "s3cret" not in caplog.text
    assert "RuntimeError" in caplog.text


async def test_a_malformed_backend_answer_is_a_tool_error_that_leaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with Client(make_server(FailingBackend(answer={"task": {"id": "s3cret-result"}})), mode="legacy") as client:
        result = await client.call_tool("get_task", {})
        assert result.is_error is True and "does not understand" in text_of(result)
    async with Client(make_server(FailingBackend(answer=["s3cret-list"])), mode="legacy") as client:
        result = await client.call_tool("list_agents", {})
        assert result.is_error is True and "does not understand" in text_of(result)
    assert "s3cret" not in caplog.text


@pytest.mark.parametrize("getter_result", ["none", "raises"])
async def test_a_missing_backend_is_a_tool_error(getter_result: str) -> None:
    def getter() -> Any:
        if getter_result == "raises":
            raise RuntimeError("not wired yet")
        return None

    server = MCPServer("kandev")
    register_tools(server, getter, IDENTITY)
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("get_task", {})
    assert result.is_error is True and "not available" in text_of(result)
