"""The ACP adapters from npm (pinned in tests/clis/package.json), run here with no API key, against one
reachable third-party server (`research`, a real stdio MCP server) and one unreachable (`closed`): what each
emits about them is read and shown with its source label.

What they emitted here (root, no network beyond the registry):
- claude-agent-acp 0.101.0: nothing at session/new (Claude Code's init event comes with the first query);
  after a prompt (which fails: not logged in) a session notice `MCP server "closed" failed to start`, and
  nothing about `research` or kandev (0.101.0 relays failures only). agentctl shows `closed` failed
  "reported by claude-agent-acp" (`claude-agent-acp:notice`), with no notice line repeating it.
- codex-acp 2.6.0: without ACP `authenticate` it refuses session/new (`Authentication required`), so it
  emits nothing; after `authenticate {methodId: "api-key"}` with a placeholder OPENAI_API_KEY the session is
  accepted and one `mcp_startup.closed.<uuid>` tool call arrives, status `failed` with Codex's error (2.6.0
  relays failures only: nothing about `research`), plus an `_auth/status_update` extension notification
  (counted, not read). agentctl does not send `authenticate` itself here, so this test is the client.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from agentctl.agent import clis
from agentctl.agent.reported.acp_tap import AcpReportTap, ReportSink
from agentctl.present.rows import row_view
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from tests.clis.conftest import clean_env
from tests.conftest import agentctl_cmd, write_spec
from tests.evidence.fixed import IDENT
from tests.passthrough.support import STDIO_SERVER, reachable_and_closed_toml


def test_agentctl_run_with_real_claude_agent_acp_shows_the_unreachable_server_failed_as_reported(
    real_cli, tmp_path: Path, short_tmp: Path
) -> None:
    adapter = real_cli("claude-agent-acp")
    home, work = _dirs(tmp_path, "home", "work")
    env_line = 'env = { IS_SANDBOX = "1" }' if os.geteuid() == 0 else ""  # its Claude Code refuses root without
    spec = write_spec(tmp_path, f"""
[agent]
command = {json.dumps([str(adapter)])}
workdir = "{work}"
session_timeout = 120
stop_grace = 0.5
{env_line}

{reachable_and_closed_toml()}""")
    env = clean_env(home, NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(agentctl_cmd("run", str(spec), "--socket", str(short_tmp / "a.sock"), "--prompt", "hi"),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout
    flat = " ".join(out.split())
    assert "closed failed · reported by claude-agent-acp" in flat, out + done.stderr
    assert "evidence: reported by claude-agent-acp (claude-agent-acp:notice)" in flat, out
    assert 'agent notice (warning' not in flat, "the relay is the row's status, not a repeated notice line"
    assert "research delivered · connection unverified" in flat, out
    assert "kandev active" in flat, out
    report = json.loads((tmp_path / "state" / "exec-test" / "report.json").read_text())
    rows = {r["name"]: r for r in report["current"]["servers"]}
    assert rows["closed"]["reported"]["source"] == "claude-agent-acp:notice"
    assert (rows["closed"]["status"], rows["closed"]["status_source"]) == ("failed", "reported")


def test_real_codex_acp_relays_the_unreachable_servers_startup_failure_and_the_reader_labels_it(
    real_cli, tmp_path: Path
) -> None:
    adapter = real_cli("codex-acp")
    home, codex_home, work = _dirs(tmp_path, "home", "codex-home", "work")
    env = clean_env(home, CODEX_HOME=str(codex_home), OPENAI_API_KEY="sk-placeholder-not-a-key")
    ledger = Ledger(IDENT)
    seeds = [ServerSeed(name=n, source="profile", transport=t, target=None) for n, t in (("research", "stdio"),
                                                                                        ("closed", "http"))]
    attempt_id, _ = ledger.begin_attempt("session_new", seeds)
    for seed in seeds:
        ledger.record("delivered", attempt_id, seed.name, transport=seed.transport)
    session: dict[str, str] = {}
    tap = AcpReportTap(lambda sid: (attempt_id, ["research", "closed"]) if sid and sid == session.get("id") else None,
                       ReportSink(ledger), agents=clis.agents())
    servers = [{"name": "research", **_stdio_server()},
               {"type": "http", "name": "closed", "url": "http://127.0.0.1:1/mcp", "headers": []}]
    with subprocess.Popen([str(adapter)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          env=env, cwd=work) as proc:
        try:
            client = _Client(proc, tap)
            methods = [m["id"] for m in client.call("initialize", {"protocolVersion": 1})["result"]["authMethods"]]
            assert "api-key" in methods
            assert "result" in client.call("authenticate", {"methodId": "api-key"})
            answer = client.call("session/new", {"cwd": str(work), "mcpServers": servers}, timeout=90)
            session["id"] = answer["result"]["sessionId"]
            row = client.until(lambda: _reported(ledger, "closed"), 60)
        finally:
            proc.kill()
    assert (row.status, row.status_source, row.reported.source) == ("failed", "reported", "codex-acp:mcp-startup")
    assert row.summary.startswith("MCP server `closed` failed to start") and len(row.summary.encode()) <= 256
    assert row_view(row).label == "failed · reported by codex-acp"
    assert _reported(ledger, "research") is None, "2.6.0 relays failures only"


def _dirs(base: Path, *names: str) -> list[Path]:
    for name in names:
        (base / name).mkdir()
    return [base / name for name in names]


def _reported(ledger: Ledger, name: str):
    row = next(r for r in ledger.history.current.servers if r.name == name)
    return row if row.reported is not None else None


def _stdio_server() -> dict:
    return {"command": sys.executable, "args": [str(STDIO_SERVER)], "env": []}


class _Client:
    """A bare ACP client over the adapter's pipes: every frame it reads goes through the report tap first.
    A thread reads the lines (a buffered pipe and select() disagree about what is ready)."""

    def __init__(self, proc: subprocess.Popen, tap: AcpReportTap) -> None:
        self.proc, self.tap, self.next_id = proc, tap, 0
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in proc.stdout], daemon=True).start()

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        try:
            line = self.lines.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            return None
        message = json.loads(line)
        if "id" in message and "method" in message:  # a request to the client (permission): refused
            self.send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
        self.tap.take(message)
        return message

    def call(self, method: str, params: dict, timeout: float = 30) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.read(deadline - time.monotonic())
            if message is not None and message.get("id") == self.next_id and "method" not in message:
                return message
        raise AssertionError(f"no answer to {method} in {timeout} s")

    def until(self, predicate, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            self.read(min(0.5, deadline - time.monotonic()))
        raise AssertionError("the adapter's report did not arrive")
