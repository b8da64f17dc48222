"""The witness process itself (`agentctl mcp-witness`) with real servers on real pipes: byte-identical relay in
both directions, hostile servers, its failure domain under real SIGKILLs, and its reports when the daemon comes
and goes. Reports go to a real HTTP listener on loopback that stands in for the daemon's /witness route (the
route itself, with the real daemon, is tested in test_witness_run.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.witness_support import CANARY, HOSTILE, PY_SERVER
from tests.conftest import poll

WITNESS = [sys.executable, "-m", "agentctl.cli", "mcp-witness"]


@pytest.fixture(autouse=True, params=["compiled", "python"])
def relay(request, monkeypatch) -> str:
    """Every test here runs against both relays: the compiled one and the Python one it falls back to."""
    if request.param == "python":
        monkeypatch.setenv("AGENTCTL_WITNESS_RELAY", "python")
    else:
        monkeypatch.delenv("AGENTCTL_WITNESS_RELAY", raising=False)
    return request.param


class Sink:
    """A loopback HTTP listener keeping every witness report body (the daemon's stand-in)."""

    def __init__(self, keep_alive: bool = False, listening: bool = True) -> None:
        reports: list[dict] = []
        self.reports = reports
        self.raw: list[bytes] = []
        self.peers: list[int] = []  # the witness's source port per report: one per connection it opened
        self.drop_connections = False  # close each connection after its answer, without saying so
        raw, peers, sink = self.raw, self.peers, self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                raw.append(body + self.headers.get("Authorization", "").encode())
                reports.append(json.loads(body))
                peers.append(self.client_address[1])
                self.send_response(204)
                self.end_headers()
                if sink.drop_connections:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        # Bound at once, so no other test can take the port; a sink not yet listening refuses connections.
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self.server.server_bind()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/witness"
        self._serving: threading.Thread | None = None
        if listening:
            self.listen()

    def listen(self) -> None:
        self.server.server_activate()
        self._serving = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._serving.start()

    def events(self, kind: str) -> list[dict]:
        return [e for r in self.reports for e in r["events"] if e["kind"] == kind]

    def close(self) -> None:
        if self._serving is not None:  # shutdown() waits for a serve_forever() that must have started
            self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


def _witness(url: str, *command: str, env: dict[str, str] | None = None, stderr=None) -> subprocess.Popen[bytes]:
    full = {**os.environ, "AGENTCTL_WITNESS_URL": url, "AGENTCTL_WITNESS_TOKEN": "tokCANARYw", **(env or {})}
    return subprocess.Popen([*WITNESS, "srv", "--", *command], env=full, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr if stderr is not None else subprocess.PIPE)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_both_directions_are_relayed_byte_for_byte_non_json_and_a_10_mb_line_included(sink, tmp_path):
    sent = (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"k":"' + CANARY.encode() + b'"}}\n'
            + b"not json \xff\xfe at all\n" + b"[" * 100 + b"\n" + b"y" * (10 * 1024 * 1024) + b"\n"
            + b'{"partial": tr')  # no final newline: relayed all the same
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "echo", env={"HASHFILE": str(tmp_path / "h")})
    out, err = proc.communicate(sent, timeout=60)
    assert proc.returncode == 0, err
    assert (tmp_path / "h").read_text() == hashlib.sha256(sent).hexdigest(), "the server read exactly what was sent"
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(sent).hexdigest(), "the agent read exactly what it wrote"
    assert sink.events("server_exited") == [], "an end the agent asked for (stdin closed) is not news of the server"
    assert all(CANARY.encode() not in body for body in sink.raw), "no param reached a report"


def test_a_real_mcp_server_behind_the_witness_is_reported_with_its_tools_and_calls_and_no_values(sink):
    proc = _witness(sink.url, sys.executable, str(PY_SERVER), env={"SERVER_SECRET": CANARY})
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 40, "b": 2}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
    ]
    for line in lines:
        proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline()) for _ in range(4)]
    assert [a["id"] for a in answers] == [1, 2, 3, 4]
    poll(lambda: len(sink.events("tool_call_observed")) == 2, what="both calls reported")
    proc.stdin.close()
    proc.wait(timeout=30)
    [init] = sink.events("initialize_observed")
    assert (init["server_name"], init["protocol_version"]) == ("stdio-fixture", "2025-11-25")
    [tools] = sink.events("tools_list_observed")
    assert (tools["tool_count"], sorted(tools["tool_names"])) == (2, ["add", "ping"])
    assert sorted((c["tool_name"], c["outcome"]) for c in sink.events("tool_call_observed")) == [
        ("add", "ok"), ("nope", "error")]
    assert all(CANARY.encode() not in body and b"42" not in body.split(b"Bearer")[0] for body in sink.raw)
    err = proc.stderr.read()
    assert f"stdio-server stderr: {CANARY}".encode() in err, "the server's stderr reaches the agent untouched"
    assert not [ln for ln in err.splitlines() if ln.startswith(b"agentctl mcp-witness") and CANARY.encode() in ln]


