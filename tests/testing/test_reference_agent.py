"""The reference ACP agent as a real subprocess, driven by the ACP SDK's client side,
against a real MCP server (MCPServer on uvicorn, loopback port, in the test's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
import pytest
from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio, SseMcpServer
from mcp.server import MCPServer

from agentctl import __version__
from agentctl.testing._ref_passthrough import parse_claude_args, parse_codex_args
from agentctl.testing.reference_agent import parse_options
from tests.conftest import eventually, serve_asgi

PAYLOAD = "TASK-42 reference payload"
TOKEN = "Bearer tok-reference-secret"
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- a real MCP server


@dataclass
class Seen:
    methods: list[tuple[str, str | None]] = field(default_factory=list)  # (mcp method, protocol version)
    http: list[tuple[str, str]] = field(default_factory=list)  # (HTTP method, path)
    auth: list[str | None] = field(default_factory=list)  # Authorization header per HTTP request
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def names(self) -> list[str]:
        return [m for m, _ in self.methods]


@dataclass
class McpFixture:
    seen: Seen
    http_url: str
    sse_url: str


def _counting(app: Any, seen: Seen) -> Any:
    async def wrapped(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            seen.http.append((scope["method"], scope["path"]))
            auth = headers.get(b"authorization")
            seen.auth.append(auth.decode() if auth else None)
            seen.changed.set()
        await app(scope, receive, send)

    return wrapped


@pytest.fixture
async def mcp_server() -> AsyncIterator[McpFixture]:
    seen = Seen()

    async def record(ctx: Any, call_next: Any) -> Any:
        seen.methods.append((ctx.method, ctx.protocol_version))
        seen.changed.set()
        return await call_next(ctx)

    server = MCPServer("kandev-test", middleware=[record])

    @server.tool()
    async def get_task() -> str:
        """Get the current task."""
        return PAYLOAD

    @server.tool()
    async def echo(text: str) -> str:
        """Echo the text."""
        return f"echo:{text}"

    async with serve_asgi(_counting(server.streamable_http_app(), seen)) as port, serve_asgi(
        _counting(server.sse_app(), seen)
    ) as sse_port:
        yield McpFixture(seen, f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{sse_port}/sse")


def dead_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/mcp"


def http_entry(name: str, url: str) -> HttpMcpServer:
    return HttpMcpServer(type="http", name=name, url=url, headers=[HttpHeader(name="Authorization", value=TOKEN)])


async def wait_for(predicate: Any, seen: Seen | None = None, timeout: float = 10.0, what: str = "condition") -> None:
    if seen is None:
        await eventually(predicate, timeout, what)
        return
    deadline = time.monotonic() + timeout
    while not predicate():
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        seen.changed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(seen.changed.wait(), min(left, 0.2))


# ---------------------------------------------------------------- the agent subprocess


class RecordingClient:
    """Minimal ACP client: a plain class (acp.Client is a Protocol; do not subclass it)."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def texts(self) -> str:
        return "".join(
            u.content.text for u in self.updates if getattr(u, "session_update", "") == "agent_message_chunk"
        )


@dataclass
class Agent:
    proc: asyncio.subprocess.Process
    conn: Any
    client: RecordingClient
    stderr: bytearray
    frames: list[dict]


def agent_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTCTL_REF_MODE"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


async def _drain(stream: asyncio.StreamReader, sink: bytearray, total: list[int] | None = None) -> None:
    while chunk := await stream.read(65536):
        if total is not None:
            total[0] += len(chunk)
        if len(sink) < 1_000_000:
            sink.extend(chunk)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    await asyncio.wait_for(proc.wait(), 3)
                    break
                except asyncio.TimeoutError:
                    continue


@contextlib.asynccontextmanager
async def spawn(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Agent]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentctl.testing.reference_agent", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=agent_env(env), start_new_session=True,
    )
    stderr = bytearray()
    drain = asyncio.create_task(_drain(proc.stderr, stderr))
    client = RecordingClient()
    frames: list[dict] = []
    conn = acp.connect_to_agent(client, proc.stdin, proc.stdout, observers=[lambda ev: frames.append(ev.message)])
    try:
        yield Agent(proc, conn, client, stderr, frames)
    finally:
        if os.environ.get("REF_DEBUG"):
            print(stderr.decode(errors="replace"))
        await _stop(proc)
        await conn.close()
        await asyncio.wait_for(drain, 5)


