"""Fixtures for the control tests (helpers live in control_support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.control.control_support import EXECUTION_ID, Served, make_ctx, serve_app

from agentctl.control.socket import cleanup_socket_path
from agentctl.daemon.app import Daemon
from agentctl.spec import load_spec
from tests.conftest import write_spec


@pytest.fixture(autouse=True)
def _clean_socket_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTCTL_SOCKET", "AGENTCTL_RUNTIME_DIR", "RUNTIME_DIRECTORY", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def served(short_dir: Path, tmp_path: Path) -> AsyncIterator[Served]:
    """The control API on a real socket at <short dir>/<execution>/control.sock, plus loopback TCP."""
    socket_path = short_dir / EXECUTION_ID / "control.sock"
    ctx = make_ctx(tmp_path / "state", socket_path)
    ctx.report_path = Path("/var/lib/agentctl") / EXECUTION_ID / "report.json"
    ctx.mcp_url = "http://127.0.0.1:40123/mcp"
    s = await serve_app(ctx, socket_path)
    try:
        yield s
    finally:
        await s.runner.cleanup()
        cleanup_socket_path(socket_path)


@pytest.fixture
async def daemon(tmp_path: Path, short_tmp: Path) -> AsyncIterator[Daemon]:
    """A real MCP-only daemon, started, its control socket at `short_tmp / "c.sock"`."""
    d = Daemon(load_spec(write_spec(tmp_path)), socket_path=short_tmp / "c.sock")
    await d.start()
    try:
        yield d
    finally:
        await d.stop()
