"""Shared test helpers: spec files, a real `agentctl serve` subprocess, and deadline polling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def poll(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll with a deadline; returns the first truthy value or fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def eventually(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition",
                     interval: float = 0.02):
    """The async twin of poll(): await a truthy predicate with a deadline; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):  # an async predicate (one that asks a server)
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def free_socket() -> socket.socket:
    """A listening loopback socket on a free port (handed to a server, so no port race)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@contextlib.asynccontextmanager
async def serve_asgi(app: Any) -> AsyncIterator[int]:
    """Serve an ASGI app (a real MCP server in tests) with uvicorn in this loop; yields the port."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit = False  # process-global: a previous shutdown may have left it set
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: server.started or task.done(), 10, "uvicorn to start")
    assert not task.done(), "uvicorn did not start"
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        AppStatus.should_exit = True  # or open SSE streams stall the shutdown
        try:
            await asyncio.wait_for(task, 10)
        finally:
            # Left set, it would end every later SSE response at once (a daemon's too).
            AppStatus.should_exit = False
            sock.close()


def write_spec(tmp_path: Path, extra: str = "", *, state_dir: Path | None = None, execution_id: str = "exec-test") -> Path:
    state = state_dir or (tmp_path / "state")
    path = tmp_path / "spec.toml"
    path.write_text(
        f"""
[identity]
task_id = "task-1"
session_id = "session-1"
agent_id = "agent-1"
agent_profile_id = "profile-1"
execution_id = "{execution_id}"

[state]
dir = "{state}"
{extra}
"""
    )
    return path


class ServeProcess:
    def __init__(self, proc: subprocess.Popen, ready: dict) -> None:
        self.proc = proc
        self.ready = ready

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def agentctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentctl.cli", *args]


def start_serve(spec: Path, socket: Path, env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> ServeProcess:
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        agentctl_cmd("serve", str(spec), "--socket", str(socket), *extra_args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=REPO,
    )
    line = proc.stdout.readline()  # blocks until ready or exit
    if not line:
        err = proc.stderr.read().decode()
        proc.wait(timeout=10)
        pytest.fail(f"agentctl serve exited before ready ({proc.returncode}): {err}")
    return ServeProcess(proc, json.loads(line))


@pytest.fixture(scope="session", autouse=True)
def _one_estimate_cache_per_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Daemons started by tests share one token-estimate cache, never the user's: the helper runs once per
    distinct catalog in a whole run."""
    name = "AGENTCTL_ESTIMATE_CACHE_DIR"
    old = os.environ.get(name)
    os.environ[name] = str(tmp_path_factory.mktemp("estimate-cache") / "token-estimates")
    yield
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory under /tmp for Unix sockets (AF_UNIX paths are limited to 107 bytes; pytest's tmp_path
    can push a socket path past that). Removed whatever a test left in it, unreadable modes included."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="actl-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for Unix sockets (AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be long)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="actl-", dir="/tmp") as d:
        yield Path(d)


# A real PostgreSQL server (session) and a fresh database per test: tests/pg.py.
from tests.pg import pg_db, pg_server  # noqa: E402,F401