async def initialize(agent: Agent) -> Any:
    return await asyncio.wait_for(
        agent.conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_info={"name": "test", "version": "1"}), 15
    )


async def prompt(agent: Agent, session_id: str, text: str) -> Any:
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), 20)


# ---------------------------------------------------------------- ACP mode


async def test_normal_lists_tools_at_session_new_and_prompt_calls_tool(mcp_server: McpFixture, tmp_path: Path) -> None:
    seen = mcp_server.seen
    async with spawn() as agent:
        init = await initialize(agent)
        assert init.protocol_version == acp.PROTOCOL_VERSION
        assert init.agent_info.name == "agentctl-reference-agent"
        assert init.agent_info.version == __version__
        caps = init.agent_capabilities
        assert (caps.mcp_capabilities.http, caps.mcp_capabilities.sse, caps.load_session) == (True, True, True)

        session = await asyncio.wait_for(
            agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)]), 20
        )
        assert session.session_id
        # session/new answers only after initialize + tools/list reached the server (legacy era)
        assert seen.names()[:3] == ["initialize", "notifications/initialized", "tools/list"]
        assert "tools/call" not in seen.names()
        assert set(seen.auth) == {TOKEN}  # the delivered header reached the server on every request

        resp = await prompt(agent, session.session_id, "hello")
        assert resp.stop_reason == "end_turn"
        assert PAYLOAD in agent.client.texts()
        assert "kandev/get_task" in agent.client.texts()
        assert seen.names().count("tools/call") == 1

        resp = await prompt(agent, session.session_id, 'CALL echo {"text": "hi there"}')
        assert "echo:hi there" in agent.client.texts()
        assert seen.names().count("tools/call") == 2
        assert seen.names().count("initialize") == 1  # the MCP session stayed open between prompts
    assert agent.proc.returncode == 0
    assert TOKEN.split()[1].encode() not in agent.stderr
    # on stdin EOF the agent closed its MCP session (DELETE on the streamable HTTP route)
    assert ("DELETE", "/mcp") in seen.http


async def test_lazy_connects_only_on_first_prompt(mcp_server: McpFixture, tmp_path: Path) -> None:
    seen = mcp_server.seen
    async with spawn("--lazy") as agent:
        await initialize(agent)
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)])
        assert seen.http == [] and seen.methods == []
        await prompt(agent, session.session_id, "go")
        assert seen.names()[:3] == ["initialize", "notifications/initialized", "tools/list"]
        assert "tools/call" in seen.names()
        assert PAYLOAD in agent.client.texts()


async def test_strict_fails_session_new_naming_unreachable_server(mcp_server: McpFixture, tmp_path: Path) -> None:
    async with spawn("--strict", "--connect-timeout", "5") as agent:
        await initialize(agent)
        servers = [http_entry("kandev", mcp_server.http_url), http_entry("docs", dead_url())]
        with pytest.raises(acp.RequestError) as err:
            await asyncio.wait_for(agent.conn.new_session(cwd=str(tmp_path), mcp_servers=servers), 20)
        assert "MCP server 'docs' unreachable" in str(err.value)
        assert "kandev" not in str(err.value)
        assert err.value.data["servers"][0]["name"] == "docs"
        assert TOKEN.split()[1] not in json.dumps(err.value.data)
        # the reachable one was contacted, then closed again
        await wait_for(lambda: ("DELETE", "/mcp") in mcp_server.seen.http, mcp_server.seen, what="DELETE")


async def test_non_strict_accepts_session_with_unreachable_server(mcp_server: McpFixture, tmp_path: Path) -> None:
    async with spawn() as agent:
        await initialize(agent)
        servers = [http_entry("docs", dead_url()), http_entry("kandev", mcp_server.http_url)]
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=servers)
        await prompt(agent, session.session_id, "go")
        assert PAYLOAD in agent.client.texts()
    assert b"MCP server 'docs' unreachable" in agent.stderr


