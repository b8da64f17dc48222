"""The daemon's live evidence state: one history, sequence numbers, attempt tokens, and change listeners.

Everything the daemon observes goes through `Ledger.record`; it stamps identity, time and sequence,
folds the event with the pure reducer and tells listeners (persistence, upstream, progress output).
Every piece of free text on its way into the history (summaries, the agent's name, version and exit
reason) passes the one redaction path here, with the full secret registry, whatever its producer did.
Listeners are called synchronously and must only schedule work: the MCP request path calls `record`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from agentctl.evidence import reducer
from agentctl.evidence.contract.report import (
    CONTRACT_VERSION,
    MAX_SHORT_TEXT_BYTES,
    AgentNotice,
    AgentState,
    AttachmentHistory,
    AttemptOrigin,
    EndpointTestResult,
    EvidenceEvent,
    EvidenceKind,
    Identity,
    RequiredGate,
)
from agentctl.evidence.required import same_reading
from agentctl.evidence.sanitize import redact, scrub, truncate_utf8
from agentctl.evidence.secret_registry import SecretRegistry
from agentctl.evidence.seeds import ServerSeed
from agentctl.identity import TokenRegistry, new_attempt_id
from agentctl.logs import log_failure

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Listener = Callable[[EvidenceEvent | None], None]


def utcnow() -> datetime:
    return datetime.now(UTC)


# Agent fields that are text the agent chose (or our words around it).
_AGENT_TEXT_FIELDS = frozenset({"name", "version", "exit_reason"})
# Within the contract's ShortText (the sources bound them so already): never a report its reader refuses.
_AGENT_SHORT_FIELDS = frozenset({"name", "version"})
# The contract's RawState: a provider's word for a state, never free text.
_RAW_STATE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def raw_state_token(value: Any, secrets: SecretRegistry) -> str | None:
    """A provider's raw state word as evidence: a short token that no redaction rule touches, else None."""
    if not isinstance(value, str) or not _RAW_STATE.fullmatch(value):
        return None
    return value if redact(value, secrets) == value else None


