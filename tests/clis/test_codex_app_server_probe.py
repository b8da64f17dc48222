"""Codex's app-server with the real CLI and no API key: `agentctl probe passthrough --strategy codex -- codex app-server`
drives it as a client (initialize, initialized, thread/start), and Codex both reaches the sentinel the codex strategy
configured and reports its startup through `mcpServer/startupStatus/updated` (`codex:app-server`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec

from agentctl.evidence.contract.probe import ProbePassthroughReport
from tests.clis.conftest import clean_env
from tests.conftest import agentctl_cmd


def test_codex_app_server_reaches_the_sentinel_and_reports_it_ready(real_cli, tmp_path: Path) -> None:
    codex = real_cli("codex")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        agentctl_cmd("probe", "passthrough", "--strategy", "codex", "--timeout", "90", "--json", "--",
                     str(codex), "app-server"),
        cwd=home, env=clean_env(home, CODEX_HOME=str(home)), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = msgspec.json.decode(done.stdout, type=ProbePassthroughReport)
    assert report.configuration.delivered and report.configuration.restored is True
    assert report.initialize is not None and report.initialize.client.name == "codex-mcp-client"
    assert report.tools_list is not None and report.tools_list.tool_count == 1
    told = report.agent_report
    assert (told.source, told.state, told.raw_state) == ("codex:app-server", "connected", "ready")
    assert not report.timed_out, "stopped once Codex had reported the sentinel, not at the end of the window"