async def test_ignore_mcp_never_contacts(mcp_server: McpFixture, tmp_path: Path) -> None:
    async with spawn(env={"AGENTCTL_REF_MODE": "ignore-mcp"}) as agent:
        await initialize(agent)
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)])
        await prompt(agent, session.session_id, "go")
        assert "Ignoring MCP servers (1 delivered)" in agent.client.texts()
    assert mcp_server.seen.http == []


async def test_modern_mode_uses_2026_client(mcp_server: McpFixture, tmp_path: Path) -> None:
    seen = mcp_server.seen
    async with spawn("--modern") as agent:
        await initialize(agent)
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)])
        assert seen.methods == [("tools/list", "2026-07-28")]
        await prompt(agent, session.session_id, "go")
        assert ("tools/call", "2026-07-28") in seen.methods
        assert PAYLOAD in agent.client.texts()


async def test_sse_only_advertises_sse_and_connects_over_sse(mcp_server: McpFixture, tmp_path: Path) -> None:
    seen = mcp_server.seen
    async with spawn("--sse-only") as agent:
        init = await initialize(agent)
        assert (init.agent_capabilities.mcp_capabilities.http, init.agent_capabilities.mcp_capabilities.sse) == (
            False,
            True,
        )
        sse = SseMcpServer(type="sse", name="kandev", url=mcp_server.sse_url, headers=[HttpHeader(name="Authorization", value=TOKEN)])
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[sse, http_entry("other", mcp_server.http_url)])
        assert ("GET", "/sse") in seen.http
        assert all(path != "/mcp" for _, path in seen.http)  # the http entry was skipped: not advertised
        assert set(seen.auth) == {TOKEN}
        await prompt(agent, session.session_id, "go")
        assert PAYLOAD in agent.client.texts()
    assert b"skipping MCP server 'other'" in agent.stderr


@pytest.mark.parametrize("flag", ["--no-mcp-capabilities", "--stdio-only"])
async def test_no_mcp_capabilities_and_stdio_only_advertise_false_false(flag: str) -> None:
    async with spawn(flag) as agent:
        init = await initialize(agent)
        caps = init.agent_capabilities.mcp_capabilities
        assert (caps.http, caps.sse) == (False, False)
        raw = next(f for f in agent.frames if f.get("id") == 0 and "result" in f)
        assert raw["result"]["agentCapabilities"]["mcpCapabilities"] == {"http": False, "sse": False}


async def test_stdio_server_and_load_session(mcp_server: McpFixture, tmp_path: Path) -> None:
    script = tmp_path / "stdio_server.py"
    script.write_text(
        "import os\nfrom mcp.server import MCPServer\ns = MCPServer('stdio-test')\n"
        "@s.tool()\nasync def get_task() -> str:\n    return 'stdio says ' + os.environ['REF_TEST_VALUE']\n"
        "s.run('stdio')\n"
    )
    stdio = McpServerStdio(
        name="kandev", command=sys.executable, args=[str(script)], env=[EnvVariable(name="REF_TEST_VALUE", value="v-7")]
    )
    # A stdio server is a second interpreter importing the SDK: seconds on a loaded machine, so a wide timeout.
    async with spawn("--connect-timeout", "60") as agent:
        await initialize(agent)
        session = await asyncio.wait_for(agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[stdio]), 20)
        await prompt(agent, session.session_id, "go")
        assert "stdio says v-7" in agent.client.texts()
        # session/load with a new delivery reconnects (to the http server this time)
        await agent.conn.load_session(
            cwd=str(tmp_path), session_id=session.session_id, mcp_servers=[http_entry("kandev", mcp_server.http_url)]
        )
        assert "tools/list" in mcp_server.seen.names()
        await prompt(agent, session.session_id, "go")
        assert PAYLOAD in agent.client.texts()


