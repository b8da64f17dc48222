"""The ops' limits are one table: the built-in tools declare them in their input schemas and the embedded
backend enforces them, at the boundary, for callers that never saw a schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.server import MCPServer

from agentctl.backend import BackendError, EmbeddedBackend, limits
from agentctl.evidence.contract.report import Identity
from agentctl.mcp_endpoint.tools import register_tools

IDENTITY = Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a",
                    agent_profile_id="p")

# (tool, parameter, schema keyword, op, argument builder, the limit)
BOUNDS = [
    ("create_task", "title", "maxLength", "task.create", lambda n: {"title": "x" * n}, limits.MAX_TITLE),
    ("post_task_message", "text", "maxLength", "task.message", lambda n: {"text": "x" * n}, limits.MAX_TEXT),
    ("ask_user", "question", "maxLength", "task.ask_user", lambda n: {"question": "x" * n}, limits.MAX_QUESTION),
    ("create_task_plan", "steps", "maxItems", "plan.create", lambda n: {"steps": ["s"] * n}, limits.MAX_STEPS),
    ("list_tasks", "limit", "maximum", "task.list", lambda n: {"limit": n}, limits.MAX_LIST_LIMIT),
]


@pytest.fixture
def backend(tmp_path: Path):
    b = EmbeddedBackend(tmp_path / "tasks.sqlite", agents_info={}, mcp_info=[], execution_info={})
    yield b
    b.close()


def _bound(schema: dict, keyword: str) -> int:
    found = [v for k, v in _walk(schema) if k == keyword]
    assert found, f"no {keyword} in {schema}"
    return max(found)


def _walk(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


async def test_the_tools_declare_the_limits_the_backend_enforces(backend: EmbeddedBackend) -> None:
    server = MCPServer("kandev")
    register_tools(server, lambda: backend, IDENTITY, deadline=5.0)
    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for tool, param, keyword, op, build, limit in BOUNDS:
        assert _bound(tools[tool].input_schema["properties"][param], keyword) == limit, (tool, param)
        await backend.call(op, IDENTITY, build(limit), deadline=5.0)  # at the limit: accepted
        with pytest.raises(BackendError, match=f"'{param}'"):
            await backend.call(op, IDENTITY, build(limit + 1), deadline=5.0)
