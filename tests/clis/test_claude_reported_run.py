"""Issue 17's "done when", with real Claude Code and no API key: `agentctl run` on a claude passthrough spec with one
reachable third-party server (a real stdio MCP server) and one unreachable one. The built-in server is active as
agentctl observed it; the reachable one is "active · reported by Claude Code" with its tool count; the unreachable
one failed "reported by Claude Code"; the report says which evidence came from where. Claude Code exits 1 at its
first model call (no key), after its init event: the run exits 1, the evidence stands.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agentctl.evidence.contract.report import decode_history
from tests.clis.conftest import claude_run, clean_env
from tests.conftest import agentctl_cmd
from tests.passthrough.support import reachable_and_closed_toml

PROMPT_CANARY = "PROMPT-CANARY-claude-5e3a"
OUTPUT = os.environ.get("AGENTCTL_CLAUDE_RUN_OUTPUT")  # where to copy the run's output (for a report), if set


def test_agentctl_run_with_real_claude_code_shows_observed_and_reported_evidence_side_by_side(
    real_cli, tmp_path: Path, short_tmp: Path
) -> None:
    claude = real_cli("claude")
    done = claude_run(claude, tmp_path, short_tmp / "c.sock", reachable_and_closed_toml(), PROMPT_CANARY)
    out = done.stdout
    if OUTPUT:
        Path(OUTPUT).write_text(out)
    flat = " ".join(out.split())
    assert done.returncode == 1, out + done.stderr  # Claude Code exits 1 with no key, after its init event
    assert "reported research: connected, 2 tools · reported by Claude Code" in flat, out
    assert "kandev active" in flat and "kandev active ·" not in flat, out
    assert "research active · reported by Claude Code" in flat, out
    assert "Claude Code reported it connected and listed 2 tools" in flat, out
    assert "closed failed · reported by Claude Code" in flat, out
    assert "evidence: reported by Claude Code (claude:stream-json-init); agentctl observed delivered" in flat, out
    assert "agent report: read from the agent's output (claude:stream-json-init)" in flat, out

    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    history = decode_history(report)
    rows = {r.name: r for r in history.current.servers}
    assert (rows["kandev"].status, rows["kandev"].status_source) == ("active", "observed")
    assert rows["kandev"].reported is not None and rows["kandev"].reported.state == "connected"
    assert (rows["research"].status_source, rows["research"].reported.tool_count) == ("reported", 2)
    assert (rows["closed"].status, rows["closed"].reason_code) == ("failed", "agent_reported_failed")
    for text in (report, out, done.stderr):
        assert PROMPT_CANARY not in text and '"subtype":"init"' not in text


def test_probe_passthrough_with_real_claude_code_reports_the_sentinel_reached_and_reported_connected(
    real_cli, tmp_path: Path
) -> None:
    import msgspec

    from agentctl.evidence.contract.probe import ProbePassthroughReport

    claude = real_cli("claude")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        agentctl_cmd("probe", "passthrough", "--strategy", "claude", "--timeout", "90", "--json", "--",
                     str(claude), "-p", PROMPT_CANARY, "--output-format", "stream-json", "--verbose"),
        cwd=home, env=clean_env(home), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = msgspec.json.decode(done.stdout, type=ProbePassthroughReport)
    assert report.configuration.delivered and report.configuration.restored is True
    assert report.initialize.client.name == "claude-code" and report.tools_list.tool_count == 1
    told = report.agent_report
    assert (told.source, told.state, told.tool_count) == ("claude:stream-json-init", "connected", 1)
    assert report.agent.exit_code == 1 and PROMPT_CANARY not in done.stdout  # no key: it exits at its model call
