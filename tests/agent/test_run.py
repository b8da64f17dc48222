"""`agentctl run`, the main job: the bundled demo end to end as a subprocess, the prompt path, and failures
that end in one line and an exit code rather than a traceback."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from agentctl.daemon.app import Daemon
from agentctl.daemon.run import run_main_job
from agentctl.evidence.contract.report import decode_history
from agentctl.spec_loader import load_spec
from tests.agent.serve_support import agent_spec, reference_passthrough
from tests.conftest import REPO, agentctl_cmd, poll, write_spec

DEMO = REPO / "examples" / "demo.toml"


def _run(cwd: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        agentctl_cmd("run", *args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


def _persisted(cwd: Path, stdout: str) -> Path:
    match = re.search(r"^report persisted to (.+)$", stdout, re.MULTILINE)
    assert match, stdout
    path = Path(match.group(1))
    return path if path.is_absolute() else cwd / path


def test_the_demo_with_a_prompt_shows_progress_active_beside_delivered_unverified_and_used_and_keeps_no_payload(
    tmp_path,
):
    work = tmp_path / "checkout"
    work.mkdir()
    canary = "RUNCANARY4242"
    # The prompt, the tool's arguments, its result and the agent's answer all carry the canary. No state dir
    # is named (not in the spec, no $STATE_DIRECTORY): the user's state dir, here under $XDG_STATE_HOME.
    env = {"STATE_DIRECTORY": "", "XDG_STATE_HOME": str(tmp_path / "xdg")}
    done = _run(work, str(DEMO), "--prompt", f'CALL update_task {{"description": "{canary}"}}', env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    steps = [line.split()[0] for line in out.splitlines() if line.startswith(("attempt ", "  "))]
    assert steps.index("attempt") < steps.index("delivered") < steps.index("connected") < steps.index("tools")
    assert steps.index("tools") < steps.index("used")
    assert re.search(r"^\s+used\s+kandev: update_task \(ok\)$", out, re.MULTILINE)
    assert canary in out, "the answer is shown to the person who asked"
    assert re.search(r"^\s+kandev\s+active$", out, re.MULTILINE)
    assert "used" in out.split("kandev    active", 1)[1].splitlines()[1]
    assert re.search(r"^\s+docs\s+delivered · connection unverified$", out, re.MULTILINE)
    assert "Traceback" not in done.stderr and canary not in done.stderr
    # No [upstream]: the header names the embedded hub; the protocol's era and version are bracketed detail.
    assert out.splitlines()[0].endswith("evidence to the embedded hub (no [upstream] configured)"), out
    assert re.search(r"^  connected   kandev: the agent connected \(agentctl-reference-agent\) "
                     r"\[(legacy|modern) MCP [\d-]+\]$", out, re.M), out
    # Nothing twice: the agent's end once, above the rows.
    assert " ".join(out.split()).count("the agent was stopped by the daemon") == 1, out

    report = _persisted(work, out)
    state = tmp_path / "xdg" / "agentctl"
    assert report.is_relative_to(state) and list(work.iterdir()) == [], "nothing is written where `run` ran"
    history = decode_history(report.read_bytes())
    assert {r.name: r.status for r in history.current.servers} == {"kandev": "active", "docs": "delivered"}
    assert history.agent.state == "exited" and history.agent.stopped_by_daemon
    assert "example-not-a-real-token" not in report.read_text()
    for path in state.rglob("*"):
        if path.is_file() and not path.name.startswith("tasks.sqlite3"):  # the task store holds task data
            assert canary.encode() not in path.read_bytes(), f"{path.name} holds the prompt or the answer"


def test_run_with_an_agent_that_cannot_start_exits_one_with_one_line(tmp_path):
    spec = agent_spec(tmp_path, "--crash-before-initialize")
    done = _run(tmp_path, str(spec), "--socket", str(tmp_path / "c.sock"))
    assert done.returncode == 1
    assert "the agent did not start: agent_exited_before_initialize" in done.stdout
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert "report persisted to" in done.stdout


async def _run_killing_the_agent_at(tmp_path, short_tmp, line: str, prompt: str | None) -> tuple[Daemon, int, str]:
    """`run` in-process with an ACP agent that gets a real SIGKILL the moment `line` is printed."""
    daemon = Daemon(load_spec(agent_spec(tmp_path, "--ignore-mcp")), socket_path=short_tmp / "c.sock")

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith(line):
                os.kill(daemon.agent.supervisor.pid, 9)
            return super().write(text)

    out = Out()
    code = await run_main_job(daemon, prompt=prompt, out=out)
    return daemon, code, out.getvalue()


async def test_run_whose_agent_dies_during_the_prompt_reports_the_error_and_stops_cleanly(tmp_path, short_tmp):
    # A real crash at the worst moment: the agent is killed as the prompt goes out.
    daemon, code, text = await _run_killing_the_agent_at(tmp_path, short_tmp, "prompt sent", "hello")
    assert code == 1
    assert re.search(r"^\s+error\s+prompt: agent_(exited|not_running)", text, re.MULTILINE), text
    assert "report persisted to" in text
    assert daemon.ledger.history.agent.exit_signal == 9
    assert not (short_tmp / "c.sock").exists(), "the daemon stopped in order"


def test_sigterm_during_a_prompt_stops_the_agent_and_the_daemon_in_order_and_says_so(tmp_path, short_tmp):
    # A third-party server that accepts and never answers keeps the lazy agent's first prompt in flight.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    servers = f'\n[[mcp.servers]]\nname = "slow"\ntype = "http"\nurl = "http://127.0.0.1:{port}/mcp"\n'
    spec = agent_spec(tmp_path, "--lazy", servers=servers)
    sock = short_tmp / "c.sock"
    proc = subprocess.Popen(
        agentctl_cmd("run", str(spec), "--prompt", "hello", "--socket", str(sock)),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        listener.settimeout(60)
        held = listener.accept()[0]  # the agent is connecting: the prompt is in flight
        agents = psutil.Process(proc.pid).children()
        assert agents
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM: stopped the agent; report persisted to" in err and "Traceback" not in err
    assert time.monotonic() - started < 10
    poll(lambda: all(not a.is_running() or a.status() == psutil.STATUS_ZOMBIE for a in agents), timeout=5,
         what="the agent to be gone")
    assert not sock.exists(), "the control socket is removed: the daemon stopped in order"
    history = decode_history((tmp_path / "state" / "exec-test" / "report.json").read_bytes())
    assert history.agent.state == "exited" and history.agent.stopped_by_daemon
    held.close()


def test_malformed_frames_from_the_agent_neither_reach_the_log_nor_cost_the_session(tmp_path, short_tmp):
    canary = "FRAMECANARY58"
    fixture = Path(__file__).parent / "fixtures" / "malformed_agent.py"
    extra = f"\n[agent]\ncommand = {json.dumps([sys.executable, str(fixture), canary])}\n"
    spec = write_spec(tmp_path, extra)
    done = _run(tmp_path, str(spec), "--prompt", "hello", "--socket", str(short_tmp / "c.sock"))
    assert done.returncode == 0, done.stderr
    assert "still here" in done.stdout and re.search(r"^\s+done\s+end_turn$", done.stdout, re.MULTILINE)
    assert canary not in done.stderr, "the SDK's validation errors quote their input; the log must not"
    assert "Traceback" not in done.stderr
    persisted = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    assert canary not in persisted
    assert decode_history(persisted).agent.stdout_skipped_lines >= 1, "the unhashable-id frame was junk"


async def test_run_with_a_passthrough_cli_waits_for_it_and_shows_its_attempt(tmp_path, short_tmp):
    spec = write_spec(tmp_path, agent=reference_passthrough(tmp_path))
    daemon = Daemon(load_spec(spec), socket_path=short_tmp / "c.sock")
    out = io.StringIO()
    code = await run_main_job(daemon, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "agent started (passthrough" in text and re.search(r"^\s+exited\s+the agent exited with code 0$", text, re.M)
    assert re.search(r"^\s+kandev\s+active$", text, re.MULTILINE), text
    assert daemon.ledger.history.current.origin == "passthrough_start"


async def test_run_json_prints_exactly_the_final_persisted_report(tmp_path, short_tmp):
    daemon = Daemon(load_spec(agent_spec(tmp_path, "--ignore-mcp")), socket_path=short_tmp / "c.sock")
    out = io.StringIO()
    assert await run_main_job(daemon, as_json=True, out=out) == 0
    printed = out.getvalue()
    assert printed.count("\n") == 1, "one JSON document, no progress lines"
    history = decode_history(printed)
    assert history.agent.state == "exited", "printed after the stop, like the file"
    assert printed.strip() == daemon.ctx.report_path.read_text().strip()


def _run_passthrough_python(tmp_path, short_tmp, code: str) -> subprocess.CompletedProcess[str]:
    """`agentctl run` of a passthrough "CLI" that is a real Python process running `code`."""
    extra = f"""
