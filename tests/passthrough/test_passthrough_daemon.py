"""Passthrough agents under the real daemon: a real CLI process (the reference agent or a sleeper),
real files, real evidence. Each process start is an attempt; nothing secret leaves the 0600 files."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from agentctl.control.client import ControlClient
from agentctl.spec_loader import load_spec
from tests.conftest import agentctl_cmd, eventually, poll, write_spec
from tests.passthrough.support import (
    ARG_CANARY, CANARIES, DEAD, ENV_CANARY, HEADER_CANARY, SLEEPER, agent_section, mode, tree,
)

REF_CLAUDE = ["agentctl-reference-agent", "--passthrough", "claude", "--connect-timeout", "20"]
REF_CODEX = ["agentctl-reference-agent", "--passthrough", "codex", "--connect-timeout", "20", "exec", "go"]


def rows(history) -> dict:
    return {r.name: r for r in history.current.servers} if history.current else {}



@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """Where the daemon's per-attempt private directories go, so a test can see them come and go."""
    d = tmp_path / "private"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.fixture
def workdir(tmp_path) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    return wd


# ---------------------------------------------------------------- the whole path, as a person runs it


def test_claude_cli_gets_its_config_connects_and_the_builtin_server_becomes_active(tmp_path, workdir, serve):
    private = tmp_path / "private"
    private.mkdir()
    spec = write_spec(tmp_path, agent_section("claude", REF_CLAUDE, workdir))
    daemon = serve(spec, env={"TMPDIR": str(private)})
    sock = daemon.socket
    client = ControlClient(sock)
    status_texts: list[str] = []

    def status() -> dict:
        # GET /v1/status is the body `agentctl status --json` prints; polled in-process (no interpreter per poll).
        body = client.get("/v1/status")[1]
        status_texts.append(json.dumps(body))
        return body

    def kandev_active() -> bool:
        current = status()["current"]
        row = {r["name"]: r for r in current["servers"]}["kandev"] if current else {}
        # Listing tools makes the row active; the call that follows is a separate request a moment later.
        return row.get("status") == "active" and row.get("tool_calls", 0) >= 1

    try:
        poll(kandev_active, timeout=30, what="the built-in server to become active and be called")
        cli = subprocess.run(agentctl_cmd("status", "--json", "--socket", str(sock)), capture_output=True, timeout=30)
        status_texts.append(cli.stdout.decode())
        current = json.loads(cli.stdout)["current"]
        assert current["origin"] == "passthrough_start" and current["accepted_at"]
        by_name = {r["name"]: r for r in current["servers"]}
        assert by_name["kandev"]["status"] == "active"
        assert by_name["kandev"]["client"]["name"] == "agentctl-reference-agent" and by_name["kandev"]["tool_calls"] >= 1
        # Third-party servers go straight to the agent: delivered, connection unverified, never failed.
        assert {n: by_name[n]["status"] for n in ("docs", "events", "fs")} == dict.fromkeys(("docs", "events", "fs"), "delivered")
        token = client.get("/v1/mcp-config")[1]["headers"]["Authorization"].split()[1]
        # The reference agent answers its one turn and exits 0 (stdin is closed): its file goes with it.
        poll(lambda: status()["checks"]["agent"] is False and not list(private.iterdir()), timeout=15,
             what="the CLI to finish and its private directory to be removed")
    finally:
        assert daemon.stop(signal.SIGTERM) == 0
    log = daemon.stderr_text()
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    kinds = [e["kind"] for e in json.loads(report)["current"]["evidence"] if e.get("server") in (None, "kandev")]
    assert kinds[:2] == ["configured", "delivered"] and "tools_list_observed" in kinds
    # Accepted at the CLI's first contact, never at its process start.
    assert kinds.index("session_accepted") > kinds.index("initialize_observed")
    assert "explicit_error" not in kinds  # exit code 0 is a finished print-mode CLI, not an error
    for secret in (token, *CANARIES):
        assert secret not in report and secret not in log and not any(secret in t for t in status_texts)
    assert list(private.iterdir()) == [] and tree(workdir) == []


async def test_codex_cli_gets_config_overrides_and_reaches_the_builtin_server(tmp_path, workdir, in_process_daemon):
    d = await in_process_daemon(write_spec(tmp_path, agent_section("codex", REF_CODEX, workdir)))
    await eventually(lambda: rows(d.ledger.history).get("kandev") and rows(d.ledger.history)["kandev"].status == "active",
                     20, what="kandev active over codex's -c overrides")
    by_name = rows(d.ledger.history)
    assert (by_name["events"].status, by_name["events"].reason_code) == ("filtered", "sse_unsupported_by_strategy")
    assert by_name["docs"].status == "delivered" and by_name["fs"].status == "delivered"
    assert d.agent.start_error is None and d.ledger.history.agent.protocol == "passthrough"


