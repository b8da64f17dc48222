"""Human rendering: every display state says what it means, colour only when asked, 80 columns."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

import msgspec
import pytest

from agentctl.control.render import (
    AMBER,
    GREEN,
    GREY,
    RED,
    RESET,
    render_health,
    render_report,
    render_status,
    use_color,
    wrap,
)
from agentctl.present.rows import display_label
from agentctl.evidence.contract.control import CheckState, HealthResponse, StatusResponse
from agentctl.evidence.contract.report import (
    AttachmentHistory,
    Attempt,
    EndpointTestResult,
    ErrorSummary,
    ServerRow,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
EXEC = "exec_0123456789abcdef0123456789abcdef"
T0 = "2026-01-02T03:04:05Z"

ROWS = [
    {"name": "kandev", "source": "builtin", "status": "active", "tool_count": 7, "tool_calls": 2},
    {"name": "kandev-cfg", "source": "builtin", "status": "connected"},
    {"name": "kandev-new", "source": "builtin", "status": "delivered"},
    {"name": "github", "source": "profile", "status": "delivered"},
    {
        "name": "broken",
        "source": "profile",
        "status": "failed",
        "reason_code": "session_rejected",
        "summary": "the agent refused the server: transport not supported by this agent build",
    },
    {"name": "local-fs", "source": "profile", "status": "filtered", "reason_code": "http_unsupported"},
    {"name": "cli-only", "source": "profile", "status": "unavailable", "reason_code": "no_passthrough_strategy"},
    {"name": "later", "source": "profile", "status": "configured"},
]


def flat(text: str) -> str:
    """The text with wrapping undone (so a test can look for a sentence across wrapped lines)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def status_body(rows=ROWS, **extra) -> StatusResponse:
    """GET /v1/status's answer as the control client decodes it."""
    return msgspec.convert(status_dict(rows, **extra), StatusResponse)


def status_dict(rows=ROWS, **extra) -> dict:
    body = {
        "identity": {
            "task_id": "task-1",
            "session_id": "sess-1",
            "execution_id": EXEC,
            "instance_id": "inst_1",
            "agent_id": "agent-1",
            "agent_profile_id": "profile-1",
        },
        "ready": True,
        "checks": {"mcp_listener": True},
        "current": {
            "attempt_id": "att_0123456789abcdef",
            "task_id": "task-1",
            "session_id": "sess-1",
            "execution_id": EXEC,
            "instance_id": "inst_1",
            "origin": "session_new",
            "acp_session_id": "acp-1",
            "started_at": T0,
            "updated_at": T0,
            "accepted_at": T0,
            "servers": rows,
        },
        "report_path": "/var/lib/agentctl/report.json",
        "mcp_url": "http://127.0.0.1:40123/mcp",
        "rejected_events": 0,
    }
    body.update(extra)
    return body


SNAPSHOT = """\
Daemon: ready

  kandev      active
              7 tools loaded, used
  kandev-cfg  connected
              initialized, tools not listed yet
  kandev-new  delivered · connection unverified
              sent to the agent; the agent has not contacted this endpoint yet
  github      delivered · connection unverified
              sent to the agent; third-party servers connect directly to the
              agent, so this is expected
  broken      failed
              the agent refused the session
              session_rejected: the agent refused the server: transport not
              supported by this agent build
  local-fs    filtered
              not sent: the agent does not advertise MCP over HTTP
              http_unsupported
  cli-only    unavailable
              unavailable: agentctl has no way to give MCP servers to this CLI
              no_passthrough_strategy
  later       configured
              not sent to the agent yet

  attempt    att_0123456789abcdef (session_new) · ACP session acp-1
  execution  exec_0123456789abcdef0123456789abcdef
  task       task-1 · session sess-1
  MCP        http://127.0.0.1:40123/mcp
  report     /var/lib/agentctl/report.json
"""


def test_snapshot_of_every_display_state_without_colour() -> None:
    out = render_status(status_body(), color=False)
    assert out == SNAPSHOT
    assert "\x1b" not in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_colour_codes_follow_the_display_state() -> None:
    out = render_status(status_body(), color=True)
    assert f"{GREEN}active{RESET}" in out
    assert f"{AMBER}connected{RESET}" in out
    assert out.count(f"{AMBER}delivered · connection unverified{RESET}") == 2
    assert f"{RED}failed{RESET}" in out
    assert f"{GREY}filtered{RESET}" in out
    assert f"{GREY}unavailable{RESET}" in out
    # configured claims nothing: plain.
    assert re.search(r"  later       configured\n", out)
    # Same text once the codes are gone, and still 80 visible columns.
    assert ANSI.sub("", out) == render_status(status_body(), color=False)
    assert max(len(ANSI.sub("", line)) for line in out.splitlines()) <= 80


