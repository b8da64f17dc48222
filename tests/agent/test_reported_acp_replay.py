"""Every ACP adapter's own report of its MCP servers, replayed by a raw ACP agent through the real daemon: each
shape in its failed, needs-authentication and connected forms sets the row with its source label within 1 s,
a healthy stream changes no row, and hostile forms (a server never delivered, 100,000 flip-flops, a 2 MiB
frame, a forged claim about the built-in server, an unknown extension method) cost nothing and leak nothing.

The frames are tests/agent/data/reported/acp-replay.json, each case naming the adapter file and version its
shape was taken from."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import pytest

from agentctl.present.rows import row_view
from tests.agent.serve_support import canary_http_server, cli, closed_port
from tests.conftest import eventually, write_spec

DATA = Path(__file__).parent / "data" / "reported" / "acp-replay.json"
AGENT = Path(__file__).parent / "fixtures" / "replay_agent.py"
CASES = json.loads(DATA.read_text())["cases"]
REPORTERS = {"claude-agent-acp": "claude-agent-acp", "codex-acp": "codex-acp", "kiro": "Kiro CLI"}


def _spec(tmp_path: Path, frames: list | Path, *, repeat: int = 1, servers: str | None = None) -> Path:
    path = frames if isinstance(frames, Path) else tmp_path / "frames.json"
    if not isinstance(frames, Path):
        path.write_text(json.dumps(frames))
    command = json.dumps([sys.executable, str(AGENT), "--frames", str(path), "--repeat", str(repeat)])
    extra = f"[agent]\ncommand = {command}\nstop_grace = 0.3\n"
    return write_spec(tmp_path, extra + (servers if servers is not None else canary_http_server(closed_port(), "31")))


def _kiro(event: str, session: str | None = "$SESSION", **params: str) -> dict:
    """A Kiro `_kiro.dev/mcp/<event>` notification about `docs` (no sessionId when `session` is None)."""
    ids = {} if session is None else {"sessionId": session}
    return {"method": f"_kiro.dev/mcp/{event}", "params": {**ids, "serverName": "docs", **params}}


def _row(daemon, name: str):
    return next(r for r in daemon.ledger.history.current.servers if r.name == name)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_each_shape_sets_the_row_with_its_source_within_a_second_and_a_healthy_stream_sets_none(
    case, tmp_path, short_tmp, in_process_daemon, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    daemon = await in_process_daemon(_spec(tmp_path, case["frames"]), socket=short_tmp / "r.sock")
    asked = time.monotonic()  # the frames follow the session's answer: this bounds frame-to-row from above
    outcome = await daemon.agent.acp.new_session()
    assert outcome.accepted
    (status, reported), = case["expect"].values()
    if reported is None:
        # A healthy stream: every frame is on the wire in one burst before a prompt's answer; once the prompt
        # is answered, every frame before it was read, and none may have set or labelled a row.
        await daemon.agent.acp.prompt("hi")
        row = _row(daemon, "docs")
        assert (row.status, row.reported) == ("delivered", None)
        assert daemon.ledger.history.current.notice_count == 1, "free text stays a weak notice line"
        return
    await eventually(lambda: _row(daemon, "docs").reported is not None, 5, what="the report")
    took = time.monotonic() - asked
    row = _row(daemon, "docs")
    assert (row.status, row.reported.state, row.reported.source) == (status, reported, case["source"])
    assert took < 1.0, f"the row reached its reported state {took:.2f} s after session/new was sent"
    print(f"{case['id']}: reported state {took * 1000:.0f} ms after session/new was sent")
    if case["source"] == "claude-agent-acp:notice":
        assert daemon.ledger.history.current.notice_count == 0, "the relay is the row's status, not a notice line"
    view = row_view(row)
    reporter = REPORTERS[case["source"].partition(":")[0]]
    if row.status_source == "reported":
        assert view.label == f"{status} · reported by {reporter}" and view.sources[0] == case["source"]
    shown = await asyncio.to_thread(cli, short_tmp / "r.sock", "report", "--json")
    assert case["source"] in shown.stdout and "CANARY" not in shown.stdout
    assert not [r for r in caplog.records if "CANARY" in r.getMessage()]


async def test_a_report_about_a_server_agentctl_never_delivered_creates_no_row_and_changes_none(
    tmp_path, short_tmp, in_process_daemon
) -> None:
    frames = [{"method": "_kiro.dev/mcp/server_init_failure",
               "params": {"sessionId": "$SESSION", "serverName": "ghost", "error": "boom"}},
              {"update": {"sessionUpdate": "notice", "severity": "warning", "title": 'MCP server "ghost" failed to start'}}]
    daemon = await in_process_daemon(_spec(tmp_path, frames), socket=short_tmp / "g.sock")
    assert (await daemon.agent.acp.new_session()).accepted
    await daemon.agent.acp.prompt("hi")  # answered after the frames: they were all read
    names = {r.name: (r.status, r.reported) for r in daemon.ledger.history.current.servers}
    assert "ghost" not in names and names["docs"] == ("delivered", None)
    assert not [e for e in daemon.ledger.history.current.evidence if e.kind == "agent_reported"]


async def test_a_report_flip_flopping_100000_times_costs_a_few_records_and_ends_at_the_last_state(
    tmp_path, short_tmp, in_process_daemon
) -> None:
    flip = [_kiro("server_initialized"), _kiro("server_init_failure", error="down")]
    recorded = []
    daemon = await in_process_daemon(_spec(tmp_path, flip, repeat=50_000), socket=short_tmp / "f.sock")
    daemon.ledger.subscribe(lambda event: recorded.append(event) if event and event.kind == "agent_reported" else None)
    started = time.monotonic()
    assert (await daemon.agent.acp.new_session()).accepted
    await daemon.agent.acp.prompt("hi")  # answered after all 100,000 frames were read
    row = await eventually(lambda: (r := _row(daemon, "docs")).reported and r.status == "failed" and r, 10,
                           what="the last state")
    took = time.monotonic() - started
    assert row.reported.summary == "down"
    assert len(recorded) < 2_000, f"{len(recorded)} records for 100,000 frames"
    assert daemon.agent.acp.connected
    print(f"100,000 flip-flops: {len(recorded)} records, {took:.2f} s to read them all")


async def test_a_2_mib_report_frame_keeps_only_a_bounded_redacted_summary(tmp_path, short_tmp, in_process_daemon) -> None:
    text = "[codex-acp forwarded startup error] MCP server `docs` failed to start: " + "secretCANARY32 " * (2 * 1024 * 1024 // 15)
    frame = {"update": {"sessionUpdate": "tool_call", "toolCallId": "mcp_startup.docs.1", "title": "mcp__docs__startup",
                        "status": "failed", "content": [{"type": "content", "content": {"type": "text", "text": text}}]}}
    daemon = await in_process_daemon(_spec(tmp_path, [frame]), socket=short_tmp / "b.sock")
    assert (await daemon.agent.acp.new_session()).accepted
    row = await eventually(lambda: (r := _row(daemon, "docs")).reported and r, 5, what="the report")
    assert row.status == "failed" and row.reported.source == "codex-acp:mcp-startup"
    assert len(row.summary.encode()) <= 256
    assert daemon.agent.acp.connected


async def test_a_forged_claim_that_the_built_in_server_is_connected_with_999_tools_is_a_disagreement(
    tmp_path, short_tmp, in_process_daemon
) -> None:
    tools = [{"name": f"t{i}"} for i in range(999)]
    frames = [{"method": "_kiro/mcp/status", "params": {"sessionId": "$SESSION", "servers": [
        {"name": "kandev", "status": "connected", "tools": tools}]}}]
    # No agent here contacts the built-in endpoint: agentctl saw no request to it.
    daemon = await in_process_daemon(_spec(tmp_path, frames, servers=""), socket=short_tmp / "k.sock")
    assert (await daemon.agent.acp.new_session()).accepted
    row = await eventually(lambda: (r := _row(daemon, "kandev")).reported and r, 5, what="the claim")
    assert row.status == "delivered" and row.status_source == "observed"
    view = row_view(row)
    assert view.disagreement == "Kiro CLI says connected; agentctl saw no request to its endpoint"
    shown = await asyncio.to_thread(cli, short_tmp / "k.sock", "status")
    assert "active" not in shown.stdout.split("kandev", 1)[1].splitlines()[0]
    assert "saw no request" in shown.stdout


async def test_an_unknown_extension_method_is_counted_never_logged_or_kept(
    tmp_path, short_tmp, in_process_daemon, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    frames = [{"method": "_vendor/methodCANARY33", "params": {"sessionId": "$SESSION", "x": "paramCANARY33"}}] * 3
    daemon = await in_process_daemon(_spec(tmp_path, frames), socket=short_tmp / "u.sock")
    assert (await daemon.agent.acp.new_session()).accepted
    await eventually(lambda: daemon.ledger.history.agent.unknown_ext_notifications == 3, 5, what="the count")
    await daemon.stop()
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    assert "CANARY" not in report and '"unknown_ext_notifications":3' in report.replace(" ", "")
    assert not [r for r in caplog.records if "CANARY" in r.getMessage()]


async def test_a_report_without_a_session_id_or_for_another_session_is_kept_on_no_attempt(
    tmp_path, short_tmp, in_process_daemon
) -> None:
    frames = [_kiro("server_init_failure", None, error="no id"),
              _kiro("server_init_failure", "someone-else", error="other session")]
    daemon = await in_process_daemon(_spec(tmp_path, frames), socket=short_tmp / "n.sock")
    assert (await daemon.agent.acp.new_session()).accepted
    await daemon.agent.acp.prompt("hi")  # answered after the frames: they were all read
    assert (_row(daemon, "docs").status, _row(daemon, "docs").reported) == ("delivered", None)
