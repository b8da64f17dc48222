"""Shared set-up for the fault tests: a real tmpfs to fill up or make read-only, processes that run as
another uid (a fork bomb held by RLIMIT_NPROC, a control client that is not the daemon's user), and the
MCP exchanges the faults are checked against (raw HTTP for what the SDK never sends, the SDK client for
the proof that a valid client still works)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentctl.control.client import ControlClient
from tests.conftest import REPO, poll

NOBODY = 65534  # a control client that is neither the daemon's user nor root
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


# ---- a small real filesystem ------------------------------------------------------------------


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@contextmanager
def tmpfs(mountpoint: Path, size: str = "2m") -> Iterator[Path]:
    """A fresh tmpfs of `size` at `mountpoint` (needs root, as the suite runs); unmounted at the end."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); "
                    "a full or read-only state directory needs a real small filesystem")
    try:
        yield mountpoint
    finally:
        if _run("umount", str(mountpoint)).returncode != 0:
            _run("umount", "-l", str(mountpoint))  # something still holds it: detach now, freed when released


def remount(mountpoint: Path, mode: str) -> None:
    """Remount read-only ("ro") or read-write ("rw"). Retried while a write is in progress (EBUSY)."""

    def attempt() -> bool:
        done = _run("mount", "-o", f"remount,{mode}", str(mountpoint))
        assert done.returncode == 0 or "busy" in done.stderr.lower(), done.stderr
        return done.returncode == 0

    poll(attempt, timeout=10, interval=0.05, what=f"remount {mode} of {mountpoint}")


def fill(directory: Path) -> Path:
    """Write a filler file until not even one more byte fits (ENOSPC); return it (unlink it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        size = 1 << 16
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                size //= 2
    finally:
        os.close(fd)
    return filler


# ---- processes of another uid -----------------------------------------------------------------


def processes_of(uid: int) -> list[psutil.Process]:
    """Live (not zombie) processes whose real uid is `uid`."""
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        uids = proc.info["uids"]
        if uids is not None and uids.real == uid and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def unused_uid() -> int:
    """A uid no process runs as (chosen per test run, so two runs side by side do not share one): RLIMIT_NPROC
    is a per-uid count, so under this uid it counts only the test's own processes."""
    start = 200_000 + os.getpid() % 50_000
    for uid in range(start, start + 1000):
        if not processes_of(uid):
            return uid
    raise AssertionError("no unused uid found")


def kill_processes_of(uid: int) -> None:
    """Safety net after a test: SIGKILL, pid by pid, whatever still runs as the test's dedicated uid."""
    for proc in processes_of(uid):
        try:
            proc.kill()
        except psutil.Error:
            pass


# The agent command of the fork-bomb fault. The bomb root leaves the agent's process group (setsid), drops
# to `uid` with RLIMIT_NPROC = limit (enforced for a non-root uid; root would ignore it) and ignores
# SIGTERM; then every process forks until the kernel refuses (EAGAIN) or its own counter runs out (at most
# 2**8 processes even without the limit), and waits. The first process execs the real reference agent,
# so the daemon speaks ACP to it as usual.
_FORK_BOMB = """
import os, resource, signal, sys
limit, uid = int(sys.argv[1]), int(sys.argv[2])
if os.fork() == 0:
    try:
        os.setsid()
        os.setgroups([]); os.setgid(uid); os.setuid(uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _ in range(8):
            try:
                os.fork()
            except OSError:
                break
        while True:
            signal.pause()
    finally:
        os._exit(0)
os.execv(sys.executable, [sys.executable, "-m", "agentctl.testing.reference_agent", *sys.argv[3:]])
"""


def fork_bomb_command(limit: int, uid: int) -> list[str]:
    return [sys.executable, "-c", _FORK_BOMB, str(limit), str(uid), "--connect-timeout", "5"]


# The command line is parsed, and everything the CLI may import lazily is imported, while still root: the
# interpreter's files live under /root, which the foreign uid cannot read. The command itself runs as `uid`.
_CLI_AS = """
import os, shutil, sys
from agentctl.cli import build_parser
import agentctl.control.client, agentctl.commands.daemon_commands, agentctl.control.render
import agentctl.commands.session_commands, agentctl.commands.client_actions
import agentctl.commands.host_daemons
# The interpreter's own files may be unreadable to uid (a pyenv under /root): what the command imports
# lazily must be loaded before the drop.
import agentctl.cli_support, agentctl.safe_files, agentctl.exit_codes, agentctl.safetext
import concurrent.futures.thread  # `ls` asks the daemons side by side
uid, argv = int(sys.argv[1]), sys.argv[2:]
args = build_parser().parse_args(argv)
os.setgroups([]); os.setgid(uid); os.setuid(uid)
assert os.getuid() == uid and os.geteuid() == uid
sys.exit(args.func(args))
"""


def cli_as(uid: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `agentctl ARGS` CLI, run by a process of `uid` (started as root, dropped before main)."""
    return subprocess.run([sys.executable, "-c", _CLI_AS, str(uid), *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "NO_COLOR": "1"})


# ---- MCP on a real daemon ---------------------------------------------------------------------


def mcp_config(sock: Path) -> dict[str, Any]:
    """The current attempt's built-in server: url, sse_url and the bearer header (GET /v1/mcp-config)."""
    code, body = ControlClient(sock).get("/v1/mcp-config")
    assert code == 200, body
    return body


def open_attempt(sock: Path, route: str = "/v1/session/new") -> dict[str, Any]:
    """A new attempt on a daemon without an agent (MCP only); returns its mcp-config."""
    code, body = ControlClient(sock).post(route)
    assert code == 200, body
    config = mcp_config(sock)
    assert config["attempt_id"] == body["attempt_id"]
    return config


def rpc(method: str, id_: int = 1, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


def initialize(version: str = "2025-11-25") -> bytes:
    return rpc("initialize", params={"protocolVersion": version, "capabilities": {},
                                     "clientInfo": {"name": "faults", "version": "1"}})


async def raw_post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx2.Response:
    """One POST as sent, whatever it holds (bytes, or an iterator for a chunked upload)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, content=body, headers={**POST_HEADERS, **(headers or {})})


@asynccontextmanager
async def sdk_client(config: dict[str, Any], mode: str = "legacy"):
    """The MCP SDK's own client on /mcp with the attempt's bearer header."""
    async with httpx2.AsyncClient(headers=config["headers"], timeout=30) as http:
        async with Client(streamable_http_client(config["url"], http_client=http), mode=mode) as client:
            yield client


async def prove_served(config: dict[str, Any]) -> None:
    """A valid SDK client is served: it lists the tools and a tool call succeeds."""
    async with sdk_client(config) as client:
        assert (await client.list_tools()).tools
        assert (await client.call_tool("get_task", {})).is_error is False


def refusals(report: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    return {(r["route"], r["method"], r["status"]): r["count"] for r in report.get("http_refusals", [])}


def attempt_of(report: dict[str, Any], attempt_id: str) -> dict[str, Any]:
    for attempt in [report["current"], *report.get("previous", [])]:
        if attempt and attempt["attempt_id"] == attempt_id:
            return attempt
    raise AssertionError(f"attempt {attempt_id} is no longer kept")


def kinds(attempt: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in attempt.get("evidence", [])]
