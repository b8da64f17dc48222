"""GET /v1/diagnostics and /v1/tools[/{name}] on a real daemon, with a real MCP client attached by hand
(MCP-only mode: `session new` opens an attempt and `mcp-config` names its credential)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agentctl import cli
from tests.diagnostics.conftest import http_server, running_daemon, spec_text
from tests.conftest import eventually


async def _attach(config: dict) -> int:
    """A real MCP client acting as the agent of the current attempt: initialize + tools/list."""
    http = create_mcp_http_client(headers=config["headers"])
    try:
        async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy", cache=None) as c:
            return len((await c.list_tools()).tools)
    finally:
        await http.aclose()



async def test_diagnostics_and_tools_follow_the_attempts(short_dir: Path, capsys: pytest.CaptureFixture[str]):
    servers = http_server("search", "http://127.0.0.1:1/mcp")
    sock = short_dir / "c.sock"
    async with running_daemon(spec_text(short_dir / "state", servers), sock) as d:
        # No attempt yet.
        view = await d.control.get("/v1/tools")
        assert view == {"server": "kandev", "loaded": False, "third_party": ["search"]}
        diag = await d.control.get("/v1/diagnostics")
        assert diag["ready"] is True and "current" not in diag and diag["identity"]["execution_id"] == "exec-diag"

        await d.control.post("/v1/session/new")
        first = d.ctx.ledger.current_attempt_id
        view = await d.control.get("/v1/tools")
        assert view["attempt_id"] == first and view["loaded"] is False
        status, body = await d.control.request("GET", "/v1/tools/get_task")
        assert status == 404 and "catalog not loaded yet" in body["error"]

        count = await _attach(await d.control.get("/v1/mcp-config"))
        await eventually(lambda: d.ctx.ledger.history.current.servers[0].status == "active", 5.0)
        view = await d.control.get("/v1/tools")
        assert view["loaded"] is True and view["tool_count"] == count == len(view["catalog"]["tools"])
        tool = await d.control.get("/v1/tools/get_task")
        assert tool["tool"]["name"] == "get_task" and tool["attempt_id"] == first
        status, body = await d.control.request("GET", "/v1/tools/search")
        assert status == 404 and body["reason_code"] == "third_party_server" and "connect directly to the agent" in body["error"]
        status, body = await d.control.request("GET", "/v1/tools/nope")
        assert status == 404 and "known: " in body["error"]

        await d.control.post("/v1/test-endpoint", {"name": "search", "timeout": 2})
        await d.control.post("/v1/session/reset")
        diag = await d.control.get("/v1/diagnostics")
        # The new attempt is current at once and starts from nothing: the old evidence is history.
        current = {s["name"]: s for s in diag["current"]["servers"]}
        assert current["kandev"]["status"] == "configured" and "endpoint_test" not in current["search"]
        [previous] = diag["previous"]
        assert previous["attempt_id"] == first and previous["superseded_at"]
        old = {s["name"]: s for s in previous["servers"]}
        steps = {s["step"]: s for s in old["kandev"]["steps"]}
        assert steps["initialize"]["done"] and steps["tools_loaded"]["detail"] == f"{count} tools"
        assert old["search"]["endpoint_test"]["reason_code"] == "connect_failed"
        assert (await d.control.get("/v1/tools"))["loaded"] is False, "the catalog belongs to its attempt"

        # The CLI explains a third-party name instead of pretending there is a catalog.
        code = await asyncio.to_thread(cli.main, ["tools", "search", "--socket", str(sock)])
        err = capsys.readouterr().err
        assert code == 1 and "third-party server" in err and "no catalog" in err


async def test_diagnostics_show_the_upstream_state(short_dir: Path):
    spec = spec_text(short_dir / "state") + f'\n[upstream]\nsocket = "{short_dir}/nobody.sock"\n'.encode()
    async with running_daemon(spec, short_dir / "c.sock") as d:
        diag = await d.control.get("/v1/diagnostics")
        assert diag["upstream"]["state"] == "buffering"


async def test_diagnostics_read_offline_from_the_persisted_report_once_the_daemon_is_gone(
    short_dir: Path, capsys: pytest.CaptureFixture[str]
):
    import json

    from agentctl.diagnostics.commands import OFFLINE_UPSTREAM

    state = short_dir / "state"
    async with running_daemon(spec_text(state, http_server("search", "http://127.0.0.1:1/mcp")),
                              short_dir / "c.sock") as d:
        await d.control.post("/v1/session/new")
        await _attach(await d.control.get("/v1/mcp-config"))
        await eventually(lambda: d.ctx.ledger.history.current.servers[0].status == "active", 5.0)
        await d.control.post("/v1/test-endpoint", {"name": "search", "timeout": 2})
        await d.control.post("/v1/session/reset")
        live = await d.control.get("/v1/diagnostics")
    offline_args = ["--state-dir", str(state), "--execution", "exec-diag"]

    assert await asyncio.to_thread(cli.main, ["diagnostics", "--json", *offline_args]) == 0
    offline = json.loads(capsys.readouterr().out)
    for key in ("identity", "current", "previous", "http_refusals", "rejected_events"):
        assert offline.get(key) == live.get(key), key
    assert offline["previous"][0]["servers"][0]["status"] == "active"  # the evidence, not just the ids
    assert offline["daemon_version"] == "?" and "upstream" not in offline and offline["ready"] is False

    assert await asyncio.to_thread(cli.main, ["diagnostics", *offline_args]) == 0
    text = capsys.readouterr().out
    assert text.startswith("agentctl diagnostics: safe to paste") and "Previous attempt" in text
    assert OFFLINE_UPSTREAM in text and "not configured" not in text and "Daemon: " not in text

    assert await asyncio.to_thread(cli.main, ["diagnostics", "--state-dir", str(state)]) == 1
    assert "diagnostics --state-dir needs --execution ID" in capsys.readouterr().err
    assert await asyncio.to_thread(cli.main, ["diagnostics", "--state-dir", str(state), "--execution", "nope"]) == 1
    assert "no report for execution nope" in capsys.readouterr().err