async def test_garbage_stdout_still_works(mcp_server: McpFixture, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    async with spawn("--garbage-stdout") as agent:
        await initialize(agent)
        session = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)])
        await prompt(agent, session.session_id, "go")
        assert PAYLOAD in agent.client.texts()
    # the garbage really was on stdout: the SDK skipped each line, logging an error for it
    skipped = [r for r in caplog.records if "Error parsing JSON-RPC message" in r.getMessage()]
    assert len(skipped) >= 3


async def test_crash_before_initialize_exits_2() -> None:
    async with spawn("--crash-before-initialize") as agent:
        rc = await asyncio.wait_for(agent.proc.wait(), 10)
        assert rc == 2
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(agent.conn.initialize(protocol_version=acp.PROTOCOL_VERSION), 10)
        assert agent.frames == [] or all("result" not in f for f in agent.frames)


async def test_crash_after_exits_3() -> None:
    started = time.monotonic()
    async with spawn("--crash-after", "1") as agent:
        assert await asyncio.wait_for(agent.proc.wait(), 10) == 3
    assert time.monotonic() - started >= 1
    assert b"crash-after" in agent.stderr


async def test_fork_grandchildren_writes_pidfile(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    async with spawn("--fork-grandchildren", env={"AGENTCTL_REF_PIDFILE": str(pidfile)}) as agent:
        pids: list[int] = []
        try:
            await initialize(agent)  # pids are written before the ACP loop starts
            pids = [int(p) for p in pidfile.read_text().split()]
            assert len(pids) == 2
            for pid in pids:
                os.kill(pid, 0)
            assert os.getsid(pids[1]) == pids[1]  # the second one escaped with setsid
            assert os.getpgid(pids[0]) == agent.proc.pid  # the first stays in the agent's group
        finally:
            # they inherit the agent's stdout/stderr: until they die, nobody sees EOF on those pipes
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def test_flood_stderr_does_not_block_the_agent(mcp_server: McpFixture, tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentctl.testing.reference_agent", "--flood-stderr", "50",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=agent_env(), start_new_session=True,
    )
    total = [0]
    drain = asyncio.create_task(_drain(proc.stderr, bytearray(), total))
    conn = acp.connect_to_agent(RecordingClient(), proc.stdin, proc.stdout)
    try:
        init = await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), 15)
        assert init.agent_info.name == "agentctl-reference-agent"
        await wait_for(lambda: total[0] >= 50 * 1024 * 1024, timeout=20, what="50 MB of stderr")
    finally:
        await _stop(proc)
        await conn.close()
        await asyncio.wait_for(drain, 5)
    assert proc.returncode == 0


async def test_hang_on_shutdown_ignores_eof_and_sigterm() -> None:
    async with spawn("--hang-on-shutdown") as agent:
        await initialize(agent)
        agent.proc.stdin.close()
        os.kill(agent.proc.pid, signal.SIGTERM)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(agent.proc.wait()), 1.0)
        os.killpg(agent.proc.pid, signal.SIGKILL)
        assert await asyncio.wait_for(agent.proc.wait(), 5) == -signal.SIGKILL


async def test_sigterm_shuts_down_cleanly(mcp_server: McpFixture, tmp_path: Path) -> None:
    async with spawn() as agent:
        await initialize(agent)
        await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[http_entry("kandev", mcp_server.http_url)])
        os.kill(agent.proc.pid, signal.SIGTERM)
        assert await asyncio.wait_for(agent.proc.wait(), 10) == 0
    assert ("DELETE", "/mcp") in mcp_server.seen.http


# ---------------------------------------------------------------- passthrough mode


