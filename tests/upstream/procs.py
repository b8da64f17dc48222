"""Real processes for the upstream tests: `agentctl hub serve` and `agentctl serve`, logs to files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentctl.control.client import ControlClient
from agentctl.evidence.contract.base import encode
from agentctl.hub.hub_store import HubStore, HubStoreError
from tests.conftest import REPO, agentctl_cmd, spec_toml

REF_AGENT = str(Path(sys.executable).parent / "agentctl-reference-agent")


class Proc:
    def __init__(self, popen: subprocess.Popen, ready: dict[str, Any], log: Path) -> None:
        self.popen = popen
        self.ready = ready
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            return self.popen.wait(timeout=timeout)
        finally:
            self.popen.stdout.close()

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGCONT)
            self.popen.kill()
            self.popen.wait(timeout=10)
        self.popen.stdout.close()


def start_agentctl(args: list[str], log: Path, env: dict[str, str] | None = None) -> Proc:
    """`agentctl ARGS...` until its JSON ready line; stderr (the log) goes to the file."""
    with open(log, "ab") as err:
        popen = subprocess.Popen(agentctl_cmd(*args), stdout=subprocess.PIPE, stderr=err, cwd=REPO,
                                 env={**os.environ, **(env or {})})
    line = popen.stdout.readline()
    if not line:
        popen.wait(timeout=10)
        pytest.fail(f"{args[0]} exited before ready ({popen.returncode}): {log.read_text()[-2000:]}")
    return Proc(popen, json.loads(line), log)


def start_hub(d: Path, name: str = "hub", extra: tuple[str, ...] = ()) -> Proc:
    return start_agentctl(["hub", "serve", "--socket", str(d / "hub.sock"), "--db", str(d / "hub.sqlite3"), *extra],
                          d / f"{name}.log")


def write_spec(d: Path, *, execution: str = "exec-1", agent: bool = False, profile: str = "task",
               upstream: str | None = None, name: str = "spec.toml") -> Path:
    path = d / name
    path.write_text(spec_toml(execution_id=execution, agent=[REF_AGENT] if agent else None, mcp={"profile": profile},
                              state_dir=d / "state", upstream=upstream or d / "hub.sock"))
    return path


def start_daemon(d: Path, spec: Path, name: str = "daemon", extra: tuple[str, ...] = ()) -> Proc:
    return start_agentctl(["serve", str(spec), "--socket", str(d / f"{name}.sock"), *extra], d / f"{name}.log")


def control(proc: Proc) -> ControlClient:
    return ControlClient(Path(proc.ready["control_socket"]), timeout=30)


def daemon_report(proc: Proc) -> dict[str, Any]:
    status, body = control(proc).get("/v1/report")
    assert status == 200
    return body


def hub_history(db: Path, session: str = "session-1") -> dict[str, Any] | None:
    """The hub's stored history of the session's current execution, read read-only like the CLI does."""
    try:
        store = HubStore(db, readonly=True)
    except HubStoreError:
        return None
    try:
        sessions = store.load()
    finally:
        store.close()
    found = sessions.get(session)
    if found is None or found.current.history is None:
        return None
    return json.loads(encode(found.current.history))


def builtins(obj: Any) -> Any:
    return json.loads(encode(obj)) if hasattr(obj, "__struct_fields__") else msgspec.to_builtins(obj)


def readyz(proc) -> tuple[int, dict]:
    url = proc.ready["mcp_url"][: -len("/mcp")] + "/readyz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def upstream_of(proc) -> dict:
    status, body = control(proc).get("/v1/status")
    assert status == 200
    return body["upstream"]


def cli_text(proc, *args: str) -> str:
    """`agentctl ARGS --socket` of that daemon, as one line of words (the text wraps at 80 columns)."""
    done = subprocess.run(agentctl_cmd(*args, "--socket", proc.ready["control_socket"]), capture_output=True,
                          text=True, timeout=60, cwd=REPO, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def spec_in(d, name: str, execution: str = "exec-1"):
    """A spec with its own state directory under d/name, naming the hub at d/hub.sock."""
    (d / name).mkdir()
    return write_spec(d / name, execution=execution, upstream=str(d / "hub.sock"))
