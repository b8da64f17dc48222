"""A real agent's free-text refusal, end to end on a real `agentctl serve`: fast-agent refuses session/new
naming the first server it cannot reach only inside `error.data.details` ("MCP Server: 'docs': Failed to
initialize - see details."). That server's row turns red with the agent's words; a server whose name is just
a word of the same message ("details") does not; the summary keeps the cause, not a bare "Internal error"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.agent.serve_support import cli, cli_json, closed_port, fast_agent_table, row, serving, stop_via_cli
from tests.conftest import write_spec

FAST_AGENT = os.environ.get("AGENTCTL_FAST_AGENT")
STDIO_SERVER = Path(__file__).resolve().parents[1] / "diagnostics" / "fixtures" / "stdio_server.py"


@pytest.mark.skipif(
    not FAST_AGENT,
    reason="set AGENTCTL_FAST_AGENT to a fast-agent executable (pip install fast-agent-mcp==0.10.48, Python >= 3.12)",
)
def test_fast_agent_refusing_a_session_fails_only_the_server_it_names_as_a_server(tmp_path, short_tmp):
    extra = fast_agent_table(str(FAST_AGENT), tmp_path) + f"""
[[mcp.servers]]
name = "details"
type = "stdio"
command = "{sys.executable}"
args = ["{STDIO_SERVER}"]

[[mcp.servers]]
name = "docs"
type = "http"
url = "http://docs.localhost:{closed_port()}/mcp"
"""
    sock = short_tmp / "c.sock"
    with serving(write_spec(tmp_path, extra), sock) as daemon:
        done = cli(sock, "session", "new", timeout=120)
        assert done.returncode == 1 and "failed servers: docs" in done.stdout, done.stdout + done.stderr
        body = cli_json(sock, "status")
        docs = row(body, "docs")
        assert docs["status"] == "failed" and docs["reason_code"] == "session_rejected"
        assert "MCP Server: 'docs': Failed to initialize" in docs["summary"]
        assert row(body, "details")["status"] == "delivered", "'see details.' names no server"
        assert row(body, "kandev")["status"] != "failed"
        assert stop_via_cli(daemon, sock) == 0
