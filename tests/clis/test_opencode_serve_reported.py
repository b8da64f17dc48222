"""OpenCode's server mode, for real: `opencode serve` answers `GET /mcp` with each MCP server's status, and
agentctl/agent/reported/opencode.py reads that answer (`opencode:serve`): a reachable stdio server connected,
a refused one failed with OpenCode's error as a redacted summary, a disabled one disabled."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from agentctl.agent.reported.opencode import PATH, parse_status
from tests.clis.conftest import clean_env
from tests.passthrough.support import STDIO_SERVER


def test_real_opencode_serve_answers_each_servers_status_and_the_reader_labels_it(real_cli, tmp_path: Path) -> None:
    opencode = real_cli("opencode")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    config = {"mcp": {
        "research": {"type": "local", "command": [sys.executable, str(STDIO_SERVER)], "enabled": True},
        "closed": {"type": "remote", "url": "http://127.0.0.1:1/pathCANARY51/mcp", "enabled": True},
        "off": {"type": "remote", "url": "http://127.0.0.1:1/mcp", "enabled": False}}}
    (tmp_path / "opencode.json").write_text(json.dumps(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = clean_env(home, OPENCODE_CONFIG=str(tmp_path / "opencode.json"))
    with subprocess.Popen([str(opencode), "serve", "--port", str(port), "--hostname", "127.0.0.1"], cwd=work, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            reports = _poll(f"http://127.0.0.1:{port}{PATH}", ["research", "closed", "off"], 90)
        finally:
            proc.kill()
    states = {r.name: (r.state, r.raw_state) for r in reports}
    assert states == {"research": ("connected", "connected"), "closed": ("failed", "failed"),
                      "off": ("disabled", "disabled")}
    closed = next(r for r in reports if r.name == "closed")
    assert closed.reason_code == "agent_reported_failed" and closed.summary and "CANARY" not in closed.summary


def _poll(url: str, names: list[str], timeout: float):
    """GET /mcp until every server has settled (none still connecting), within `timeout`."""
    deadline = time.monotonic() + timeout
    reports = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                reports = parse_status(answer.read(), names)
        except OSError:
            reports = None  # not listening yet
        if reports is not None and len(reports) == len(names) and all(r.state != "pending" for r in reports):
            return reports
        time.sleep(0.25)
    raise AssertionError(f"GET /mcp did not settle in {timeout} s: {reports}")
