"""Owns a hub's link to the other hubs of a shared PostgreSQL database: it has the database decide each hello
(a claim), LISTENs for the sessions they change
and has the hub reread exactly those (no scan of the table), and checks every FENCE_INTERVAL that each
session with a daemon here is still current in the database, so a fence reaches this hub within that bound
even when a notification is lost. The listening connection reconnects with backoff; after a gap every
session is reread once, since notifications sent meanwhile are gone, and this hub's daemons' `connected`
flags are written again (another hub may have taken this one for gone meanwhile).

Every FENCE_INTERVAL it also looks which hubs have a connection to the database (pg_stat_activity, by the
tag of agentctl.hub.pg_store.hub_tag): a hub seen before and missing at two checks in a row is gone (killed,
or its host lost), and its daemons' flags are cleared, so no page shows a daemon connected to a dead hub.
A hub whose database connections all dropped for more than a check while it lived is taken for gone too;
its daemons' next frames (a heartbeat at the latest) and its own rewrite after the gap set the flags back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agentctl.dsn import PostgresDsn
from agentctl.hub import rules
from agentctl.hub.hub_conn import HubConnection, notice_line
from agentctl.hub.hub_store import HubStoreError, SharedStore
from agentctl.hub.state import SessionState
from agentctl.listener_guard import GuardedProtocol
from agentctl.upstream import protocol as P
from agentctl.hub.pg_store import CHANNEL, PgHubStore, PrunedExecution, hub_tag, parse_notice
from agentctl.postgres import PostgresUnavailable, connect_async, describe_error, driver

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.hub.memory import HubMemory
    from agentctl.hub.retention import Retention

log = logging.getLogger("agentctl.hub")

FENCE_INTERVAL = 1.0
REFRESH_BATCH = 500  # sessions reread in one read: one thread hop and two queries, not two per session
BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 5.0


class SharedView:
    """Started by the hub after its stores, stopped before they close. Works on the hub's memory (sessions,
    connections, dirty rows) and has its retention forget a session pruned by another hub."""

    def __init__(self, memory: HubMemory, retention: Retention, hub_id: str, dsn: PostgresDsn) -> None:
        self.memory = memory
        self.retention = retention
        self.hub_id = hub_id
        self.dsn = dsn
        store, reader = memory.store, memory.reader
        assert isinstance(store, PgHubStore) and isinstance(reader, PgHubStore), "a shared view is PostgreSQL's only"
        self._store: SharedStore = store  # the hub's writable store
        self._reader: SharedStore = reader  # its reader: rereads never wait behind a flush
        self.listening = False
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._first: Any = None  # the listening connection start() opened, for the loop's first round
        self._seen: set[str] = set()  # other hubs' tags seen connected to the database
        self._missing: set[str] = set()  # of those, the ones missing at the last check

    async def start(self) -> None:
        """Listening before the hub serves (so it is ready at once); raises HubStoreError when it cannot."""
        try:
            self._first = await self._listening_connection()
        except PostgresUnavailable as exc:
            raise HubStoreError(str(exc)) from None
        except driver().Error as exc:
            raise HubStoreError(f"cannot listen on hub database {self.dsn.display()}: "
                                f"{describe_error(self.dsn, exc)}") from None
        self.listening = True
        self._tasks = [
            asyncio.create_task(self._listen_loop(), name="agentctl-hub-listen"),
            asyncio.create_task(self._refresh_loop(), name="agentctl-hub-refresh"),
            asyncio.create_task(self._fence_loop(), name="agentctl-hub-fence"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.listening = False
        if self._first is not None:
            await self._first.close()
            self._first = None

    def problem(self) -> str | None:
        if not self.listening:
            return "database unavailable: other hubs' changes are not reaching this hub"
        return None

    async def claim(self, conn: HubConnection, hello: P.HelloFrame) -> SessionState:
        """The database's decision on a hello (agentctl.hub.pg_store); a database that cannot answer refuses
        the connection as `unavailable`: the daemon keeps buffering and reconnects with backoff."""
        memory = self.memory
        # Claims queue when a fleet reconnects: busy meanwhile, or the guard's hello deadline closes a daemon
        # for the database's wait, and it reconnects into the same queue.
        protocol = conn.writer.transport.get_protocol()
        guarded = protocol if isinstance(protocol, GuardedProtocol) else None
        busy = guarded is not None and guarded.request_started()
        try:
            return await asyncio.to_thread(self._store.claim, hello.identity, hello.daemon_version, memory.clock())
        except PrunedExecution as exc:  # retention's tombstone: this execution may not be current again
            memory.fatal(conn, exc.refusal)
        except HubStoreError as exc:
            log.warning("hello from %s not taken: %s", hello.identity.session_id, exc)
            memory.fatal(conn, rules.Refusal("unavailable", "the hub's database is unavailable; reconnect later"))
        finally:
            if busy and guarded is not None:
                guarded.request_finished()

    def take_stored(self, stored: SessionState) -> SessionState:
        """The database's view of a session into memory; this hub's connections it fences are told so."""
        memory = self.memory
        sid = stored.session_id
        session = memory.sessions.get(sid)
        if session is None:
            memory.sessions[sid] = stored
            return stored
        synced = rules.sync(session, stored, memory.links(session), memory.held_executions(session))
        if synced.now_current:
            log.info("session %s: execution %s is now current (through another hub)", sid, session.current_execution_id)
        for other, notice in synced.told:
            assert other.identity is not None
            log.info("session %s: execution %s instance %s superseded (%s)", sid, other.identity.execution_id,
                     other.identity.instance_id, notice.code)
            other.send(notice_line(notice))
        return session

    async def refresh(self, session_id: str) -> None:
        """Another hub changed this session: reread it (one session, indexed) and take the database's view."""
        await self.refresh_many([session_id])

    async def refresh_many(self, session_ids: list[str]) -> None:
        """Reread these sessions in one read (indexed, no scan) and take the database's view of each."""
        if not session_ids:
            return
        try:
            stored = await asyncio.to_thread(self._reader.load_sessions, session_ids)
        except HubStoreError as exc:
            log.warning("rereading %d sessions failed: %s", len(session_ids), exc)
            return
        for session_id in session_ids:
            self._take(session_id, stored[session_id])

    def _take(self, session_id: str, stored: SessionState | None) -> None:
        if stored is None:  # pruned (by this hub or another): gone from memory too, unless held here
            self.retention.forget(session_id)
            return
        if session_id in self.memory.sessions:
            self.take_stored(stored)
        self.memory.changed(session_id)  # one not in memory: the page reads its listing from the database

    async def resync(self) -> None:
        """Notifications were lost: reread every session in memory once (the others are read from the database
        when asked for), and tell the page that any session may have changed."""
        await self.refresh_many(sorted(self.memory.sessions))
        self.memory.changed("")

    async def check_fences(self) -> None:
        """Each session with a followed daemon here still current in the database? (A bound on a fence's delay
        that does not rest on notifications.)"""
        followed = self.memory.followed()
        if not followed:
            return
        try:
            currents = await asyncio.to_thread(self._reader.currents, sorted(followed))
        except HubStoreError:
            return  # the listener's own reconnecting says the database is away
        for sid, current in currents.items():
            if followed.get(sid) != current:
                await self.refresh(sid)

    async def check_departed(self) -> None:
        """Clear the flags of hubs gone from the database (seen before, missing at two checks in a row)."""
        try:
            live = await asyncio.to_thread(self._reader.live_hubs)
        except HubStoreError:
            return
        live.discard(hub_tag(self.hub_id))
        missing = self._seen - live
        departed = missing & self._missing
        self._missing, self._seen = missing - departed, (self._seen - departed) | live
        if not departed:
            return
        if self.memory.store is None:  # read after the await: a stop may have closed it since
            return
        try:
            changed = await asyncio.to_thread(self._store.clear_departed, sorted(departed))
        except HubStoreError as exc:
            log.warning("clearing the flags of a departed hub failed: %s", exc)
            return
        if changed:
            log.info("a hub left the database without a goodbye: its daemons in %d sessions marked not connected",
                     len(changed))
        for session_id in changed:
            await self.refresh(session_id)

    async def _listen_loop(self) -> None:
        psycopg = driver()
        backoff = BACKOFF_INITIAL
        gap = False  # a first start reads everything anyway
        while True:
            try:
                conn, self._first = self._first or await self._listening_connection(), None
                async with conn:
                    if gap:
                        log.info("hub database notifications resumed; rereading every session")
                        self.memory.remark_connections()  # this hub's daemons' `connected` flags
                        await self.resync()
                    self.listening, backoff, gap = True, BACKOFF_INITIAL, False
                    async for notice in conn.notifies():
                        parsed = parse_notice(notice.payload)
                        if parsed is not None and parsed[0] != self.hub_id:
                            self._pending.add(parsed[1])
                            self._wake.set()
            except (PostgresUnavailable, HubStoreError) as exc:
                self._lost(str(exc), gap)
            except (psycopg.Error, OSError) as exc:
                self._lost(describe_error(self.dsn, exc), gap)
            gap = True
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _listening_connection(self) -> Any:
        conn = await connect_async(self.dsn, application_name=hub_tag(self.hub_id))
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            await conn.close()
            raise
        return conn

    def _lost(self, why: str, already: bool) -> None:
        self.listening = False
        if not already:
            log.warning("hub database notifications lost (%s); reconnecting with backoff", why)

    async def _refresh_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, set()
            ordered = sorted(pending)
            for start in range(0, len(ordered), REFRESH_BATCH):
                await self.refresh_many(ordered[start:start + REFRESH_BATCH])

    async def _fence_loop(self) -> None:
        while True:
            await asyncio.sleep(FENCE_INTERVAL)
            await self.check_fences()
            await self.check_departed()
