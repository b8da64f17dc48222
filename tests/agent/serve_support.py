"""Helpers for agent scenarios: a spec whose agent is the shipped reference agent, the real CLI, the probes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from agentctl.control.client import ControlClient

from tests.conftest import REPO, ServeProcess, agentctl_cmd, await_ready, poll, spawn_serve, write_spec

REFERENCE_AGENT = [sys.executable, "-m", "agentctl.testing.reference_agent"]


def agent_spec(
    directory: Path,
    *flags: str,
    execution_id: str = "exec-test",
    servers: str = "",
    agent_extra: str = "",
    task_id: str = "task-1",
) -> Path:
    """A spec in `directory` running the reference agent with `flags` (TOML arrays accept JSON lists)."""
    directory.mkdir(parents=True, exist_ok=True)
    command = json.dumps([*REFERENCE_AGENT, *flags, "--connect-timeout", "20"])
    extra = f"""
[agent]
command = {command}
stop_grace = 0.3
{agent_extra}
{servers}
"""
    return write_spec(directory, extra, execution_id=execution_id, identity={"task_id": task_id})


def reference_passthrough(workdir: Path, strategy: str = "claude") -> dict[str, Any]:
    """An [agent] table (spec_toml's `agent`): the reference agent acting as `strategy`'s CLI in `workdir`."""
    return {"command": [*REFERENCE_AGENT, "--passthrough", strategy], "protocol": "passthrough", "strategy": strategy,
            "workdir": str(workdir), "stop_grace": 0.2}


def fast_agent_table(fast_agent: str, workdir: Path) -> str:
    """An [agent] table running a real fast-agent over ACP in `workdir`, with a HOME of its own there."""
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    return f"""
[agent]
command = {json.dumps([fast_agent, "acp", "--model", "passthrough"])}
workdir = "{workdir}"
session_timeout = 60
env = {{ HOME = "{home}", NO_COLOR = "1" }}
"""


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def canary_http_server(port: int, tag: str, name: str = "docs") -> str:
    """A [[mcp.servers]] table for an http server on `port` (one nobody listens on: closed_port()), with canaries (`<part>CANARY<tag>`) in its path,
    query and Authorization header: none of them may reach any output."""
    return f"""
[[mcp.servers]]
name = "{name}"
type = "http"
url = "http://127.0.0.1:{port}/pathCANARY{tag}/mcp?key=queryCANARY{tag}"
headers = {{ Authorization = "Bearer headerCANARY{tag}" }}
"""


def cli(sock: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run `agentctl ARGS --socket SOCK` as a subprocess (the real CLI over the real control socket)."""
    return subprocess.run(
        agentctl_cmd(*args, "--socket", str(sock)),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )


def cli_json(sock: Path, *args: str) -> dict[str, Any]:
    done = cli(sock, *args, "--json")
    assert done.stdout, f"agentctl {' '.join(args)} printed nothing: {done.stderr}"
    return json.loads(done.stdout)


def status(sock: Path) -> dict[str, Any]:
    """GET /v1/status, what `agentctl status --json` prints (in-process: polling must not spawn a CLI each time)."""
    code, body = ControlClient(sock).get("/v1/status")
    assert code == 200, body
    return body


def report_of(sock: Path) -> dict[str, Any]:
    """GET /v1/report, what `agentctl report --json` prints."""
    code, body = ControlClient(sock).get("/v1/report")
    assert code == 200, body
    return body


def row(body: dict[str, Any], name: str, attempt: dict[str, Any] | None = None) -> dict[str, Any]:
    attempt = attempt if attempt is not None else body["current"]
    for server in attempt["servers"]:
        if server["name"] == name:
            return server
    raise AssertionError(f"no row {name!r} in {[s['name'] for s in attempt['servers']]}")


def wait_row(sock: Path, name: str, wanted: str, timeout: float = 15.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body = status(sock)
        return body if body["current"] and row(body, name)["status"] == wanted else None

    return poll(check, timeout=timeout, interval=0.05, what=f"{name} {wanted}")


def http_get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def base_url(daemon: ServeProcess) -> str:
    return daemon.ready["mcp_url"][: -len("/mcp")]


def agent_pid(daemon: ServeProcess) -> int:
    """The supervised agent: the child of the daemon's agent shim that runs the reference agent."""

    def find() -> int | None:
        for shim in psutil.Process(daemon.proc.pid).children():
            try:
                if "from shim import main" not in " ".join(shim.cmdline()):
                    continue
                for child in shim.children():
                    if "agentctl.testing.reference_agent" in " ".join(child.cmdline()):
                        return child.pid
            except psutil.Error:
                continue
        return None

    return poll(find, timeout=30, what="the agent process")


def gone(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop_via_cli(daemon: ServeProcess, sock: Path, timeout: float = 20.0) -> int:
    done = cli(sock, "stop")
    assert done.returncode == 0, done.stderr
    return daemon.proc.wait(timeout=timeout)


@contextmanager
def serving(spec: Path, sock: Path) -> Iterator[ServeProcess]:
    """A real `agentctl serve` with its agent; always torn down (SIGTERM) if the test did not stop it."""
    with serving_many([(spec, sock)]) as (daemon,):
        yield daemon


@contextmanager
def serving_many(pairs: list[tuple[Path, Path]]) -> Iterator[list[ServeProcess]]:
    """Several daemons started side by side (their agents start concurrently), each torn down at the end."""
    procs = [spawn_serve(spec, sock) for spec, sock in pairs]
    daemons: list[ServeProcess] = []
    try:
        for proc, (spec, sock) in zip(procs, pairs, strict=True):
            daemons.append(await_ready(proc, spec, sock))  # blocks until ready (agent initialized) or exit
            daemons[-1].drain_stderr()
        yield daemons
    finally:
        for proc in procs:  # all asked at once, so they stop side by side too
            if proc.poll() is None:
                proc.terminate()
        for daemon in daemons:
            daemon.close(timeout=30)
        for proc in procs[len(daemons):]:
            proc.kill()
            proc.wait(timeout=30)


def stderr_text(daemon: ServeProcess) -> str:
    """The daemon's whole log, once `serving` has ended."""
    return daemon.stderr_text()


def assert_recorded_nowhere(daemon: Any, canary: str, log_text: str) -> None:
    """What the agent printed (`canary`) is in nothing recorded: the report, the diagnostics, the log, any state
    file (the in-process hub's store, which is what went upstream, among them). `daemon`: a finished Daemon."""
    from agentctl.diagnostics.diagnostics import build_diagnostics
    from agentctl.evidence.contract.base import encode

    assert canary not in daemon.ctx.report_path.read_text()
    assert canary.encode() not in encode(build_diagnostics(daemon.ctx))
    assert canary not in log_text
    for path in daemon.ctx.state_dir.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path.name