[agent]
command = {json.dumps([sys.executable, "-c", code])}
protocol = "passthrough"
strategy = "claude"
workdir = "{tmp_path}"
stop_grace = 0.2
"""
    return _run(tmp_path, str(write_spec(tmp_path, extra)), "--socket", str(short_tmp / "c.sock"))


def test_run_whose_passthrough_cli_exits_with_an_error_at_once_exits_one_and_never_says_accepted(tmp_path, short_tmp):
    # A real CLI process that fails before doing anything: exit code 3, no MCP contact.
    done = _run_passthrough_python(tmp_path, short_tmp, "import sys; sys.exit(3)")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "accepted" not in out, "a passthrough CLI accepts nothing, least of all one that failed at once"
    assert "session began" not in out, "a process start is not a session acceptance"
    assert "NO SESSION: the agent process exited [agent_exited]" in " ".join(out.split()), out
    assert re.search(r"^\s+exited\s+the agent exited with code 3$", out, re.M), out
    flat = " ".join(out.split())
    assert "kandev delivered · connection unverified" in flat
    # Said once each: the exit in the progress and once above the table, the session error in the headline with
    # its detail under it (no `error session:` progress line, no gone line under every row, no second
    # "session error" line).
    assert "Agent: the agent has exited, exit code 3; no more evidence will come from it" in flat
    assert flat.count("no more evidence will come from it") == 1, out
    assert flat.count("the agent process exited") == 1 and flat.count("agent_exited: exited with code 3") == 1, out
    assert "error session:" not in flat, out
    # The header first, then the passthrough start, then the attempt's progress.
    lines = out.splitlines()
    assert lines[0].startswith("agentctl: execution exec") and "evidence to the embedded hub" in lines[0]
    assert lines[1].startswith("agent started (passthrough") and lines[2].startswith("attempt att_"), out
    assert "Traceback" not in done.stderr and "report persisted to" in out


def test_run_whose_passthrough_cli_finishes_with_code_zero_exits_zero(tmp_path, short_tmp):
    done = _run_passthrough_python(tmp_path, short_tmp, "pass")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^\s+exited\s+the agent exited with code 0$", done.stdout, re.M), done.stdout


async def test_run_whose_acp_agent_is_killed_after_accepting_the_session_exits_one_and_shows_it_gone(
    tmp_path, short_tmp
):
    # A real crash right after the agent accepted the session: no prompt fails, only the agent.
    _, code, text = await _run_killing_the_agent_at(tmp_path, short_tmp, "  accepted", None)
    assert code == 1, text
    assert re.search(r"^\s+error\s+session: the agent process exited \[agent_exited: killed by SIGKILL\]$", text, re.MULTILINE), text
    assert "Agent: the agent has exited, killed by SIGKILL" in text
    assert "waiting for agent" not in text


async def test_the_table_run_prints_is_the_report_it_persists(tmp_path, short_tmp):
    # The table is rendered from the final report (after the stop): whatever lands after the session was
    # accepted (the agent's tools/list, its exit) is in both or in neither.
    from agentctl.control.render import render_status

    daemon = Daemon(load_spec(agent_spec(tmp_path)), socket_path=short_tmp / "c.sock")
    out = io.StringIO()
    assert await run_main_job(daemon, out=out) == 0
    text = out.getvalue()
    table = text.split("\n\n", 1)[1].rsplit("report persisted to ", 1)[0]
    persisted = decode_history(_persisted(tmp_path, text).read_bytes())
    assert table.startswith("Agent: the agent was stopped by the daemon")
    assert table == render_status(persisted, color=False, agent_line=True)
    assert persisted.current.servers[0].status == "active" and "kandev" in table