@pytest.mark.parametrize(
    ("row", "label", "meaning"),
    [
        ({"status": "active", "tool_count": 1}, "active", "1 tool loaded"),
        ({"status": "active", "tool_count": 12, "tool_calls": 3}, "active", "12 tools loaded, used"),
        ({"status": "connected"}, "connected", "initialized, tools not listed yet"),
        (
            {"status": "delivered", "source": "builtin"},
            "delivered · connection unverified",
            "sent to the agent; the agent has not contacted this endpoint yet",
        ),
        (
            {"status": "delivered", "source": "profile"},
            "delivered · connection unverified",
            "third-party servers connect directly to the agent, so this is expected",
        ),
        ({"status": "failed", "reason_code": "initialize_failed"}, "failed",
         "an MCP initialize request failed initialize_failed"),
        ({"status": "filtered", "reason_code": "duplicate_name"}, "filtered",
         "not sent: another server of this attempt already uses the name duplicate_name"),
        ({"status": "unavailable", "reason_code": "some_future_code"}, "unavailable", "some future code some_future_code"),
        ({"status": "filtered"}, "filtered", "no reason recorded"),
        ({"status": "configured"}, "configured", "not sent to the agent yet"),
    ],
)
def test_each_state_label_and_plain_language_line(row: dict, label: str, meaning: str) -> None:
    row = {"name": "srv", **row}
    assert display_label(msgspec.convert(row, ServerRow)) == label
    out = render_status(status_body(rows=[row]), color=False)
    assert re.search(rf"^  srv +{re.escape(label)}$", out, re.M)
    assert meaning in flat(out)
    assert "\x1b" not in out


def test_active_without_tool_use_does_not_claim_use() -> None:
    out = render_status(status_body(rows=[{"name": "k", "status": "active", "tool_count": 3}]), color=False)
    assert "3 tools loaded, none used yet\n" in out and ", used" not in out


def test_an_attempt_shows_its_endpoint_test_and_session_error_as_details_and_fails_no_row() -> None:
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    attempt = Attempt(
        attempt_id="att_1",
        task_id="task-1",
        session_id="sess-1",
        execution_id=EXEC,
        instance_id="inst_1",
        started_at=t,
        updated_at=t,
        servers=[
            ServerRow(name="kandev", source="builtin", status="active", tool_count=4, disconnected_at=t),
            ServerRow(
                name="gh",
                status="delivered",
                endpoint_test=EndpointTestResult(succeeded=False, tested_at=t, reason_code="connect_failed"),
            ),
        ],
        session_error=ErrorSummary(reason_code="session_timeout", summary="session/new failed"),
    )
    assert display_label(attempt.servers[1]) == "delivered · connection unverified"
    out = render_status(attempt, color=False)
    assert "4 tools loaded" in out
    assert "legacy connection closed at 2026-01-02 03:04:05\n" in out
    # Labelled as a test failure from the daemon, not as what happened inside the agent: words first, code as detail.
    assert ("endpoint test failed: could not connect to the server [connect_failed] (a test from the daemon, "
            "not what the agent saw)") in flat(out)
    # A session error is a diagnostic, not a failed row; the NO SESSION headline says it, its detail under it, once.
    assert ("NO SESSION: the agent did not answer the session request in time [session_timeout]. The agent has no "
            "session with these servers; each row below is only what happened before that "
            "session_timeout: session/new failed") in flat(out)
    assert flat(out).count("the agent did not answer the session request in time") == 1
    assert not re.search(r"^  \S+ +failed$", out, re.M)
    assert f"execution  {EXEC}" in out


def test_long_names_and_summaries_stay_within_80_columns() -> None:
    rows = [
        {"name": "a-really-long-server-name-from-some-profile", "status": "failed", "reason_code": "x" * 30,
         "summary": "word " * 51},  # at the contract's bound (MAX_SUMMARY_BYTES)
        {"name": "s", "status": "delivered"},
    ]
    out = render_status(status_body(rows=rows), color=True)
    assert max(len(ANSI.sub("", line)) for line in out.splitlines()) <= 80
    assert "a-really-long-server-na…" in out


