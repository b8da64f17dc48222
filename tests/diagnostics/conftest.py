"""Fixtures for the diagnostics tests: a real MCP server on loopback (MCPServer on uvicorn, in the test's
loop), a real daemon in the test's loop, and a real control-socket client (aiohttp over AF_UNIX)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from mcp.server import MCPServer

from agentctl.daemon.app import Daemon
from agentctl.spec import parse_spec
from tests.conftest import eventually, serve_asgi

FIXTURES = Path(__file__).parent / "fixtures"
PY = sys.executable
REF_AGENT = str(Path(sys.executable).parent / "agentctl-reference-agent")


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)


# ---- a real MCP server ---------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the test server received: HTTP paths and the Authorization header of each request."""

    paths: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    api_keys: list[str | None] = field(default_factory=list)


@dataclass
class McpServerFixture:
    port: int
    sse_port: int
    seen: Seen

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.sse_port}/sse"


def _recording(app: Any, seen: Seen, rewrite_to: str | None) -> Any:
    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.paths.append(scope["path"])
            auth = dict(scope.get("headers") or []).get(b"authorization")
            seen.auth.append(auth.decode() if auth else None)
            key = dict(scope.get("headers") or []).get(b"x-api-key")
            seen.api_keys.append(key.decode() if key else None)
            if rewrite_to and scope["path"].endswith("/mcp"):
                # Any path ending in /mcp is the MCP route: specs may plant canaries in the path.
                scope = dict(scope, path=rewrite_to, raw_path=rewrite_to.encode())
        await app(scope, receive, send)

    return wrapped


def plain_app(status: int, body: bytes) -> Any:
    """An HTTP server that answers every request with `status` and `body` (not MCP at all)."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].replace(".startup", ".startup.complete").replace(".shutdown", ".shutdown.complete")
                await send({"type": kind})
                if message["type"] == "lifespan.shutdown":
                    return
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})

    return app


def build_server(tool_count: int = 3) -> MCPServer:
    server = MCPServer("diag-test")

    @server.tool()
    async def echo(text: str) -> str:
        """Echo the text."""
        return text

    for i in range(tool_count - 1):

        async def extra() -> str:
            return "ok"

        server.add_tool(extra, name=f"tool_{i:04d}", description=f"Extra tool {i}.")
    return server


@pytest.fixture
async def mcp_server() -> AsyncIterator[McpServerFixture]:
    seen = Seen()
    server = build_server()
    async with serve_asgi(_recording(server.streamable_http_app(), seen, "/mcp")) as port, serve_asgi(
        _recording(server.sse_app(), seen, None)
    ) as sse_port:
        yield McpServerFixture(port=port, sse_port=sse_port, seen=seen)


# ---- a real daemon -------------------------------------------------------------------------------------


def spec_text(state_dir: Path, servers: str = "", agent: str = "", execution_id: str = "exec-diag") -> bytes:
    return f"""
[identity]
task_id = "task-1"
session_id = "session-1"
agent_id = "agent-1"
agent_profile_id = "profile-1"
execution_id = "{execution_id}"

[state]
dir = "{state_dir}"

[daemon]
persist_delay = 0.0
{agent}
{servers}
""".encode()


def stdio_server(name: str, script: str, *args: str, env: str = "{}") -> str:
    argv = ", ".join(json.dumps(a) for a in [str(FIXTURES / script), *args])
    return f"""
[[mcp.servers]]
name = "{name}"
type = "stdio"
command = "{PY}"
args = [{argv}]
env = {env}
"""


def http_server(name: str, url: str, transport: str = "http", headers: str = "{}") -> str:
    return f"""
[[mcp.servers]]
name = "{name}"
type = "{transport}"
url = "{url}"
headers = {headers}
"""


class Control:
    """A real control-socket client (aiohttp over AF_UNIX), usable from the daemon's own loop."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def request(self, method: str, route: str, body: Any = None, timeout: float = 90) -> tuple[int, Any]:
        connector = aiohttp.UnixConnector(path=str(self.path))
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as http:
            async with http.request(method, "http://agentctl" + route, json=body) as resp:
                return resp.status, await resp.json()

    async def get(self, route: str) -> Any:
        status, body = await self.request("GET", route)
        assert status == 200, (route, status, body)
        return body

    async def post(self, route: str, body: Any = None) -> tuple[int, Any]:
        return await self.request("POST", route, body)


@dataclass
class Running:
    daemon: Daemon
    control: Control

    @property
    def ctx(self) -> Any:
        return self.daemon.ctx


@contextlib.asynccontextmanager
async def running_daemon(spec: bytes, socket_path: Path) -> AsyncIterator[Running]:
    daemon = Daemon(parse_spec(spec), socket_path=socket_path)
    await daemon.start()
    try:
        yield Running(daemon=daemon, control=Control(socket_path))
    finally:
        await daemon.stop()


# ---- processes -------------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Running, in the kernel's sense. A zombie has exited (only its exit status is left for a parent that
    may be a container's pid 1, which we do not control), so it counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """[] once every pid is gone; fails the test naming the survivors otherwise."""
    await eventually(lambda: not any(alive(pid) for pid in pids), timeout,
                     f"processes {[pid for pid in pids if alive(pid)]} to exit")
    return []


async def wait_for_file_lines(path: Path, count: int, timeout: float = 10.0) -> list[int]:
    def ready() -> list[int] | None:
        lines = path.read_text().split() if path.exists() else []
        return [int(x) for x in lines[:count]] if len(lines) >= count else None

    return await eventually(ready, timeout, f"{count} pids in {path.name}")
