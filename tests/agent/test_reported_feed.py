"""The report feed a passthrough CLI's output passes through, which report a run will give, and how the rows it
produces read on every surface (status, report, diagnostics, the hub page)."""

from __future__ import annotations

import pytest

from agentctl.agent.clis import open_feed, plan_report
from agentctl.agent.clis.claude import SOURCE, ClaudeInitReader, claude_request_args
from agentctl.agent.reported.feed import NULL_FEED, LedgerFeed
from agentctl.control.render import render_report, render_status
from agentctl.diagnostics.diagnostics import attempt_diagnostics
from agentctl.diagnostics.render import agent_lines, _server_block
from agentctl.evidence.contract.base import encode
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.hub.web_view import server_view
from tests.agent.reported_support import stdout_of
from tests.evidence.fixed import IDENT

CANARY = "PROMPT-CANARY-7d1e"


@pytest.mark.parametrize(("argv", "source", "note_has"), [
    (["claude", "-p", "hi", "--output-format", "stream-json", "--verbose"], SOURCE, None),
    (["claude", "--print", "--output-format=stream-json", "--verbose", "hi"], SOURCE, None),
    (["claude", "-p", "hi", "--output-format", "stream-json"], None, "without `--output-format stream-json"),
    (["claude", "-p", "hi", "--output-format", "json", "--verbose"], None, "without `--output-format stream-json"),
    (["claude", "--output-format", "stream-json", "--verbose"], None, "interactively"),
    (["claude", "-p", "x", "--", "--output-format", "stream-json", "--verbose"], None, "without"),
    (["claude", "-p", "x", "--output-format", "stream-json", "--output-format", "text", "--verbose"], None, "without"),
])
def test_a_claude_run_reports_only_when_its_own_flags_ask_for_stream_json_in_print_mode(argv, source, note_has):
    plan = plan_report("claude", argv)
    assert plan.source == source
    assert (plan.note is None) == (note_has is None)
    if note_has:
        assert note_has in plan.note and "no agent report is available" in plan.note


@pytest.mark.parametrize("strategy", ["codex", "gemini", "opencode", "cursor", None])
def test_every_other_cli_says_plainly_that_no_agent_report_is_available(strategy):
    plan = plan_report(strategy, ["cli", "-p", "--output-format", "stream-json", "--verbose"])
    assert plan.source is None and "no agent report" in plan.note


def test_report_off_reads_nothing_even_when_the_flags_ask_for_stream_json():
    plan = plan_report("claude", ["claude", "-p", "hi", "--output-format", "stream-json", "--verbose"], "off")
    assert plan.source is None and "off" in plan.note


@pytest.mark.parametrize(("argv", "added"), [
    (["claude", "-p", "hi"], ["--output-format", "stream-json", "--verbose"]),
    (["claude", "-p", "hi", "--verbose"], ["--output-format", "stream-json"]),
    (["claude", "-p", "hi", "--output-format", "text"], []),  # the user's choice is kept
    (["claude"], []),  # interactive: a TUI has no stream-json
    (["claude", "--", "-p"], []),
])
def test_request_adds_the_stream_json_flags_only_to_a_print_mode_run_that_chose_no_format(argv, added):
    assert claude_request_args(argv) == added
    if added:
        assert plan_report("claude", [*argv, *added]).source == SOURCE


def _ledger(names=("kandev", "research", "closed")) -> tuple[Ledger, str]:
    ledger = Ledger(IDENT)
    seeds = [ServerSeed(name=n, source="builtin" if n == "kandev" else "profile", transport="http",
                        target="http://127.0.0.1:18801") for n in names]
    attempt, _ = ledger.begin_attempt("passthrough_start", seeds)
    for name in names:
        ledger.record("delivered", attempt, name, transport="http")
    return ledger, attempt


def _fed(ledger: Ledger, attempt: str, data: bytes, chunk: int) -> LedgerFeed:
    feed = open_feed(ledger, attempt, plan_report("claude", ["c", "-p", "--output-format", "stream-json", "--verbose"]),
                     ["kandev", "research", "closed"])
    assert isinstance(feed, LedgerFeed)
    for i in range(0, len(data), chunk):
        feed.feed(data[i:i + chunk])
    feed.close()
    feed.close()  # idempotent: the stream ends once
    return feed


def test_the_real_init_event_fed_in_any_chunking_records_each_delivered_server_as_reported():
    data = stdout_of("claude-two-servers.stdout")
    for chunk in (1, 13, 65536):
        ledger, attempt = _ledger()
        feed = _fed(ledger, attempt, data, chunk)
        assert feed.recorded == 2
        rows = {r.name: r for r in ledger.history.current.servers}
        research = rows["research"]
        assert (research.status, research.status_source, research.reported.tool_count) == ("active", "reported", 2)
        assert research.tool_count is None, "the agent's count is its report, not agentctl's observation"
        assert (rows["closed"].status, rows["closed"].reason_code) == ("failed", "agent_reported_failed")
        assert rows["kandev"].status == "delivered" and rows["kandev"].reported is None


def test_no_feed_without_a_report_or_without_a_delivered_server():
    ledger, attempt = _ledger()
    assert open_feed(ledger, attempt, plan_report("claude", ["claude"]), ["research"]) is NULL_FEED
    assert open_feed(ledger, attempt, plan_report("claude", ["c", "-p", "--output-format", "stream-json", "--verbose"]),
                     []) is NULL_FEED


