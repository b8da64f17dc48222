"""agentctl.bundled: how agentctl runs itself again, and the hidden `reference-agent` subcommand behind it."""

from __future__ import annotations

import subprocess
import sys

from agentctl import __version__
from agentctl.bundled import bundled_command, self_command


def test_only_the_reference_agent_is_bundled():
    assert bundled_command("agentctl-reference-agent") == [*self_command(), "reference-agent"]
    assert bundled_command("agentctl") is None and bundled_command("claude-code-acp") is None


def test_from_a_venv_self_command_is_this_interpreter_running_the_cli_module():
    argv = self_command()
    assert argv == [sys.executable, "-m", "agentctl.cli"]
    result = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and result.stdout.strip() == f"agentctl {__version__}"


def test_hidden_reference_agent_subcommand_runs_the_agent_and_takes_its_flags():
    # The agent's own flag goes through untouched (argparse of agentctl never sees it); stdin at EOF ends it.
    result = subprocess.run(
        [*bundled_command("agentctl-reference-agent"), "--ignore-mcp"],
        input=b"", capture_output=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"stdin closed" in result.stderr
    assert "reference-agent" not in subprocess.run(
        [*self_command(), "--help"], capture_output=True, text=True, timeout=30
    ).stdout, "the subcommand stays hidden"
