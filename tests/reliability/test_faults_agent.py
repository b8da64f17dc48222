"""Agent faults under a real `agentctl serve` that tests/agent does not already prove: a fork bomb held by a
process limit, and an agent frozen mid-session (SIGSTOP). The daemon stays responsive, the fault is
evidence, earlier evidence is kept, and stop leaves no process of the agent's tree.

Crash, hang on shutdown, garbage on stdout and stderr floods are proved in tests/agent (see FAULTS.md)."""

from __future__ import annotations

import json
import os
import signal

from agentctl.evidence.store import read_report
from tests.agent.serve_support import (
    agent_pid,
    agent_spec,
    base_url,
    cli,
    cli_json,
    gone,
    http_get,
    report_of,
    row,
    serving,
    status,
    stderr_text,
    stop_via_cli,
    wait_row,
)
from tests.conftest import poll, write_spec
from tests.reliability.faults_support import (
    attempt_of,
    fork_bomb_command,
    kill_processes_of,
    processes_of,
    unused_uid,
)

LIMIT = 100


def test_a_fork_bomb_held_by_its_process_limit_leaves_the_daemon_responsive_and_stop_leaves_no_process(
    tmp_path, short_tmp
):
    uid = unused_uid()
    spec = write_spec(tmp_path, f"[agent]\ncommand = {json.dumps(fork_bomb_command(LIMIT, uid))}\nstop_grace = 0.3\n")
    sock = short_tmp / "c.sock"
    try:
        with serving(spec, sock) as daemon:
            agent = agent_pid(daemon)
            poll(lambda: len(processes_of(uid)) >= LIMIT, timeout=30, what="the bomb to reach its limit")

            # The daemon answers, opens a session, and the agent's MCP use is evidence, with the bomb at its limit.
            assert status(sock)["ready"]
            assert cli_json(sock, "session", "new")["accepted"]
            wait_row(sock, "kandev", "active")
            done = cli(sock, "prompt", "still there?")
            assert done.returncode == 0 and "Called kandev/" in done.stdout, done.stderr
            assert http_get(base_url(daemon) + "/livez")[0] == 200
            assert len(processes_of(uid)) == LIMIT, "the kernel held the bomb at its limit"
            bomb = [p.pid for p in processes_of(uid)]
            assert all(os.getsid(p) != agent for p in bomb), "the bomb left the agent's session"

            # The bomb ignores SIGTERM and left the agent's process group: only the tree sweep finds it.
            assert stop_via_cli(daemon, sock, timeout=30) == 0
        for pid in [agent, *bomb]:
            assert gone(pid), f"pid {pid} of the agent tree survived `agentctl stop`"
        assert processes_of(uid) == []
        persisted = read_report(tmp_path / "state", "exec-test")
        assert persisted.agent.state == "exited" and persisted.agent.stopped_by_daemon
        assert persisted.current.servers[0].status == "active", "the evidence outlived the bomb"
        assert "not gone" not in stderr_text(daemon)
    finally:
        kill_processes_of(uid)


def test_a_frozen_agent_times_out_a_new_session_as_report_level_evidence_and_stop_still_ends_it(
    tmp_path, short_tmp
):
    # Lazy: session/new is answered at once (MCP connects on the first prompt), so only the frozen agent
    # can run into the short session timeout, however loaded the machine.
    spec = agent_spec(tmp_path, "--lazy", agent_extra="session_timeout = 2.0")
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:
        assert cli_json(sock, "session", "new")["accepted"]
        assert cli(sock, "prompt", "use the tools").returncode == 0
        first = wait_row(sock, "kandev", "active")["current"]["attempt_id"]
        pid = agent_pid(daemon)
        os.kill(pid, signal.SIGSTOP)  # alive, holding its pipes and connections, answering nothing

        result = cli_json(sock, "session", "new")
        assert not result["accepted"] and result["reason_code"] == "session_timeout"
        report = report_of(sock)
        assert report["current"]["attempt_id"] == result["attempt_id"] != first
        assert report["current"]["session_error"]["reason_code"] == "session_timeout"
        assert row(report, "kandev")["status"] == "delivered", "a timeout is report-level: no row is failed"
        assert row(report, "kandev", attempt_of(report, first))["status"] == "active", "the old attempt is kept"
        assert report["agent"]["state"] == "running"
        assert http_get(base_url(daemon) + "/livez")[0] == 200
        assert cli(sock, "health").returncode == 0
        # A timeout is not a refusal: the words say what happened.
        again = cli(sock, "session", "new")
        assert again.returncode == 1, again.stdout
        assert "the agent did not answer the session request in time: session_timeout" in again.stdout
        assert "refused" not in again.stdout

        assert stop_via_cli(daemon, sock, timeout=30) == 0
    assert gone(pid)
    agent = read_report(tmp_path / "state", "exec-test").agent
    assert agent.stopped_by_daemon and agent.exit_signal == 9, "a stopped process ends only by SIGKILL"