async def test_codex_cli_argv_readable_by_anyone_holds_no_env_or_header_value(tmp_path, workdir, in_process_daemon):
    d = await in_process_daemon(write_spec(tmp_path, agent_section("codex", SLEEPER, workdir)))
    pid = d.agent.supervisor.process.pid
    token = d.ledger.tokens.token_of(d.ledger.current_attempt_id)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    assert "mcp_servers.fs.env_vars=" in cmdline and ARG_CANARY in cmdline  # args are the server's argv
    for secret in (token, ENV_CANARY, HEADER_CANARY):
        assert secret not in cmdline
    assert f"FS_TOKEN={ENV_CANARY}" in environ  # forwarded to the stdio server by name
    assert rows(d.ledger.history)["fs"].status == "delivered"


async def test_config_is_written_and_removed_off_the_event_loop(
    tmp_path, workdir, private_tmp, monkeypatch, in_process_daemon
):
    # Wrappers around the real strategy and cleanup that note which thread they run on (fsync can take
    # seconds on a busy disk; the event loop must keep serving MCP meanwhile).
    from agentctl.agent.clis import get_strategy
    from agentctl.agent.passthrough import manager as pt_manager

    threads: dict[str, int] = {}
    strategy = get_strategy("cursor")
    real_materialize, real_cleanup = strategy.materialize, pt_manager.cleanup

    def materialize(req):
        threads["materialize"] = threading.get_ident()
        return real_materialize(req)

    def cleanup(mat):
        threads["cleanup"] = threading.get_ident()
        real_cleanup(mat)

    monkeypatch.setattr(strategy, "materialize", materialize)
    monkeypatch.setattr(pt_manager, "cleanup", cleanup)
    d = await in_process_daemon(write_spec(tmp_path, agent_section("cursor", SLEEPER, workdir)))
    assert (workdir / ".cursor" / "mcp.json").exists()
    await d.stop()
    loop_thread = threading.get_ident()
    assert set(threads) == {"materialize", "cleanup"} and loop_thread not in threads.values()
    assert tree(workdir) == [] and list(private_tmp.iterdir()) == []


# ---------------------------------------------------------------- merged files, restored at stop


async def test_cursor_file_holds_the_token_0600_while_running_and_comes_back_byte_for_byte(
    tmp_path, workdir, private_tmp, caplog, in_process_daemon
):
    caplog.set_level(logging.DEBUG)
    target = workdir / ".cursor" / "mcp.json"
    target.parent.mkdir()
    original = b'{\n  "mcpServers": {"mine": {"command": "my-server"}}\n}\n'
    target.write_bytes(original)
    target.chmod(0o640)
    d = await in_process_daemon(write_spec(tmp_path, agent_section("cursor", SLEEPER, workdir)))
    assert d.agent.supervisor.running
    token = d.ledger.tokens.token_of(d.ledger.current_attempt_id)
    merged = json.loads(target.read_text())["mcpServers"]
    assert set(merged) == {"mine", "kandev", "docs", "events", "fs"}
    assert merged["kandev"]["headers"] == {"Authorization": f"Bearer {token}"} and mode(target) == 0o600
    assert {r.name: r.status for r in d.ledger.history.current.servers} == dict.fromkeys(("kandev", "docs", "events", "fs"), "delivered")
    await d.stop()
    assert target.read_bytes() == original and mode(target) == 0o640
    assert tree(workdir) == [".cursor", ".cursor/mcp.json"] and list(private_tmp.iterdir()) == []
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    for secret in (token, *CANARIES):
        assert secret not in report and secret not in caplog.text


async def test_gemini_leaves_nothing_behind_when_the_workspace_had_no_settings(
    tmp_path, workdir, private_tmp, in_process_daemon
):
    d = await in_process_daemon(write_spec(tmp_path, agent_section("gemini", SLEEPER, workdir)))
    settings = json.loads((workdir / ".gemini" / "settings.json").read_text())["mcpServers"]
    assert settings["kandev"]["httpUrl"] == f"{d.ctx.mcp_base}/mcp" and settings["events"]["url"] == f"{DEAD}/sse"
    await d.stop()
    assert tree(workdir) == [] and list(private_tmp.iterdir()) == []