def test_not_ready_and_no_attempt_yet() -> None:
    body = status_body(ready=False, checks={"mcp_listener": True, "upstream": False}, current=None)
    out = render_status(body, color=False)
    assert out.startswith("Daemon: not ready (waiting for upstream)\n")
    assert "no attachment attempt yet" in out


def test_report_shows_previous_attempts() -> None:
    body = status_dict()
    previous = dict(body["current"], attempt_id="att_old", superseded_at=T0, servers=[ROWS[3]])
    history = {
        "version": 1,
        "identity": body["identity"],
        "updated_at": T0,
        "current": body["current"],
        "previous": [previous],
        "http_refusals": [{"route": "/mcp", "method": "POST", "status": 401, "count": 3}],
    }
    out = render_report(msgspec.convert(history, AttachmentHistory), color=False)
    assert "Previous attempt att_old (session_new) · ACP session acp-1, superseded 2026-01-02 03:04:05" in flat(out)
    assert "refused    3 HTTP requests before MCP" in out
    assert "Daemon:" not in out  # a report has no live readiness
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_report_shows_each_attempts_kept_gate_reading_beside_its_rows_in_grey_never_as_a_row() -> None:
    body = status_dict(rows=[ROWS[2]])
    blocked = {"state": "blocked", "timeout": 30.0, "judged_at": T0, "servers": [
        {"name": "kandev-new", "state": "not_attached", "policy": "required, not attached after 30 s"}]}
    previous = dict(body["current"], attempt_id="att_old", superseded_at=T0, servers=[ROWS[2]], required=blocked)
    current = dict(body["current"], required=dict(blocked, state="waiting", servers=[
        {"name": "kandev-new", "state": "waiting", "policy": "required, waiting"}]))
    history = {"version": 3, "identity": body["identity"], "updated_at": T0, "current": current,
               "previous": [previous]}
    out = render_report(msgspec.convert(history, AttachmentHistory), color=True)
    plain = ANSI.sub("", out)
    assert plain.count("  required   kandev-new: required, waiting") == 1
    previous_part = plain.split("Previous attempt att_old", 1)[1]
    assert "  required   kandev-new: required, not attached after 30 s" in previous_part
    line = next(x for x in out.splitlines() if "not attached after 30 s" in x)
    assert line.startswith(GREY) and RED not in line, "a policy reading beside the evidence, never a red row"
    assert display_label(msgspec.convert(ROWS[2], ServerRow)) in plain  # the row still says its own evidence


def _health(**fields) -> HealthResponse:
    return HealthResponse(**{"live": True, "ready": False, "stopping": False, "checks": {}, **fields})


def test_health_lines() -> None:
    assert render_health(_health(live=True, ready=False), False, color=False) == "live\n"
    assert render_health(_health(live=True, ready=True), True, color=True) == f"{GREEN}ready{RESET}\n"
    body = _health(live=True, ready=False, stopping=True, checks={"a": CheckState(ok=True)})
    assert render_health(body, True, color=False) == "not ready (stopping)\n"


