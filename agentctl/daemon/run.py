"""`agentctl run`: the main job for a person at a terminal, built on the same Daemon as `serve`.

Start the daemon in-process, start the agent, open a session, optionally prompt, print a line per
evidence step as it arrives, then the status table and where the report is persisted, and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from agentctl.agent.outcome import AgentError
from agentctl.daemon.app import Daemon
from agentctl.daemon.run_terminal import HeldLines, attached_exit_status, run_attached
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.control import PromptStreamItem
from agentctl.evidence.contract.report import EvidenceEvent
from agentctl.evidence.display import reporter_name
from agentctl.evidence.reasons import meaning
from agentctl.control.socket import cleanup_socket_path
from agentctl.exit_codes import EXIT_FAILED, EXIT_NOT_ATTACHED, EXIT_OK, EXIT_SIGNAL_BASE
from agentctl.lifecycle import Signals, StopStack, serve_until_signalled
from agentctl.logs import TRANSITIONS
from agentctl.safetext import neutralize

if TYPE_CHECKING:  # pragma: no cover
    from agentctl.agent.component import Agent

log = logging.getLogger("agentctl.run")

SETTLE_SECONDS = 1.0  # after the session is accepted, give the agent a moment to list tools before the table

# Exit codes of `agentctl run`, from the CLI's one table (its --help and the README list them). EXIT_NO_DAEMON
# is the CLI's own: a bad spec or a daemon that could not start, one line on stderr.
EXIT_AGENT_FAILED = EXIT_FAILED  # the agent did not start, refused or failed the session or prompt, or exited with an error


def progress_line(event: EvidenceEvent, passthrough: bool = False) -> str | None:
    """One line per step a person cares about; never any payload."""
    server = event.server
    kind = event.kind
    if kind == "delivered":
        return f"  delivered   {server} over {event.transport}"
    if kind == "filtered":
        return f"  filtered    {server}: {meaning(event.reason_code)} [{event.reason_code}]"
    if kind == "session_accepted":
        if passthrough:
            # A passthrough CLI has no handshake: this is the first sign its session runs (never its start).
            return "  session     the CLI's session began (its first contact with the built-in server, or its own report)"
        return "  accepted    the agent accepted the session"
    if kind == "initialize_observed" and event.observed_by == "witness":
        name = f" ({event.server_info.name})" if event.server_info else ""
        version = f" [MCP {event.protocol_version}]" if event.protocol_version else ""
        return f"  connected   {server}: the server answered the agent's initialize{name} · agentctl's witness{version}"
    if kind == "server_exited":
        return f"  exited      {server}: the server exited with code {event.exit_code} · agentctl's witness"
    if kind == "initialize_observed":
        client = event.client.name if event.client else "an unnamed client"
        # The protocol's era and version are detail, in brackets like a reason code: the news is who connected.
        version = f" {event.protocol_version}" if event.protocol_version else ""
        return f"  connected   {server}: the agent connected ({client}) [{event.era or 'legacy'} MCP{version}]"
    if kind == "tools_list_observed":
        return f"  tools       {server}: {event.tool_count} tools loaded"
    if kind == "tool_call_observed":
        return f"  used        {server}: {event.tool_name} ({event.outcome})"
    if kind == "agent_reported" and event.report_source:
        # The agent's claim about the server, never agentctl's observation: said with its source.
        count = f", {event.tool_count} tools" if event.tool_count is not None else ""
        who = reporter_name(event.report_source)
        return f"  reported    {server}: {event.reported_state}{count} · reported by {who}"
    if kind == "explicit_error":
        if passthrough and server is None and event.reason_code == "agent_exited":
            return None  # the CLI's own `exited` line says it, with its code
        where = server or "session"
        detail = f"{event.reason_code}: {event.summary}" if event.summary else event.reason_code
        return f"  error       {where}: {meaning(event.reason_code)} [{detail}]"
    return None


async def run_main_job(
    daemon: Daemon,
    *,
    prompt: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
    signals: Signals | None = None,
) -> int:
    """The main job; with no `[upstream] socket` in the spec it runs an in-process hub, so one command shows
    the whole path (evidence upstream, the tool tunnel) and `agentctl hub status` can read it afterwards. The
    hub starts before the daemon and stops after it, within the same bounded stop.

    `signals`: SIGTERM/SIGINT captured by the CLI before start-up (else from here on); the first stops the
    job and drains (exit 128 + N), a second cuts the drain short."""
    # The agent's end, readiness and failed servers are in this job's own output: at run's default level (warning)
    # their log lines would say them twice. `--log-level info` (or debug) still logs them.
    transitions = logging.getLogger(TRANSITIONS)
    quiet = transitions.getEffectiveLevel() >= logging.WARNING and transitions.level == logging.NOTSET
    if quiet:
        transitions.setLevel(logging.ERROR)
    try:
        return await _main_job(daemon, prompt=prompt, as_json=as_json, out=out, signals=signals)
    finally:
        if quiet:
            transitions.setLevel(logging.NOTSET)


async def _main_job(daemon: Daemon, *, prompt: str | None, as_json: bool, out: TextIO | None,
                    signals: Signals | None) -> int:
    if daemon.upstream_socket:
        return await _run_main_job(daemon, prompt=prompt, as_json=as_json, out=out, signals=signals)
    from agentctl.evidence.store import ensure_state_dir

    ensure_state_dir(daemon.ctx.state_dir, daemon.ctx.identity.execution_id)
    # A short private directory: the hub's socket path must fit AF_UNIX's 107 bytes.
    with tempfile.TemporaryDirectory(prefix="agentctl-hub-", dir="/tmp") as tmp:
        return await _run_main_job(daemon, prompt=prompt, as_json=as_json, out=out, signals=signals,
                                   hub_dir=Path(tmp))


async def _run_main_job(
    daemon: Daemon,
    *,
    prompt: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
    signals: Signals | None = None,
    hub_dir: Path | None = None,
) -> int:
    from agentctl.control.render import render_status, use_color

    out = out or sys.stdout
    # Every progress line quotes evidence (names, the agent's own words): no control character reaches the terminal.
    show = (lambda line: None) if as_json else (lambda line: (out.write(neutralize(line, spaces=True) + "\n"), out.flush()))
    show = HeldLines(show)  # held while an agent on a terminal has the person's

    attempts: list[str] = []
    passthrough = daemon.spec.agent is not None and daemon.spec.agent.protocol == "passthrough"

    def on_event(event: EvidenceEvent | None) -> None:
        if event is None:
            return
        if event.attempt_id not in attempts:
            # The attempt exists before anything is delivered for it: say so first.
            attempts.append(event.attempt_id)
            show(f"attempt {event.attempt_id}")
        if line := progress_line(event, passthrough):
            show(line)

    async def job(_ready: object) -> int:
        return await _job(daemon, prompt, show)

    stops = StopStack(log)

    async def start() -> None:
        try:
            if hub_dir is not None:
                from agentctl.hub.embedded import embedded_hub

                state_dir = daemon.ctx.state_dir
                hub = embedded_hub(hub_dir, db_path=state_dir / "hub.sqlite3", tasks_db=state_dir / "tasks.sqlite3")
                daemon.use_upstream(await stops.enter("in-process hub", hub), embedded=True)
            await stops.enter("daemon", daemon)
        except BaseException:
            await stops.aclose()  # a start that failed or was cut short stops what it started
            raise

    async def start_then_header() -> None:
        # Evidence of a start (a passthrough CLI's attempt, its delivery) waits for the header, so the output
        # reads in order: what runs where, then what happened to it.
        with show.holding():
            await start()
            hub = "the embedded hub (no [upstream] configured)" if hub_dir is not None else "the [upstream] socket"
            show.now(f"agentctl: execution {daemon.ctx.identity.execution_id}, MCP at {daemon.ctx.mcp_url}, "
                     f"evidence to {hub}")
            agent = daemon.agent
            if agent is not None and agent.kind == "passthrough" and agent.start_error is None:
                show.now("agent started (passthrough: its process start is the attempt, not a session acceptance)")

    async def abort() -> None:
        await daemon.abort()
        if hub_dir is not None:
            cleanup_socket_path(hub_dir / "hub.sock")  # what the hub flushed is flushed

    daemon.ledger.subscribe(on_event)
    try:
        outcome = await serve_until_signalled(
            start=start_then_header, main=job, stop=stops.aclose, abort=abort,
            shutdown_timeout=daemon.spec.daemon.shutdown_timeout, signals=signals,
        )
    finally:
        daemon.ledger.unsubscribe(on_event)
    if as_json and daemon.ctx.report_path is not None:
        # After the stop: the same final report the file holds (the agent's exit included).
        out.write(encode(daemon.ledger.history).decode() + "\n")
    elif not as_json and outcome.signum is None and daemon.ctx.report_path is not None:
        # The table is the final report the file holds, rendered after the stop: evidence that lands after the
        # session was accepted (a tools/list 0.6 s later) is in both or in neither, never only in the file.
        # A gone agent is said once above the rows, not under each of them.
        out.write("\n" + render_status(daemon.ledger.history, color=use_color(out), agent_line=True))
        out.write(f"report persisted to {daemon.ctx.report_path}\n")
    if outcome.signum is None:
        return outcome.result or EXIT_OK
    # Ctrl-C or SIGTERM: the agent tree is stopped and the report is final all the same.
    first = signal.Signals(outcome.signum).name
    how = f"; {signal.Signals(outcome.forced_by).name} again: exited without finishing the stop" if outcome.forced_by else ""
    where = f"; report persisted to {daemon.ctx.report_path}" if daemon.ctx.report_path else ""
    print(f"agentctl: interrupted by {first}: stopped the agent{where}{how}", file=sys.stderr)
    return EXIT_SIGNAL_BASE + (outcome.forced_by or outcome.signum)


async def _job(daemon: Daemon, prompt: str | None, show: Callable[[str], object]) -> int:
    from agentctl.daemon.refusal import explain_exit, explain_refusal

    code = EXIT_OK
    agent = daemon.agent
    if agent is None:
        attempt_id, _ = daemon.open_attempt("manual")
        show(f"attempt {attempt_id} (no [agent] in the spec: MCP only)")
    elif agent.start_error is not None:
        show(f"the agent did not start: {agent.start_error}")
        code = EXIT_AGENT_FAILED
        explain_refusal(agent, "did not start", str(agent.start_error))
    elif agent.kind == "passthrough":
        # A passthrough CLI: its start was the attempt (said under the header), and it works and exits on its own.
        if prompt is not None:
            show("  note        --prompt needs an ACP agent; a passthrough CLI takes its task from its own argv")
            code = EXIT_AGENT_FAILED
        if (process := agent.supervisor.process) is not None:
            if process.terminal is not None:
                await run_attached(process.terminal, process.wait_exit(), show)
            info = await agent.supervisor.wait_exit()
            show(f"  exited      the agent {info.reason}")
        await _settle(daemon)
        if process is not None and process.terminal is None and _exited_with_error(agent):
            # Its screen was nobody's: say what it printed last, and why that may be (a terminal's person saw it).
            await agent.output_drained()
            explain_exit(agent, info.reason)
        if process is not None and process.terminal is not None and code == EXIT_OK:
            # The person ran the agent itself: its own status is theirs, as `ssh -t` or `docker run -it` do.
            return attached_exit_status(info)
    else:
        started = daemon.ledger.history.agent
        name, version = (started.name, started.version) if started is not None else (None, None)
        show(f"agent {name or '?'} {version or ''} started".replace("  ", " "))
        acp = agent.runtime_now()  # started without an error: its runtime is there
        outcome = await acp.new_session()
        refused: tuple[str, str | None] | None = None  # what, and the agent's error: explained once its output is in
        if not outcome.accepted:
            code = EXIT_AGENT_FAILED
            refused = ("refused the session", f"{outcome.reason_code}: {outcome.summary}" if outcome.summary else outcome.reason_code)
        elif prompt is not None and not await hold_for_required(daemon, show):
            code = EXIT_NOT_ATTACHED
            show("  no prompt   a required server is not attached: the prompt was not sent")
        elif prompt is not None:
            show("prompt sent")
            printer = _AnswerPrinter(show)
            try:
                stop_reason = await acp.prompt(prompt, printer)
                printer.flush()
                show(f"  done        {stop_reason}")
            except AgentError as exc:
                printer.flush()
                show(f"  error       prompt: {exc}")
                code = EXIT_AGENT_FAILED
                refused = ("refused the prompt", str(exc))
        await _settle(daemon)
        if refused is not None:
            explain_refusal(agent, *refused)
    if agent is not None and _exited_with_error(agent):
        code = EXIT_AGENT_FAILED
    return code


async def hold_for_required(daemon: Daemon, show: Callable[[str], object]) -> bool:
    """Wait until every required server is attached (True) or the gate blocks (False), saying each server's
    evidence and the gate's reading of it. Nothing is required: True at once."""
    from agentctl.control.server import build_gate
    from agentctl.evidence.required import gate_lines

    gate = build_gate(daemon.ctx)
    if gate is None:
        return True
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def listener(event: EvidenceEvent | None) -> None:
        changed.set()

    daemon.ledger.subscribe(listener)
    try:
        if gate.state == "waiting":
            show(f"  waiting     for {', '.join(s.name for s in gate.servers if s.state != 'attached')} "
                 f"(required, up to {gate.timeout:g} s)")
        while gate is not None and gate.state == "waiting":
            changed.clear()
            # The evidence wakes the gate; the deadline is the attempt's start plus the timeout.
            left = gate.timeout - (gate.waited or 0.0)
            deadline = loop.time() + max(left, 0.0) + 0.01
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=max(deadline - loop.time(), 0.0))
            gate = build_gate(daemon.ctx)
    finally:
        daemon.ledger.unsubscribe(listener)
    assert gate is not None
    for line in gate_lines(gate):
        show(f"  required    {line}")
    return gate.state == "open"


