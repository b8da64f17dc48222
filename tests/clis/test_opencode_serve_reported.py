"""OpenCode's server mode, for real: `opencode serve` answers `GET /mcp` with each MCP server's status, and
agentctl/agent/clis/opencode.py reads that answer (`opencode:serve`): a reachable stdio server connected,
a refused one failed with OpenCode's error as a redacted summary, a disabled one disabled."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from agentctl.agent.clis.opencode import PATH, parse_status
from agentctl.present.rows import row_view
from tests.clis.conftest import clean_env
from tests.conftest import eventually, poll, write_spec
from tests.passthrough.support import STDIO_SERVER, reachable_and_closed_toml


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

    def settled():
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                reports = parse_status(answer.read(), names)
        except OSError:
            return None  # not listening yet
        if reports is not None and len(reports) == len(names) and all(r.state != "pending" for r in reports):
            return reports
        return None

    return poll(settled, timeout=timeout, interval=0.25, what="GET /mcp to settle")


async def test_a_passthrough_opencode_serve_run_is_asked_get_mcp_and_its_rows_say_reported_by_opencode(
    real_cli, tmp_path: Path, short_tmp: Path, in_process_daemon
) -> None:
    opencode = real_cli("opencode")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    spec = write_spec(tmp_path, f"""
[agent]
command = {json.dumps([str(opencode), "serve"])}
protocol = "passthrough"
strategy = "opencode"
workdir = "{work}"
stop_grace = 0.5
env = {{ HOME = "{home}" }}

{reachable_and_closed_toml()}""")
    daemon = await in_process_daemon(spec, socket=short_tmp / "o.sock")

    def rows():
        current = daemon.ledger.history.current
        return {r.name: r for r in current.servers} if current else {}

    await eventually(lambda: all(rows().get(n) and rows()[n].reported for n in ("research", "closed")), 90,
                     what="OpenCode's GET /mcp answer")
    views = {name: row_view(row) for name, row in rows().items()}
    assert views["closed"].label == "failed · reported by OpenCode", views["closed"]
    assert views["research"].label == "connected · reported by OpenCode", views["research"]
    assert rows()["closed"].reported.source == "opencode:serve" and rows()["closed"].summary
    assert daemon.ledger.history.agent.report_source == "opencode:serve"
