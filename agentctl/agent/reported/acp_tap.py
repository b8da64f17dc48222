"""Owns reading an ACP agent's own reports of its MCP servers off the wire, and coalescing them into evidence.

`AcpReportTap.take` sees every frame the agent sends before the ACP SDK does (agentctl/agent/transports.py's
intercept). It is given the known agents (agentctl/agent/clis/) and hands a `session/update` of a known
adapter's shape to that adapter's reader (an agent's `acp_relay`: claude-agent-acp's notice and `_meta` relay,
codex-acp's `mcp_startup` tool call) and passes the frame on untouched, except a notice that was a relay about
a delivered server (its row says it; the notice line would only repeat it as free text); it takes every
extension notification (a method starting with `_`, no id) off the wire: an agent's own MCP methods (its
`acp_extension`: Kiro's) go to that agent's parser, any other is counted by nothing but its number (its method
is agent-chosen text: never logged, never kept). Which attempt a frame is about is the owner's rule (`resolve`: the session
id to an attempt and the servers it delivered); a frame that resolves to none is not kept.

`ReportSink` records the newest report per attempt and server once the receive loop yields (asyncio's
`call_soon`), and only when it differs from the last one recorded: a burst of frames, even one flip-flopping
100,000 times, costs one record per server per burst, and the row still reaches the last state at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any

from agentctl.agent.reported.base import ServerReport, record

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.agent_cli import AgentCli
    from agentctl.evidence.ledger import Ledger
    from agentctl.evidence.secret_registry import SecretRegistry

log = logging.getLogger(__name__)

# session id (None when the frame has none) -> (attempt id, the servers that attempt delivered), or None.
Resolver = Callable[[str | None], tuple[str, Collection[str]] | None]
MAX_KEPT_KEYS = 1024  # last-recorded reports remembered (attempts x servers); past it, forgotten and re-recorded


class ReportSink:
    """Coalesces reports into `agent_reported` evidence (and the count of unknown extension methods)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._pending: dict[tuple[str, str], tuple[str, ServerReport]] = {}
        self._last: dict[tuple[str, str], tuple[str, ServerReport]] = {}
        self._scheduled = False
        self.unknown_ext = 0
        self._unknown_recorded = 0
        self.recorded = 0

    def add(self, attempt_id: str, source: str, reports: list[ServerReport]) -> None:
        for report in reports:
            self._pending[(attempt_id, report.name)] = (source, report)
        if reports:
            self._schedule()

    def count_unknown(self) -> None:
        self.unknown_ext += 1
        self._schedule()

    def _schedule(self) -> None:
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call): record now
            self.flush()
            return
        self._scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        if len(self._last) > MAX_KEPT_KEYS:
            self._last.clear()
        for key, value in pending.items():
            if self._last.get(key) == value:
                continue  # the same report again: nothing new to record
            try:
                self.recorded += record(self._ledger, key[0], value[0], [value[1]])
            except Exception as exc:  # a report must never cost the connection (this runs on the loop)
                log.warning("an agent's report could not be recorded (%s)", type(exc).__name__)
                continue
            self._last[key] = value
        if self.unknown_ext != self._unknown_recorded:
            self._unknown_recorded = self.unknown_ext
            self._ledger.update_agent(unknown_ext_notifications=self.unknown_ext)


class AcpReportTap:
    """The transport intercept for agent reports: True only for an extension notification (consumed).
    `agents`: the registry's (agentctl/agent/clis/), whose relays and extension methods it reads."""

    def __init__(
        self, resolve: Resolver, sink: ReportSink, secrets: SecretRegistry | Collection[str] = (),
        builtin: str | None = None, *, agents: Iterable[AgentCli],
    ) -> None:
        known = list(agents)
        self._relays = [agent.acp_relay for agent in known if agent.acp_relay is not None]
        self._extensions = {method: ext for agent in known if (ext := agent.acp_extension) is not None
                            for method in ext.methods}
        self._resolve = resolve
        self._builtin = builtin  # the built-in server: its listed tools are kept for the exposure check
        self._sink = sink
        self._secrets = secrets
        self.unresolved = 0  # report-shaped frames about no kept session

    def take(self, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if not isinstance(method, str) or "id" in message:
            return False  # a response, or a request: the SDK answers it (-32601 for an unknown one)
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "session/update":
            return self._update(params)
        if not method.startswith("_"):
            return False
        extension = self._extensions.get(method)
        if extension is not None:
            target = self._target(params)
            if target is not None:
                reports = extension.parse(method, params, target[1], self._secrets, self._builtin)
                self._sink.add(target[0], extension.source, reports or [])
        else:
            self._sink.count_unknown()
        return True

    def _update(self, params: dict[str, Any]) -> bool:
        """Reads a relay; True (taken off the wire) only for a notice that is one: its row shows it, and the
        weak notice line (agentctl/agent/acp_notices.py) would say that it changes no row."""
        update = params.get("update")
        if not isinstance(update, dict):
            return False
        # The cheap shape tests first: the prompt's own output (the common case) never costs a session lookup.
        relays = [relay for relay in self._relays if relay.candidate(update)]
        if not relays:
            return False
        target = self._target(params)
        if target is None:
            return False
        attempt_id, delivered = target
        found = next((got for relay in relays if (got := relay.parse(update, delivered, self._secrets)) is not None),
                     None)
        if found is None:
            return False
        self._sink.add(attempt_id, found[0], found[1])
        return update.get("sessionUpdate") == "notice" and bool(found[1])

    def _target(self, params: dict[str, Any]) -> tuple[str, Collection[str]] | None:
        session_id = params.get("sessionId")
        target = self._resolve(session_id if isinstance(session_id, str) else None)
        if target is None:
            self.unresolved += 1
            log.debug("an agent report about no kept session was not recorded")
        return target
