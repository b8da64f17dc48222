"""The status stays true after a fault, on a real `agentctl serve` (no agent; attempts opened over the control
socket, the agent played by raw HTTP and the SDK's own client): one malformed request does not leave the
built-in row red once a valid client lists and calls tools, and a closed legacy connection is not shown as
current after a later modern-era request. Both are checked in the JSON, the text of `agentctl status` and
`agentctl diagnostics`, and the report persisted at stop."""

from __future__ import annotations

from pathlib import Path

from agentctl.evidence.store import read_report
from tests.agent.serve_support import cli, report_of, row, serving
from tests.conftest import poll, write_spec
from tests.reliability.faults_support import attempt_of, kinds, open_attempt, raw_post, rpc, sdk_client
from tests.upstream.procs import builtins

MODERN = "2026-07-28"


def _wait_kandev(sock: Path, predicate, what: str) -> dict:
    def check():
        report = report_of(sock)
        return report if predicate(row(report, "kandev")) else None

    return poll(check, timeout=10, what=what)


async def test_a_malformed_initialize_then_a_valid_client_leaves_kandev_active_with_the_failure_as_detail(
    tmp_path, short_tmp
):
    sock = short_tmp / "c.sock"
    with serving(write_spec(tmp_path), sock) as daemon:
        config = open_attempt(sock)
        auth = {"Authorization": config["headers"]["Authorization"]}
        # An initialize without clientInfo: the SDK refuses it, and that is failure evidence for now.
        bad = rpc("initialize", params={"protocolVersion": "2025-11-25", "capabilities": {}})
        answer = await raw_post(config["url"], bad, auth)
        assert answer.status_code == 200 and "-32602" in answer.text
        failed = _wait_kandev(sock, lambda r: r["status"] == "failed", "kandev failed")
        assert row(failed, "kandev")["reason_code"] == "initialize_failed"

        # Then a valid client of the same attempt lists and calls tools.
        async with sdk_client(config) as client:
            assert (await client.list_tools()).tools
            assert (await client.call_tool("get_task", {})).is_error is False
        report = _wait_kandev(sock, lambda r: r.get("tool_calls", 0) >= 1, "the tool call")
        kandev = row(report, "kandev")
        assert kandev["status"] == "active" and "reason_code" not in kandev
        assert kandev["last_failure"]["reason_code"] == "initialize_failed"
        assert kandev["failed_at"] < kandev["tools_list_observed_at"]
        assert kinds(attempt_of(report, config["attempt_id"])).count("explicit_error") == 1

        status = cli(sock, "status")
        assert status.returncode == 0, status.stderr
        assert "kandev    active" in status.stdout
        text = " ".join(status.stdout.split())
        assert "tools loaded, used" in text
        assert "earlier attachment error, no longer current: an MCP initialize request failed at" in text
        assert "(initialize_failed: the initialize request failed (ValidationError)); a later contact succeeded" in text
        diagnostics = " ".join(cli(sock, "diagnostics").stdout.split())
        assert "[ ] failed" in diagnostics
        assert "earlier: initialize_failed; no longer current (a later contact succeeded)" in diagnostics
        assert daemon.stop() == 0
    persisted = row(builtins(read_report(tmp_path / "state", "exec-test")), "kandev")
    assert persisted["status"] == "active" and persisted["last_failure"] == kandev["last_failure"]


async def test_a_modern_request_after_a_legacy_connection_closed_never_shows_that_connection_as_current(
    tmp_path, short_tmp
):
    sock = short_tmp / "c.sock"
    with serving(write_spec(tmp_path), sock) as daemon:
        config = open_attempt(sock)
        async with sdk_client(config, mode="legacy") as client:  # leaving it DELETEs the session
            assert (await client.list_tools()).tools
        closed = _wait_kandev(sock, lambda r: r.get("disconnected_at"), "the legacy close")
        legacy = row(closed, "kandev")
        assert legacy["connection_id"].startswith("conn_") and legacy["era"] == "legacy"

        async with sdk_client(config, mode=MODERN) as client:
            assert (await client.call_tool("get_task", {})).is_error is False
            assert (await client.list_tools()).tools
        report = _wait_kandev(sock, lambda r: r.get("tool_calls", 0) >= 1 and r["era"] == "modern",
                              "the modern requests")
        kandev = row(report, "kandev")
        assert kandev["status"] == "active"
        # The closed connection is detail: same id, still closed, older than the modern contact.
        assert kandev["connection_id"] == legacy["connection_id"]
        assert kandev["disconnected_at"] == legacy["disconnected_at"]
        assert kandev["connection_seen_at"] <= kandev["disconnected_at"] < kandev["tools_list_observed_at"]
        modern = [e for e in attempt_of(report, config["attempt_id"])["evidence"] if e.get("era") == "modern"]
        assert modern and all("connection_id" not in e for e in modern)

        text = " ".join(cli(sock, "status").stdout.split())
        assert "legacy connection closed at" in text and "; modern-era requests since (stateless" in text
        assert daemon.stop() == 0
    persisted = row(builtins(read_report(tmp_path / "state", "exec-test")), "kandev")
    assert persisted["disconnected_at"] == kandev["disconnected_at"] and persisted["era"] == "modern"
