"""Helpers for the control tests: a real Ledger and DaemonContext, and a real aiohttp app served on loopback
TCP and on a real control socket (the same app on both sites, as the daemon does)."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from agentctl.cli import build_parser as cli_parser
from agentctl.control.server import install_control_routes
from agentctl.control.socket import prepare_socket_path, start_unix_site
from agentctl.context import DaemonContext
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.spec import IdentitySpec, Spec
from tests.conftest import StepClock, identity

TEST_CTX_KEY = web.AppKey("test_control_ctx", DaemonContext)
EXECUTION_ID = "exec_0123456789abcdef0123456789abcdef"


def make_ctx(state_dir: Path, socket_path: Path) -> DaemonContext:
    spec = Spec(
        identity=IdentitySpec(
            task_id="task-1",
            session_id="sess-1",
            agent_id="agent-1",
            agent_profile_id="profile-1",
            execution_id=EXECUTION_ID,
        )
    )
    ledger = Ledger(identity(session="sess-1", execution=EXECUTION_ID, instance="inst_0123456789abcdef"),
                    clock=StepClock())
    return DaemonContext(spec=spec, ledger=ledger, state_dir=state_dir, control_socket=socket_path)


def seed_attempt(ctx: DaemonContext) -> str:
    """An attempt with the built-in server active (and used) and a third-party server delivered."""
    ledger = ctx.ledger
    attempt_id, _token = ledger.begin_attempt(
        "session_new",
        [
            ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:9"),
            ServerSeed(name="github", source="profile", transport="http", target="https://api.github.com"),
        ],
    )
    for name in ("kandev", "github"):
        ledger.record("delivered", attempt_id, name)
    ledger.record("session_accepted", attempt_id, acp_session_id="acp-1")
    ledger.record("initialize_observed", attempt_id, "kandev", connection_id="conn_1", era="legacy")
    ledger.record("tools_list_observed", attempt_id, "kandev", connection_id="conn_1", tool_count=7)
    ledger.record("tool_call_observed", attempt_id, "kandev", tool_name="get_task", outcome="ok")
    return attempt_id


@dataclass
class Served:
    ctx: DaemonContext
    socket_path: Path
    tcp_port: int
    runner: web.AppRunner


async def _livez(request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def serve_app(ctx: DaemonContext, socket_path: Path, *, prepare: bool = True) -> Served:
    app = web.Application()
    app[TEST_CTX_KEY] = ctx
    install_control_routes(app, TEST_CTX_KEY)
    app.router.add_get("/livez", _livez)  # stands in for the daemon's non-control routes
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp.port
    if prepare:
        prepare_socket_path(socket_path)
    await start_unix_site(runner, socket_path)
    return Served(ctx=ctx, socket_path=socket_path, tcp_port=port, runner=runner)


def build_parser() -> argparse.ArgumentParser:
    """The client commands as the real CLI registers them."""
    return cli_parser()


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def is_root() -> bool:
    return os.geteuid() == 0


def raw_exchange(sock: Path, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """One raw HTTP/1.1 request (`head` ends in the blank line) over the control socket: status and body bytes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(sock))
        conn.sendall(head.encode() + body)
        raw = b""
        while chunk := conn.recv(1 << 16):
            raw += chunk
    status_line, _, rest = raw.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]
