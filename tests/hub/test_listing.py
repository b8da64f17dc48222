"""The hub's session list at fleet size, on both engines (a real SQLite file and a real PostgreSQL database): the
database orders, filters and searches it (agentctl.hub.listing), a page is bounded and windows cover the list
once, and a write without a history keeps the listing it had. Then the query a request asks for, refused
with a specific error when it is bad."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import (
    AgentState,
    Attempt,
    AttachmentHistory,
    ErrorSummary,
    RequiredGate,
    RequiredReading,
    ServerRow,
)
from agentctl.hub.hub_store import ExecutionRecord, SessionRecord
from agentctl.hub.listing import MAX_LIMIT, PageQuery, PageQueryError, parse_query
from agentctl.hub.state import ExecutionState
from tests.upstream.support import identity

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _history(sid: str, statuses: list[str], *, error: bool = False, agent: str = "ref-agent",
             gate: str | None = None) -> AttachmentHistory:
    ident = identity(session=sid, execution="e-1")
    required = None if gate is None else RequiredGate(state=gate, timeout=30.0, judged_at=T0, servers=[
        RequiredReading(name="srv0", state="not_attached" if gate == "blocked" else "attached",
                        policy="required, not attached after 30 s" if gate == "blocked" else "required, attached")])
    attempt = Attempt(attempt_id="a-1", task_id=ident.task_id, session_id=sid, execution_id="e-1",
                      instance_id=ident.instance_id, started_at=T0, updated_at=T0,
                      servers=[ServerRow(name=f"srv{i}", status=s) for i, s in enumerate(statuses)],
                      session_error=ErrorSummary(reason_code="session_rejected") if error else None,
                      required=required)
    return AttachmentHistory(version=1 if gate is None else 3, identity=ident, updated_at=T0, current=attempt,
                             agent=AgentState(protocol="acp", state="running", name=agent, version="1.2"))


def write_session(store, sid: str, statuses: list[str], *, connected: bool = False, contact: datetime = T0,
           error: bool = False, agent: str = "ref-agent", history: bool = True, gate: str | None = None) -> None:
    ident = identity(session=sid, execution="e-1")
    state = ExecutionState(identity=ident, daemon_version="0.1.0", hello_order=1, first_hello_at=T0,
                           last_contact_at=contact, connected=connected)
    blob = encode(_history(sid, statuses, error=error, agent=agent, gate=gate)) if history else None
    store.write([SessionRecord(sid, ident.task_id, "e-1", 0, contact)], [ExecutionRecord.of(sid, state, blob)])


def _ids(store, **query) -> list[str]:
    return [s.session_id for s in store.page(PageQuery(**query)).sessions]


# (session, states of its rows, session error, connected, minutes after T0 of its last contact)
ORDER = [
    ("s-failed-old", ["failed"], False, False, -120),
    ("s-failed-live", ["failed", "active"], False, True, -180),
    ("s-error", ["active"], True, False, -300),
    ("s-none-sent", ["filtered", "unavailable"], False, False, -400),
    ("s-ok-live-b", ["active"], False, True, -240),
    ("s-ok-live-a", ["active"], False, True, -60),
    ("s-ok-recent", ["delivered"], False, False, 0),
    ("s-ok-old", ["delivered", "filtered"], False, False, -500),
]
EXPECTED = ["s-failed-live", "s-failed-old", "s-error", "s-none-sent", "s-ok-live-a", "s-ok-live-b", "s-ok-recent",
            "s-ok-old"]


@pytest.mark.parametrize("shift", [0, 3])
def test_the_list_is_attention_first_then_a_connected_daemon_then_latest_contact_whatever_the_write_order(
        open_db, shift):
    store = open_db()
    for sid, statuses, error, connected, minutes in ORDER[shift:] + ORDER[:shift]:
        write_session(store, sid, statuses, error=error, connected=connected, contact=T0 + timedelta(minutes=minutes))
    assert _ids(store) == EXPECTED
    page = store.page(PageQuery(filter="attention"))
    assert [s.session_id for s in page.sessions] == EXPECTED[:4] and (page.total, page.matched) == (8, 4)
    listing = store.page(PageQuery(words=("s-failed-live",))).sessions[0]
    assert listing.connected and [row.status for row in listing.current_attempt.servers] == ["failed", "active"]
    assert listing.agent.name == "ref-agent" and listing.current_attempt.evidence == []


def test_the_state_filter_and_the_search_run_in_the_database_with_wildcards_taken_literally(open_db):
    store = open_db()
    write_session(store, "s-1", ["delivered"], agent="Claude Code", connected=True)
    write_session(store, "s-2", ["active", "filtered"], agent="codex_acp")
    write_session(store, "s-3", ["unavailable"], agent="gemini 100%")
    write_session(store, "s-4", [], history=False)  # no snapshot yet: found by its task and session only
    assert sorted(_ids(store, filter="connected")) == ["s-1"]
    assert sorted(_ids(store, filter="disconnected")) == ["s-2", "s-3", "s-4"]
    assert sorted(_ids(store, filter="filtered")) == ["s-2"]
    assert sorted(_ids(store, filter="delivered")) == ["s-1"]
    assert _ids(store, filter="configured") == []
    assert _ids(store, words=("claude", "code")) == ["s-1"]  # each word, in any case (the query is lower-cased)
    assert _ids(store, words=("codex_acp",)) == ["s-2"] and _ids(store, words=("codex%acp",)) == []
    assert _ids(store, words=("100%",)) == ["s-3"] and _ids(store, words=("_",)) == ["s-2"]
    assert _ids(store, words=("\\",)) == [] and _ids(store, words=("%",)) == ["s-3"]  # the escape itself too
    assert _ids(store, words=("s-4",)) == ["s-4"]
    assert sorted(_ids(store, words=("task-1",))) == ["s-1", "s-2", "s-3", "s-4"]
    assert _ids(store, filter="connected", words=("codex",)) == []


def test_the_blocked_filter_finds_exactly_the_sessions_the_required_server_gate_blocked_and_counts_them(open_db):
    store = open_db()
    write_session(store, "s-blocked", ["delivered"], gate="blocked")
    write_session(store, "s-open", ["active"], gate="open")
    write_session(store, "s-waiting", ["delivered"], gate="waiting")
    write_session(store, "s-none", ["delivered"])
    write_session(store, "s-failed-blocked", ["failed"], gate="blocked", connected=True)
    assert sorted(_ids(store, filter="blocked")) == ["s-blocked", "s-failed-blocked"]
    # A policy result beside the evidence: not "needs attention" by itself, and the row keeps its own state.
    assert _ids(store, filter="attention") == ["s-failed-blocked"]
    assert sorted(_ids(store, filter="delivered")) == ["s-blocked", "s-none", "s-waiting"]
    counts = store.counts()
    assert (counts.blocked, counts.total, counts.by_state) == (2, 5, {"delivered": 3, "active": 1, "failed": 1})
    listing = store.page(PageQuery(words=("s-blocked",))).sessions[0]
    assert listing.current_attempt.required.servers[0].policy == "required, not attached after 30 s"
    write_session(store, "s-blocked", ["active"], gate="open")  # a new history lists it anew
    assert _ids(store, filter="blocked") == ["s-failed-blocked"] and store.counts().blocked == 1


def test_a_page_is_bounded_and_windows_cover_the_list_once(open_db):
    store = open_db()
    for i in range(130):
        write_session(store, f"s-{i:03d}", ["failed" if i % 7 == 0 else "active"], contact=T0 + timedelta(seconds=i))
    seen: list[str] = []
    for offset in range(0, 130, 40):
        page = store.page(PageQuery(offset=offset, limit=40))
        assert len(page.sessions) <= 40 and page.total == page.matched == 130
        seen += [s.session_id for s in page.sessions]
    assert len(seen) == len(set(seen)) == 130
    assert seen[:19] == [f"s-{i:03d}" for i in range(126, -1, -7)], "the failed ones first, newest contact first"
    assert store.page(PageQuery(offset=500)).sessions == []


def test_a_write_without_a_history_keeps_the_listing_and_a_new_history_replaces_it(open_db):
    store = open_db()
    write_session(store, "s-1", ["failed"])
    write_session(store, "s-1", [], history=False, contact=T0 + timedelta(minutes=1))
    assert _ids(store, filter="attention") == ["s-1"] and _ids(store, filter="failed") == ["s-1"]
    write_session(store, "s-1", ["active"])
    assert _ids(store, filter="attention") == [] and _ids(store, filter="active") == ["s-1"]


@pytest.mark.parametrize(("params", "error"), [
    ({"filter": "everything"}, "filter: unknown value 'everything'"),
    ({"limit": str(MAX_LIMIT + 1)}, f"limit: at most {MAX_LIMIT}"),
    ({"limit": "0"}, "limit: at least 1"),
    ({"offset": "-1"}, "offset: not a whole number"),
    ({"q": "x" * 201}, "q: at most 200 characters"),
    ({"q": " ".join("abcdefghi")}, "q: at most 8 words"),
    ({"token": "x"}, "unknown parameter 'token'"),
])
def test_a_bad_page_query_is_refused_saying_which_parameter_and_why(params, error):
    with pytest.raises(PageQueryError, match="^" + error.replace("(", r"\(")):
        parse_query(params)


def test_a_page_query_lower_cases_its_words_once_each():
    query = parse_query({"q": "  Claude  CODE claude ", "filter": "failed", "offset": "50", "limit": "20"})
    assert query == PageQuery(filter="failed", words=("claude", "code"), offset=50, limit=20)
    assert parse_query({}) == PageQuery()


# (rows' states, session error, display state, needs attention): the database counts what the page filters on.
STATES = [
    (["active", "failed"], False, "failed", True),
    (["delivered", "active"], False, "active", False),
    (["delivered"], False, "delivered", False),
    (["filtered"], True, "filtered", True),  # a session error
    (None, False, "no_servers", False),  # no attempt (no snapshot yet)
    (["filtered", "unavailable"], False, "unavailable", True),  # every server not sent: the agent has no MCP server
    (["filtered", "delivered"], False, "delivered", False),  # one filtered beside one sent does not
]


def test_the_database_counts_sessions_by_display_state_and_needing_attention_as_the_page_filters(open_db):
    store = open_db()
    for n, (statuses, error, _, _) in enumerate(STATES):
        write_session(store, f"s-{n}", statuses or [], error=error, history=statuses is not None, connected=n < 2)
    counts = store.counts()
    want: dict[str, int] = {}
    for _, _, state, _ in STATES:
        want[state] = want.get(state, 0) + 1
    assert counts.by_state == want and counts.total == len(STATES) and counts.connected == 2
    needing = sorted(f"s-{n}" for n, (*_, needs) in enumerate(STATES) if needs)
    assert counts.attention == len(needing) and sorted(_ids(store, filter="attention")) == needing


def test_executions_written_before_the_listings_existed_are_listed_in_batches_and_an_unreadable_history_once(
        open_db, request, tmp_path):
    store = open_db()
    for i in range(5):
        write_session(store, f"s-{i}", ["failed"] if i == 0 else ["active"])
    write_session(store, "s-bare", [], history=False)  # no history: nothing to list, never selected
    # What a database migrated from hub schema 3 holds: histories without listings (one history unreadable),
    # made by another connection to the same database.
    undo = ("DELETE FROM listings", "UPDATE executions SET history = '{\"not\": \"a history\"}' WHERE session_id = 's-4'")
    if open_db.engine == "sqlite":
        with sqlite3.connect(tmp_path / "hub.sqlite3") as other:
            for sql in undo:
                other.execute(sql)
    else:
        import psycopg

        with psycopg.connect(request.getfixturevalue("pg_db").url) as other:
            for sql in undo:
                other.execute(sql)
    assert store.page(PageQuery(words=("s-0",))).sessions[0].current_attempt is None
    assert [store.backfill_listings(2), store.backfill_listings(2), store.backfill_listings(2)] == [2, 2, 1]
    assert store.backfill_listings(2) == 0, "each execution is listed once, the unreadable one included"
    assert _ids(store, filter="attention") == ["s-0"]
    listed = store.page(PageQuery(words=("s-1",))).sessions[0]
    assert [row.status for row in listed.current_attempt.servers] == ["active"]
    assert store.page(PageQuery(words=("s-4",))).sessions[0].current_attempt is None
