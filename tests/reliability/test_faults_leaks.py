"""Leaks a local user can provoke without any token, against real processes: malformed HTTP requests that
carry a live bearer token (aiohttp's parser quotes the offending line), and hostile names, ids and
summaries in upstream frames (escape sequences that rewrite a terminal, line breaks that forge log lines,
bidi overrides), shown by the real hub CLI and logged by the real hub."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from pathlib import Path

import msgspec
import pytest

from agentctl.control.client import ControlClient
from agentctl.evidence.contract.base import encode
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.upstream import protocol as P
from tests.conftest import REPO, agentctl_cmd, eventually, poll, write_spec
from tests.reliability.faults_support import open_attempt
from tests.upstream.procs import start_agentctl, start_hub
from tests.upstream.support import RawClient, identity


def _send_raw(connect: tuple[int, object], data: bytes) -> bytes:
    """One request as bytes over a real socket (TCP port or Unix path); the answer's first bytes."""
    family, address = connect
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(data)
        try:
            return sock.recv(200)
        except (ConnectionResetError, TimeoutError):
            return b""


def _malformed(token: str, route: str) -> dict[str, bytes]:
    """Requests aiohttp's parser refuses, each quoting `token` in the part it complains about."""
    return {
        # A header padded past the 8190-byte line limit: the message quotes the line's first 100 bytes.
        "LineTooLong": f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}".encode()
        + b"A" * 9000 + b"\r\n\r\n",
        # A control character inside the header value: the message quotes the whole header line.
        "BadHttpMessage": f"GET {route} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token[:9]}\x01"
        f"{token[9:]}\r\n\r\n".encode(),
    }


def _leaked(log: str, token: str) -> list[str]:
    return [form for form in (token, token[:9], token[9:], token[:20]) if form in log]


