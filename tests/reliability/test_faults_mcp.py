"""MCP request faults against a real `agentctl serve` (no agent; attempts opened over the control socket):
no token, a wrong or an older attempt's token, a foreign Host header, oversized and malformed bodies, an
unsupported protocol version. Each is refused (or attributed) with its evidence, earlier evidence is kept,
and a valid SDK client is served right after."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentctl.evidence.store import read_report
from tests.agent.serve_support import report_of, row, serving, stderr_text
from tests.conftest import poll, write_spec
from tests.reliability.faults_support import (
    attempt_of,
    initialize,
    kinds,
    open_attempt,
    prove_served,
    raw_post,
    refusals,
    rpc,
    sdk_client,
)
from tests.upstream.procs import builtins

MODERN = "2026-07-28"
CANARY = "MCPFAULTCANARY41"


@contextmanager
def _daemon(tmp_path: Path, short_tmp: Path) -> Iterator[tuple]:
    """A real daemon without an agent, and an attempt opened over its control socket: (daemon, sock, mcp-config)."""
    sock = short_tmp / "c.sock"
    with serving(write_spec(tmp_path), sock) as daemon:
        yield daemon, sock, open_attempt(sock)


def _persisted_and_logged(tmp_path: Path, daemon) -> str:
    return (tmp_path / "state" / "exec-test" / "report.json").read_text() + stderr_text(daemon)


def _wait_refusals(sock, wanted: dict[tuple[str, str, int], int]) -> dict:
    def check():
        report = report_of(sock)
        got = refusals(report)
        return report if all(got.get(k, 0) >= n for k, n in wanted.items()) else None

    return poll(check, timeout=10, what=f"refusals {wanted}")


async def test_no_token_a_wrong_token_and_a_foreign_host_are_refused_counted_and_a_valid_client_still_works(
    tmp_path, short_tmp
):
    with _daemon(tmp_path, short_tmp) as (daemon, sock, config):
        await prove_served(config)
        url, token = config["url"], config["headers"]["Authorization"]
        host = url.split("/")[2]

        assert (await raw_post(url, initialize())).status_code == 401
        for wrong in (f"Bearer {CANARY}", f"Basic {CANARY}", "Bearer", token + "x"):
            answer = await raw_post(url, initialize(), {"Authorization": wrong})
            assert answer.status_code == 401 and b"jsonrpc" not in answer.content
        for foreign in ("evil.example", f"evil.example:{host.split(':')[1]}", "127.0.0.1"):
            answer = await raw_post(url, initialize(), {"Authorization": token, "Host": foreign})
            assert answer.status_code == 421, foreign
        report = _wait_refusals(sock, {("/mcp", "POST", 401): 5, ("/mcp", "POST", 421): 3})

        attempt = attempt_of(report, config["attempt_id"])
        assert kinds(attempt).count("initialize_observed") == 1, "no refused request reached the SDK"
        assert row(report, "kandev")["status"] == "active", "the evidence from before the faults is kept"
        await prove_served(config)
        assert daemon.proc.poll() is None
        live = report_of(sock)
        assert daemon.stop() == 0
    persisted = builtins(read_report(tmp_path / "state", "exec-test"))
    assert refusals(persisted) == refusals(live)
    text = _persisted_and_logged(tmp_path, daemon)
    assert CANARY not in text and token.split()[1] not in text


async def test_oversized_and_malformed_bodies_are_refused_without_harm_and_the_next_request_is_served(
    tmp_path, short_tmp
):
    with _daemon(tmp_path, short_tmp) as (daemon, sock, config):
        await prove_served(config)
        url, auth = config["url"], {"Authorization": config["headers"]["Authorization"]}

        big = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "' + b"y" * (5 << 20) + b'"}}'
        assert (await raw_post(url, big, auth)).status_code == 413

        async def chunks():  # no Content-Length: the limit must hold for a chunked upload too
            for _ in range(6):
                yield CANARY.encode() * (1 << 16)

        assert (await raw_post(url, chunks(), auth)).status_code == 413
        parse = await raw_post(url, b'{"jsonrpc": "2.0", "id": 1, "method": ' + CANARY.encode(), auth)
        assert parse.status_code == 400 and parse.json()["error"]["code"] == -32700
        for shape in (b"[]", b'{"no": "jsonrpc"}', b"\xff\xfe\x00garbage", b""):
            assert (await raw_post(url, shape, auth)).status_code == 400, shape
        report = _wait_refusals(sock, {("/mcp", "POST", 413): 2, ("/mcp", "POST", 400): 5})

        attempt = attempt_of(report, config["attempt_id"])
        assert "explicit_error" not in kinds(attempt), "a bad request is not an attachment error"
        assert row(report, "kandev")["status"] == "active"
        await prove_served(config)
        assert daemon.stop() == 0
    text = _persisted_and_logged(tmp_path, daemon)
    assert CANARY not in text and "Traceback" not in text


async def test_an_unsupported_protocol_version_is_negotiated_down_on_initialize_and_refused_on_a_request(
    tmp_path, short_tmp
):
    with _daemon(tmp_path, short_tmp) as (daemon, sock, config):
        url, auth = config["url"], {"Authorization": config["headers"]["Authorization"]}

        # initialize offering a version the server does not speak: the server answers with one it does.
        answer = await raw_post(url, initialize("1999-01-01"), auth)
        assert answer.status_code == 200
        data = json.loads(next(line[5:] for line in answer.text.splitlines() if line.startswith("data:")))
        assert data["result"]["protocolVersion"] == "2025-11-25"
        session = {**auth, "Mcp-Session-Id": answer.headers["mcp-session-id"]}
        # Inside that session a request that names an unsupported version is refused.
        bogus = await raw_post(url, rpc("tools/list", 2), {**session, "MCP-Protocol-Version": "1999-01-01"})
        assert bogus.status_code == 400
        # A stateless (modern-era) request naming a future version: refused with the SDK's -32022.
        params = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                            "io.modelcontextprotocol/clientCapabilities": {},
                            "io.modelcontextprotocol/clientInfo": {"name": "faults", "version": "1"}}}
        future = await raw_post(url, rpc("tools/list", 3, params),
                                {**auth, "MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"})
        assert future.status_code == 400 and future.json()["error"]["code"] == -32022
        report = _wait_refusals(sock, {("/mcp", "POST", 400): 2})

        attempt = attempt_of(report, config["attempt_id"])
        assert kinds(attempt).count("initialize_observed") == 1, "the negotiated initialize is evidence"
        assert "tools_list_observed" not in kinds(attempt), "neither refused tools/list was served"
        assert row(report, "kandev")["status"] == "connected"
        await prove_served(config)  # the negotiated era's client, then the modern one
        async with sdk_client(config, mode=MODERN) as client:
            assert (await client.list_tools()).tools
        assert row(report_of(sock), "kandev")["status"] == "active"
        assert daemon.stop() == 0


async def test_an_older_attempts_token_still_works_after_a_reset_and_its_evidence_stays_in_that_attempt(
    tmp_path, short_tmp
):
    with _daemon(tmp_path, short_tmp) as (daemon, sock, old):
        new = open_attempt(sock, "/v1/session/reset")
        assert new["attempt_id"] != old["attempt_id"] and new["headers"] != old["headers"]

        await prove_served(old)  # the agent still holding the superseded attempt's credential

        def landed():
            report = report_of(sock)
            return report if "tools_list_observed" in kinds(attempt_of(report, old["attempt_id"])) else None

        report = poll(landed, timeout=10, what="the old token's evidence")
        assert report["current"]["attempt_id"] == new["attempt_id"]
        assert row(report, "kandev")["status"] == "configured", "never makes the current attempt green"
        assert kinds(report["current"]) == ["configured"]
        assert attempt_of(report, old["attempt_id"])["superseded_at"]

        await prove_served(new)
        assert row(report_of(sock), "kandev")["status"] == "active"
        assert daemon.stop() == 0