def test_nothing_of_the_output_but_the_parsed_states_reaches_the_report():
    ledger, attempt = _ledger()
    line = (b'{"type":"system","subtype":"init","cwd":"/home/' + CANARY.encode() + b'","tools":["mcp__research__a"],'
            b'"mcp_servers":[{"name":"research","status":"connected"},{"name":"' + CANARY.encode() + b'","status":"failed"}]}\n')
    _fed(ledger, attempt, b"{\"type\":\"user\",\"text\":\"" + CANARY.encode() + b"\"}\n" + line, 7)
    report = encode(ledger.history)
    assert CANARY.encode() not in report and b'"research"' in report
    assert {r.name: r.status for r in ledger.history.current.servers}["research"] == "active"


# ---- how the rows read ----------------------------------------------------------------------------------------


def _reported_world(observed_kandev: bool = True, disagree: bool = False) -> Ledger:
    ledger, attempt = _ledger()
    if observed_kandev:
        ledger.record("initialize_observed", attempt, "kandev", era="modern")
        ledger.record("tools_list_observed", attempt, "kandev", era="modern", tool_count=4)
    if disagree:  # the agent says the built-in server failed, agentctl saw it list tools
        ledger.record("agent_reported", attempt, "kandev", reported_state="failed", report_source=SOURCE, raw_state="failed")
    reader = ClaudeInitReader(["kandev", "research", "closed"])
    from agentctl.agent.reported import record

    record(ledger, attempt, SOURCE, reader.feed(stdout_of("claude-two-servers.stdout")) + reader.close())
    ledger.update_agent(protocol="passthrough", state="running", report_source=SOURCE)
    return ledger


def test_status_shows_kandev_observed_the_reachable_server_active_reported_and_the_refused_one_failed_reported():
    text = render_status(_reported_world().history, color=False)
    lines = text.splitlines()
    assert any(line.split()[:2] == ["kandev", "active"] and "reported" not in line for line in lines), text
    assert any("research" in line and "active · reported by Claude Code" in line for line in lines), text
    assert any("closed" in line and "failed · reported by Claude Code" in line for line in lines), text
    flat = " ".join(text.split())
    assert "Claude Code reported it connected and listed 2 tools" in flat
    assert "evidence: reported by Claude Code (claude:stream-json-init); agentctl observed delivered" in flat
    assert "agent report: read from the agent's output (claude:stream-json-init)" in flat


def test_a_reported_failure_is_red_and_an_observation_stays_the_state_with_the_report_and_disagreement_beside_it():
    history = _reported_world(disagree=True).history
    coloured = render_status(history, color=True)
    assert "\x1b[31mfailed · reported by Claude Code" in coloured
    text = " ".join(render_report(history, color=False).split())
    assert "kandev active" in text
    assert "also Claude Code reported failed (the agent's report; agentctl's observation is shown)" in text
    assert "disagreement: agentctl observed active; Claude Code reported failed" in text


def test_diagnostics_and_the_hub_page_read_the_rows_the_same_way():
    ledger = _reported_world(disagree=True)
    attempt = ledger.history.current
    diag = attempt_diagnostics(attempt, [])
    blocks = {s.name: " ".join(" ".join(_server_block(s, False)).split()) for s in diag.servers}
    assert "research active · reported by Claude Code" in blocks["research"]
    assert "closed failed · reported by Claude Code" in blocks["closed"]
    assert "disagreement: agentctl observed active; Claude Code reported failed" in blocks["kandev"]
    views = {row.name: server_view(row, attempt, ledger.history.agent) for row in attempt.servers}
    assert views["research"]["label"] == "active · reported by Claude Code" and views["research"]["tone"] == "green"
    assert views["closed"]["label"] == "failed · reported by Claude Code" and views["closed"]["tone"] == "red"
    assert any(d.startswith("disagreement:") for d in views["kandev"]["details"])
    assert "agent report: read from" in " ".join(agent_lines(ledger.history.agent))


def test_an_interactive_cli_says_at_report_level_that_no_report_is_available_and_no_row_changes():
    ledger, _ = _ledger()
    plan = plan_report("claude", ["claude"])
    ledger.update_agent(protocol="passthrough", state="running", report_source=plan.source, report_note=plan.note)
    text = " ".join(render_status(ledger.history, color=False).split())
    assert "agent report: none; Claude Code runs interactively" in text
    assert all(r.status == "delivered" and r.reported is None for r in ledger.history.current.servers)


def test_a_ledger_that_fails_to_record_stops_the_feed_not_the_stream(caplog):
    ledger, attempt = _ledger()
    calls = []

    def broken(*args, **kwargs):
        calls.append(args)
        raise RuntimeError(CANARY)

    ledger.record = broken  # a fault a real ledger does not produce on demand
    feed = _fed(ledger, attempt, stdout_of("claude-two-servers.stdout") * 2, 64)
    assert feed.recorded == 0 and len(calls) == 1, "one failure, then the feed reads no more"
    assert CANARY not in caplog.text and "RuntimeError" in caplog.text


def test_agentctl_run_prints_each_report_as_it_arrives_labelled_with_the_agent_that_reported_it():
    from agentctl.daemon.run import progress_line

    ledger = _reported_world(observed_kandev=False)
    lines = [progress_line(e, passthrough=True) for e in ledger.history.current.evidence if e.kind == "agent_reported"]
    assert lines == ["  reported    research: connected, 2 tools · reported by Claude Code",
                     "  reported    closed: failed · reported by Claude Code"]
