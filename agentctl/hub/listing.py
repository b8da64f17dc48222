"""Owns what the hub's session list is filtered, searched and ordered by, pure: each execution's listing summary
(kept beside its history in the store, so a page of sessions is one indexed query and never a decode of every
history), the page query a request asks for, and "needs attention".

The store (agentctl.hub.hub_store, pg_store) keeps per execution, in its `listings` table: `summary` (the JSON
of its current attempt as a listing, without evidence or catalogs, and its agent), `attention` (1 when the
session needs attention, the rule below), `statuses` (the current attempt's row states, each between spaces,
for the state filter, and `blocked` when the required-server gate's reading of it is blocked) and `search` (lower-cased words a search matches: task, session and agent). The page
orders by attention first, then a connected daemon, then the most recent contact, then the session id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

import msgspec

from agentctl.evidence.contract.hub import HubSession
from agentctl.evidence.contract.report import STATUSES, AgentState, Attempt, AttachmentHistory

Filter = Literal["all", "attention", "connected", "disconnected", "failed", "delivered", "active", "filtered",
                 "unavailable", "blocked"]
FILTERS: tuple[str, ...] = get_args(Filter)
DEFAULT_LIMIT = 50
MAX_LIMIT = 200  # sessions in one answer: its size stays bounded whatever the fleet
MAX_QUERY_CHARS = 200
MAX_WORDS = 8


class ListingSummary(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """An execution's listing as the store keeps it (the `summary` column)."""

    current_attempt: Attempt | None = None
    agent: AgentState | None = None


class Summary(msgspec.Struct, frozen=True):
    """The columns an execution row carries for the page, computed when its history is written."""

    summary: bytes
    attention: int
    statuses: str
    search: str


class PageQuery(msgspec.Struct, frozen=True):
    """A page of the session list: the state filter, the search words (lower-cased), and the window."""

    filter: str = "all"
    words: tuple[str, ...] = ()
    offset: int = 0
    limit: int = DEFAULT_LIMIT


class PageQueryError(ValueError):
    """A page query the hub refuses; str() says which parameter and why."""


def parse_query(params: Mapping[str, str]) -> PageQuery:
    """The page query from a request's parameters (`filter`, `q`, `offset`, `limit`). Raises PageQueryError."""
    unknown = sorted(set(params) - {"filter", "q", "offset", "limit"})
    if unknown:
        raise PageQueryError(f"unknown parameter {unknown[0]!r} (known: filter, q, offset, limit)")
    chosen = params.get("filter", "all") or "all"
    if chosen not in FILTERS:
        raise PageQueryError(f"filter: unknown value {chosen[:40]!r} (one of: {', '.join(FILTERS)})")
    text = params.get("q", "")
    if len(text) > MAX_QUERY_CHARS:
        raise PageQueryError(f"q: at most {MAX_QUERY_CHARS} characters")
    words = tuple(dict.fromkeys(text.lower().split()))
    if len(words) > MAX_WORDS:
        raise PageQueryError(f"q: at most {MAX_WORDS} words")

    def number(name: str, default: int, top: int) -> int:
        raw = params.get(name, "")
        if raw == "":
            return default
        if not raw.isdigit() or len(raw) > 9:
            raise PageQueryError(f"{name}: not a whole number: {raw[:20]!r}")
        value = int(raw)
        if value > top:
            raise PageQueryError(f"{name}: at most {top}")
        return value

    limit = number("limit", DEFAULT_LIMIT, MAX_LIMIT)
    if limit == 0:
        raise PageQueryError("limit: at least 1")
    return PageQuery(filter=chosen, words=words, offset=number("offset", 0, 10**9 - 1), limit=limit)


def needs_attention(attempt: Attempt | None) -> bool:
    """The page's "needs attention" (hub/static/views.js): a failed server in the current attempt, a session
    error, or servers none of which was sent to the agent (all filtered or unavailable). An endpoint delivered
    and not contacted yet is not in it: a lazy agent may connect later."""
    if attempt is None:
        return False
    rows = attempt.servers
    none_sent = bool(rows) and all(row.status in ("filtered", "unavailable") for row in rows)
    return attempt.session_error is not None or none_sent or any(row.status == "failed" for row in rows)


def blocked_on_required(attempt: Attempt | None) -> bool:
    """The page's "blocked on a required server": the gate's reading of the current attempt is `blocked`. Not
    "needs attention" by itself: the gate is a policy result beside the evidence, and absence is not failure."""
    return attempt is not None and attempt.required is not None and attempt.required.state == "blocked"


def listing_attempt(attempt: Attempt | None) -> Attempt | None:
    """The current attempt for a listing: rows and times, without the evidence log and the catalogs."""
    if attempt is None:
        return None
    copy = msgspec.structs.replace(attempt, evidence=[])
    copy.servers = [msgspec.structs.replace(row, catalog=None) for row in attempt.servers]
    return copy


def search_text(task_id: str, session_id: str, agent: AgentState | None) -> str:
    """The words a search matches, lower-cased: the task, the session and the agent's name and version."""
    who = [agent.name or "", agent.version or "", agent.protocol] if agent is not None else ["none"]
    return " ".join(["task", task_id, "session", session_id, "agent", *who]).lower()


