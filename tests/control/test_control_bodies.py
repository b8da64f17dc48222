"""Request bodies on the control socket: whatever a caller sends gets a one-line 4xx, never a 500 or a
traceback, and the daemon keeps answering. A real daemon (MCP only) on a real socket."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from agentctl.control.agent_routes import MAX_PROMPT_BYTES
from agentctl.control.client import ControlClient
from agentctl.daemon.app import Daemon
from tests.control.control_support import raw_exchange


def exchange(sock: Path, head: str, body: bytes) -> tuple[int, dict]:
    """One raw HTTP/1.1 request over the control socket; the status and the JSON body of the answer."""
    status, raw = raw_exchange(sock, head, body)
    return status, json.loads(raw)


def post(path: str, body: bytes, *, chunked: bool = False) -> tuple[str, bytes]:
    if not chunked:
        return f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n", body
    size = 64 * 1024  # no Content-Length at all: the size is only known once it has been read
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size))
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n", chunks + b"0\r\n\r\n"


@pytest.mark.parametrize("path", ["/v1/session/load", "/v1/prompt", "/v1/mcp/profile", "/v1/test-endpoint"])
async def test_a_body_key_with_a_newline_is_a_one_line_400(daemon: Daemon, short_tmp: Path, path: str, caplog):
    caplog.set_level(logging.INFO)
    body = json.dumps({"bad\nkey\r\x1b[31m": 1}).encode()
    status, answer = await asyncio.to_thread(exchange, short_tmp / "c.sock", *post(path, body))
    assert status == 400 and answer["error"].startswith("bad request body: ")
    assert answer["error"].isprintable() and "\n" not in answer["error"]
    assert "Traceback" not in caplog.text and not any(r.levelno >= logging.ERROR for r in caplog.records)
    assert (await asyncio.to_thread(ControlClient(short_tmp / "c.sock").get, "/v1/health"))[0] == 200


async def test_a_prompt_over_the_limit_is_refused_even_without_a_content_length(daemon: Daemon, short_tmp: Path):
    body = json.dumps({"text": "p" * (MAX_PROMPT_BYTES + 1)}).encode()
    for chunked in (False, True):
        status, answer = await asyncio.to_thread(exchange, short_tmp / "c.sock", *post("/v1/prompt", body, chunked=chunked))
        assert status == 413 and answer["error"] == f"prompt over {MAX_PROMPT_BYTES} bytes", chunked
