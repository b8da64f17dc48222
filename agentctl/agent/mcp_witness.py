"""The stdio witness (`agentctl mcp-witness NAME -- COMMAND [ARG...]`): a third-party stdio MCP server, observed.

The agent spawns the witness in the server's place. The witness starts the real server with exactly the command,
arguments, environment and working directory it was given (its own variables taken out first), relays both
directions byte for byte as they arrive, and reads only the envelopes agentctl/agent/witness_scan.py keeps. The
server's stderr is the witness's own, inherited: never read. What it sees goes to the daemon that delivered it,
to the endpoint's witness route with the attempt's bearer token (`AGENTCTL_WITNESS_URL`/`_TOKEN`, never argv).

Failure domain: the server runs in its own process group and dies with the witness (PR_SET_PDEATHSIG); the
witness dies with the agent (the same, plus a parent watch) and exits with the server's code (128+N for a
signal), so the agent sees what it would see of the server itself. A daemon that is gone costs nothing: the
relay goes on, reports wait (bounded) and go when it answers again; a daemon that no longer knows the token
(401) is never asked again.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from agentctl.agent.delivery import WITNESS_ENV_TOKEN as ENV_TOKEN
from agentctl.agent.delivery import WITNESS_ENV_URL as ENV_URL
from agentctl.agent.witness_relay import Relay
from agentctl.agent.witness_scan import Envelopes, Observation

# `python`: relay in Python even where the compiled relay is there (an operator's way around a fault in it; the
# tests run both). Taken out of the environment like the other two.
ENV_RELAY = "AGENTCTL_WITNESS_RELAY"
# The failures the witness names (registered in agentctl/evidence/reasons.py; the route checks them).
NOT_STARTED = "witness_server_not_started"
EXITED_EARLY = "witness_server_exited"
MAX_QUEUED = 512  # reports held while the daemon does not answer; beyond this calls are counted, not kept
RETRY_MAX = 5.0
LINGER = 0.25  # seconds a report of a call waits for more calls to share its request
LINGERING = frozenset({"tool_call_observed"})
FLUSH_AT_EXIT = 2.0  # seconds the witness gives its last reports once the server has exited
_PR_SET_PDEATHSIG = 1


def _say(text: str) -> None:
    """One diagnostic line on stderr: fixed wording and counts, never a value the server or agent sent."""
    with contextlib.suppress(OSError):
        os.write(2, f"agentctl mcp-witness: {text}\n".encode())



def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


class Reporter:
    """Sends observations to the daemon on a thread of its own; the relay never waits for it.

    One kept-alive connection, opened again only after a failure. Reports of calls linger up to LINGER so a
    burst of calls shares one request (each event keeps its own age, so the times stay exact); what the gate
    waits for (the server's answers to initialize and tools/list, its failure, its exit) goes at once."""

    def __init__(self, url: str, token: str, server: str) -> None:
        parts = urlsplit(url)
        self._host, self._port, self._path = parts.hostname or "", parts.port or 80, parts.path or "/"
        self._auth = f"Bearer {token}"
        self._server = server
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._silent = not (url and token and parts.scheme == "http")
        self._idle = threading.Event()
        self._idle.set()
        self._final = False
        self._conn: http.client.HTTPConnection | None = None
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="witness-report", daemon=True)
        self._thread.start()

    def add(self, kind: str, **fields: Any) -> None:
        if self._silent:
            return
        with self._cond:
            if len(self._queue) >= MAX_QUEUED:
                self.dropped += 1
                return
            lingering = kind in LINGERING and bool(self._queue)
            self._queue.append({"kind": kind, "at": time.monotonic(), **fields})
            self._idle.clear()
            if not lingering:  # a call joining a queued one: the sender already waits out LINGER for it
                self._cond.notify()

    def flush(self, timeout: float) -> bool:
        """Wait (bounded) until every queued report went, or until the daemon failed to answer once: at the
        end a daemon that is not there is not waited for."""
        with self._cond:
            self._final = True
            self._cond.notify()
        return self._idle.wait(timeout)

    def _routine(self) -> bool:
        return not self._final and all(e["kind"] in LINGERING for e in self._queue)

    def _run(self) -> None:
        delay = 0.2
        while True:
            with self._cond:
                while not self._queue:
                    self._idle.set()
                    self._cond.wait()
                if self._routine():
                    self._cond.wait_for(lambda: not self._routine(), timeout=LINGER)
                batch = list(self._queue)
            status = self._post(batch)
            if status is None:  # the daemon is not there: keep the reports, try again later
                if self._final:
                    self._idle.set()
                    return
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = 0.2
            if status >= 300:
                _say(f"the daemon refused {len(batch)} report(s) (HTTP {status})")
            with self._cond:
                for _ in batch:
                    self._queue.popleft()
                if status == 401:
                    # Not this daemon's attempt any more (a new daemon, or the attempt ended): silent for good.
                    self._silent = True
                    self._queue.clear()
                if not self._queue:
                    self._idle.set()

    def _post(self, batch: list[dict[str, Any]]) -> int | None:
        now = time.monotonic()
        events = [{k: v for k, v in e.items() if k != "at"} | {"age": round(now - e["at"], 3)} for e in batch]
        body = json.dumps({"server": self._server, "events": events}, separators=(",", ":")).encode()
        # A kept connection the daemon closed meanwhile fails at once: one fresh connection is tried before
        # the daemon is taken for gone.
        for fresh in (self._conn is None, True):
            if fresh:
                self._close()
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=5)
            assert self._conn is not None
            try:
                self._conn.request("POST", self._path, body=body,
                                   headers={"Authorization": self._auth, "Content-Type": "application/json"})
                resp = self._conn.getresponse()
                resp.read(4096)
                if resp.will_close or not resp.isclosed():
                    self._close()  # unread body left, or the daemon closes: no reuse
                return resp.status
            except (OSError, http.client.HTTPException):
                self._close()
                if fresh:
                    return None
        return None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Witness:
    """One server behind one witness: the envelopes of its link (fed by the relay) and the reports."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.envelopes = Envelopes()
        self._lock = threading.Lock()
        self.answered = False  # the server answered one of the agent's watched requests
        self.agent_closed = False  # the agent ended the link: closed the server's stdin, or signalled the witness

    def observe(self, seen: Observation | None) -> None:
        if seen is None:
            return
        self.answered = True
        self.reporter.add(seen.kind, **seen.fields)

    def agent_done(self) -> None:
        self.agent_closed = True

    def from_agent(self, line: bytes, end: int) -> None:
        with self._lock:
            seen = self.envelopes.from_agent(line, end)
        self.observe(seen)

    def from_server(self, line: bytes, horizon: int) -> None:
        with self._lock:
            seen = self.envelopes.from_server(line, horizon)
        self.observe(seen)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _usage() -> int:
    _say("usage: agentctl mcp-witness NAME -- COMMAND [ARG...] (where to report comes from the environment)")
    return 2


def _parse(argv: list[str]) -> tuple[str, list[str]] | None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0] or not argv[2]:
        return None
    return argv[0], argv[2:]


def run(name: str, command: list[str], url: str, token: str, use_compiled: bool = True) -> int:
    """Relay until the server exits; its exit code (128+N for signal N) is the witness's."""
    parent = os.getppid()
    _die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:
        return 1
    reporter = Reporter(url, token, name)
    witness = Witness(reporter)
    try:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                  start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        why = os.strerror(exc.errno) if exc.errno else type(exc).__name__
        reporter.add("explicit_error", reason=NOT_STARTED,
                     summary=f"the server could not be started: {why}")
        reporter.add("server_exited", exit_code=code)
        _say(f"the server could not be started ({why})")
        reporter.flush(FLUSH_AT_EXIT)
        return code
    assert server.stdin is not None and server.stdout is not None
    stopping = threading.Event()

    def forward(sig: int, _frame: Any) -> None:
        # The agent (or the agent's death) ends the witness: the server gets the same signal.
        witness.agent_closed = True
        with contextlib.suppress(OSError):
            os.kill(server.pid, sig)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    relay = Relay(witness.from_agent, witness.from_server, lambda: witness.envelopes.waiting, witness.agent_done,
                  use_compiled=use_compiled)
    relay.start(0, server.stdin.fileno(), server.stdout.fileno(), 1)
    threading.Thread(target=_watch_parent, args=(parent, server, stopping), daemon=True).start()
    returncode = server.wait()
    # Whatever the server left behind in its group (a forked child holding the pipe) goes with it.
    with contextlib.suppress(OSError):
        os.killpg(server.pid, signal.SIGKILL)
    relay.join(FLUSH_AT_EXIT)
    code = _exit_code(returncode)
    if not witness.agent_closed:
        # An end the agent asked for (it closed the pipe, or signalled) is its shutdown, not news of the server.
        if not witness.answered:
            reporter.add("explicit_error", reason=EXITED_EARLY,
                         summary=f"the server exited with code {code} before it answered the agent")
        reporter.add("server_exited", exit_code=code)
    reporter.flush(FLUSH_AT_EXIT)
    return code


def _watch_parent(parent: int, server: subprocess.Popen[bytes], stopping: threading.Event) -> None:
    """The agent is gone (re-parented) even if a pipe stays open: the server goes, SIGKILL if it lingers."""
    while os.getppid() == parent:
        if stopping.wait(0.5):
            break
    deadline = time.monotonic() + 2.0
    with contextlib.suppress(OSError):
        if os.getppid() != parent:
            os.kill(server.pid, signal.SIGTERM)
    while server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if server.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(server.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """`agentctl mcp-witness NAME -- COMMAND [ARG...]`."""
    parsed = _parse(argv)
    # Out of the environment at once: the server gets exactly the environment it was given.
    url, token = os.environ.pop(ENV_URL, ""), os.environ.pop(ENV_TOKEN, "")
    use_compiled = os.environ.pop(ENV_RELAY, "") != "python"
    if parsed is None:
        return _usage()
    name, command = parsed
    code = run(name, command, url, token, use_compiled)
    sys.stdout.flush()
    os._exit(code)  # the relay threads may still sit in a read of a pipe nobody will close