def test_a_server_that_exits_mid_call_makes_the_witness_exit_with_its_code_and_the_agent_sees_eof(sink):
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "exit-mid-call")
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n{"jsonrpc":"2.0","id":2,"method":"tools/call",'
                     b'"params":{"name":"x"}}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    assert proc.stdout.read() == b"", "no answer to the call: the pipe ends as it would with the server itself"
    assert proc.wait(timeout=30) == 3
    poll(lambda: sink.events("server_exited"), what="the exit report")
    assert sink.events("server_exited")[0]["exit_code"] == 3
    assert sink.events("tool_call_observed") == [] and not sink.events("explicit_error"), \
        "initialized, then exited: an exit, not a start failure"


def test_a_server_that_never_answers_is_relayed_silently_and_ends_when_the_agent_closes_and_signals(sink, tmp_path):
    pidfile = tmp_path / "pid"
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "silent", env={"PIDFILE": str(pidfile)})
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n')
    proc.stdin.close()
    poll(lambda: pidfile.exists() and pidfile.read_text(), what="the server's pid")
    server = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)  # what an MCP client does after closing stdin
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    poll(lambda: not _alive(server), what="the server gone")
    assert sink.events("initialize_observed") == []


def test_a_stderr_flood_passes_through_untouched_and_the_relay_goes_on(sink):
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "stderr-flood", env={"FLOOD_MB": "20"})
    result: dict[str, bytes] = {}
    reader = threading.Thread(target=lambda: result.update(err=proc.stderr.read()))
    reader.start()
    proc.stdin.write(b"hello\n")
    proc.stdin.close()
    assert proc.stdout.read() == b"hello\n"
    assert proc.wait(timeout=60) == 0
    reader.join(timeout=60)
    assert len(result["err"]) >= 20 * 1024 * 1024


def test_a_server_that_forks_and_dies_leaves_no_child_behind_and_the_witness_exits_with_its_code(sink, tmp_path):
    pidfile = tmp_path / "pid"
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "fork-and-die", env={"PIDFILE": str(pidfile)})
    assert proc.wait(timeout=30) == 0, "the forked child's open stdout does not hold the witness"
    child = int(pidfile.read_text())
    poll(lambda: not _alive(child), what="the forked child gone with its group")


def test_an_answer_after_megabytes_relayed_unread_is_still_observed_and_every_byte_arrives(sink):
    # Nothing is awaited while the server floods: those bytes go pipe to pipe unread (splice); the witness must
    # still find where the next line starts and read the initialize answer that follows them.
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "flood-answer", env={"FLOOD_MB": "24"})
    block = (b"a log line, not JSON\n" * 200 + b'{"jsonrpc":"2.0","method":"notifications/message"}\n') * 200
    flood = block * (24 * 1024 * 1024 // len(block))
    got = bytearray()
    while len(got) < len(flood):
        got += proc.stdout.read1(1 << 20)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(flood).hexdigest(), "the flood arrived byte for byte"
    proc.stdin.write(b'{"jsonrpc":"2.0","id":"i1","method":"initialize"}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == "i1"
    poll(lambda: sink.events("initialize_observed"), what="the answer after the flood observed")
    assert sink.events("initialize_observed")[0]["server_name"] == "hostile"
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_a_10_mb_line_from_the_server_reaches_the_agent_whole(sink):
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "big-line")
    proc.stdin.close()
    out = proc.stdout.read()
    assert out == b"x" * (10 * 1024 * 1024) + b"\n"
    assert proc.wait(timeout=30) == 0


def test_kill_9_of_the_witness_kills_the_server(sink, tmp_path):
    pidfile = tmp_path / "pid"
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "silent", env={"PIDFILE": str(pidfile)})
    poll(lambda: pidfile.exists() and pidfile.read_text(), what="the server's pid")
    server = int(pidfile.read_text())
    proc.kill()
    proc.wait(timeout=10)
    poll(lambda: not _alive(server), what="the server dead with its witness")


def test_kill_9_of_the_server_ends_the_witness_with_137_and_reports_the_exit(sink, tmp_path):
    pidfile = tmp_path / "pid"
    proc = _witness(sink.url, sys.executable, str(HOSTILE), "silent", env={"PIDFILE": str(pidfile)})
    poll(lambda: pidfile.exists() and pidfile.read_text(), what="the server's pid")
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    poll(lambda: sink.events("server_exited"), what="the exit report")
    assert sink.events("server_exited")[0]["exit_code"] == 137
    assert sink.events("explicit_error")[0]["reason"] == "witness_server_exited"


def test_kill_9_of_the_agent_ends_witness_and_server(sink, tmp_path):
    pidfile, wpid = tmp_path / "pid", tmp_path / "wpid"
    agent = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, subprocess, sys\n"
        f"p = subprocess.Popen({[*WITNESS, 'srv', '--', sys.executable, str(HOSTILE), 'silent']!r}, "
        "stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        f"open({str(wpid)!r}, 'w').write(str(p.pid))\n"
        "signal.pause()  # held until the test kills it\n")], env={**os.environ, "PIDFILE": str(pidfile), "AGENTCTL_WITNESS_URL": sink.url,
                                     "AGENTCTL_WITNESS_TOKEN": "t"})
    poll(lambda: pidfile.exists() and pidfile.read_text() and wpid.exists() and wpid.read_text(), timeout=30,
         what="the witness and the server started")
    witness, server = int(wpid.read_text()), int(pidfile.read_text())
    agent.kill()
    agent.wait(timeout=10)
    poll(lambda: not _alive(witness) and not _alive(server), what="no witness or server outliving its agent")