# ---------------------------------------------------------------- honest evidence when nothing can be handed over


async def test_without_a_strategy_every_server_is_unavailable_and_the_cli_still_runs(
    tmp_path, workdir, in_process_daemon
):
    d = await in_process_daemon(write_spec(tmp_path, agent_section(None, SLEEPER, workdir)))
    current = d.ledger.history.current
    assert {r.name: (r.status, r.reason_code) for r in current.servers} == dict.fromkeys(
        ("kandev", "docs", "events", "fs"), ("unavailable", "no_passthrough_strategy"))
    assert current.origin == "passthrough_start" and current.accepted_at is None, (
        "a CLI with no configuration shows no session: its process start is not one")
    assert d.agent.supervisor.running and tree(workdir) == []


async def test_a_config_agentctl_cannot_write_is_one_report_level_error_and_no_server_failed(
    tmp_path, workdir, in_process_daemon
):
    # The failure is agentctl's own, not an attachment error of any server: one explicit_error for the
    # report, and the servers it would have delivered were never exposed (unavailable), none failed.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workdir / ".cursor").symlink_to(elsewhere)
    spec = load_spec(write_spec(tmp_path, agent_section("cursor", SLEEPER, workdir) + '\n[policy]\ntransports = ["http", "stdio"]\n'))
    d = await in_process_daemon(spec)
    current = d.ledger.history.current
    by_name = rows(d.ledger.history)
    assert {n: (r.status, r.reason_code) for n, r in by_name.items()} == {
        "kandev": ("unavailable", "materialize_failed"), "docs": ("unavailable", "materialize_failed"),
        "fs": ("unavailable", "materialize_failed"), "events": ("filtered", "policy_denied"),
    }
    why = "symlink in the way at .cursor; refusing to write through it"
    assert (current.session_error.reason_code, current.session_error.summary) == ("materialize_failed", why)
    errors = [e for e in current.evidence if e.kind == "explicit_error"]
    assert len(errors) == 1 and errors[0].server is None
    assert by_name["kandev"].summary == why
    assert d.agent.start_error.reason_code == "materialize_failed" and d.agent.supervisor.process is None
    agent = d.ledger.history.agent
    assert (agent.protocol, agent.state, agent.exit_reason) == ("passthrough", "exited", why)
    assert d.ctx.readiness.checks["agent"] is False and d.ctx.readiness.checks["mcp_endpoint"] is True
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------- restarts


async def test_each_process_start_is_a_new_attempt_with_its_own_token(
    tmp_path, workdir, private_tmp, in_process_daemon
):
    d = await in_process_daemon(write_spec(tmp_path, agent_section("claude", REF_CLAUDE, workdir, servers=False)))
    first = d.ledger.current_attempt_id
    first_token = d.ledger.tokens.token_of(first)
    await eventually(lambda: rows(d.ledger.history)["kandev"].status == "active", 20, what="first attempt active")
    await eventually(lambda: d.ledger.history.agent.state == "exited" and not list(private_tmp.iterdir()), 20,
                     what="the first CLI run to finish and clean up")
    assert d.ledger.history.current.session_error is None  # exit 0

    second = await d.agent.restart()
    assert second == d.ledger.current_attempt_id and second != first
    assert d.ledger.tokens.token_of(second) != first_token
    history = d.ledger.history
    assert history.current.origin == "passthrough_start" and history.previous[0].attempt_id == first
    assert history.previous[0].superseded_at is not None
    assert {r.name: r.status for r in history.previous[0].servers} == {"kandev": "active"}  # kept, not reset
    await eventually(lambda: rows(d.ledger.history)["kandev"].status == "active", 20, what="second attempt active")
    await d.stop()
    assert list(private_tmp.iterdir()) == [] and tree(workdir) == []


async def test_a_cli_that_fails_is_a_report_level_diagnostic(tmp_path, workdir, private_tmp, in_process_daemon):
    failing = [*REF_CLAUDE, "--crash-after", "0.05"]
    d = await in_process_daemon(write_spec(tmp_path, agent_section("claude", failing, workdir, servers=False)))
    error = await eventually(lambda: d.ledger.history.current.session_error, 20, what="the exit diagnostic")
    assert error.reason_code == "agent_exited" and error.summary == "exited with code 3"
    assert rows(d.ledger.history)["kandev"].status != "failed"  # an exit names no server
    # Removed off the event loop, in a worker thread, once the exit is known: a deadline, not a race.
    await eventually(lambda: not list(private_tmp.iterdir()), 20, what="the private directory to be removed")
