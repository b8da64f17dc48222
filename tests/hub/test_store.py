"""The hub's `SessionStore`, one suite over both engines (a real SQLite file and a real PostgreSQL database):
what is written reads back exactly, histories are kept when a write carries none, the hot/cold split, a
restarting hub's `connected` flags; then what only a shared PostgreSQL database answers: the current execution
decided by claims under the session's row lock, and writes of two hubs that add up instead of overwriting."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentctl.dsn import parse_location
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.report import AttachmentHistory
from agentctl.hub.hub_store import ExecutionRecord, HubStoreError, SessionRecord
from agentctl.hub.stores import open_store
from agentctl.hub.state import ExecutionState, SessionState
from tests.pg import PgDatabase
from tests.upstream.support import identity

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
Opener = Callable[..., object]


@pytest.fixture(params=["sqlite", "postgresql"])
def open_db(request, tmp_path: Path) -> Iterator[Opener]:
    """open_db(readonly=False, hub_id="") -> a store on this test's database, closed after the test."""
    if request.param == "sqlite":
        location: object = tmp_path / "hub.sqlite3"
    else:
        pg_db: PgDatabase = request.getfixturevalue("pg_db")
        location = parse_location(pg_db.url)
    opened: list = []

    def opener(*, readonly: bool = False, hub_id: str = "") -> object:
        store = open_store(location, readonly=readonly, hub_id=hub_id)
        opened.append(store)
        return store

    opener.engine = request.param  # type: ignore[attr-defined]
    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def pg_open(pg_db: PgDatabase) -> Iterator[Opener]:
    opened: list = []

    def opener(*, readonly: bool = False, hub_id: str = "") -> object:
        store = open_store(parse_location(pg_db.url), readonly=readonly, hub_id=hub_id)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


def _session(sid: str, current: str, *, contact: datetime = T0, stale: int = 0) -> SessionRecord:
    return SessionRecord(sid, "task-1", current, stale, contact)


def _execution(sid: str, eid: str, order: int, *, history: AttachmentHistory | None = None, connected: bool = True,
               rejected: int = 0, contact: datetime = T0) -> ExecutionRecord:
    ident = identity(session=sid, execution=eid)
    state = ExecutionState(identity=ident, daemon_version="0.1.0", hello_order=order, first_hello_at=T0,
                           last_contact_at=contact, connected=connected, rejected_frames=rejected)
    return ExecutionRecord.of(sid, state, encode(history) if history is not None else None)


def _history(sid: str, eid: str) -> AttachmentHistory:
    return AttachmentHistory(version=1, identity=identity(session=sid, execution=eid), updated_at=T0)


def _shape(session: SessionState) -> tuple:
    return (session.session_id, session.task_id, session.current_execution_id, session.stale_rejected,
            session.last_contact_at, sorted((e.execution_id, e.hello_order, e.connected, e.rejected_frames,
                                             encode(e.history) if e.history else None, e.last_contact_at)
                                            for e in session.executions.values()))


def test_what_is_written_reads_back_exactly_and_a_write_without_history_keeps_the_stored_one(open_db):
    store = open_db()
    history = _history("s-1", "e-1")
    store.write([_session("s-1", "e-1")], [_execution("s-1", "e-1", 1, history=history)])
    later = T0 + timedelta(minutes=5)
    store.write([_session("s-1", "e-1", contact=later)], [_execution("s-1", "e-1", 1, contact=later, rejected=2)])
    whole = store.load_session("s-1")
    assert whole is not None and encode(whole.current.history) == encode(history), "a write without one keeps it"
    assert whole.last_contact_at == later and whole.current.rejected_frames == 2
    assert _shape(whole) == _shape(store.load_split(None)[0]["s-1"])
    assert store.load_session("no-such-session") is None
    reader = open_db(readonly=True)
    assert _shape(reader.load_split(None)[0]["s-1"]) == _shape(whole), "a reader sees what the writer committed"


def test_the_hot_sessions_are_whole_and_the_others_are_listings_by_last_contact(open_db):
    store = open_db()
    for n in range(3):
        sid = f"s-{n}"
        store.write([_session(sid, "e-1", contact=T0 + timedelta(minutes=n))],
                    [_execution(sid, "e-1", n + 1, history=_history(sid, "e-1"))])
    hot, cold = store.load_split(1)
    assert list(hot) == ["s-2"] and sorted(cold) == ["s-0", "s-1"]
    assert cold["s-0"].current_execution_id == "e-1"


def test_a_restarting_hub_clears_the_connected_flags_it_owns(open_db):
    store = open_db(hub_id="host-a")
    store.write([_session("s-1", "e-1")], [_execution("s-1", "e-1", 1, connected=True)])
    store.reset_connected()
    assert not store.load_session("s-1").current.connected
    assert store.max_hello_order() == 1


