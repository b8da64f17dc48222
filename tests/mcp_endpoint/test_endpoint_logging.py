"""No session id, token, query string or message body reaches a log line at INFO or above."""

from __future__ import annotations

import json
import logging

import pytest

from agentctl.mcp_endpoint.sdk import SdkLogRedactor
from tests.mcp_endpoint.conftest import MODERN, Harness, eventually

POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SENTINEL = "sentinel-body-5c1e"


def _init() -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": SENTINEL, "version": "1"}},
        }
    ).encode()


async def test_a_busy_session_logs_nothing_secret_at_info_or_above(harness: Harness, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    attempt, token = harness.new_attempt()
    secrets = {token, SENTINEL}

    status, headers, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_init())
    assert status == 200
    session_id = headers["mcp-session-id"]
    secrets.add(session_id)
    session_headers = {**POST_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    # The SDK logs these at INFO/WARNING with the ids in the text.
    await harness.http("DELETE", "/mcp", token=token, headers=session_headers)
    await harness.http("POST", "/mcp", token=token, headers=session_headers, body=b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
    await harness.http("POST", "/mcp", token=token, headers={**POST_HEADERS, "Host": "evil-host.example"}, body=_init())
    bogus_sse = "b" * 32
    secrets.add(bogus_sse)
    await harness.http(
        "POST", f"/messages/?session_id={bogus_sse}", token=token, headers={"Content-Type": "application/json"}, body=_init()
    )
    await harness.http("POST", "/messages/?session_id=not-hex-" + SENTINEL, token=token, headers={"Content-Type": "application/json"}, body=b"{}")
    async with harness.sse(token, mode="legacy") as client:
        await client.list_tools()
        # Tool errors: the SDK logs the failure text (ours never quote arguments, but check).
        await client.call_tool("create_task", {"title": SENTINEL * 50})
        await client.call_tool("post_task_message", {"text": SENTINEL})
    async with harness.client(token, mode=MODERN) as client:
        await client.call_tool("post_task_message", {"text": SENTINEL})
    await harness.wait_events(attempt, "tool_call_observed", 3)

    # httpx2/httpcore2 are the test's own client (the SDK client logs full URLs at INFO); agentctl.logs
    # must hold them at WARNING wherever the daemon itself runs an MCP client.
    loud = [r for r in caplog.records if r.levelno >= logging.INFO and not r.name.startswith(("httpx2", "httpcore2"))]
    assert loud, "expected the SDK to log something at INFO (else this test proves nothing)"
    for record in loud:
        text = record.getMessage() + (record.exc_text or "")
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        for secret in secrets:
            assert secret not in text, f"{record.name} {record.levelname} leaks a secret: {text[:200]!r}"
        assert "session_id=" not in text and "evil-host" not in text


def test_the_redactor_keeps_the_fixed_text_and_masks_values():
    redactor = SdkLogRedactor()

    def run(msg: str, *args: object, exc: BaseException | None = None) -> str:
        record = logging.LogRecord("mcp.x", logging.WARNING, __file__, 1, msg, args or None, None)
        if exc is not None:
            record.exc_info = (type(exc), exc, None)
        assert redactor.filter(record)
        assert record.exc_info is None and not record.args
        return record.getMessage()

    assert run("Rejecting request for session %s: credential does not match", "abc") == (
        "Rejecting request for session <…>: credential does not match"
    )
    assert run("Terminating session: 0123456789abcdef0123456789abcdef") == "Terminating session"
    assert run("Session 0123456789abcdef0123456789abcdef crashed") == "Session <id> crashed"
    assert run("Tool %r failed: %r", "x", "y", exc=ValueError("secret")) == "Tool <…> failed: <…> (ValueError)"


# ---- client-chosen text and observation failures ----------------------------------------------------

MODERN_HEADERS = {**POST_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}


def _legacy_init(name: str, version: str) -> bytes:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": name, "version": version}}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()


def _modern_list(name: str, version: str) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": version},
    }
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}).encode()


async def test_a_client_that_names_itself_with_a_credential_is_recorded_redacted(harness: Harness):
    attempt, token = harness.new_attempt()
    name, version = f"client {token}", "2.0\n" + "rc " * 80
    status, _, _ = await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_legacy_init(name, version))
    assert status == 200
    status, _, _ = await harness.http("POST", "/mcp", token=token, headers=MODERN_HEADERS, body=_modern_list(name, version))
    assert status == 200
    events = await harness.wait_events(attempt, "initialize_observed", 2)
    for event in events:
        assert event.client.name == "client <redacted>", event.era
        assert "\n" not in event.client.version and event.client.version.endswith("…")
        assert len(event.client.version.encode()) <= 128


async def test_an_observation_failure_logs_its_type_and_keeps_the_traceback_for_debug(
    harness: Harness, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    # A fake, said so: no real client input makes the sanitizer or the ledger raise. Their text carries
    # a canary, as an exception quoting what the client sent would.
    from agentctl.mcp_endpoint import observe

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"cannot use {SENTINEL}")

    caplog.set_level(logging.INFO, logger="agentctl")
    attempt, token = harness.new_attempt()
    monkeypatch.setattr(observe, "_client_info", broken)
    await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_legacy_init("c", "1"))
    await harness.http("POST", "/mcp", token=token, headers=MODERN_HEADERS, body=_modern_list("c", "1"))
    monkeypatch.setattr(harness.ledger, "record", broken)
    async with harness.client(token, mode=MODERN) as client:
        await client.list_tools()
    expected = {f"{what} failed (RuntimeError)" for what in
                ("observing initialize", "observing a modern request", "recording MCP evidence")}

    def seen() -> set[str]:
        return {r.getMessage() for r in caplog.records if r.name == "agentctl.mcp_endpoint.observe"}

    await eventually(lambda: expected <= seen(), 5.0, what="the three failures logged")
    lines = [r for r in caplog.records if r.name == "agentctl.mcp_endpoint.observe"]
    assert all(r.exc_info is None for r in lines) and SENTINEL not in caplog.text

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="agentctl")
    await harness.http("POST", "/mcp", token=token, headers=POST_HEADERS, body=_legacy_init("c", "1"))
    await eventually(lambda: "Traceback" in caplog.text, 5.0, what="the traceback at DEBUG")
    assert SENTINEL in caplog.text