def summarize(task_id: str, session_id: str, history: AttachmentHistory | None) -> Summary:
    """The listing columns of an execution whose history is `history`."""
    attempt = history.current if history is not None else None
    agent = history.agent if history is not None else None
    statuses: list[str] = sorted({row.status for row in attempt.servers} & set(STATUSES)) if attempt else []
    # Beside the row states in the same column (a token no row state has): the state filter finds it alike.
    statuses += ["blocked"] if blocked_on_required(attempt) else []
    summary = ListingSummary(current_attempt=listing_attempt(attempt), agent=agent)
    return Summary(summary=msgspec.json.encode(summary), attention=int(needs_attention(attempt)),
                   statuses="".join(f" {s} " for s in statuses), search=search_text(task_id, session_id, agent))


_SUMMARY = msgspec.json.Decoder(ListingSummary)


def decode_summary(blob: str | bytes | None) -> ListingSummary:
    """A stored summary; an empty one for a row written before summaries or without a history."""
    if not blob:
        return ListingSummary()
    try:
        return _SUMMARY.decode(blob)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ListingSummary()  # the row's history is still whole; the listing shows no attempt rather than fail


def listing_of(task_id: str, session_id: str, current_execution_id: str, connected: bool, last_contact_at: object,
               executions: int, stale_rejected: int, summary: ListingSummary) -> HubSession:
    return HubSession(task_id=task_id, session_id=session_id, current_execution_id=current_execution_id,
                      connected=connected, last_contact_at=last_contact_at,  # type: ignore[arg-type]
                      executions=executions, stale_rejected=stale_rejected,
                      current_attempt=summary.current_attempt, agent=summary.agent)


def escape_like(word: str) -> str:
    """A word for `LIKE ... ESCAPE '\\'`: its wildcards matched as themselves."""
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def where_clause(query: PageQuery, mark: str) -> tuple[str, list[object]]:
    """The WHERE of a page query over PAGE_FROM (a session, its current execution `e` and that one's listing `l`),
    in the SQL both engines speak; `mark` is the driver's placeholder."""
    clauses: list[str] = []
    params: list[object] = []
    f = query.filter
    if f == "attention":
        clauses.append("COALESCE(l.attention, 0) = 1")
    elif f == "connected":
        clauses.append("e.connected != 0")
    elif f == "disconnected":
        clauses.append("e.connected = 0")
    elif f != "all":
        clauses.append(f"COALESCE(l.statuses, '') LIKE {mark}")
        params.append(f"% {f} %")
    for word in query.words:
        # A row written before summaries is still found by its task and session.
        clauses.append(f"COALESCE(l.search, LOWER(s.task_id || ' ' || s.session_id)) LIKE {mark} ESCAPE '\\'")
        params.append(f"%{escape_like(word)}%")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


# Attention first, then a connected daemon (whose contact is now), then the most recent contact, then the id.
PAGE_ORDER = ("ORDER BY COALESCE(l.attention, 0) DESC, e.connected DESC, "
              "CASE WHEN e.connected != 0 THEN '' ELSE s.last_contact_at END DESC, s.session_id")
PAGE_FROM = ("FROM sessions s JOIN executions e ON e.session_id = s.session_id "
             "AND e.execution_id = s.current_execution_id LEFT JOIN listings l ON l.session_id = s.session_id AND l.execution_id = s.current_execution_id")


# A session's display state (the metrics' `sessions_by_state`): failed when a row failed, else its most advanced
# row's state, else no_servers. No parameter in it: a driver's placeholder syntax never meets its wildcards.
_STATE_ORDER = ("failed", *reversed([s for s in STATUSES if s != "failed"]))
STATE_CASE = ("CASE " + " ".join(f"WHEN COALESCE(l.statuses, '') LIKE '% {s} %' THEN '{s}'"
                                 for s in _STATE_ORDER) + " ELSE 'no_servers' END")
COUNTS_SQL = (f"SELECT {STATE_CASE} AS state, COUNT(*), "
              "SUM(CASE WHEN COALESCE(l.attention, 0) = 1 THEN 1 ELSE 0 END), "
              "SUM(CASE WHEN e.connected != 0 THEN 1 ELSE 0 END), "
              f"SUM(CASE WHEN COALESCE(l.statuses, '') LIKE '% blocked %' THEN 1 ELSE 0 END) {PAGE_FROM} GROUP BY 1")


class SessionCounts(msgspec.Struct, frozen=True):
    """The stored sessions counted by the database (for /metrics): in all, needing attention, with a connected
    daemon, blocked on a required server, and by display state."""

    total: int = 0
    attention: int = 0
    connected: int = 0
    blocked: int = 0
    by_state: dict[str, int] = {}


def counts_of(rows: list[tuple[object, ...]]) -> SessionCounts:
    """SessionCounts from COUNTS_SQL's rows."""
    by_state = {str(row[0]): int(row[1]) for row in rows}  # type: ignore[call-overload]
    total = [sum(int(row[i] or 0) for row in rows) for i in (1, 2, 3, 4)]  # type: ignore[call-overload]
    return SessionCounts(total=total[0], attention=total[1], connected=total[2], blocked=total[3], by_state=by_state)
