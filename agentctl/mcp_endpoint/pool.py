"""Bounds on the legacy session pool (streamable-HTTP `Mcp-Session-Id` sessions): per attempt, in all, and the
sessions of attempts whose token is gone.

mcp 2.3's `StreamableHTTPSessionManager` keeps up to 10,000 sessions for 30 idle minutes, shared by every
attempt, and does not close a session when its token stops being accepted. At about 46 KB of daemon memory
per open session (bench/legacy_sessions.py), one attempt's abandoned sessions could grow the daemon by
hundreds of MB and lock the current attempt's own client out with 503. So:

- an attempt holds at most `per_attempt` sessions and the pool at most `total`;
- every request that would open a session is admitted here first (`admit`). At a bound, the least recently
  used idle session (no request in flight, no open GET stream) is ended to make room: one of a non-current
  attempt first, then one of the requesting attempt itself; a superseded attempt never ends the current
  one's sessions. Only when none is idle is the request refused (the caller answers 503 and records
  `session_pool_full` for the requesting attempt);
- when an attempt's token leaves history (3 attempts are kept), its sessions are ended, busy or not.

The SDK gives no public handle on its sessions. `StreamableHTTPSessionManager._server_instances` (session
id -> transport) is read to find a session's transport, and the transport's public `idle_scope` is
cancelled, which ends the session exactly as the SDK's own idle timeout does (connection_closed follows).
tests/mcp_endpoint/test_endpoint_sdk_contract.py pins that attribute; without it, nothing can be ended and
the bounds refuse instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from agentctl.listener_guard import RateLimitedLog

if TYPE_CHECKING:  # pragma: no cover
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = logging.getLogger(__name__)
_ROOM_LOG = RateLimitedLog(log, level=logging.INFO)

# 100 concurrent clients of one attempt hold about 40 legacy sessions, each busy with its GET stream; at
# about 60 KB each, the pool holds at most ~8 MB.
PER_ATTEMPT: Final = 64
TOTAL: Final = 128
MCP_SESSION_ID: Final = "Mcp-Session-Id"
MCP_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"


def legacy_session_of(headers: Any) -> tuple[bool, str | None]:
    """(legacy, session id) of a /mcp request by the SDK's own era rule: legacy without an
    MCP-Protocol-Version header or with a handshake-era one; a legacy request without a session id opens one."""
    version = headers.get(MCP_PROTOCOL_VERSION)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS, headers.get(MCP_SESSION_ID)


@dataclass(slots=True)
class _Session:
    attempt_id: str
    last_active: float
    in_flight: int = 0


class SessionPool:
    """Admission and ending of the legacy sessions of one endpoint; the current attempt comes from
    `current()`, the attempts whose tokens still work from `live()`."""

    def __init__(self, manager: StreamableHTTPSessionManager, current: Callable[[], str | None],
                 live: Callable[[], Iterable[str]], *, per_attempt: int = PER_ATTEMPT,
                 total: int = TOTAL) -> None:
        self._manager = manager
        self._current = current
        self._live = live
        self.per_attempt = per_attempt
        self.total = total
        self._sessions: dict[str, _Session] = {}
        self._opening: Counter[str] = Counter()
        self.ended = 0  # sessions ended here to make room or because their attempt is gone
        self._warned = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- what the HTTP layer calls -------------------------------------------------------------------

    def admit(self, attempt_id: str) -> bool:
        """Room for one more session of `attempt_id` (making it if it must); False: refuse with 503.
        After True, call `opened` once the request is answered."""
        self._forget_ended()
        current = self._current()
        mine = self._count(attempt_id)
        if mine >= self.per_attempt and not self._end_oldest_idle(lambda a: a == attempt_id):
            return False
        if len(self._sessions) + sum(self._opening.values()) >= self.total:
            if not self._end_oldest_idle(lambda a: a != current) and not (
                attempt_id == current and self._end_oldest_idle(lambda a: a == attempt_id)
            ):
                return False
        self._opening[attempt_id] += 1
        return True

    def opened(self, attempt_id: str, session_id: str | None) -> None:
        """The opening request was answered; `session_id` is the session it opened (None: it opened none)."""
        self._opening[attempt_id] -= 1
        if self._opening[attempt_id] <= 0:
            del self._opening[attempt_id]
        if session_id:
            self._sessions[session_id] = _Session(attempt_id, time.monotonic())

    def enter(self, session_id: str | None) -> None:
        session = self._sessions.get(session_id) if session_id else None
        if session is not None:
            session.in_flight += 1
            session.last_active = time.monotonic()

    def leave(self, session_id: str | None) -> None:
        session = self._sessions.get(session_id) if session_id else None
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            session.last_active = time.monotonic()

    def end_gone_attempts(self) -> None:
        """End every session of an attempt whose token is no longer accepted."""
        live = self._live()
        for session_id in [sid for sid, s in self._sessions.items() if s.attempt_id not in live]:
            self._end(session_id)

    # ---- inside ----------------------------------------------------------------------------------

    def sessions_of(self, attempt_id: str) -> int:
        return sum(1 for s in self._sessions.values() if s.attempt_id == attempt_id)

    def _count(self, attempt_id: str) -> int:
        return self.sessions_of(attempt_id) + self._opening[attempt_id]

    def _instances(self) -> dict[str, Any] | None:
        instances = getattr(self._manager, "_server_instances", None)
        if isinstance(instances, dict):
            return instances
        if not self._warned:
            self._warned = True
            log.warning("the MCP SDK no longer exposes its legacy sessions; the session bounds refuse instead of "
                        "ending idle sessions")
        return None

    def _forget_ended(self) -> None:
        """Drop the sessions the SDK has ended itself (DELETE, its idle timeout, a crash)."""
        instances = self._instances()
        if instances is not None:
            for session_id in [sid for sid in self._sessions if sid not in instances]:
                del self._sessions[session_id]

    def _end_oldest_idle(self, whose: Any) -> bool:
        idle = [(s.last_active, sid) for sid, s in self._sessions.items() if s.in_flight == 0 and whose(s.attempt_id)]
        if not idle or not self._end(min(idle)[1]):
            return False
        _ROOM_LOG.note("room", lambda: f"legacy MCP sessions at their bound ({self.per_attempt} per attempt, "
                                        f"{self.total} in all): idle ones end to make room ({self.ended} so far)")
        return True

    def _end(self, session_id: str) -> bool:
        instances = self._instances()
        if instances is None:
            return False
        self._sessions.pop(session_id, None)
        transport = instances.get(session_id)
        if transport is None:
            return True  # already gone from the SDK: the room is there
        self.ended += 1
        scope = getattr(transport, "idle_scope", None)
        if scope is not None:
            scope.cancel()  # as the SDK's idle timeout: the session's loop ends and the SDK discards it
        else:
            task = asyncio.get_running_loop().create_task(transport.terminate())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return True
