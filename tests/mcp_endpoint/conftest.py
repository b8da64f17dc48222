"""Harness for the MCP endpoint tests: a real aiohttp AppRunner + TCPSite on loopback hosting
McpEndpoint.mount(), a real Ledger, the embedded SQLite backend, and the SDK's own client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from aiohttp import web
from mcp.client import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from agentctl.backend import EmbeddedBackend
from agentctl.evidence import reducer
from agentctl.evidence.estimates import CatalogEstimates, EstimateCache
from agentctl.evidence.contract.report import Attempt, EvidenceEvent, ServerRow
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.mcp_endpoint.server import McpEndpoint
from tests.conftest import eventually, identity  # noqa: F401 - re-exported to the endpoint tests

BUILTIN = "kandev"
MODERN = "2026-07-28"



@dataclass
class Harness:
    ledger: Ledger
    endpoint: McpEndpoint
    runner: web.AppRunner
    host: str
    port: int
    backend_box: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        assert self.endpoint.url
        return self.endpoint.url

    @property
    def sse_url(self) -> str:
        assert self.endpoint.sse_url
        return self.endpoint.sse_url

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def new_attempt(self) -> tuple[str, str]:
        seed = ServerSeed(name=BUILTIN, source="builtin", transport="http", target=self.base)
        return self.ledger.begin_attempt("manual", [seed])

    def attempt(self, attempt_id: str) -> Attempt:
        found = reducer.find_attempt(self.ledger.history, attempt_id)
        assert found is not None, "attempt no longer kept"
        return found

    def row(self, attempt_id: str) -> ServerRow:
        row = reducer.find_row(self.attempt(attempt_id), BUILTIN)
        assert row is not None
        return row

    def events(self, attempt_id: str, kind: str | None = None) -> list[EvidenceEvent]:
        return [e for e in self.attempt(attempt_id).evidence if kind is None or e.kind == kind]

    def refusals(self) -> dict[tuple[str, str, int], int]:
        return {(r.route, r.method, r.status): r.count for r in self.ledger.history.http_refusals}

    async def wait_refusal(self, key: tuple[str, str, int], count: int = 1, timeout: float = 5.0) -> int:
        await eventually(lambda: self.refusals().get(key, 0) >= count, timeout, f"refusal {key}")
        return self.refusals()[key]

    async def settle(self) -> None:
        """A barrier: evidence is folded in order, so once a refusal made now is counted, everything
        observed before it is in the ledger. Used to assert that something was NOT recorded."""
        key = ("/mcp", "POST", 401)
        before = self.refusals().get(key, 0)
        status, _, _ = await self.http("POST", "/mcp", body=b"{}")
        assert status == 401
        await self.wait_refusal(key, before + 1)

    async def wait_events(self, attempt_id: str, kind: str, count: int = 1, timeout: float = 5.0) -> list[EvidenceEvent]:
        await eventually(lambda: len(self.events(attempt_id, kind)) >= count, timeout, f"{count} x {kind}")
        return self.events(attempt_id, kind)

    @asynccontextmanager
    async def client(self, token: str | None, mode: str = "auto", **kwargs: Any) -> AsyncIterator[Client]:
        """The SDK client on /mcp (streamable HTTP), authenticated with `token`."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10.0, read=30.0)) as http:
            async with Client(streamable_http_client(self.url, http_client=http), mode=mode, **kwargs) as client:
                yield client

    @asynccontextmanager
    async def sse(self, token: str | None, mode: str = "legacy", **kwargs: Any) -> AsyncIterator[Client]:
        """The SDK client on the legacy HTTP+SSE transport (/sse + /messages/)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with Client(sse_client(self.sse_url, headers=headers, timeout=10.0), mode=mode, **kwargs) as client:
            yield client

    async def http(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One raw HTTP exchange (aiohttp client) for the edges the SDK client never produces."""
        all_headers = dict(headers or {})
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        async with aiohttp.ClientSession() as session:
            async with session.request(method, self.base + path, headers=all_headers, data=body) as resp:
                return resp.status, dict(resp.headers), await resp.read()


