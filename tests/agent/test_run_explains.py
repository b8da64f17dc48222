"""`agentctl run` explains what went wrong before and at the agent: a refused session shows the agent's
error, its last lines of output (on the terminal only) and a hint; a spec naming a missing agent is one line
before anything starts."""

from __future__ import annotations

import io
import os
import subprocess
from types import SimpleNamespace

from agentctl.agent.stderr_ring import StderrWindow
from agentctl.daemon.app import Daemon
from agentctl.daemon.refusal import explain_refusal
from agentctl.daemon.run import run_main_job
from agentctl.exit_codes import EXIT_FAILED, EXIT_NO_DAEMON
from agentctl.spec_loader import load_spec
from agentctl.testing._acp_agent import REFUSAL_CANARY
from tests.agent.serve_support import agent_spec, assert_recorded_nowhere
from tests.conftest import agentctl_cmd, write_spec


async def test_a_refused_session_shows_the_error_the_agents_last_lines_and_a_hint_on_stderr_and_records_none_of_them(
    tmp_path, short_tmp, capsys, caplog
):
    daemon = Daemon(load_spec(agent_spec(tmp_path, "--refuse-auth")), socket_path=short_tmp / "c.sock")
    out = io.StringIO()
    assert await run_main_job(daemon, out=out) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "agentctl: the agent refused the session: session_rejected: Authentication required" in err
    assert "warning: recent agent output may contain sensitive data" in err
    assert f"  | reference-agent: refuse-auth: reading credentials of profile {REFUSAL_CANARY}" in err
    assert "  | Error: ANTHROPIC_API_KEY is not set; run /login or set an API key" in err
    assert "hint: The agent has no usable API key" in err
    assert REFUSAL_CANARY not in out.getvalue(), "the agent's output goes to stderr, not the progress lines"

    assert_recorded_nowhere(daemon, REFUSAL_CANARY, caplog.text)


def test_run_names_a_missing_agent_executable_before_starting_anything(tmp_path):
    spec = write_spec(tmp_path, '[agent]\ncommand = ["no-such-agent-cli-7", "--key", "CANARY-arg-77"]\n')
    done = subprocess.run(agentctl_cmd("run", str(spec), "--socket", str(tmp_path / "c.sock")), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == EXIT_NO_DAEMON
    assert done.stderr.strip().endswith("agent.command: executable 'no-such-agent-cli-7' not found on PATH"), done.stderr
    assert "CANARY-arg-77" not in done.stderr + done.stdout
    assert done.stdout == "" and not (tmp_path / "c.sock").exists()
    assert not any(tmp_path.rglob("*.json")), "no state was written"


def _agent_with_output(lines: list[str]):
    # The window's own type, handed out as the supervisor would; the ring itself is tested in test_stderr_ring.
    window = StderrWindow(lines=lines, truncated=False, total_bytes_seen=sum(map(len, lines)), empty=not lines)
    return SimpleNamespace(supervisor=SimpleNamespace(process=object(), stderr_snapshot=lambda: window))


def test_the_explanation_shows_only_the_last_lines_cut_and_neutralized_and_says_when_there_were_none():
    err = io.StringIO()
    lines = [f"line {n}" for n in range(10)] + ["\x1b[31mred\x1b[0m " + "x" * 1000]
    explain_refusal(_agent_with_output(lines), "refused the prompt", "prompt_rejected: Authentication required", err=err)
    text = err.getvalue()
    assert "line 5" not in text and "  | line 6" in text, "the last five lines only"
    assert "\x1b" not in text and max(map(len, text.splitlines())) < 450
    assert text.splitlines()[-1].startswith("hint: The agent wants to be authenticated first")

    err = io.StringIO()
    explain_refusal(_agent_with_output([]), "refused the session", "session_rejected: Internal error", err=err)
    assert err.getvalue() == ("agentctl: the agent refused the session: session_rejected: Internal error\n"
                              "(the agent wrote nothing to stderr)\n")