class Ledger:
    def __init__(
        self, identity: Identity, clock: Clock = utcnow, secrets: SecretRegistry | Iterable[str] = ()
    ) -> None:
        self.identity = identity
        self._clock = clock
        self._seq = 0
        self._listeners: list[Listener] = []
        self.tokens = TokenRegistry()
        # The spec's secret-bearing values and every token minted here: what no evidence may carry.
        self.secrets = secrets if isinstance(secrets, SecretRegistry) else SecretRegistry(secrets)
        self._self_tests: set[str] = set()
        self.history = AttachmentHistory(version=CONTRACT_VERSION, identity=identity, updated_at=clock())

    def now(self) -> datetime:
        return self._clock()

    @property
    def current_attempt_id(self) -> str | None:
        return self.history.current.attempt_id if self.history.current else None

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def begin_attempt(self, origin: AttemptOrigin, seeds: Sequence[ServerSeed] = ()) -> tuple[str, str]:
        """Create the new current attempt and its bearer token, then record `configured` for each seed."""
        attempt_id = new_attempt_id()
        old = self.current_attempt_id
        reducer.begin_attempt(self.history, attempt_id=attempt_id, origin=origin, now=self._clock())
        token = self._mint(attempt_id)
        self._prune_tokens()
        if old is not None:
            self._notify(None)
        for seed in seeds:
            self.record(
                "configured",
                attempt_id,
                seed.name,
                source=seed.source,
                transport=seed.transport,
                target=seed.target,
            )
        self._notify(None)
        return attempt_id, token

    def mint_self_test_token(self) -> tuple[str, str]:
        """A one-off credential for the daemon testing its own endpoint.

        Requests made with it authenticate, but their evidence is dropped here: the daemon contacting
        itself must never look like the agent attaching. Call `forget_self_test` when done.
        """
        attempt_id = "selftest_" + new_attempt_id()
        self._self_tests.add(attempt_id)
        return attempt_id, self._mint(attempt_id)

    def _mint(self, attempt_id: str) -> str:
        token = self.tokens.mint(attempt_id)
        # Redacted even after the token is forgotten: a dead token echoed later is still a token.
        self.secrets.add_token(token)
        return token

    def scrub(self, text: Any) -> Any:
        """Free text through the one redaction path with the full registry (see sanitize.scrub)."""
        return scrub(text, self.secrets)

    def forget_self_test(self, attempt_id: str) -> None:
        self.tokens.forget(attempt_id)
        self._self_tests.discard(attempt_id)

    def record(
        self,
        kind: EvidenceKind,
        attempt_id: str,
        server: str | None = None,
        *,
        occurred_at: datetime | None = None,
        **fields: Any,
    ) -> EvidenceEvent | None:
        """Stamp and fold one observation. Returns the event, or None when its attempt is no longer kept."""
        if attempt_id in self._self_tests:
            return None
        if fields.get("summary"):
            fields["summary"] = self.scrub(fields["summary"])
        if "raw_state" in fields:
            fields["raw_state"] = raw_state_token(fields["raw_state"], self.secrets)
        self._seq += 1
        ident = self.identity
        event = EvidenceEvent(
            kind=kind,
            occurred_at=occurred_at or self._clock(),
            task_id=ident.task_id,
            session_id=ident.session_id,
            execution_id=ident.execution_id,
            instance_id=ident.instance_id,
            attempt_id=attempt_id,
            seq=self._seq,
            server=server,
            **fields,
        )
        result = reducer.apply(self.history, event)
        if result != "applied":
            log.debug("evidence %s for attempt not kept: %s", kind, result)
            self._notify(None)
            return None
        self._notify(event)
        return event

    def set_endpoint_test(self, attempt_id: str, server: str, result: EndpointTestResult) -> bool:
        if result.summary:
            result = msgspec.structs.replace(result, summary=self.scrub(result.summary) or "")
        stored = reducer.record_endpoint_test(self.history, attempt_id, server, result)
        if stored:
            self._notify(None)
        return stored

    def add_notice(self, attempt_id: str, notice: AgentNotice) -> bool:
        """Keep an agent's session notice on its attempt, its text through the one redaction path."""
        if attempt_id in self._self_tests:
            return False
        notice = msgspec.structs.replace(
            notice, title=self.scrub(notice.title) or "", description=self.scrub(notice.description) or None
        )
        stored = reducer.add_notice(self.history, attempt_id, notice)
        if stored:
            self._notify(None)
        return stored

    def set_required(self, attempt_id: str, gate: RequiredGate) -> bool:
        """Keep the required-server gate's reading on its attempt (current or kept); only a changed reading is
        written, so judging again on every change of the evidence writes nothing new."""
        attempt = self.history.current if self.current_attempt_id == attempt_id else next(
            (a for a in self.history.previous if a.attempt_id == attempt_id), None)
        if attempt is None or same_reading(attempt.required, gate):
            return False
        attempt.required = gate
        self._notify(None)
        return True

    def count_refusal(self, route: str, method: str, status: int) -> None:
        reducer.count_refusal(self.history, route, method, status)
        self._notify(None)

    def update_agent(self, **fields: Any) -> AgentState:
        """Set report-level facts about the supervised agent (identity it declared, capabilities, exit)."""
        agent = self.history.agent
        if agent is None:
            agent = AgentState(protocol=fields.pop("protocol", "acp"), state=fields.pop("state", "starting"))
            self.history.agent = agent
        for name, value in fields.items():
            if name in _AGENT_TEXT_FIELDS:
                value = self.scrub(value)
            if name in _AGENT_SHORT_FIELDS and isinstance(value, str):
                value = truncate_utf8(value, MAX_SHORT_TEXT_BYTES)[0]
            setattr(agent, name, value)
        self._notify(None)
        return agent

    def _prune_tokens(self) -> None:
        # A token outlives its attempt only while the attempt is kept in history.
        kept = {a.attempt_id for a in self.history.previous} | self._self_tests
        if self.history.current:
            kept.add(self.history.current.attempt_id)
        for attempt_id in self.tokens.attempt_ids() - kept:
            self.tokens.forget(attempt_id)

    def _notify(self, event: EvidenceEvent | None) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception as exc:  # a broken listener must not break the MCP request path
                log_failure(log, "evidence listener failed", exc)
