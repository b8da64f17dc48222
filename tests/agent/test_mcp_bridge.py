"""The kandev stdio bridge: an agent that speaks only stdio MCP gets the built-in server through `agentctl
mcp-bridge`, which it spawns itself; the endpoint attributes the bridge's requests to the attempt by its token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from mcp.server.mcpserver import Context
from pydantic import BaseModel

from tests.agent.serve_support import agent_pid, agent_spec, cli, cli_json, closed_port, row, serving, wait_row
from tests.conftest import agentctl_cmd, poll


def _bridge_of(agent: int) -> psutil.Process:
    """The bridge process the agent spawned (the MCP SDK's stdio client starts it as a child)."""

    def find() -> psutil.Process | None:
        for child in psutil.Process(agent).children(recursive=True):
            try:
                if "mcp-bridge" in child.cmdline():
                    return child
            except psutil.Error:
                continue
        return None

    return poll(find, timeout=10, what="the bridge process")


def _token_of(bridge: psutil.Process) -> str:
    """The attempt's token, as the agent handed it to the bridge: in its initial environment (procfs keeps it
    even though the bridge takes it out of its own os.environ at once)."""
    raw = Path(f"/proc/{bridge.pid}/environ").read_bytes().split(b"\0")
    [token] = [v.split(b"=", 1)[1].decode() for v in raw if v.startswith(b"AGENTCTL_BRIDGE_TOKEN=")]
    assert len(token) >= 16
    return token


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stdio_only_agent_gets_kandev_through_the_bridge_active_with_tools_and_calls_counted(
    tmp_path, short_tmp, era
):
    flags = ["--stdio-only", *(["--modern"] if era == "modern" else [])]
    spec = agent_spec(tmp_path, *flags)
    sock = short_tmp / "b.sock"
    with serving(spec, sock) as daemon:
        new = cli_json(sock, "session", "new")
        assert new["accepted"]
        body = wait_row(sock, "kandev", "active")
        builtin = row(body, "kandev")
        assert builtin["tool_count"] > 0, "tools/list went through the bridge and was observed by the endpoint"
        assert body["current"]["attempt_id"] == new["attempt_id"], "attributed to the attempt by its token"
        delivered = [e for e in body["current"]["evidence"] if e.get("server") == "kandev" and e["kind"] == "delivered"]
        assert delivered and delivered[0]["transport"] == "stdio", "the agent was handed a stdio server"

        done = cli(sock, "prompt", "read it")
        assert done.returncode == 0 and "Called kandev/" in done.stdout, done.stdout + done.stderr
        assert poll(lambda: row(cli_json(sock, "status"), "kandev").get("tool_calls", 0) >= 1, what="a counted call")

        # Canary: the token is in the bridge's environment only, never in its argv, the report or the logs.
        bridge = _bridge_of(agent_pid(daemon))
        token = _token_of(bridge)
        assert token.encode() not in Path(f"/proc/{bridge.pid}/cmdline").read_bytes()
        assert "AGENTCTL_BRIDGE_URL" not in " ".join(bridge.cmdline())
        stop = cli(sock, "stop")
        assert stop.returncode == 0
        assert daemon.proc.wait(timeout=30) == 0
    assert poll(lambda: not psutil.pid_exists(bridge.pid) or bridge.status() == psutil.STATUS_ZOMBIE,
                what="the bridge gone with its agent")
    log_text = daemon.stderr_text()
    assert token not in log_text
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path.name


def _bridge(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    full = {**os.environ, **env}
    return subprocess.Popen([*agentctl_cmd("mcp-bridge"), *args], env=full, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_the_bridge_answers_a_request_with_a_json_rpc_error_when_the_endpoint_is_unreachable_and_exits_on_stdin_eof():
    token = "bridge-canary-token-5f2a9c"
    url = f"http://127.0.0.1:{closed_port()}/mcp"
    proc = _bridge({"AGENTCTL_BRIDGE_URL": url, "AGENTCTL_BRIDGE_TOKEN": token})
    request = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
               "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    oversized = b'{"jsonrpc":"2.0","method":"x","params":"' + b"a" * (9 * 1024 * 1024) + b'"}\n'
    out, err = proc.communicate(oversized + json.dumps(request).encode() + b"\n", timeout=30)
    assert proc.returncode == 0, "stdin closed: the bridge ends normally"
    [answer] = [json.loads(line) for line in out.splitlines()]
    assert answer["id"] == 7 and answer["error"]["message"] == "agentctl bridge: the built-in endpoint is unreachable"
    text = err.decode()
    assert "unreachable" in text and "1 unreadable or oversized line(s)" in text
    assert token not in text and url not in text and "127.0.0.1" not in text


def test_the_bridge_refuses_to_start_without_its_environment_or_with_arguments():
    proc = _bridge({"AGENTCTL_BRIDGE_URL": "", "AGENTCTL_BRIDGE_TOKEN": ""})
    _, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 2 and b"started without its environment" in err
    proc = _bridge({"AGENTCTL_BRIDGE_URL": "http://127.0.0.1:9/mcp", "AGENTCTL_BRIDGE_TOKEN": "t" * 20}, "--token=x")
    _, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 2


def test_the_bridge_exits_when_the_agent_that_spawned_it_is_killed(tmp_path):
    # A real SIGKILL of the spawning process: its end of the bridge's stdin closes with it, and the bridge is
    # re-parented; either ends it.
    pidfile = tmp_path / "bridge.pid"
    script = (
        "import subprocess, sys, os, signal\n"
        f"p = subprocess.Popen({agentctl_cmd('mcp-bridge')!r}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "signal.pause()  # held until the test kills it\n"
    )
    env = {**os.environ, "AGENTCTL_BRIDGE_URL": "http://127.0.0.1:9/mcp", "AGENTCTL_BRIDGE_TOKEN": "t" * 20}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        pid = int(poll(lambda: pidfile.exists() and pidfile.read_text(), what="the bridge's pid"))
        bridge = psutil.Process(pid)
        parent.kill()
        parent.wait(timeout=10)
        poll(lambda: not bridge.is_running() or bridge.status() == psutil.STATUS_ZOMBIE, timeout=15,
             what="the bridge exiting after its parent died")
    finally:
        if parent.poll() is None:
            parent.kill()


class Confirm(BaseModel):
    ok: bool


# Legacy-era logging is what a handshake-era server sends unasked; the SDK marks it deprecated for 2026-07-28.
@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
async def test_server_notifications_and_server_initiated_requests_cross_the_bridge_and_the_answers_go_back():
    # A real SDK server (not agentctl's endpoint) so the server side can send a log notification and ask an
    # elicitation mid-call; a real SDK stdio client spawns the bridge and answers it.
    import mcp_types
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.server import MCPServer

    from tests.conftest import serve_asgi

    server = MCPServer("bridged")

    @server.tool()
    async def huge() -> str:
        return "x" * (9 * 1024 * 1024)

    @server.tool()
    async def ask(ctx: Context) -> str:
        await ctx.info("working on it")
        answer = await ctx.elicit("go ahead?", Confirm)
        return f"{answer.action}:{getattr(answer, 'data', None)}"

    app = server.streamable_http_app()
    seen: list[str] = []

    async def recording(scope, receive, send):  # the Authorization each request carried
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]).get(b"authorization", b"").decode())
        await app(scope, receive, send)

    logs: list[str] = []

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    async def on_elicit(context, params) -> mcp_types.ElicitResult:
        return mcp_types.ElicitResult(action="accept", content={"ok": True})

    token = "bridge-token-" + "c" * 24
    async with serve_asgi(recording) as port:
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentctl.cli", "mcp-bridge"],
                                       env={"AGENTCTL_BRIDGE_URL": f"http://127.0.0.1:{port}/mcp",
                                            "AGENTCTL_BRIDGE_TOKEN": token})
        async with Client(params, mode="legacy", logging_callback=on_log, elicitation_callback=on_elicit,
                          read_timeout_seconds=20) as client:
            tools = await client.list_tools()
            assert sorted(t.name for t in tools.tools) == ["ask", "huge"]
            with pytest.raises(Exception, match="too large or cut off"):  # bounded: an error, not a hang
                await client.call_tool("huge", {})
            result = await client.call_tool("ask", {})
    assert result.content[0].text == "accept:ok=True"
    assert logs == ["working on it"], "the notification inside the answer's SSE stream reached the client"
    assert seen and set(seen) == {f"Bearer {token}"}, "every request carried the attempt's token"
