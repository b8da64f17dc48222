"""A real CLI on the terminal: `agentctl run` on a Claude Code passthrough spec with `terminal = true` opens Claude
Code's own interface, which lists the kandev server with its tools (`/mcp`); after exit the table shows them loaded.

Claude Code is the npm package pinned in tests/clis (required in CI, skipped locally without it). No network is
needed: a placeholder API key (accepted in its own dialog) gets it past its start-up screens, and it connects to
its MCP servers before any model call.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.clis.conftest import find_cli
from tests.conftest import agentctl_cmd, poll, write_spec

PLACEHOLDER_KEY = "sk-ant-placeholder-not-a-key"


def type_command(term, command: str) -> None:
    """Type `command` into Claude Code's prompt box. Keys typed while it still starts up are dropped (its prompt
    box is drawn before it reads keys), so they are typed again until they show."""
    for _ in range(10):
        term.send(command.encode())
        try:
            poll(lambda: f"❯ {command}" in term.screen(), 6, what=f"{command} in the prompt box")
            return
        except pytest.fail.Exception:
            continue
    pytest.fail(f"Claude Code never showed {command} typed in its prompt box:\n{term.screen()}")


def test_claude_code_opens_its_own_interface_on_the_terminal_with_the_kandev_tools(tmp_path: Path, on_pty, short_dir):
    claude = find_cli("claude")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # Its first-run screens (theme, workspace trust) answered as a person would have on an earlier run.
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }))
    spec = write_spec(tmp_path, f'[agent]\ncommand = ["{claude}"]\nprotocol = "passthrough"\nstrategy = "claude"\n'
                                f'terminal = true\nstop_grace = 1\nworkdir = "{work}"\n')
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "TERM": "xterm-256color", "ANTHROPIC_API_KEY": PLACEHOLDER_KEY, "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    term = on_pty(agentctl_cmd("run", str(spec), "--socket", str(short_dir / "c.sock")), rows=30, cols=100, env=env)
    before = term.stty()
    term.wait_for("Do you want to use this API key?", 90)
    term.send(b"\x1b[A")  # arrow up: "Yes"
    term.wait_for("❯ Yes")
    term.send(b"\r")
    term.wait_for("Claude Code v")
    term.wait_for("shift+tab to cycle")  # its prompt box: the interface is ready for keys
    type_command(term, "/mcp")
    term.send(b"\r")
    # Its own MCP dialog: the kandev server connected, with its tools.
    poll(lambda: re.search(r"✔ kandev\s+\d+ tools", term.screen()), 60, what=f"kandev in /mcp:\n{term.screen()}")
    mcp_screen = term.screen()
    term.send(b"\x1b")  # close the dialog
    term.wait_for("shift+tab to cycle")
    type_command(term, "/exit")
    term.send(b"\r")
    assert term.wait(90) == 0, term.screen()
    assert term.stty() == before
    after = term.output().decode("utf-8", "replace").rsplit("/exit", 1)[-1]
    assert "tools loaded" in after and "exited      the agent exited with code 0" in after, term.screen()
    assert "kandev    active" in term.screen(), term.screen()
    print(mcp_screen)  # the closing note's capture: `pytest -s` shows it
