"""`agentctl probe passthrough` with the real reference agent in its claude passthrough mode (a real subprocess that
reads the materialized `--mcp-config`, reaches the real sentinel, and prints Claude Code's init event under
stream-json), a real merged workspace file (cursor), a CLI that outlives its window, and usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentctl.cli import main
import msgspec

from agentctl.evidence.contract.probe import ProbePassthroughReport
from agentctl.probe.passthrough import PassthroughOptions, run_passthrough_probe
from agentctl.probe.report import render_passthrough
from agentctl.probe.sentinel import SERVER_NAME, TOOL_NAME

REF_CLAUDE = [sys.executable, "-m", "agentctl.testing.reference_agent", "--passthrough", "claude", "--connect-timeout", "20"]
STREAM_JSON = ["-p", "hi", "--output-format", "stream-json", "--verbose"]
SLEEPER = [sys.executable, "-c", "import signal\nwhile True: signal.pause()"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentctl.cli", "probe", "passthrough", *args], cwd=cwd,
                          env={**os.environ, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=120)


def test_the_claude_strategy_reports_config_initialize_tools_list_tool_use_and_the_agents_own_report(tmp_path):
    done = _cli("--strategy", "claude", "--timeout", "60", "--json", "--", *REF_CLAUDE, *STREAM_JSON, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = msgspec.json.decode(done.stdout, type=ProbePassthroughReport)
    config = report.configuration
    assert report.ran and (config.strategy, config.server_name, config.delivered, config.transport) == (
        "claude", SERVER_NAME, True, "http")
    assert config.temporary_files == 1 and config.workspace_files == [] and config.restored is True
    assert report.initialize.client.name == "agentctl-reference-agent"
    assert report.tools_list.tool_count == 1 and report.tool_call.tool_name == TOOL_NAME
    told = report.agent_report
    assert (told.source, told.state, told.tool_count) == ("claude:stream-json-init", "connected", 1)
    assert report.agent.exit_code == 0 and not report.timed_out
    text = render_passthrough(report)
    assert "reported    connected, 1 tool · reported by Claude Code (claude:stream-json-init)" in text
    assert "workspace: restored" in text and "tool use    observed: agentctl_probe_sentinel (ok)" in text
    assert list(tmp_path.iterdir()) == [], "nothing left in the workdir"
    assert '"subtype"' not in done.stdout and "mcp__" not in done.stdout, "the CLI's output is never shown"


async def test_a_merged_workspace_file_comes_back_byte_for_byte_and_a_cli_past_its_window_is_stopped(tmp_path):
    original = b'{\n  // the user\'s own\n  "mcpServers": {"mine": {"url": "https://x.example/mcp"}}\n}\n'
    (tmp_path / ".cursor").mkdir()
    (tmp_path / ".cursor" / "mcp.json").write_bytes(original)
    opts = PassthroughOptions(strategy="cursor", command=[*SLEEPER], timeout=1.0, workdir=str(tmp_path), stop_grace=0.2)
    report, code = await run_passthrough_probe(opts)
    assert code == 0 and report.timed_out and report.agent.stopped_by_daemon
    assert report.configuration.workspace_files == [".cursor/mcp.json"] and report.configuration.restored is True
    assert (tmp_path / ".cursor" / "mcp.json").read_bytes() == original
    assert report.initialize is None and report.agent_report.state is None
    assert "no agent report" in report.agent_report.note
    text = render_passthrough(report)
    assert "merged into .cursor/mcp.json" in text and "stopped by the probe at the end of its window" in text


async def test_a_strategy_that_leaves_the_sentinel_out_says_why_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no trusted-folders file: Gemini trusts nothing
    work = tmp_path / "work"
    work.mkdir()
    opts = PassthroughOptions(strategy="gemini", command=[sys.executable, "-c", "pass"], timeout=10, workdir=str(work))
    report, code = await run_passthrough_probe(opts)
    assert code == 0 and report.configuration.delivered is False
    assert report.configuration.filtered.reason_code == "untrusted_folder" and list(work.iterdir()) == []
    assert "not written: [untrusted_folder]" in render_passthrough(report)


async def test_a_cli_that_cannot_be_started_means_the_probe_could_not_run_and_the_files_are_gone(tmp_path):
    opts = PassthroughOptions(strategy="claude", command=[str(tmp_path / "no-such-cli")], timeout=5, workdir=str(tmp_path))
    report, code = await run_passthrough_probe(opts)
    assert code == 2 and not report.ran and report.error.reason_code == "agent_start_failed"
    assert report.configuration.restored is True and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "message"), [
    (["--strategy", "claude"], "no agent command"),
    (["--strategy", "claude", "--", "--x"], "unknown option before the agent command"),
    (["--strategy", "nope", "--", "cli"], "invalid choice"),
    (["--strategy", "claude", "--timeout", "0", "--", "cli"], "--timeout"),
])
def test_usage_errors_start_nothing(tmp_path, capsys, args, message):
    try:
        code = main(["probe", "passthrough", "--workdir", str(tmp_path), *args])
    except SystemExit as exited:  # argparse's own errors
        code = exited.code
    assert code == 1
    assert message in capsys.readouterr().err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "expected"), [
    (["codex", "app-server"], True),
    (["codex", "-c", "mcp_servers.a.url=\"x\"", "app-server", "-c", "k=v"], True),
    (["codex", "exec", "app-server"], False),
    (["codex", "-c", "app-server"], False),  # the value of -c, not the subcommand
    (["codex"], False),
])
def test_only_codex_app_server_is_driven_as_a_client(argv, expected):
    from agentctl.probe.codex_app import is_app_server

    assert is_app_server(argv) is expected
