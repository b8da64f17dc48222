"""ACP edges an agent chooses: errors that echo the request, text it names itself with, a prompt reader
too slow for its updates, a cancel it never reads. A real daemon in-process and a real scripted agent
process (tests/agent/fixtures/scripted_agent.py) over real pipes and a real control socket."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import pytest

from agentctl.agent import acp as acp_module
from agentctl.control.agent_routes import MAX_PENDING_UPDATES
from agentctl.control.client import ControlClient
from agentctl.daemon.app import Daemon
from agentctl.spec_loader import load_spec
from tests.conftest import write_spec
from tests.conftest import eventually

SCRIPTED = Path(__file__).parent / "fixtures" / "scripted_agent.py"
HEADER_CANARY = "HDR-CANARY-7d1c0b9e"

SERVERS = [
    {"name": "docs", "type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Api-Key": HEADER_CANARY}},
    {"name": "files", "type": "http", "url": "http://127.0.0.1:1/files"},
]


def spec(tmp_path: Path, *flags: str) -> Path:
    return write_spec(tmp_path, agent={"command": [sys.executable, str(SCRIPTED), *flags], "stop_grace": 0.2},
                      servers=SERVERS)


def raw_post(sock: Path, path: str, body: bytes) -> socket.socket:
    """Send a POST over the control socket and leave the answer unread (a caller that reads slowly)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(sock))
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    return conn


def read_all(conn: socket.socket) -> bytes:
    chunks = []
    conn.settimeout(30)
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    conn.close()
    return b"".join(chunks)


def ndjson_lines(raw: bytes) -> list[dict]:
    """The JSON lines of a chunked NDJSON HTTP response."""
    _head, _, body = raw.partition(b"\r\n\r\n")
    data, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        data, rest = data + rest[:size], rest[size + 2 :]
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@pytest.mark.parametrize("where", ["data", "message"])
async def test_an_error_echoing_the_whole_request_is_report_level_and_fails_no_server(tmp_path, short_tmp, where):
    async with Daemon(load_spec(spec(tmp_path, "--echo-error", where)), socket_path=short_tmp / "c.sock") as daemon:
        outcome = await daemon.agent.acp.new_session()
        assert not outcome.accepted and outcome.failed_servers == ()
        current = daemon.ledger.history.current
        assert current.session_error is not None and current.session_error.reason_code == "session_rejected"
        assert {r.name: r.status for r in current.servers} == dict.fromkeys(("kandev", "docs", "files"), "delivered")
        token = daemon.ledger.tokens.token_of(current.attempt_id)
        report = json.dumps((await asyncio.to_thread(ControlClient(short_tmp / "c.sock").get, "/v1/report"))[1])
        assert token not in report and HEADER_CANARY not in report and token not in (outcome.summary or "")


async def test_agent_chosen_names_and_session_ids_are_kept_only_when_safe(tmp_path, short_tmp):
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps({
        "name": f"helper key={HEADER_CANARY} Bearer abcdefghijklmnop",
        "version": "1.0\n" + "build " * 60,
        "session_id": "my session for alice",
    }))
    async with Daemon(load_spec(spec(tmp_path, "--texts", str(texts))), socket_path=short_tmp / "c.sock") as daemon:
        outcome = await daemon.agent.acp.new_session()
        assert outcome.accepted and outcome.acp_session_id == "my session for alice"  # for the caller only
        agent = daemon.ledger.history.agent
        assert agent.name == "helper key=<redacted> Bearer <redacted>"
        assert "\n" not in agent.version and len(agent.version.encode()) <= 128 and agent.version.endswith("…")
        assert daemon.ledger.history.current.acp_session_id is None, "free text is no id"


async def test_a_slow_prompt_reader_gets_a_bounded_stream_and_the_count_of_what_was_dropped(tmp_path, short_tmp):
    count = MAX_PENDING_UPDATES * 4
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec(tmp_path, "--updates", str(count), "--size", "2048")), socket_path=sock) as daemon:
        runtime = daemon.agent.acp
        assert (await runtime.new_session()).accepted
        conn = await asyncio.to_thread(raw_post, sock, "/v1/prompt", b'{"text": "go"}')
        await eventually(lambda: runtime.prompt_running, 20, what="the prompt to start")
        await eventually(lambda: not runtime.prompt_running, 20, what="the prompt to finish while nobody reads")
        # The SDK runs one task per session/update: none of them waits on the reader.
        piled = [t for t in asyncio.all_tasks() if t.get_name() == "acp.Connection.notification"]
        assert piled == []
        lines = ndjson_lines(await asyncio.to_thread(read_all, conn))
    updates, final = lines[:-1], lines[-1]
    assert final["type"] == "done" and final["stop_reason"] == "end_turn"
    assert 0 < final["dropped_updates"] and len(updates) + final["dropped_updates"] == count
    numbers = [int(u["text"][:8]) for u in updates]
    assert numbers == sorted(numbers) and numbers[0] == 0, "what arrives arrives in order"


async def test_a_cancel_the_agent_never_reads_answers_in_bounded_time(tmp_path, short_tmp, monkeypatch):
    monkeypatch.setattr(acp_module, "CANCEL_TIMEOUT", 0.3)
    sock = short_tmp / "c.sock"
    async with Daemon(load_spec(spec(tmp_path, "--deaf")), socket_path=sock) as daemon:
        runtime = daemon.agent.acp
        assert (await runtime.new_session()).accepted
        # A prompt bigger than the pipe and the write buffer: its write backs up behind the deaf agent.
        body = json.dumps({"text": "p" * (250 * 1024)}).encode()
        conn = await asyncio.to_thread(raw_post, sock, "/v1/prompt", body)
        await eventually(lambda: runtime.prompt_running, 20, what="the prompt to be in flight")
        status, answer = await asyncio.to_thread(ControlClient(sock).post, "/v1/cancel", {})
        assert status == 504 and answer["reason_code"] == "cancel_timeout"
        assert (await asyncio.to_thread(ControlClient(sock).get, "/v1/health"))[0] == 200
        conn.close()