async def test_passthrough_claude_reads_mcp_config_and_calls_tool(mcp_server: McpFixture, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "kandev": {"type": "http", "url": mcp_server.http_url, "headers": {"Authorization": TOKEN}},
        "docs": {"type": "http", "url": dead_url(), "headers": {}},
    }}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentctl.testing.reference_agent", "--passthrough", "claude", "-p", "hello",
        "--mcp-config", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=agent_env(), start_new_session=True,
    )
    stderr = bytearray()
    drain = asyncio.create_task(_drain(proc.stderr, stderr))
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        summary = json.loads(line)
        servers = {s["name"]: s for s in summary["servers"]}
        assert servers["kandev"]["connected"] and "get_task" in servers["kandev"]["tools"]
        assert not servers["docs"]["connected"] and servers["docs"]["error"]
        assert summary["call"]["server"] == "kandev" and summary["call"]["ok"]
        assert PAYLOAD in summary["call"]["text"]
        assert "tools/call" in mcp_server.seen.names() and set(mcp_server.seen.auth) == {TOKEN}
        assert proc.returncode is None  # stays alive until stdin closes
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        await _stop(proc)
        await asyncio.wait_for(drain, 5)
    assert TOKEN.split()[1].encode() not in stderr


def test_codex_args_parse_like_codex() -> None:
    argv = [
        "exec", "-c", 'mcp_servers.kandev.url="http://127.0.0.1:9/mcp"',
        "-c", 'mcp_servers.kandev.http_headers={ "Authorization" = "Bearer x", "X-A" = "1" }',
        "--config", 'mcp_servers.tools.command="/usr/bin/tool"',
        "-c", 'mcp_servers.tools.args=["--a", "b"]',
        "-c", 'mcp_servers.tools.env={ FOO = "bar" }',
        "-c", "mcp_servers.plain.url=http://unquoted/mcp",
        "-c", 'mcp_servers.tok.url="http://t/mcp"', "-c", 'mcp_servers.tok.bearer_token_env_var="MY_TOKEN"',
        "-c", 'mcp_servers.off.url="http://x"', "-c", "mcp_servers.off.enabled=false",
        "-c", "model=o3",
    ]
    entries = {e.name: e for e in parse_codex_args(argv, environ={"MY_TOKEN": "zzz"})}
    assert set(entries) == {"kandev", "tools", "plain", "tok"}
    assert entries["kandev"].transport == "http" and entries["kandev"].url == "http://127.0.0.1:9/mcp"
    assert entries["kandev"].headers == {"Authorization": "Bearer x", "X-A": "1"}
    assert (entries["tools"].transport, entries["tools"].args, entries["tools"].env) == ("stdio", ["--a", "b"], {"FOO": "bar"})
    assert entries["plain"].url == "http://unquoted/mcp"  # not TOML: taken as a raw string, as codex does
    assert entries["tok"].headers == {"Authorization": "Bearer zzz"}


async def test_passthrough_codex_connects(mcp_server: McpFixture) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentctl.testing.reference_agent", "--passthrough", "codex", "exec",
        "-c", f'mcp_servers.kandev.url="{mcp_server.http_url}"',
        "-c", f'mcp_servers.kandev.http_headers={{ "Authorization" = "{TOKEN}" }}',
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env=agent_env({"AGENTCTL_REF_MODE": "modern"}), start_new_session=True,
    )
    try:
        summary = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
        assert summary["passthrough"] == "codex" and summary["call"]["ok"] and PAYLOAD in summary["call"]["text"]
        assert ("tools/call", "2026-07-28") in mcp_server.seen.methods
        assert await asyncio.wait_for(proc.wait(), 10) == 0  # stdin is /dev/null: EOF at once
    finally:
        await _stop(proc)


def test_claude_args_and_env_modes(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"mcpServers": {"s": {"command": "x", "args": ["1"], "env": {"A": "b"}}, "h": {"url": "http://h"}}}))
    entries = {e.name: e for e in parse_claude_args(["-p", "hi", f"--mcp-config={cfg}"])}
    assert entries["s"].transport == "stdio" and entries["s"].env == {"A": "b"}
    assert entries["h"].transport == "http"
    opts = parse_options(["--strict"], {"AGENTCTL_REF_MODE": "lazy, crash-after=2.5,builtin-name=kb"})
    assert (opts.strict, opts.lazy, opts.crash_after, opts.builtin_name) == (True, True, 2.5, "kb")
    with pytest.raises(SystemExit):
        parse_options([], {"AGENTCTL_REF_MODE": "no-such-mode"})
