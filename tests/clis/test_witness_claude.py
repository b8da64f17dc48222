"""The stdio witness under a real CLI: Claude Code (passthrough, no API key) spawns two witnessed stdio servers, the
npm filesystem server and a Python one on the MCP SDK, from its own --mcp-config. Both rows read "active · observed by
agentctl's witness" with their tool counts: agentctl's observation, beside (and outranking) Claude Code's own report;
the env canary reaches no output and no report. Claude Code exits 1 at its first model call (no key), after it
connected its servers: the run exits 1, the evidence stands."""

from __future__ import annotations

import sys
from pathlib import Path

from agentctl.evidence.contract.report import decode_history
from tests.agent.witness_support import CANARY, PY_SERVER, filesystem_server, stdio_server
from tests.clis.conftest import claude_run


def test_real_claude_code_spawns_witnessed_stdio_servers_and_both_rows_read_observed_by_the_witness(
    real_cli, tmp_path: Path, short_tmp: Path
) -> None:
    claude = real_cli("claude")
    fs = filesystem_server()
    workdir = tmp_path / "work"
    workdir.mkdir()
    servers = (stdio_server("files", [str(fs), str(workdir)]) + stdio_server("py", [sys.executable, str(PY_SERVER)]))
    done = claude_run(claude, tmp_path, short_tmp / "c.sock", servers, "hi")
    out = done.stdout
    flat = " ".join(out.split())
    assert done.returncode == 1, out + done.stderr  # no key: Claude Code exits 1 after its init event
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    rows = {r.name: r for r in decode_history(report).current.servers}
    assert (rows["files"].status, rows["files"].status_source, rows["files"].observed_by) == (
        "active", "observed", "witness"), out
    assert rows["files"].tool_count is not None and rows["files"].tool_count >= 10
    assert (rows["py"].status, rows["py"].observed_by, rows["py"].tool_count) == ("active", "witness", 2), out
    assert "files active · observed by agentctl's witness" in flat, out
    for text in (report, out, done.stderr):
        assert CANARY not in text