def test_malformed_requests_carrying_a_live_token_log_type_route_and_status_once_on_both_daemon_listeners(short_tmp):
    spec = write_spec(short_tmp)
    daemon = start_agentctl(["serve", str(spec), "--socket", str(short_tmp / "c.sock")], short_tmp / "daemon.log")
    try:
        sock = Path(daemon.ready["control_socket"])
        token = open_attempt(sock)["headers"]["Authorization"].split()[-1]
        port = int(daemon.ready["mcp_url"].rsplit(":", 1)[1].split("/")[0])
        tcp, unix = (socket.AF_INET, ("127.0.0.1", port)), (socket.AF_UNIX, str(sock))
        for kind, data in _malformed(token, "/mcp?x=1").items():
            assert _send_raw(tcp, data).startswith(b"HTTP/1.0 400"), kind
        for kind, data in _malformed(token, "/v1/status").items():
            assert _send_raw(unix, data).startswith(b"HTTP/1.0 400"), kind
        for _ in range(40):  # a flood of the same kinds costs no further line
            for data in _malformed(token, "/mcp").values():
                _send_raw(tcp, data)
        # Both listeners still serve: the MCP port's readiness probe and the control socket.
        assert _send_raw(tcp, b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n").startswith(b"HTTP/1.1 200")
        assert ControlClient(sock).get("/v1/status")[0] == 200
        log = poll(lambda: (text := daemon.log.read_text()).count("refused a malformed request") >= 2 and text,
                   what="the refusals in the log")
    finally:
        assert daemon.stop() == 0
    log = daemon.log.read_text()
    for kind in ("LineTooLong", "BadHttpMessage"):
        line = f"agentctl WARNING agentctl.http: daemon: refused a malformed request: {kind} on (unparsed), status 400"
        assert log.count(line) == 1, (kind, log[-3000:])
    assert "Error handling request" not in log and "Bearer" not in log
    assert _leaked(log, token) == []


def test_malformed_requests_carrying_the_page_token_log_one_line_on_the_hub_page(short_tmp):
    hub = start_hub(short_tmp, extra=("--http", "127.0.0.1:0"))
    try:
        token = hub.ready["page"].split("#token=", 1)[1]
        port = int(hub.ready["http"].rstrip("/").rsplit(":", 1)[1])
        for data in _malformed(token, "/api/status").values():
            assert _send_raw((socket.AF_INET, ("127.0.0.1", port)), data).startswith(b"HTTP/1.0 400")
        poll(lambda: hub.log.read_text().count("refused a malformed request") >= 2, what="the refusals in the log")
    finally:
        hub.stop()
    log = hub.log.read_text()
    assert "agentctl WARNING agentctl.http: hub page: refused a malformed request: LineTooLong on (unparsed), " \
           "status 400" in log
    assert "Error handling request" not in log and _leaked(log, token) == []


# ---- control characters from frames ---------------------------------------------------------------------

ESCAPES = "\x1b[2J\x1b[H\x1b]0;owned\x07"              # clear the screen, home the cursor, set the title
FORGED = "agentctl INFO agentctl.hub.hub: forged"  # what a line break in an id would start
HOSTILE_SESSION = f"s1\n{FORGED}"
HOSTILE_SERVER = f"docs{ESCAPES}"
HOSTILE_SUMMARY = f"refused \u202eenil-eno\u202c by {ESCAPES}server\x85next"
RAW = ("\x1b", "\x07", "\u202e", "\x85")


async def _publish_hostile(sock: Path) -> dict:
    """A local process speaking the upstream protocol: hello and a snapshot whose names, ids and summaries
    carry control characters (a real daemon never sends such text; any process of the user can)."""
    ident = identity(session=HOSTILE_SESSION, execution=f"exec-1{ESCAPES}")
    ledger = Ledger(ident)
    seeds = [ServerSeed(name=HOSTILE_SERVER, source="profile", transport="http", target="https://docs.example")]
    ledger.begin_attempt("session_new", seeds)
    row = ledger.history.current.servers[0]
    row.status, row.reason_code, row.summary = "failed", "connect_failed", HOSTILE_SUMMARY
    ledger.update_agent(state="running")
    ledger.history.agent.name = f"agent{ESCAPES}"
    client = await RawClient.connect(sock)
    await client.hello(ident)
    await client.send(P.frame(P.SnapshotFrame, history=ledger.history))
    await client.send(P.frame(P.HeartbeatFrame))
    assert isinstance(await client.recv(), P.HeartbeatFrame)
    await client.close()
    return json.loads(encode(ledger.history))


def _cli(*argv: str) -> str:
    done = subprocess.run(agentctl_cmd(*argv), capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": ""})
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def _sessions(db: str) -> list[str]:
    return [s["session_id"] for s in json.loads(_cli("hub", "status", "--db", db, "--json"))["sessions"]]


def test_control_characters_from_frames_are_made_visible_by_the_hub_cli_and_log_and_kept_exact_in_json(short_tmp):
    hub = start_hub(short_tmp)
    try:
        sent = asyncio.run(_publish_hostile(short_tmp / "hub.sock"))
        db = str(short_tmp / "hub.sqlite3")
        poll(lambda: _sessions(db) == [HOSTILE_SESSION], what="the session flushed")
        outputs = {argv: _cli("hub", *argv, "--db", db) for argv in (("status",), ("report", HOSTILE_SESSION))}
        report_json = json.loads(_cli("hub", "report", HOSTILE_SESSION, "--db", db, "--json"))
    finally:
        hub.stop()
    for argv, text in outputs.items():
        assert not [ch for ch in RAW if ch in text], argv
        assert not [line for line in text.splitlines() if line.startswith(FORGED)], argv
        assert "docs\\x1b[2J" in text, argv  # shown, harmlessly, not dropped
        assert f"session s1 {FORGED}" in text, argv  # the line break is a space: still one line
    assert "agent agent\\x1b[2J\\x1b[H\\x1b]0;owned\\x07 running" in outputs[("status",)]
    report = outputs[("report", HOSTILE_SESSION)]
    assert "refused \\u202eenil-eno\\u202c by" in report and "server\\x85next" in report, report
    # --json is exactly what the daemon sent (JSON escapes control characters itself).
    assert report_json["history"]["current"]["servers"][0]["name"] == HOSTILE_SERVER
    assert report_json["history"]["current"]["servers"][0]["summary"] == HOSTILE_SUMMARY
    assert report_json["session"]["session_id"] == HOSTILE_SESSION == sent["identity"]["session_id"]
    log = hub.log.read_text()
    assert f"session s1\\x0a{FORGED[:8]}" in log  # the hub logged the id, its line break made visible
    assert not [line for line in log.splitlines() if line.startswith(FORGED)]
    assert not [ch for ch in RAW if ch in log]


def test_a_planted_report_with_control_characters_renders_harmlessly_and_its_json_stays_exact(short_tmp):
    from agentctl.evidence.store import report_path, write_atomic

    ledger = Ledger(identity(execution="exec-planted"))
    ledger.begin_attempt("session_new", [ServerSeed(name=HOSTILE_SERVER, source="profile", transport="http",
                                                    target="https://docs.example")])
    ledger.history.current.acp_session_id = f"acp\n{FORGED}"
    path = report_path(short_tmp / "state", "exec-planted")
    path.parent.mkdir(parents=True, mode=0o700)
    write_atomic(path, encode(ledger.history))
    argv = ("report", "--state-dir", str(short_tmp / "state"), "--execution", "exec-planted")
    text = _cli(*argv)
    assert not [ch for ch in RAW if ch in text] and "docs\\x1b[2J" in text
    assert "ACP session acp agentctl INFO" in text and not [line for line in text.splitlines() if line.startswith(FORGED)]
    assert json.loads(_cli(*argv, "--json"))["current"]["acp_session_id"] == f"acp\n{FORGED}"
    assert msgspec.json.decode(path.read_bytes())["current"]["servers"][0]["name"] == HOSTILE_SERVER


@pytest.mark.parametrize("hostile", ["\x1b[31mred", "a\nb", "\u202eevil", "x\x9by", "tab\there"])
def test_a_log_record_with_control_characters_is_one_line_with_them_visible(hostile: str) -> None:
    import logging

    from agentctl.logs import LOG_FORMAT, SafeFormatter

    record = logging.LogRecord("agentctl.t", logging.INFO, __file__, 1, "session %s connected", (hostile,), None)
    line = SafeFormatter(LOG_FORMAT).format(record)
    assert "\n" not in line and not [ch for ch in line if ord(ch) < 32 or 0x7f <= ord(ch) <= 0x9f]
    assert "\u202e" not in line and line.split(" ", 1)[1].startswith("agentctl INFO agentctl.t: session ")


async def test_a_hub_fed_by_a_hostile_frame_still_serves_the_next_daemon(short_tmp):
    """The neutralization is display-only: a hostile frame is stored as sent and harms nobody after it."""
    hub = await asyncio.to_thread(start_hub, short_tmp)
    try:
        await _publish_hostile(short_tmp / "hub.sock")
        client = await RawClient.connect(short_tmp / "hub.sock")
        await client.hello(identity(session="s-clean"))
        await client.send(P.frame(P.SnapshotFrame, history=Ledger(identity(session="s-clean")).history))
        await client.send(P.frame(P.HeartbeatFrame))
        assert isinstance(await client.recv(), P.HeartbeatFrame)
        await client.close()
        db = str(short_tmp / "hub.sqlite3")
        await eventually(lambda: "s-clean" in _sessions(db), 20, "the clean session")
    finally:
        await asyncio.to_thread(hub.stop)