# ---- legacy sessions by hand ----------------------------------------------------------------

LEGACY_VERSION = "2025-11-25"
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def rpc(method: str, id_: int | None = 1, params: dict | None = None) -> bytes:
    body: dict = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        body["id"] = id_
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


INIT = rpc("initialize", params={"protocolVersion": LEGACY_VERSION, "capabilities": {},
                                 "clientInfo": {"name": "by-hand", "version": "1"}})


def session_headers(token: str, sid: str) -> dict[str, str]:
    return {**POST_HEADERS, "Authorization": f"Bearer {token}", "Mcp-Session-Id": sid,
            "MCP-Protocol-Version": LEGACY_VERSION}


async def open_legacy_session(h: Harness, token: str) -> str:
    """A legacy session opened by hand (initialize + notifications/initialized) and left open; its id."""
    status, headers, _ = await h.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=INIT)
    assert status == 200
    sid = headers["mcp-session-id"]
    status, _, _ = await h.http("POST", "/mcp", headers=session_headers(token, sid),
                                body=rpc("notifications/initialized", None))
    assert status == 202
    return sid


async def legacy_session_alive(h: Harness, token: str, sid: str) -> bool:
    status, _, _ = await h.http("POST", "/mcp", headers=session_headers(token, sid), body=rpc("ping", 7))
    assert status in (200, 404), status
    return status == 200


@pytest.fixture
async def make_harness(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """Build and start a harness; everything started is stopped at teardown (bounded)."""
    started: list[Harness] = []

    async def make(
        *,
        profile: str = "task",
        estimator_loader: CatalogEstimates | None = None,
        **endpoint_kwargs: Any,
    ) -> Harness:
        ledger = Ledger(identity())
        box: dict[str, Any] = {}
        db = tmp_path / f"tasks-{len(started)}.sqlite"
        box["backend"] = EmbeddedBackend(
            db,
            agents_info={"agents": [{"id": "agent-1", "profiles": ["profile-1"]}]},
            mcp_info=[ServerSeed(name=BUILTIN, source="builtin", transport="http", target="http://127.0.0.1:1")],
            execution_info={"task_id": "task-1", "session_id": "session-1", "execution_id": "exec-1"},
        )
        endpoint = McpEndpoint(
            ledger,
            builtin_name=BUILTIN,
            profile=profile,
            backend_getter=lambda: box.get("backend"),
            estimator_loader=estimator_loader,
            **endpoint_kwargs,
        )
        app = web.Application()
        endpoint.mount(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        endpoint.set_listen(host, port)
        await endpoint.start()
        harness = Harness(ledger=ledger, endpoint=endpoint, runner=runner, host=host, port=port, backend_box=box)
        started.append(harness)
        return harness

    yield make

    for harness in started:
        await asyncio.wait_for(harness.endpoint.stop(), 10)
        await asyncio.wait_for(harness.runner.cleanup(), 10)
        backend = harness.backend_box.get("backend")
        if backend is not None:
            backend.close()


@pytest.fixture
async def harness(make_harness: Callable[..., Awaitable[Harness]]) -> Harness:
    return await make_harness()


@pytest.fixture(scope="session")
def estimate_cache(tmp_path_factory: pytest.TempPathFactory) -> EstimateCache:
    """One estimate cache for the session: the real helper process runs once per distinct catalog."""
    return EstimateCache(tmp_path_factory.mktemp("estimates") / "cache")


@pytest.fixture
def estimates(estimate_cache: EstimateCache, monkeypatch: pytest.MonkeyPatch) -> CatalogEstimates:
    """Token estimates as a daemon has them: the encoding shipped in the package, counted by the helper."""
    monkeypatch.delenv("AGENTCTL_O200K_PATH", raising=False)
    return CatalogEstimates(estimate_cache)
