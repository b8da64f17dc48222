"""A real ACP agent not written here, fast-agent, spawns a witnessed stdio server on a real `agentctl serve`: the
witness sits between them and the row reads active as the witness observed it, with the server's tools."""

from __future__ import annotations

import json
import os

import pytest

from tests.agent.serve_support import cli, cli_json, fast_agent_table, row, serving, stop_via_cli, wait_row
from tests.agent.witness_support import CANARY, PY_SERVER, python, stdio_server
from tests.conftest import write_spec

FAST_AGENT = os.environ.get("AGENTCTL_FAST_AGENT")


@pytest.mark.skipif(
    not FAST_AGENT,
    reason="set AGENTCTL_FAST_AGENT to a fast-agent executable (pip install fast-agent-mcp==0.10.48, Python >= 3.12)",
)
def test_fast_agent_spawns_a_witnessed_stdio_server_and_the_row_reads_active_observed_by_the_witness(
    tmp_path, short_tmp
):
    extra = fast_agent_table(str(FAST_AGENT), tmp_path) + stdio_server("fx", [python(), str(PY_SERVER)])
    sock = short_tmp / "f.sock"
    with serving(write_spec(tmp_path, extra), sock) as daemon:
        done = cli(sock, "session", "new", timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        fx = row(wait_row(sock, "fx", "active", timeout=60), "fx")
        assert (fx.get("observed_by"), fx.get("tool_count")) == ("witness", 2), fx
        assert "mcp-witness" not in (fx.get("target") or ""), "the row names the server, not the witness"
        assert CANARY not in json.dumps(cli_json(sock, "status")), "the server's env value is in no report"
        assert stop_via_cli(daemon, sock) == 0
