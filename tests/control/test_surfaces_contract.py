"""Every surface speaks the one contract: a refusal is a ControlError wherever it comes from, readiness has one
shape on the control socket and the loopback probe, the prompt streams contract items, and `serve`'s and
`hub serve`'s ready lines are contract structs. A real daemon on a real socket, the real CLI."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import msgspec
import pytest

from agentctl.control.client import ControlClient, ControlProtocolError, ControlRefused
from agentctl.evidence.contract.control import (
    ControlError,
    DaemonReady,
    HealthResponse,
    PromptStreamItem,
    StatusResponse,
)
from agentctl.evidence.contract.hub import HubReady
from agentctl.evidence.reasons import REASONS
from tests.conftest import REPO, agentctl_cmd, write_spec
from tests.control.control_support import raw_exchange

CANARY = "quoted-canary-9d41"


def exchange(sock: Path, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    """One raw HTTP/1.1 request over the control socket: the status and the body bytes."""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    return raw_exchange(sock, head, body)


def read_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


def json_documents(text: str) -> list[dict]:
    """The JSON documents printed one after another (`--json` output of a stream)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


def refusal(status: int, raw: bytes) -> ControlError:
    """The answer as a ControlError, with exactly its fields and a registered reason code."""
    assert set(json.loads(raw)) == set(ControlError.__struct_fields__), raw
    error = msgspec.json.decode(raw, type=ControlError)
    assert error.status == status and error.reason_code in REASONS and error.error.isprintable(), error
    return error


REFUSALS = [  # method, route, body, status, reason code: an MCP-only daemon with no session yet
    ("GET", "/v1/no-such-route", b"", 404, "unknown_route"),
    ("PUT", "/v1/status", b"", 405, "wrong_method"),
    ("POST", "/v1/session/load", b'{"session_id": 1}', 400, "bad_request_body"),
    ("POST", "/v1/mcp/profile", b"not json", 400, "bad_request_body"),
    ("POST", "/v1/test-endpoint", b"x" * 5000, 413, "body_too_large"),
    ("POST", "/v1/prompt", b'{"text": "hi"}', 409, "no_acp_agent"),
    ("POST", "/v1/cancel", b"", 409, "no_acp_agent"),
    ("GET", "/v1/mcp-config", b"", 404, "no_attempt"),
    ("POST", "/v1/mcp/profile", b'{"name": "nope"}', 400, "unknown_profile"),
    ("GET", "/v1/tools/get_task", b"", 404, "no_attempt"),
    ("POST", "/v1/test-endpoint", b'{"name": "nope"}', 404, "unknown_server"),
]


async def test_every_refusal_of_the_control_api_is_one_control_error_and_the_client_reads_it(daemon, short_tmp):
    sock = short_tmp / "c.sock"
    for method, route, body, status, reason in REFUSALS:
        code, raw = await asyncio.to_thread(exchange, sock, method, route, body)
        assert code == status, (route, raw)
        assert refusal(status, raw).reason_code == reason, route
    # The CLI's client hands the same struct to the command, never a dict.
    with pytest.raises(ControlRefused) as refused:
        await asyncio.to_thread(ControlClient(sock).call, "GET", "/v1/mcp-config", StatusResponse)
    assert refused.value.error.reason_code == "no_attempt" and refused.value.error.status == 404
    # Over TCP the control API does not exist, in the same shape.
    url = daemon.ctx.mcp_base + "/v1/status"
    with pytest.raises(urllib.error.HTTPError) as http:
        await asyncio.to_thread(urllib.request.urlopen, url, timeout=10)
    assert refusal(404, http.value.read()).reason_code == "unknown_route"


async def test_a_quoted_value_in_a_refused_body_is_never_repeated(daemon, short_tmp):
    body = json.dumps({f"'{CANARY}'": 1}).encode()
    code, raw = await asyncio.to_thread(exchange, short_tmp / "c.sock", "POST", "/v1/session/load", body)
    error = refusal(400, raw)
    assert CANARY not in error.error and error.error == "bad request body: Object contains unknown field `<value>`"


