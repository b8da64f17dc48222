"""A hub with its page, fed by real daemons (in-process Daemon, real reference agents, real sockets).

One task, two sessions in different states:
- session-a: a strict reference agent; the built-in server goes active, `docs` (unreachable) fails the
  session, `legacy` (sse, not allowed by policy) is filtered, `local` (stdio) stays delivered. Canaries are
  planted in every value a spec can carry: header values, URL user info, path and query, server args and
  env, agent args and env.
- session-b: a lazy reference agent (connects on the first prompt), so after a reset its current attempt
  is delivered while the previous one keeps the active evidence.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from agentctl.daemon.app import Daemon
from agentctl.spec import parse_spec
from agentctl.hub.hub import Hub
from agentctl.hub.web import HubWeb
from tests.conftest import spec_toml

PY = sys.executable
REF_AGENT = str(Path(sys.executable).parent / "agentctl-reference-agent")
STDIO_SERVER = Path(__file__).resolve().parents[1] / "diagnostics" / "fixtures" / "stdio_server.py"
TOKEN = "test-token-" + "7f3a9c2e5b1d4f60a8e2c9b7d3f1e5a2"

CANARIES = {
    "header": "cnry-hdr-5d2e91",
    "user": "cnryuser3b",
    "password": "cnry-pw-c4e7",
    "path": "cnry-path-8a61",
    "query": "cnry-query-f0b2",
    "server_arg": "--cnry-sarg-27d9",
    "server_env": "cnry-senv-9e14",
    "agent_arg": "--cnry-aarg-61fa",
    "agent_env": "cnry-aenv-0c3b",
    "sse_header": "cnry-sse-4b8f",
}


def leaks(text: str) -> list[str]:
    return [name for name, value in CANARIES.items() if value.lstrip("-") in text]


def _spec(d: Path, session: str, execution: str, agent: dict, servers: list[dict], **fields) -> bytes:
    return spec_toml(
        execution_id=execution,
        identity={"task_id": "task-web", "session_id": session, "agent_id": "reference-agent",
                  "agent_profile_id": "profile-web"},
        agent=agent, servers=servers, daemon={"persist_delay": 0.0}, upstream=d / "hub.sock",
        state_dir=d / "state", **fields,
    ).encode()


def spec_a(d: Path) -> bytes:
    c = CANARIES
    url = f"http://{c['user']}:{c['password']}@127.0.0.1:1/{c['path']}/mcp?key={c['query']}"
    return _spec(
        d, "session-a", "exec-a",
        agent={"command": [REF_AGENT, c["agent_arg"]],
               "env": {"AGENTCTL_REF_MODE": "strict,connect-timeout=30", "AGENT_SECRET": c["agent_env"]}},
        policy={"transports": ["http", "stdio"]},
        servers=[
            {"name": "docs", "type": "http", "url": url, "headers": {"Authorization": f"Bearer {c['header']}"}},
            {"name": "legacy", "type": "sse", "url": "http://127.0.0.1:1/sse",
             "headers": {"X-Api-Key": c["sse_header"]}},
            {"name": "local", "type": "stdio", "command": PY, "args": [str(STDIO_SERVER), c["server_arg"]],
             "env": {"SERVER_SECRET": c["server_env"]}},
        ],
    )


def spec_b(d: Path) -> bytes:
    return _spec(
        d, "session-b", "exec-b",
        agent={"command": [REF_AGENT], "env": {"AGENTCTL_REF_MODE": "lazy,connect-timeout=30"}},
        servers=[{"name": "search", "type": "http", "url": "http://127.0.0.1:1/mcp"}],
    )


@dataclass
class World:
    dir: Path
    hub: Hub
    web: HubWeb
    a: Daemon
    b: Daemon

    @property
    def url(self) -> str:
        return self.web.url

    @property
    def page_url(self) -> str:
        return self.web.url + "#token=" + TOKEN


@contextlib.asynccontextmanager
async def hub_with_page(d: Path, socket: str = "hub.sock") -> AsyncIterator[tuple[Hub, HubWeb]]:
    hub = Hub(d / socket, d / "hub.sqlite3", flush_interval=0.02)
    await hub.start()
    web = HubWeb(hub, "127.0.0.1", 0, token=TOKEN)
    try:
        await web.start()
        yield hub, web
    finally:
        await web.stop()
        await hub.stop()


@contextlib.asynccontextmanager
async def world(d: Path) -> AsyncIterator[World]:
    async with hub_with_page(d) as (hub, web):
        async with Daemon(parse_spec(spec_a(d)), socket_path=d / "a.sock") as a, \
                Daemon(parse_spec(spec_b(d)), socket_path=d / "b.sock") as b:
            yield World(dir=d, hub=hub, web=web, a=a, b=b)


# ---- a session whose agent runs on a terminal (the TUI stand-in of tests/pty) -----------------------------

TERMINAL_CANARY = "cnry-term-3e9d17"  # typed into the agent's terminal: its screen shows it, nothing else may


@contextlib.asynccontextmanager
async def terminal_world(d: Path) -> AsyncIterator[tuple[Hub, HubWeb, Daemon]]:
    """A hub with its page and one daemon (session-t) whose passthrough agent runs on a terminal; the agent has
    echoed TERMINAL_CANARY, typed on its keyboard, and the hub follows the daemon."""
    from tests.conftest import eventually
    from tests.pty.conftest import TUI_CMD, Collector

    spec = _spec(d, "session-t", "exec-t", servers=[], agent={
        "command": TUI_CMD, "protocol": "passthrough", "strategy": "none", "terminal": True, "stop_grace": 0.5})
    async with hub_with_page(d) as (hub, web):
        async with Daemon(parse_spec(spec), socket_path=d / "t.sock") as daemon:
            host = daemon.agent.supervisor.process.terminal
            await eventually(lambda: b"tty=True" in host.replay(), what="the agent's first line")
            typist = Collector()
            host.attach(typist)
            assert host.claim(typist) and host.write(typist, TERMINAL_CANARY.encode() + b"\r")
            await eventually(lambda: b"echo " + TERMINAL_CANARY.encode() in host.replay(), what="the echo")
            host.detach(typist)
            await eventually(lambda: hub._live_conn("session-t") is not None and hub._live_conn("session-t").on_terminal,
                             what="the hub following a daemon whose agent is on a terminal")
            yield hub, web, daemon
