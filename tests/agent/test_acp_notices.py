"""ACP session notices: agentctl opts in, takes a `notice` session/update off the wire (the pinned SDK has no
model for it) and keeps it as a weak report-level line, redacted and bounded, that changes no row."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

from agentctl.agent.acp_notices import NO_TITLE, NoticeTap, advertise, parse_notice
from agentctl.agent.transports import AgentStdioTransport
from agentctl.evidence.contract.report import MAX_NOTICES_PER_ATTEMPT, AgentNotice
from agentctl.evidence.ledger import Ledger
from tests.agent.serve_support import agent_spec, canary_http_server, cli, closed_port
from tests.conftest import eventually
from tests.evidence.fixed import IDENT

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_the_initialize_request_opts_in_to_session_notices_and_other_frames_are_left_alone() -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False}}}}
    assert advertise(init)["params"]["clientCapabilities"] == {"fs": {"readTextFile": False}, "session": {"notices": {}}}
    other = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}}
    assert advertise(json.loads(json.dumps(other))) == other


def test_a_notice_keeps_its_severity_and_redacted_text_and_names_one_server_only_when_it_says_so() -> None:
    secret = "Bearer headerCANARY26"
    notice = parse_notice(
        {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server 'docs' unavailable",
         "description": f"GET http://10.0.0.5:81/pathCANARY26?key=queryCANARY26 with Authorization: {secret} failed"},
        ["kandev", "docs"], NOW, [secret],
    )
    assert notice.severity == "warning" and notice.server == "docs" and notice.source == "acp:session-notice"
    assert "CANARY" not in notice.title + notice.description and "http://10.0.0.5:81" in notice.description
    odd = parse_notice({"sessionUpdate": "notice", "severity": "fatal", "title": " ", "description": None},
                       ["kandev", "docs"], NOW)
    assert (odd.severity, odd.title, odd.description, odd.server) == ("unknown", NO_TITLE, None, None)
    both = parse_notice({"sessionUpdate": "notice", "severity": "info", "title": "MCP server 'docs' and MCP "
                         "server 'kandev' restarted"}, ["kandev", "docs"], NOW)
    assert both.server is None, "two servers named: the notice names none"


def test_the_ledger_keeps_the_first_notices_counts_every_one_and_no_row_changes() -> None:
    ledger = Ledger(IDENT)
    attempt_id, _ = ledger.begin_attempt("session_new")
    ledger.record("delivered", attempt_id, "docs", transport="http", target="http://h")
    for i in range(MAX_NOTICES_PER_ATTEMPT + 3):
        assert ledger.add_notice(attempt_id, AgentNotice(severity="error", title=f"notice {i}", occurred_at=NOW))
    attempt = ledger.history.current
    assert attempt.notice_count == MAX_NOTICES_PER_ATTEMPT + 3
    assert [n.title for n in attempt.notices] == [f"notice {i}" for i in range(MAX_NOTICES_PER_ATTEMPT)]
    assert [(r.name, r.status) for r in attempt.servers] == [("docs", "delivered")], "an error notice fails nothing"
    assert ledger.add_notice("att_gone", AgentNotice(severity="info", title="x", occurred_at=NOW)) is False


def test_a_snapshot_from_outside_with_too_many_notices_is_cut_to_the_bound_and_still_counts_them() -> None:
    from agentctl.evidence.reducer import enforce_bounds

    ledger = Ledger(IDENT)
    ledger.begin_attempt("session_new")
    history = ledger.history
    history.current.notices = [AgentNotice(severity="info", title=f"n{i}", occurred_at=NOW) for i in range(500)]
    history.current.notice_count = 0  # a sender that lies about its count
    bounded = enforce_bounds(history)
    assert [n.title for n in bounded.current.notices] == [f"n{i}" for i in range(MAX_NOTICES_PER_ATTEMPT)]
    assert bounded.current.notice_count == 500


async def test_the_transport_consumes_a_notice_frame_and_hands_on_every_other_frame() -> None:
    reader = asyncio.StreamReader()
    taken: list[tuple[str | None, dict]] = []
    transport = AgentStdioTransport(reader, None, intercept=NoticeTap(lambda s, u: taken.append((s, u))).take)  # type: ignore[arg-type]
    notice = {"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": "s1", "update": {"sessionUpdate": "notice", "severity": "info", "title": "t"}}}
    chunk = {"jsonrpc": "2.0", "method": "session/update",
             "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}}}
    reader.feed_data((json.dumps(notice) + "\n" + json.dumps(chunk) + "\n").encode())
    reader.feed_eof()
    assert await transport.receive() == chunk
    assert await transport.receive() is None
    assert taken == [("s1", notice["params"]["update"])]


async def test_a_reference_agent_notice_is_one_sanitized_report_line_and_no_row_changes_status(
    tmp_path, short_tmp, in_process_daemon, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    port = closed_port()
    servers = canary_http_server(port, "26")
    sock = short_tmp / "n.sock"
    daemon = await in_process_daemon(agent_spec(tmp_path, "--send-notice", servers=servers), socket=sock)
    outcome = await daemon.agent.acp.new_session()
    assert outcome.accepted
    attempt = await eventually(lambda: daemon.ledger.history.current if daemon.ledger.history.current.notice_count
                               else None, 20, what="the agent's notice")
    [notice] = attempt.notices
    assert notice.severity == "warning" and notice.server == "docs" and "unavailable" in notice.title
    assert "CANARY" not in notice.title + notice.description and "/mcp" not in notice.description
    assert "continuing without its tools" in notice.description, "the agent's own words are kept"
    await eventually(lambda: _status(daemon, "kandev") == "active", 20, what="kandev active")
    assert _status(daemon, "docs") == "delivered", "the notice names docs; its row is unchanged"
    assert attempt.session_error is None

    shown = await asyncio.to_thread(cli, sock, "status")
    assert "agent notice (warning; the agent's words, not agentctl's observation" in shown.stdout
    assert "MCP server 'docs' unavailable" in shown.stdout and "CANARY" not in shown.stdout
    diagnostics = await asyncio.to_thread(cli, sock, "diagnostics", "--json")
    assert json.loads(diagnostics.stdout)["current"]["notice_count"] == 1 and "CANARY" not in diagnostics.stdout
    await daemon.stop()
    report = (tmp_path / "state" / "exec-test" / "report.json").read_text()
    assert '"notice_count":1' in report.replace(" ", "") and "CANARY" not in report
    assert not [r for r in caplog.records if "CANARY" in r.getMessage()], "nothing of the notice is logged"
    assert not [r for r in caplog.records if r.getMessage().startswith("ACP SDK")], "the SDK never saw it"


def _status(daemon, name: str) -> str:
    return next(r.status for r in daemon.ledger.history.current.servers if r.name == name)


def test_every_surface_shows_the_notices_as_report_lines_and_says_how_many_were_not_kept() -> None:
    from agentctl.control.render import render_attempt
    from agentctl.hub.web_view import attempt_view

    ledger = Ledger(IDENT)
    attempt_id, _ = ledger.begin_attempt("session_new")
    ledger.record("delivered", attempt_id, "docs", transport="http", target="http://h")
    for i in range(MAX_NOTICES_PER_ATTEMPT + 2):
        ledger.add_notice(attempt_id, AgentNotice(severity="warning", title=f"MCP server 'docs' unavailable {i}",
                                                  description="retrying", occurred_at=NOW, server="docs"))
    attempt = ledger.history.current
    text = "\n".join(render_attempt(attempt, color=False))
    assert text.count("agent notice (warning; the agent's words") == MAX_NOTICES_PER_ATTEMPT
    assert "unavailable 0: retrying" in text and "2 more agent notices not kept" in text
    view = attempt_view(attempt)
    assert len(view["notices"]) == MAX_NOTICES_PER_ATTEMPT + 1 and view["servers"][0]["status"] == "delivered"
