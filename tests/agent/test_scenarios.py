"""The issue's agent scenarios end to end: a real `agentctl serve` supervising the shipped reference agent,
driven with the real CLI (`session new|reset`, `prompt`, `status --json`, `stderr`, `stop`)."""

from __future__ import annotations

import os
import signal
import time

from agentctl.evidence.store import read_report
from tests.agent.serve_support import (
    agent_pid,
    agent_spec,
    base_url,
    canary_http_server,
    cli,
    cli_json,
    closed_port,
    gone,
    http_get,
    report_of,
    row,
    serving,
    serving_many,
    status,
    stderr_text,
    stop_via_cli,
    wait_row,
)
from tests.conftest import poll


def _evidence(body: dict, server: str, kind: str) -> list[dict]:
    return [e for e in body["current"]["evidence"] if e.get("server") == server and e["kind"] == kind]


def _kinds(attempt: dict, server: str) -> list[str]:
    return [e["kind"] for e in attempt["evidence"] if e.get("server") == server]


def test_two_agents_in_one_task_only_the_one_that_lists_tools_shows_the_builtin_active(tmp_path, short_tmp):
    spec_a = agent_spec(tmp_path / "a", execution_id="exec-a")
    spec_b = agent_spec(tmp_path / "b", "--ignore-mcp", execution_id="exec-b")
    sock_a, sock_b = short_tmp / "a.sock", short_tmp / "b.sock"
    with serving_many([(spec_a, sock_a), (spec_b, sock_b)]) as (a, b):
        new_a = cli_json(sock_a, "session", "new")
        new_b = cli_json(sock_b, "session", "new")
        assert new_a["accepted"] and new_b["accepted"]

        body_a = wait_row(sock_a, "kandev", "active")
        assert row(body_a, "kandev")["tool_count"] > 0
        # B's session was accepted after its agent decided not to connect; a prompt (answered without any
        # MCP contact) is one more round trip, so anything B's agent could have done has been done.
        done = cli(sock_b, "prompt", "hello")
        assert done.returncode == 0 and "Ignoring MCP servers" in done.stdout
        body_b = cli_json(sock_b, "status")  # the real `agentctl status --json`
        builtin_b = row(body_b, "kandev")
        assert builtin_b["status"] == "delivered"
        assert "initialize_observed_at" not in builtin_b and "tool_count" not in builtin_b
        assert body_a["identity"]["task_id"] == body_b["identity"]["task_id"] == "task-1"

        # Reset on the eager agent: in occurrence order the new attempt's row was delivered (shown so)
        # before that agent contacted MCP with the new attempt's token.
        reset = cli_json(sock_a, "session", "reset")
        current = wait_row(sock_a, "kandev", "active")["current"]
        assert current["attempt_id"] == reset["attempt_id"] != new_a["attempt_id"]
        kinds = _kinds(current, "kandev")
        assert kinds.index("configured") < kinds.index("delivered") < kinds.index("initialize_observed")
        assert kinds.index("initialize_observed") < kinds.index("tools_list_observed")
        assert stop_via_cli(a, sock_a) == 0 and stop_via_cli(b, sock_b) == 0


def test_lazy_agent_stays_delivered_until_its_first_prompt_and_a_reset_is_delivered_again_with_old_evidence_in_history(
    tmp_path, short_tmp
):
    # Lazy: the agent contacts MCP only on a prompt, so "until it contacts MCP" is under the test's control.
    spec = agent_spec(tmp_path, "--lazy", agent_extra="session_timeout = 1.0")
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:
        first = cli_json(sock, "session", "new")
        assert first["accepted"]
        # Watch the row through the only timeout the agent path has (session_timeout) and past it: absence
        # of contact never becomes `failed`.
        t0 = time.monotonic()
        seen: set[str] = set()

        def watched_long_enough() -> bool:
            seen.add(row(status(sock), "kandev")["status"])
            return time.monotonic() - t0 > 1.5

        poll(watched_long_enough, timeout=30, interval=0.1, what="an observation window past session_timeout")
        assert seen == {"delivered"}
        done = cli(sock, "prompt", "first")
        assert done.returncode == 0 and "Called kandev/" in done.stdout
        before = wait_row(sock, "kandev", "active")
        assert before["current"]["attempt_id"] == first["attempt_id"]
        assert row(before, "kandev")["tool_calls"] >= 1

        reset = cli_json(sock, "session", "reset")
        assert reset["accepted"] and reset["attempt_id"] != first["attempt_id"]
        assert reset["acp_session_id"] != first["acp_session_id"], "ACP has no reset: a new ACP session"
        after = status(sock)
        current = after["current"]
        assert current["attempt_id"] == reset["attempt_id"] and current["origin"] == "reset"
        assert row(after, "kandev")["status"] == "delivered", "no contact yet with the new attempt's token"
        assert "tools_list_observed" not in _kinds(current, "kandev")

        report = report_of(sock)
        old = report["previous"][0]
        assert old["attempt_id"] == first["attempt_id"] and old["superseded_at"]
        assert row(report, "kandev", old)["status"] == "active", "history keeps the old evidence"

        assert cli(sock, "prompt", "again").returncode == 0
        again = wait_row(sock, "kandev", "active")
        assert again["current"]["attempt_id"] == reset["attempt_id"]
        assert [a["attempt_id"] for a in report_of(sock)["previous"]] == [first["attempt_id"]]
        assert stop_via_cli(daemon, sock) == 0


