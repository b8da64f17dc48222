"""`agentctl run --prompt` with required servers (issue 30): the prompt goes only once every required server is
attached. The agents are real: the shipped reference agent (lazy: it connects to its servers on the first prompt
only; eager: during session/new) and a raw ACP agent replaying codex-acp's own report of a failed server."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import msgspec

from agentctl.daemon.app import Daemon
from agentctl.daemon.run import run_main_job
from agentctl.exit_codes import EXIT_FAILED as EXIT_AGENT_FAILED, EXIT_NOT_ATTACHED, EXIT_OK
from agentctl.spec_loader import load_spec
from tests.agent.serve_support import agent_spec, canary_http_server, closed_port
from tests.agent.witness_support import persisted as _persisted
from tests.agent.witness_support import run_prompt as _run
from tests.conftest import write_spec

REPLAY_AGENT = Path(__file__).parent / "fixtures" / "replay_agent.py"
REPLAY = json.loads((Path(__file__).parent / "data" / "reported" / "acp-replay.json").read_text())["cases"]


def _required_builtin(timeout: float) -> str:
    return f"\n[mcp]\nbuiltin_required = true\nrequired_timeout = {timeout}\n"


def _replaying(tmp_path: Path, case: str, mcp: str = "") -> tuple[Path, Path]:
    """A spec whose agent replays `case`'s frames about a required `docs` server, and the file its prompts go to."""
    frames = next(c for c in REPLAY if c["id"] == case)["frames"]
    (tmp_path / "frames.json").write_text(json.dumps(frames))
    prompts = tmp_path / "prompts.log"
    command = json.dumps([sys.executable, str(REPLAY_AGENT), "--frames", str(tmp_path / "frames.json"),
                          "--prompts", str(prompts)])
    server = canary_http_server(closed_port(), "31") + "required = true\n"
    return write_spec(tmp_path, f"[agent]\ncommand = {command}\nstop_grace = 0.3\n{mcp}{server}"), prompts


async def test_a_lazy_agent_with_a_required_builtin_server_times_out_gets_no_prompt_and_run_exits_with_its_code(
    tmp_path, short_tmp
):
    spec = agent_spec(tmp_path, "--lazy", servers=_required_builtin(1.5))
    daemon, code, text, took = await _run(spec, short_tmp / "r.sock")
    assert code == EXIT_NOT_ATTACHED, text
    assert "prompt sent" not in text
    assert "  required    kandev: required, not attached after 1.5 s " \
           "(delivered · connection unverified for 1.5 s)" in text
    assert "  no prompt   a required server is not attached: the prompt was not sent" in text
    # The lazy agent connects on its first prompt: had one reached it, the endpoint would have seen it.
    row = next(r for r in _persisted(text).current.servers if r.name == "kandev")
    assert (row.status, row.initialize_observed_at, row.tool_calls) == ("delivered", None, 0)
    assert took < 30, f"the gate held {took:.1f} s for a 1.5 s timeout"
    # The persisted report keeps the gate's reading on the attempt, beside the row it read (still delivered).
    gate = _persisted(text).current.required
    assert (gate.state, gate.timeout, [(s.name, s.state, s.policy) for s in gate.servers]) == (
        "blocked", 1.5, [("kandev", "not_attached", "required, not attached after 1.5 s")])


async def test_an_eager_agent_with_a_required_builtin_server_gets_the_prompt_at_once(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, servers=_required_builtin(30))
    daemon, code, text, _ = await _run(spec, short_tmp / "r.sock")
    assert code == EXIT_OK, text
    lines = text.splitlines()
    gate = lines.index("  required    kandev: required, attached (active · observed by agentctl)")
    assert lines[gate + 1] == "prompt sent" and "  waiting     for kandev" not in text
    row = next(r for r in _persisted(text).current.servers if r.name == "kandev")
    assert row.tool_calls >= 1, "the prompt's turn called the built-in server"
    gate = _persisted(text).current.required
    assert (gate.state, [(s.name, s.state) for s in gate.servers]) == ("open", [("kandev", "attached")])


async def test_a_third_party_server_the_agent_reports_failed_blocks_the_prompt_at_once_naming_its_reporter(
    tmp_path, short_tmp
):
    spec, prompts = _replaying(tmp_path, "codex-acp-mcp-startup-failed", "[mcp]\nrequired_timeout = 60\n")
    daemon, code, text, took = await _run(spec, short_tmp / "r.sock")
    assert code == EXIT_NOT_ATTACHED, text
    assert not prompts.exists(), "the agent received a prompt"
    assert "  required    docs: required, failed (failed · reported by codex-acp: " in text
    assert "CANARY" not in text
    assert took < 30, f"a reported failure blocks at once, not after the 60 s timeout ({took:.1f} s)"
    row = next(r for r in _persisted(text).current.servers if r.name == "docs")
    assert (row.status, row.reported.state) == ("failed", "failed")
    gate = _persisted(text).current.required
    assert (gate.state, gate.servers[0].policy) == ("blocked", "required, failed")
    assert "CANARY" not in msgspec.json.encode(gate).decode(), "the reading keeps no word of the agent's"


async def test_the_same_replayed_agent_reporting_the_server_connected_gets_its_prompt(tmp_path, short_tmp):
    spec, prompts = _replaying(tmp_path, "codex-acp-mcp-startup-completed")
    daemon, code, text, _ = await _run(spec, short_tmp / "r.sock")
    assert code == EXIT_OK, text
    assert prompts.read_text() == "prompt\n"
    assert "docs: required, attached (connected · reported by codex-acp)" in text


async def test_an_agent_killed_while_the_gate_waits_ends_the_wait_at_once_and_no_prompt_is_sent(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--lazy", servers=_required_builtin(60))
    daemon = Daemon(load_spec(spec), socket_path=short_tmp / "r.sock")

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("  waiting"):
                os.kill(daemon.agent.supervisor.pid, signal.SIGKILL)  # a real SIGKILL while the gate waits
            return super().write(text)

    out = Out()
    began = time.monotonic()
    code = await run_main_job(daemon, prompt="hello", out=out)
    took, text = time.monotonic() - began, out.getvalue()
    # The agent's own end is the first cause: run's code says that one (1); the gate's line says why nothing
    # was prompted.
    assert code == EXIT_AGENT_FAILED, text
    assert "  required    kandev: required, not attached (the agent exited) " \
           "(delivered · connection unverified)" in text
    assert "prompt sent" not in text
    assert took < 30, f"the wait outlived the agent: {took:.1f} s for a 60 s timeout"
