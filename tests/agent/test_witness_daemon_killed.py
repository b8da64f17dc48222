"""The stdio witness when a real `agentctl serve` is SIGKILLed: a witness its own agent holds (a passthrough
host's, say) keeps relaying with the attempt's real credential, and none outlives the daemon's own agent."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.agent.serve_support import agent_pid, cli_json, gone, serving, wait_row
from tests.agent.witness_support import PY_SERVER, python, stdio_server, witness_agent_spec
from tests.conftest import ServeProcess, poll

DEADLINE = 8.0  # the shim gives the agent's tree 1 s of SIGTERM, then SIGKILLs it


def _witness_of(agent: int) -> psutil.Process:
    def find() -> psutil.Process | None:
        for child in psutil.Process(agent).children(recursive=True):
            try:
                if "mcp-witness" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        return None

    return poll(find, timeout=30, what="the witness the agent spawned")


def _credential(witness: psutil.Process) -> dict[str, str]:
    """The witness's report URL and token as it was started (read from /proc like the bridge's test does)."""
    raw = open(f"/proc/{witness.pid}/environ", "rb").read().split(b"\0")
    pairs = dict(v.decode().split("=", 1) for v in raw if v.startswith(b"AGENTCTL_WITNESS_"))
    assert set(pairs) == {"AGENTCTL_WITNESS_URL", "AGENTCTL_WITNESS_TOKEN"}
    return pairs


def _call(proc: subprocess.Popen[bytes], rid: int, method: str, params: dict | None = None) -> dict:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params else {})}
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    while True:
        answer = json.loads(proc.stdout.readline())
        if answer.get("id") == rid:
            return answer


@contextlib.contextmanager
def _witnessed(tmp_path: Path, sock: Path) -> Iterator[tuple[ServeProcess, int, psutil.Process]]:
    """A real daemon whose agent's session has the witnessed server active: (daemon, agent pid, witness)."""
    spec = witness_agent_spec(tmp_path, stdio_server("fx", [python(), str(PY_SERVER)]))
    with serving(spec, sock) as daemon:
        assert cli_json(sock, "session", "new")["accepted"]
        wait_row(sock, "fx", "active", timeout=60)
        agent = agent_pid(daemon)
        yield daemon, agent, _witness_of(agent)


def test_sigkill_of_a_real_daemon_leaves_no_witness_or_server_of_its_agent(tmp_path, short_tmp):
    with _witnessed(tmp_path, short_tmp / "k.sock") as (daemon, agent, witness):
        servers = witness.children()
        assert servers and str(PY_SERVER) in " ".join(servers[0].cmdline())
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
        tree = [agent, witness.pid, *(s.pid for s in servers)]
        poll(lambda: all(gone(p) for p in tree), timeout=DEADLINE,
             what="no agent, witness or server outliving a SIGKILLed daemon")


def test_a_witness_held_by_its_own_agent_keeps_relaying_after_the_real_daemon_is_sigkilled(tmp_path, short_tmp):
    with _witnessed(tmp_path, short_tmp / "h.sock") as (daemon, _, witness):
        credential = _credential(witness)
        # This test is the agent now: its witness reports to the real daemon with the attempt's real token.
        mine = subprocess.Popen([sys.executable, "-m", "agentctl.cli", "mcp-witness", "fx", "--", python(),
                                 str(PY_SERVER)], env={**os.environ, **credential}, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert "result" in _call(mine, 1, "initialize", {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
            daemon.proc.kill()
            daemon.proc.wait(timeout=10)
            for i in range(3):  # the daemon is gone: every call still goes through, answered as before
                answer = _call(mine, 10 + i, "tools/call", {"name": "add", "arguments": {"a": i, "b": 1}})
                assert answer["result"]["content"][0]["text"] == str(i + 1)
            assert mine.poll() is None, "the relay outlives the daemon"
        finally:
            mine.stdin.close()
            assert mine.wait(timeout=30) == 0, "an end the agent asked for: the server's own exit code"
        err = mine.stderr.read().decode()
        assert "mcp-witness" not in err or "refused" not in err, err
