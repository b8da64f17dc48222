"""`agentctl run` on a `terminal = true` spec: the person's terminal is the agent's, raw while attached and
restored on every way out, the window size followed, the agent's own exit status returned, the table after."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from agentctl.daemon.run_terminal import HeldLines
from tests.conftest import agentctl_cmd, poll, write_spec
from tests.pty.conftest import TUI_CMD

REF_CLAUDE = ["agentctl-reference-agent", "--passthrough", "claude", "--connect-timeout", "20"]


def _spec(tmp_path: Path, command: list[str], strategy: str | None) -> Path:
    argv = ", ".join(json.dumps(a) for a in command)
    strat = f'strategy = "{strategy or "none"}"\n'
    return write_spec(tmp_path, f'[agent]\ncommand = [{argv}]\nprotocol = "passthrough"\nterminal = true\n'
                                f'stop_grace = 0.5\nworkdir = "{tmp_path}"\n{strat}')


def _run(on_pty, spec: Path, short_dir: Path):
    return on_pty(agentctl_cmd("run", str(spec), "--socket", str(short_dir / "c.sock")), rows=30, cols=100)


def test_run_attaches_the_terminal_to_the_agent_then_restores_it_and_prints_the_table(tmp_path, on_pty, short_dir):
    term = _run(on_pty, _spec(tmp_path, REF_CLAUDE, "claude"), short_dir)
    before = term.stty()
    # The reference agent prints its one-line summary once it has used the built-in server's tools.
    term.wait_for('"passthrough":"claude"')
    during = term.stty()
    assert during != before, "raw mode while attached"
    assert "tools loaded" not in term.output().decode().split('"passthrough"')[0], \
        "no progress line tears the agent's screen while attached"
    term.send(b"\x04")  # Ctrl-D: raw here, so it reaches the agent's own terminal, which makes it end-of-file
    assert term.wait() == 0
    assert term.stty() == before, "the terminal's settings are exactly what they were"
    screen = term.output().decode("utf-8", "replace")
    after = screen.split('"passthrough":"claude"', 1)[1]
    assert "exited      the agent exited with code 0" in after
    assert "kandev" in after and "tools loaded" in after, "the evidence recorded while attached, shown after exit"
    assert "report persisted to" in after


def test_run_follows_the_window_size_tells_of_a_taken_keyboard_and_returns_the_agents_own_status(tmp_path, on_pty, short_dir):
    term = _run(on_pty, _spec(tmp_path, TUI_CMD, None), short_dir)
    before = term.stty()
    term.wait_for("tty=True ctty=True fg=True")
    term.wait_for("winch 30x100")  # the person's size, once the terminal is connected
    term.resize(40, 120)
    term.wait_for("winch 40x120")
    # Another terminal takes the keyboard with `agentctl attach --take`: the person's terminal is told.
    other = on_pty(agentctl_cmd("attach", "--socket", str(short_dir / "c.sock"), "--take"))
    other.wait_for("you hold the keyboard")
    term.wait_for("another viewer took the keyboard")
    other.send(b"quit\r")
    assert term.wait() == 7, "an attached run exits with the agent's own status"
    assert other.wait() == 0
    assert term.stty() == before


@pytest.mark.parametrize("how", ["agent crash", "SIGTERM of agentctl"])
def test_run_restores_the_terminal_when_the_agent_crashes_or_agentctl_is_terminated(tmp_path, on_pty, short_dir, how):
    crashing = [sys.executable, "-c", "import os, sys, time; print('READY', flush=True); sys.stdin.readline(); os.kill(os.getpid(), 9)"]
    term = _run(on_pty, _spec(tmp_path, crashing if how == "agent crash" else TUI_CMD, None), short_dir)
    before = term.stty()
    term.wait_for("READY" if how == "agent crash" else "winch 30x100")
    assert term.stty() != before
    if how == "agent crash":
        term.send(b"go\r")
        assert term.wait() == 128 + signal.SIGKILL
    else:
        term.proc.send_signal(signal.SIGTERM)
        assert term.wait() == 128 + signal.SIGTERM
    assert term.stty() == before, f"terminal settings restored after the {how}"
    poll(lambda: "report persisted to" in term.output().decode("utf-8", "replace") or how != "agent crash",
         what="the status table after the crash")


def test_progress_lines_held_while_attached_are_shown_after_in_order_and_bounded():
    shown: list[str] = []
    lines = HeldLines(shown.append)
    lines("before")
    with lines.holding():
        for i in range(1005):
            lines(f"held {i}")
        assert shown == ["before"]
    assert shown[1] == "  (5 earlier progress lines not shown)"
    assert shown[2] == "held 5" and shown[-1] == "held 1004" and len(shown) == 1002
    lines("after")
    assert shown[-1] == "after"