def _exited_with_error(agent: Agent) -> bool:
    """The agent's process ended on its own before the job did, with a non-zero code or a signal."""
    info = agent.supervisor.exit_info
    return info is not None and not info.stopped and (info.returncode != 0 or info.signal is not None)


class _AnswerPrinter:
    """Shows the agent's answer on the terminal only (it is never recorded), a line at a time."""

    def __init__(self, show: Callable[[str], object]) -> None:
        self._show = show
        self._parts: list[str] = []

    def __call__(self, item: PromptStreamItem) -> None:
        if item.type == "agent_message_chunk":
            self._parts.append(item.text or "")
            if "".join(self._parts).endswith("\n"):
                self.flush()

    def flush(self) -> None:
        text = "".join(self._parts).strip()
        self._parts.clear()
        if text:
            self._show("  agent       " + text[:200])


async def _settle(daemon: Daemon, quiet: float = 0.3) -> None:
    """Let in-flight MCP evidence land: return after `quiet` s without news, or SETTLE_SECONDS at most.

    Missing evidence is then shown honestly (delivered, connection unverified); it is never waited out.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    changed = asyncio.Event()

    def listener(event: EvidenceEvent | None) -> None:
        changed.set()

    daemon.ledger.subscribe(listener)
    try:
        while (left := deadline - loop.time()) > 0:
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), timeout=min(quiet, left))
            except TimeoutError:
                return
    finally:
        daemon.ledger.unsubscribe(listener)