async def test_health_and_readyz_verbose_answer_the_one_readiness_shape(daemon, short_tmp):
    daemon.ctx.readiness.set("upstream", True, "buffering")
    code, raw = await asyncio.to_thread(exchange, short_tmp / "c.sock", "GET", "/v1/health")
    assert code == 200
    probe = await asyncio.to_thread(read_url, daemon.ctx.mcp_base + "/readyz?verbose")
    health = msgspec.json.decode(raw, type=HealthResponse)
    assert msgspec.json.decode(probe, type=HealthResponse) == health
    assert health.live and health.ready and health.checks["upstream"].detail == "buffering"
    assert json.loads(probe)["checks"]["control_socket"] == {"ok": True}


def test_a_daemon_answer_of_another_shape_is_one_line_not_a_traceback(short_tmp):
    """A daemon of another agentctl version (stood in for by a socket that answers a foreign shape)."""
    path = short_tmp / "other.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    answers = [b'{"identity": {"future": true}}', b"<html>bad gateway</html>"]
    statuses = [200, 502]

    def serve() -> None:
        for status, answer in zip(statuses, answers):
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: {len(answer)}\r\nConnection: close\r\n\r\n"
                             .encode() + answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = ControlClient(path, timeout=10)
        with pytest.raises(ControlProtocolError, match="cannot read .* another agentctl version"):
            client.call("GET", "/v1/status", StatusResponse)
        with pytest.raises(ControlRefused) as refused:
            client.call("GET", "/v1/status", StatusResponse)
        assert refused.value.error == ControlError(error="", reason_code="unexpected_answer", status=502)
        assert str(refused.value) == "the daemon refused /v1/status (HTTP 502)"
    finally:
        thread.join(10)
        server.close()


def test_serve_prints_one_ready_line_in_the_contracts_shape(tmp_path, serve):
    daemon = serve(write_spec(tmp_path))
    ready = msgspec.convert(daemon.ready, DaemonReady)
    assert list(daemon.ready) == ["event", *DaemonReady.__struct_fields__] and daemon.ready["event"] == "ready"
    assert ready.control_socket == str(daemon.socket) and ready.pid == daemon.proc.pid
    assert daemon.stop() == 0


def test_hub_serve_prints_one_ready_line_in_the_contracts_shape(short_tmp):
    proc = subprocess.Popen(
        agentctl_cmd("hub", "serve", "--socket", str(short_tmp / "h.sock"), "--db", str(short_tmp / "h.sqlite3"),
                     "--http", "127.0.0.1:0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, text=True,
    )
    try:
        line = proc.stdout.readline()
        ready = msgspec.json.decode(line, type=HubReady)
        assert json.loads(line)["event"] == "ready" and ready.pid == proc.pid
        assert ready.http and ready.page.startswith(ready.http + "#token=") and ready.token_file is None
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


async def test_the_prompt_streams_contract_items_ending_in_done(tmp_path, in_process_daemon):
    from tests.agent.serve_support import agent_spec, cli

    daemon = await in_process_daemon(agent_spec(tmp_path))
    sock = daemon.ctx.control_socket
    assert (await asyncio.to_thread(cli, sock, "session", "new")).returncode == 0
    done = await asyncio.to_thread(cli, sock, "prompt", "hello", "--json")
    assert done.returncode == 0, done.stderr
    items = [msgspec.convert(doc, PromptStreamItem) for doc in json_documents(done.stdout)]
    assert items[-1].type == "done" and items[-1].stop_reason
    assert any(item.type == "agent_message_chunk" and item.text for item in items)


def test_a_cli_refusal_is_one_line_naming_the_route_status_and_message(tmp_path, serve):
    daemon = serve(write_spec(tmp_path))
    done = subprocess.run(agentctl_cmd("mcp-config", "--socket", str(daemon.socket)), capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("agentctl: the daemon refused /v1/mcp-config (HTTP 404): no current attempt yet: run "
                           "`agentctl session new` first\n")
    assert daemon.stop() == 0
