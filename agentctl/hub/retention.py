"""Owns the hub's retention: sessions whose last contact is older than the retention period leave the database
(and the hub's memory) in bounded batches, each execution leaving a tombstone that keeps fencing whole, and
the database's size, oldest session and sessions counted by state, measured for `/metrics`. First, once per
start, the executions written before hub schema 4 get their listing the same way (the page reads listings).

A batch is one short transaction in a worker thread, taken in turns with the hub's flush (never beside it),
with a pause between batches: ingest and the page never wait on more than one batch. A session whose current
execution's daemon is connected (on any hub: the `connected` flags) or that this hub holds (a connection it
follows, changes not yet written) is never pruned. A session pruned while a hello raced it (its daemon
connected meanwhile) is written again whole from memory at the next flush. A superseded daemon's connection
does not hold its session: when the session is pruned it is closed with `stale_execution`, and its next hello
meets the tombstone.

A hello of an execution the hub does not hold is checked against its tombstone (agentctl.hub.rules.after_prune):
a superseded execution of a pruned session is refused as `stale_execution` forever. With a shared PostgreSQL
database the claim does that check in its transaction (agentctl.hub.pg_store).
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from agentctl.hub import rules
from agentctl.hub.hub_store import HubStoreError
from agentctl.hub.listing import SessionCounts
from agentctl.hub.state import SessionState

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.evidence.contract.report import Identity
    from agentctl.hub.hub_conn import HubConnection
    from agentctl.hub.memory import HubMemory

log = logging.getLogger("agentctl.hub")

DEFAULT_RETENTION = timedelta(days=30)
PRUNE_INTERVAL = 60.0  # seconds between rounds (a round prunes every session due, batch after batch)
PRUNE_BATCH = 200  # sessions per transaction: tens of milliseconds each (bench/hub_db_size.py)
PRUNE_PAUSE = 0.05  # seconds between batches: the flush and the readers get their turn
FOREVER = ("forever", "0", "never", "off")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


class RetentionError(ValueError):
    """A retention period that cannot be read; one line for the CLI."""


def parse_retention(text: str) -> timedelta | None:
    """`30d`, `12h`, `90m`, `3600s` or a number of days; `forever` (or 0) keeps every session: None."""
    value = text.strip().lower()
    if value in FOREVER:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([dhms]?)", value)
    if match is None:
        raise RetentionError(f"retention {text!r}: give a period such as 30d, 12h, 90m or 3600s, or `forever`")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "d"]
    if seconds <= 0:
        return None
    return timedelta(seconds=seconds)


class Retention:
    """Started by the hub after its stores and hydration, stopped before its last flush. Works on the hub's
    memory: prunes what it does not hold, and takes its turn on the store with the flush."""

    def __init__(self, memory: HubMemory, period: timedelta | None, *, interval: float = PRUNE_INTERVAL,
                 batch: int = PRUNE_BATCH) -> None:
        self.memory = memory
        self.period = period
        self.interval = interval
        self.batch = batch
        self.pruned = 0  # sessions this hub pruned since it started
        self.size_bytes = 0  # the database's size at the last measure
        self.oldest_contact_at: datetime | None = None
        self.counts = SessionCounts()  # the stored sessions, as last counted (count_sessions)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self.measure()
        except HubStoreError as exc:  # the hub serves without the figures; the next round measures again
            log.warning("measuring the hub database failed: %s", exc)
        self._task = asyncio.create_task(self._loop(), name="agentctl-hub-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        try:
            await self.backfill()
        except HubStoreError as exc:  # the page shows those sessions without their attempt until the next start
            log.warning("listing executions written before hub schema 4 failed: %s", exc)
        while True:
            try:
                await self.prune()
                await self.measure()
            except HubStoreError as exc:  # the flush says the database is away; the next round tries again
                log.warning("retention round failed: %s", exc)
            await asyncio.sleep(self.interval)

    async def backfill(self) -> int:
        """List the executions written before hub schema 4 (a history, no listing), a batch per transaction and
        never beside a flush, so an upgraded database's page shows each session's attempt; how many were listed."""
        memory = self.memory
        total = 0
        while memory.store is not None:
            async with memory.flush_lock:
                store = memory.store
                if store is None:
                    break
                done = await asyncio.to_thread(store.backfill_listings, self.batch)
            total += done
            if done < self.batch:
                break
            await asyncio.sleep(PRUNE_PAUSE)
        if total:
            log.info("hub database: listed %d execution(s) written before schema 4", total)
        return total

    async def measure(self) -> None:
        reader = self.memory.reader
        if reader is not None:
            self.size_bytes, self.oldest_contact_at = await asyncio.to_thread(reader.footprint)

    async def count_sessions(self) -> None:
        """Count the stored sessions (by state, needing attention, connected) after a flush, in a worker thread:
        one grouped query, run by each /metrics scrape, never on the loop. Raises HubStoreError."""
        await self.memory.flush()
        reader = self.memory.reader
        if reader is not None:
            self.counts = await asyncio.to_thread(reader.counts)

    async def prune(self) -> int:
        """Prune every session due, a batch per transaction; how many went."""
        memory = self.memory
        if self.period is None:
            return 0
        total = 0
        while memory.store is not None:
            now = memory.clock()
            async with memory.flush_lock:  # never beside a flush: one user of the store at a time
                store = memory.store
                if store is None:
                    break
                # Held: a connection this hub follows, or changes not yet written. A superseded daemon's
                # connection does not hold its session: it is closed when the session is pruned (`forget`).
                held = memory.busy(followed_only=True)
                ids = await asyncio.to_thread(store.prune, now - self.period, held, self.batch, now)
            for session_id in ids:
                self.forget(session_id)
            total += len(ids)
            if len(ids) < self.batch:
                break
            await asyncio.sleep(PRUNE_PAUSE)
        if total:
            self.pruned += total
            log.info("retention: pruned %d session(s) last in contact over %s ago", total, self.period)
        return total

    def forget(self, session_id: str) -> None:
        """The database no longer holds the session: drop it from memory, unless it became busy meanwhile (a
        hello raced the prune), in which case all of it is written again at the next flush."""
        memory = self.memory
        session = memory.sessions.get(session_id)
        if session is not None and session_id in memory.busy(followed_only=True):
            for execution in session.executions.values():
                memory.mark(session, execution, history=True)
            return
        memory.sessions.pop(session_id, None)
        gone = rules.after_prune(False, session_live=False)  # what its superseded daemons' next hello meets
        for conn in [c for c in memory.conns if c.session is session and session is not None]:
            assert gone is not None
            memory.refuse(conn, gone.code, gone.message)  # its frames could not be kept anyway
        memory.changed(session_id)

    def fence(self, conn: HubConnection, session: SessionState | None, ident: Identity) -> None:
        """A hello of an execution the hub does not hold: refused when its tombstone says it may not be current
        again (raises Refused through the hub's memory), else nothing."""
        memory = self.memory
        if session is not None and ident.execution_id in session.executions:
            return
        reader = memory.reader
        if reader is None:
            return
        try:
            was_current = reader.tombstone(ident.session_id, ident.execution_id)  # one indexed row
        except HubStoreError:
            memory.fatal(conn, rules.Refusal("unavailable", "the hub cannot read this session's stored state; "
                                                          "try again"))
        refusal = rules.after_prune(was_current, session_live=session is not None)
        if refusal is not None:
            log.info("session %s: refused a hello of pruned execution %s (stale)", ident.session_id,
                     ident.execution_id)
            memory.fatal(conn, refusal)