def _calls(proc: subprocess.Popen[bytes], first_id: int, count: int) -> None:
    for i in range(count):
        call = {"jsonrpc": "2.0", "id": first_id + i, "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": i, "b": 1}}}
        proc.stdin.write(json.dumps(call).encode() + b"\n")
    proc.stdin.flush()
    assert [json.loads(proc.stdout.readline())["id"] for _ in range(count)] == list(range(first_id, first_id + count))


def _initialized(proc: subprocess.Popen[bytes]) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    proc.stdin.write(json.dumps(init).encode() + b"\n" + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1


@contextlib.contextmanager
def _initialized_behind_a_kept_alive_sink() -> Iterator[tuple[Sink, subprocess.Popen[bytes]]]:
    """A real MCP server behind the witness, initialized and reported to a keep-alive listener; the witness is
    ended (its agent closes stdin) and the listener closed on the way out."""
    sink = Sink(keep_alive=True)
    proc = _witness(sink.url, sys.executable, str(PY_SERVER))
    try:
        _initialized(proc)
        poll(lambda: sink.events("initialize_observed"), what="the initialize report, sent at once")
        yield sink, proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        sink.close()


def test_a_burst_of_calls_is_reported_in_a_few_requests_on_one_kept_alive_connection_every_call_counted():
    with _initialized_behind_a_kept_alive_sink() as (sink, proc):
        _calls(proc, 10, 40)
        poll(lambda: len(sink.events("tool_call_observed")) == 40, what="all 40 calls reported")
        with_calls = [r for r in sink.reports if any(e["kind"] == "tool_call_observed" for e in r["events"])]
        assert len(with_calls) <= 10, f"40 calls took {len(with_calls)} reports: calls share a report"
        assert len(set(sink.peers)) == 1, "every report went on the one kept-alive connection"
    assert len(sink.events("tool_call_observed")) == 40, "no call reported twice"


def test_a_daemon_that_drops_the_kept_connection_gets_the_next_reports_on_a_new_one_with_nothing_lost_or_doubled():
    with _initialized_behind_a_kept_alive_sink() as (sink, proc):
        sink.drop_connections = True
        for round_ in range(3):  # each report after the first finds its connection closed under it
            _calls(proc, 100 * (round_ + 1), 5)
            poll(lambda r=round_: len(sink.events("tool_call_observed")) == 5 * (r + 1), what="this round's calls")
        assert len(set(sink.peers)) >= 3, "a new connection after each dropped one"
    assert len(sink.events("tool_call_observed")) == 15, "nothing lost, nothing doubled"


def test_with_the_daemon_gone_the_relay_goes_on_and_reports_arrive_once_it_is_back():
    back = Sink(listening=False)
    proc = _witness(back.url, sys.executable, str(HOSTILE), "answer-init")
    try:
        proc.stdin.write(b'{"jsonrpc":"2.0","id":7,"method":"initialize"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 7, "no daemon, the agent is answered all the same"
        back.listen()
        poll(lambda: back.events("initialize_observed"), timeout=20, what="the report once the daemon is back")
        assert back.events("initialize_observed")[0]["server_name"] == "hostile"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        back.close()


def test_a_command_that_does_not_exist_is_reported_and_the_witness_exits_127(sink, tmp_path):
    proc = _witness(sink.url, str(tmp_path / "missing"))
    proc.stdin.close()
    assert proc.wait(timeout=30) == 127
    assert [e["reason"] for e in sink.events("explicit_error")] == ["witness_server_not_started"]
    assert [e["exit_code"] for e in sink.events("server_exited")] == [127]


def test_the_server_gets_exactly_its_environment_and_working_directory_without_the_witness_variables(
        sink, tmp_path, relay):
    show = ("import json, os, sys\n"
            "sys.stdout.write(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(), 'argv': sys.argv[1:]}))\n")
    full = {"PATH": os.environ["PATH"], "KEEP": "kept", "AGENTCTL_WITNESS_URL": sink.url,
            "AGENTCTL_WITNESS_TOKEN": "tokCANARYw", "AGENTCTL_WITNESS_RELAY": relay}
    proc = subprocess.Popen([*WITNESS, "srv", "--", sys.executable, "-c", show, "a b", "--", "-x"], env=full,
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    seen = json.loads(proc.communicate(timeout=30)[0])
    assert {k: v for k, v in seen["env"].items() if k in ("KEEP", "PATH") or k.startswith("AGENTCTL")} == {
        "KEEP": "kept", "PATH": os.environ["PATH"]}, "the witness's own variables never reach the server"
    assert (Path(seen["cwd"]), seen["argv"]) == (tmp_path, ["a b", "--", "-x"])