def test_strict_agent_with_an_unreachable_server_fails_only_that_server_with_a_sanitized_reason(tmp_path, short_tmp):
    port = closed_port()
    servers = canary_http_server(port, "17")
    spec = agent_spec(tmp_path, "--strict", servers=servers)
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:
        done = cli(sock, "session", "new")
        assert done.returncode == 1 and "failed servers: docs" in done.stdout
        assert "the agent refused the session: session_rejected" in done.stdout, "a refusal is called one"
        body = cli_json(sock, "status")
        docs = row(body, "docs")
        assert docs["status"] == "failed" and docs["reason_code"] == "session_rejected"
        assert docs["target"] == f"http://127.0.0.1:{port}"
        assert docs["summary"] and "CANARY" not in docs["summary"] and "/mcp" not in docs["summary"]
        assert row(body, "kandev")["status"] != "failed", "the other rows keep their own state"
        assert "session_error" not in body["current"], "a server-specific error is not report-level"
        assert stop_via_cli(daemon, sock) == 0
    assert "CANARY" not in (tmp_path / "state" / "exec-test" / "report.json").read_text()
    assert "CANARY" not in stderr_text(daemon)


def test_crashing_agent_is_evidence_readiness_says_exited_liveness_stays_and_stop_works(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--ignore-mcp", "--crash-after", "1")
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:

        def exited() -> dict | None:
            report = report_of(sock)
            return report if report.get("agent", {}).get("state") == "exited" else None

        agent = poll(exited, timeout=30, what="the crash evidence")["agent"]
        # On a loaded machine the crash may come before initialize is answered; then the start failure
        # leads the reason ("agent_exited; exited with code 3"). Either way the exit itself is stated.
        assert agent["exit_code"] == 3 and agent["exit_reason"].endswith("exited with code 3")
        assert not agent.get("stopped_by_daemon")

        base = base_url(daemon)
        assert http_get(base + "/livez") == (200, {"live": True})
        code, ready = http_get(base + "/readyz?verbose")
        assert code == 503 and ready["checks"]["agent"]["ok"] is False
        assert ready["checks"]["agent"]["detail"] == f"exited: {agent['exit_reason']}"
        assert cli(sock, "health").returncode == 0, "the daemon stays up for diagnostics"

        prompt = cli(sock, "prompt", "anyone there?")
        assert prompt.returncode == 1 and "not running" in prompt.stderr
        after = cli_json(sock, "session", "new")
        assert not after["accepted"] and after["reason_code"] == "agent_not_running"
        current = status(sock)["current"]
        assert current["session_error"]["reason_code"] == "agent_not_running", "an error naming no server is report-level"
        assert all(s["status"] != "failed" for s in current["servers"]), "and marks no row failed"
        assert all("delivered_at" not in s for s in current["servers"]), "nothing is delivered to a dead agent"

        window = cli(sock, "stderr")
        assert window.returncode == 0 and "warning:" in window.stderr and "sensitive" in window.stderr
        assert "crash-after" in window.stdout and "has exited" in window.stdout
        assert stop_via_cli(daemon, sock) == 0


def test_garbage_on_stdout_is_skipped_and_counted_and_a_mid_session_kill_is_report_level_evidence(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--garbage-stdout", "--flood-stderr", "1")
    sock = short_tmp / "c.sock"
    canary = "ANSWERCANARY93"
    with serving(spec, sock) as daemon:
        assert cli_json(sock, "session", "new")["accepted"]
        wait_row(sock, "kandev", "active")
        # The prompt, the tool's arguments, its result and the agent's answer all carry the canary.
        done = cli(sock, "prompt", f'CALL update_task {{"description": "{canary}"}}')
        assert done.returncode == 0 and "Called kandev/update_task" in done.stdout and canary in done.stdout

        def flooded() -> dict | None:
            v = cli_json(sock, "stderr")
            return v if v["total_bytes_seen"] >= 1024 * 1024 else None

        view = poll(flooded, timeout=30, what="the 1 MiB stderr flood")
        assert "sensitive" in view["warning"] and view["truncated"]
        assert 0 < len(view["lines"]) <= 50 and len("\n".join(view["lines"]).encode()) <= 16 * 1024

        pid = agent_pid(daemon)
        os.kill(pid, signal.SIGKILL)  # a crash in the middle of an accepted session

        def exited() -> dict | None:
            report = report_of(sock)
            return report if report.get("agent", {}).get("state") == "exited" else None

        report = poll(exited, timeout=30, what="the exit evidence")
        agent = report["agent"]
        assert agent["exit_signal"] == 9 and agent["exit_reason"] == "killed by SIGKILL"
        assert agent["stdout_skipped_lines"] >= 4, "junk lines between frames are counted, never logged"
        current = report["current"]
        assert current["session_error"]["reason_code"] == "agent_exited"
        assert row(report, "kandev")["status"] == "active", "an exit is report-level: the row keeps its evidence"
        assert http_get(base_url(daemon) + "/livez")[0] == 200
        assert stop_via_cli(daemon, sock) == 0
    persisted = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    log = stderr_text(daemon)
    for text in (persisted, log):
        assert canary not in text and "garbage" not in text and "flood-stderr" not in text
    assert read_report(tmp_path / "state", "exec-test").agent.stdout_skipped_lines >= 4


def test_hang_on_shutdown_with_forked_grandchildren_leaves_no_process_after_stop(tmp_path, short_tmp):
    pidfile = tmp_path / "grandchildren.pids"
    spec = agent_spec(
        tmp_path,
        "--hang-on-shutdown",
        "--fork-grandchildren",
        agent_extra=f'env = {{ AGENTCTL_REF_PIDFILE = "{pidfile}" }}',
    )
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:
        pid = agent_pid(daemon)
        poll(pidfile.exists, timeout=10, what="the grandchildren's pidfile")
        pids = [int(p) for p in pidfile.read_text().split()]
        assert len(pids) == 2 and not any(gone(p) for p in pids)
        assert cli_json(sock, "session", "new")["accepted"]
        assert stop_via_cli(daemon, sock, timeout=30) == 0
    for p in [pid, *pids]:
        assert gone(p), f"pid {p} of the agent tree survived `agentctl stop`"
    agent = read_report(tmp_path / "state", "exec-test").agent
    assert agent.state == "exited" and agent.stopped_by_daemon
    assert agent.exit_signal == 9, "it ignored stdin EOF and SIGTERM, so SIGKILL ended it"


def test_advertised_transports_decide_delivery_and_every_omission_carries_a_stable_reason(tmp_path, short_tmp):
    servers = """
[[mcp.servers]]
name = "docs"
type = "http"
url = "http://127.0.0.1:9/mcp"
"""
    spec_sse = agent_spec(tmp_path / "sse", "--sse-only", servers=servers)
    spec_none = agent_spec(tmp_path / "none", "--no-mcp-capabilities", servers=servers)
    sock_sse, sock_none = short_tmp / "s.sock", short_tmp / "n.sock"
    with serving_many([(spec_sse, sock_sse), (spec_none, sock_none)]) as (d_sse, d_none):
        assert cli_json(sock_sse, "session", "new")["accepted"]
        assert cli_json(sock_none, "session", "new")["accepted"]

        body = wait_row(sock_sse, "kandev", "active")
        assert row(body, "kandev")["transport"] == "sse", "the built-in server goes over sse when http is not advertised"
        docs = row(body, "docs")
        assert docs["status"] == "filtered" and docs["reason_code"] == "http_unsupported"
        assert report_of(sock_sse)["agent"]["mcp_capabilities"] == {"sse": True}

        # Neither advertised: the built-in server goes as a stdio server, agentctl's bridge to the endpoint.
        body = wait_row(sock_none, "kandev", "active")
        assert [e["transport"] for e in _evidence(body, "kandev", "delivered")] == ["stdio"]
        docs = row(body, "docs")
        assert docs["status"] == "filtered" and docs["reason_code"] == "http_unsupported"
        assert report_of(sock_none)["agent"]["mcp_capabilities"] == {}
        assert stop_via_cli(d_sse, sock_sse) == 0 and stop_via_cli(d_none, sock_none) == 0


def test_permission_requests_follow_the_policy_default_deny_and_are_counted_without_content(tmp_path, short_tmp):
    spec_deny = agent_spec(tmp_path / "deny", "--request-permission", "--ignore-mcp")
    spec_allow = agent_spec(tmp_path / "allow", "--request-permission", "--ignore-mcp", agent_extra='permission = "allow"')
    sock_deny, sock_allow = short_tmp / "d.sock", short_tmp / "a.sock"
    with serving_many([(spec_deny, sock_deny), (spec_allow, sock_allow)]) as daemons:
        for sock, answer, granted in ((sock_deny, "Permission cancelled", 0), (sock_allow, "Permission allow-once", 1)):
            assert cli_json(sock, "session", "new")["accepted"]
            done = cli(sock, "prompt", "read it")
            assert done.returncode == 0 and answer in done.stdout
            agent = report_of(sock)["agent"]
            assert agent["permission_requests"] == 1 and agent.get("permissions_granted", 0) == granted
        for daemon, sock in zip(daemons, (sock_deny, sock_allow)):
            assert stop_via_cli(daemon, sock) == 0
    for name in ("deny", "allow"):
        persisted = (tmp_path / name / "state" / "exec-test" / "report.json").read_text()
        assert "read the task" not in persisted and "allow-once" not in persisted, "no request content is kept"


def test_sigkill_of_the_daemon_takes_the_agent_along(tmp_path, short_tmp):
    spec = agent_spec(tmp_path, "--ignore-mcp")
    sock = short_tmp / "c.sock"
    with serving(spec, sock) as daemon:
        pid = agent_pid(daemon)
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
        poll(lambda: gone(pid), timeout=5, what="the agent to die with its daemon (parent-death signal)")
