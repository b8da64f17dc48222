"""The exposure check on a real Claude Code run: the tools its init event says the model gets, compared with
the built-in tools agentctl's endpoint served it. `--disallowedTools` takes two of them away; agentctl names
exactly those two, as a finding beside kandev's row (reason `agent_exposure_gap`), never as a row state."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agentctl.evidence.contract.report import decode_history
from agentctl.present.rows import row_view
from tests.clis.conftest import clean_env
from tests.conftest import agentctl_cmd, write_spec


def test_a_real_claude_run_that_exposes_fewer_kandev_tools_than_served_shows_the_gap_by_name(
    real_cli, tmp_path: Path, short_tmp: Path
) -> None:
    claude = real_cli("claude")
    (tmp_path / "work").mkdir()
    (tmp_path / "home").mkdir()
    command = [str(claude), "-p", "hi", "--output-format", "stream-json", "--verbose",
               "--disallowedTools", "mcp__kandev__ask_user,mcp__kandev__create_task"]
    spec = write_spec(tmp_path, agent={"command": command, "protocol": "passthrough", "strategy": "claude",
                                       "workdir": str(tmp_path / "work"), "stop_grace": 0.5})
    env = clean_env(tmp_path / "home", NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(agentctl_cmd("run", str(spec), "--socket", str(short_tmp / "x.sock")), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    flat = " ".join(done.stdout.split())
    assert "exposure: Claude Code exposes 8 of 10 kandev tools; 2 missing: ask_user, create_task " \
           "[agent_exposure_gap]" in flat, done.stdout + done.stderr
    history = decode_history((tmp_path / "state" / "exec-test" / "report.json").read_text())
    kandev = next(r for r in history.current.servers if r.name == "kandev")
    assert (kandev.status, kandev.status_source) == ("active", "observed")
    assert len(kandev.reported.exposed_tools) == 8 and "ask_user" not in kandev.reported.exposed_tools
    assert row_view(kandev).exposure_reason == "agent_exposure_gap"