class FakeStream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_use_color_honours_no_color_and_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    assert use_color(FakeStream(tty=True)) is True
    assert use_color(FakeStream(tty=False)) is False
    assert use_color(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(FakeStream(tty=True)) is False
    monkeypatch.setenv("NO_COLOR", "")  # present but empty: no effect (no-color.org)
    assert use_color(FakeStream(tty=True)) is True
    monkeypatch.setenv("TERM", "dumb")
    assert use_color(FakeStream(tty=True)) is False


def test_a_failure_a_later_contact_superseded_is_shown_as_detail_with_its_time_code_and_summary() -> None:
    row = {"name": "kandev", "source": "builtin", "status": "active", "tool_count": 4, "failed_at": T0,
           "tools_list_observed_at": "2026-01-02T03:05:00Z",
           "last_failure": {"reason_code": "initialize_failed", "summary": "the initialize request failed (x)"}}
    out = flat(render_status(status_body(rows=[row]), color=False))
    assert "kandev    active 4 tools loaded, none used yet" in out
    assert ("earlier attachment error, no longer current: an MCP initialize request failed at 2026-01-02 03:04:05 "
            "(initialize_failed: the initialize request failed (x)); a later contact succeeded") in out
    # While the failure is current the row says so in words, and the same failure is not repeated as "earlier".
    failed = {**row, "status": "failed", "reason_code": "initialize_failed", "summary": "the initialize request failed (x)"}
    out = flat(render_status(status_body(rows=[failed]), color=False))
    assert "kandev    failed an MCP initialize request failed initialize_failed: the initialize request failed (x)" in out
    assert "earlier" not in out


def test_a_closed_legacy_connection_with_later_modern_requests_says_both() -> None:
    closed = {"name": "kandev", "source": "builtin", "status": "active", "tool_count": 4, "era": "legacy",
              "connection_id": "conn_1", "initialize_observed_at": T0, "disconnected_at": "2026-01-02T03:05:00Z"}
    assert "legacy connection closed at 2026-01-02 03:05:00\n" in render_status(status_body(rows=[closed]), False)
    later = {**closed, "era": "modern", "tools_list_observed_at": "2026-01-02T03:06:00Z"}
    out = flat(render_status(status_body(rows=[later]), color=False))
    assert ("legacy connection closed at 2026-01-02 03:05:00; modern-era requests since (stateless: they have no "
            "connection)") in out


def test_an_attempt_whose_session_was_refused_says_so_above_its_green_rows() -> None:
    # Qwen Code's shape: it connected to every server and listed the tools, then refused session/new.
    active = {"name": "kandev", "source": "builtin", "status": "active", "tool_count": 10}
    refused = status_dict([active])
    refused["current"].update(accepted_at=None, acp_session_id=None,
                              session_error={"reason_code": "session_rejected", "summary": "Internal error"})
    out = render_status(msgspec.convert(refused, StatusResponse), color=False)
    lines = out.splitlines()
    first_row = next(i for i, line in enumerate(lines) if line.strip().startswith("kandev"))
    assert "NO SESSION: the agent refused the session [session_rejected]" in " ".join(lines[:first_row])
    assert "NO SESSION" not in render_status(status_body([active]), color=False), "an accepted session has none"
    colored = render_status(msgspec.convert(refused, StatusResponse), color=True)
    assert "\x1b[31m  NO SESSION" in colored


def test_a_refusal_that_failed_a_named_server_heads_the_attempt_too_and_one_still_in_flight_does_not() -> None:
    failed = {"name": "docs", "source": "profile", "status": "failed", "reason_code": "session_rejected"}
    delivered = {"name": "docs", "source": "profile", "status": "delivered"}
    body = status_dict([failed])
    body["current"].update(accepted_at=None, acp_session_id=None)
    assert "NO SESSION" in render_status(msgspec.convert(body, StatusResponse), color=False)
    body = status_dict([delivered])
    body["current"].update(accepted_at=None, acp_session_id=None)
    assert "NO SESSION" not in render_status(msgspec.convert(body, StatusResponse), color=False)


def test_a_session_error_no_headline_said_keeps_its_own_line() -> None:
    # Accepted, then a session-level error: no NO SESSION headline, so the error has its own line and detail.
    body = status_dict([{"name": "kandev", "source": "builtin", "status": "active", "tool_count": 10}])
    body["current"]["session_error"] = {"reason_code": "session_error", "summary": "boom"}
    out = flat(render_status(msgspec.convert(body, StatusResponse), color=False))
    assert "NO SESSION" not in out
    assert "session error (not tied to one server): " in out and "session_error: boom" in out


def test_wrapping_never_cuts_a_path_or_splits_the_command_a_fix_gives() -> None:
    path = "/var/lib/agentctl/" + "a-long-state-directory-" * 4 + "exec_0123/report.json"
    lines = wrap(f"report written to {path} for the record", 2)
    assert f"  {path}" in lines, "a word longer than a line overflows whole, never cut"
    text = ("the agent refused because an MCP server it was given failed: the rows above say which, and "
            "`agentctl test-endpoint NAME --socket PATH` checks one from the daemon")
    lines = wrap(text, 12)
    assert any("`agentctl test-endpoint NAME --socket PATH`" in line for line in lines), lines
    assert all(len(line) <= 80 for line in lines)
    assert " ".join(" ".join(lines).split()) == text