def test_a_reader_refuses_a_database_the_hub_has_not_migrated(open_db, tmp_path):
    if open_db.engine == "sqlite":  # type: ignore[attr-defined]
        with pytest.raises(HubStoreError, match="no hub database at"):
            open_db(readonly=True)
    else:
        with pytest.raises(HubStoreError, match="is at schema version 0; this agentctl reads version"):
            open_db(readonly=True)


# ---- PostgreSQL only: hubs sharing one database ---------------------------------------------------------


def test_a_new_execution_claimed_through_any_hub_becomes_current_and_a_known_one_changes_nothing(pg_open):
    a, b = pg_open(hub_id="host-a"), pg_open(hub_id="host-b")
    first = a.claim(identity(execution="e-1"), "0.1.0", T0)
    assert first.current_execution_id == "e-1"
    second = b.claim(identity(execution="e-2"), "0.1.0", T0 - timedelta(hours=1))  # a host clock behind: no matter
    assert second.current_execution_id == "e-2"
    assert second.executions["e-2"].hello_order > second.executions["e-1"].hello_order
    again = a.claim(identity(execution="e-1", instance="inst-2"), "0.1.0", T0)  # e-1's late hello changes nothing
    assert again.current_execution_id == "e-2"
    assert a.currents(["session-1", "unknown"]) == {"session-1": "e-2"}


def test_a_hubs_flush_of_its_old_view_never_moves_the_current_execution_back(pg_open):
    a, b = pg_open(hub_id="host-a"), pg_open(hub_id="host-b")
    a.claim(identity(execution="e-1"), "0.1.0", T0)
    b.claim(identity(execution="e-2"), "0.1.0", T0)
    # Hub A has not heard of e-2 yet: it writes its session record naming e-1, and e-1 with 3 rejected frames.
    a.write([_session("session-1", "e-1", stale=3)], [_execution("session-1", "e-1", 1, rejected=3)])
    b.write([_session("session-1", "e-2", stale=0)], [_execution("session-1", "e-2", 2, rejected=1)])
    seen = b.load_session("session-1")
    assert seen.current_execution_id == "e-2"
    assert seen.stale_rejected == 4, "each hub's rejected frames are added, not overwritten"
    assert seen.executions["e-1"].hello_order < seen.executions["e-2"].hello_order
    a.reset_connected()  # hub A restarts: its own flags only
    after = b.load_session("session-1")
    assert not after.executions["e-1"].connected and after.executions["e-2"].connected


def test_claims_racing_from_many_threads_give_one_current_execution_the_newest_by_database_order(pg_open):
    stores = [pg_open(hub_id=f"host-{n}") for n in range(4)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def claim(n: int) -> None:
        try:
            barrier.wait(10)
            for k in range(5):
                stores[n].claim(identity(execution=f"e-{n}-{k}"), "0.1.0", T0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    final = stores[0].load_session("session-1")
    orders = [e.hello_order for e in final.executions.values()]
    assert len(orders) == 20 and len(set(orders)) == 20, "every execution has its own order"
    newest = max(final.executions.values(), key=lambda e: e.hello_order)
    assert final.current_execution_id == newest.execution_id


def test_a_connection_left_dead_by_a_server_restart_is_replaced_without_failing_the_next_write(pg_open, pg_server):
    store = pg_open(hub_id="host-a")
    store.write([_session("s-1", "e-1")], [_execution("s-1", "e-1", 1)])
    pg_server.restart()  # real pg_ctl: the store's connection is now dead, and nobody has noticed yet
    store.write([_session("s-1", "e-1", contact=T0 + timedelta(minutes=1))], [_execution("s-1", "e-1", 1)])
    assert store.load_session("s-1").last_contact_at == T0 + timedelta(minutes=1)


def test_several_sessions_read_in_one_call_are_each_as_read_alone_and_a_missing_one_is_none(pg_open):
    # What a hub rereads after another hub's flush: one read for the whole flush, not two queries per session.
    store = pg_open(hub_id="a")
    for n in range(3):
        sid = f"s-{n}"
        store.write([_session(sid, "e-2")], [_execution(sid, "e-1", 1), _execution(sid, "e-2", 2, history=_history(sid, "e-2"))])
    reader = pg_open(readonly=True)
    found = reader.load_sessions(["s-2", "gone", "s-0"])
    assert list(found) == ["s-2", "gone", "s-0"] and found["gone"] is None
    for sid in ("s-0", "s-2"):
        assert _shape(found[sid]) == _shape(reader.load_session(sid))
