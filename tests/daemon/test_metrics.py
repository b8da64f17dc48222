"""Prometheus /metrics on the daemon's loopback port and the hub's page port: real daemons, a real hub and
page, a real MCP client; values move with traffic, labels come from closed sets, and no token, server name
or id ever appears."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from agentctl.daemon.app import Daemon
from agentctl.hub.hub import Hub
from agentctl.hub.web import HubWeb
from agentctl.spec import parse_spec
from tests.conftest import eventually, spec_toml

SESSION = "session-CANARYsid7"
HOSTILE = "evil.CANARYsrv"  # a server name a profile can choose freely
URL_SECRET = "CANARYpath-s3cret"


def _spec(d, hub_sock, execution_id: str) -> bytes:
    return spec_toml(
        execution_id=execution_id, identity={"task_id": "task-CANARYtask", "session_id": f"{SESSION}-{execution_id}"},
        state_dir=f"{d}/state-{execution_id}", upstream=hub_sock,
        servers=[{"name": HOSTILE, "type": "http", "url": f"http://127.0.0.1:1/{URL_SECRET}/mcp"}],
    ).encode()


async def _scrape(http: aiohttp.ClientSession, url: str) -> tuple[str, dict[tuple[str, tuple], float]]:
    async with http.get(url) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = await response.text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    return text, samples


def _value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_daemon_and_hub_metrics_move_with_traffic_and_never_carry_a_token_name_or_id(short_dir):
    hub = Hub(short_dir / "hub.sock", short_dir / "hub.sqlite3", flush_interval=0.02)
    await hub.start()
    page = HubWeb(hub, token="page-token-CANARYpage")
    await page.start()
    one = Daemon(parse_spec(_spec(short_dir, hub.socket_path, "exec-1")), socket_path=short_dir / "c1.sock")
    two = Daemon(parse_spec(_spec(short_dir, hub.socket_path, "exec-2")), socket_path=short_dir / "c2.sock")
    await one.start()
    await two.start()
    try:
        attempt, token = one.open_attempt("manual")
        daemon_url, hub_url = f"{one.ctx.mcp_base}/metrics", f"{page.url}metrics"
        async with aiohttp.ClientSession() as http:
            _, before = await _scrape(http, daemon_url)
            assert _value(before, "agentctl_attempts_total") == 1
            assert _value(before, "agentctl_evidence_events_total", kind="tools_list_observed") == 0
            assert _value(before, "agentctl_servers", state="configured") == 2

            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as client_http:
                async with Client(streamable_http_client(one.ctx.mcp_url, http_client=client_http),
                                  mode="legacy") as client:
                    await client.list_tools()
            async with http.post(one.ctx.mcp_url, headers={"Authorization": "Bearer wrong-CANARYtok"},
                                 data=b"{}") as refused:
                assert refused.status == 401

            await eventually(lambda: one.ctx.upstream.queued_evidence == 0 and one.ctx.upstream.connected,
                             what="the evidence written upstream")
            text, after = await _scrape(http, daemon_url)
            assert _value(after, "agentctl_evidence_events_total", kind="tools_list_observed") >= 1
            assert _value(after, "agentctl_evidence_events_total", kind="initialize_observed") >= 1
            assert _value(after, "agentctl_servers", state="active") == 1
            assert _value(after, "agentctl_http_refusals_total", route="/mcp", method="POST", status="401") == 1
            assert _value(after, "agentctl_upstream_state", state="connected") == 1
            assert _value(after, "agentctl_upstream_lag_frames") == 0
            assert _value(after, "agentctl_agent_restarts_total") == 0
            # Request latency by method: each request the client made, timed under its own method only.
            assert _value(after, "agentctl_mcp_request_duration_seconds_count", method="initialize") == 1
            assert _value(after, "agentctl_mcp_request_duration_seconds_count", method="tools/list") >= 1
            assert _value(after, "agentctl_mcp_request_duration_seconds_bucket", method="tools/list", le="+Inf") \
                == _value(after, "agentctl_mcp_request_duration_seconds_count", method="tools/list")
            assert _value(after, "agentctl_mcp_request_duration_seconds_count", method="tools/call") == 0
            assert [k for k in after if k[0] == "agentctl_build_info"] and after[("process_open_fds", ())] > 0

            # The second daemon in this process has counters of its own.
            _, other = await _scrape(http, f"{two.ctx.mcp_base}/metrics")
            assert _value(other, "agentctl_evidence_events_total", kind="tools_list_observed") == 0
            assert _value(other, "agentctl_http_refusals_total", route="/mcp", method="POST", status="401") == 0

            # A peer that sends garbage to the hub is refused and counted by its reason code.
            _, hub_before = await _scrape(http, hub_url)
            reader, writer = await asyncio.open_unix_connection(str(hub.socket_path))
            writer.write(b"not a frame CANARYframe\n")
            await writer.drain()
            await reader.read()  # the hub answers with an error frame and closes
            writer.close()
            hub_text, hub_after = await _scrape(http, hub_url)
            assert _value(hub_after, "agentctl_hub_refused_frames_total", code="malformed_frame") == \
                _value(hub_before, "agentctl_hub_refused_frames_total", code="malformed_frame") + 1
            assert _value(hub_after, "agentctl_hub_sessions") == 2
            assert _value(hub_after, "agentctl_hub_connected_daemons") == 2
            assert _value(hub_after, "agentctl_hub_frames_total", kind="hello") == 2
            assert _value(hub_after, "agentctl_hub_frames_total", kind="evidence") >= 1
            assert _value(hub_after, "agentctl_hub_store_errors_total") == 0
            # exec-1's attempt has the built-in server active; exec-2 opened none (no agent, no attempt).
            assert _value(hub_after, "agentctl_hub_sessions_by_state", state="active") == 1
            assert _value(hub_after, "agentctl_hub_sessions_by_state", state="no_servers") == 1
            assert _value(hub_after, "agentctl_hub_sessions_needing_attention") == 0
            assert _value(hub_after, "agentctl_hub_sessions_by_connection", daemon="connected") == 2
            assert [k for k in hub_after if k[0] == "agentctl_hub_build_info" or k[0] == "agentctl_build_info"]

        for output in (text, hub_text):
            for secret in (token, "CANARY", attempt, "exec-1", "session-", "task-", URL_SECRET):
                assert secret not in output, secret
    finally:
        await two.stop()
        await one.stop()
        await page.stop()
        await hub.stop()


@contextlib.asynccontextmanager
async def _hub_page(d) -> AsyncIterator[tuple[Hub, HubWeb]]:
    """A hub on a real SQLite file with its page (and /metrics), stopped after."""
    hub = Hub(d / "hub.sock", d / "hub.sqlite3")
    await hub.start()
    page = HubWeb(hub, token="page-token")
    await page.start()
    try:
        yield hub, page
    finally:
        await page.stop()
        await hub.stop()


async def test_metrics_need_no_token_but_the_hub_page_still_refuses_a_foreign_host_name(short_dir):
    async with _hub_page(short_dir) as (_, page), aiohttp.ClientSession() as http:
        async with http.get(f"{page.url}metrics", headers={"Host": "attacker.example"}) as response:
            assert response.status == 421
        async with http.get(f"{page.url}api/status") as response:
            assert response.status == 401, "the page's API still needs its token"


async def test_the_hubs_metrics_count_sessions_blocked_on_a_required_server_as_the_pages_filter_finds_them(short_dir):
    from datetime import UTC, datetime

    from agentctl.hub.stores import open_store
    from tests.hub.test_listing import write_session

    store = open_store(short_dir / "hub.sqlite3")  # the sessions a hub finds in its database when it starts
    try:
        for sid, statuses, gate in (("s-blocked", ["delivered"], "blocked"), ("s-failed", ["failed"], "blocked"),
                                    ("s-open", ["active"], "open"), ("s-waiting", ["delivered"], "waiting"),
                                    ("s-none", ["delivered"], None)):
            # Contact now: the hub's retention keeps them (it prunes sessions by their last contact).
            write_session(store, sid, statuses, gate=gate, contact=datetime.now(UTC))
    finally:
        store.close()
    async with _hub_page(short_dir) as (_, page), aiohttp.ClientSession() as http:
        text, samples = await _scrape(http, f"{page.url}metrics")
    assert _value(samples, "agentctl_hub_sessions_blocked_on_required") == 2
    assert _value(samples, "agentctl_hub_sessions") == 5
    # Not "needs attention" by itself: only the session whose row failed is.
    assert _value(samples, "agentctl_hub_sessions_needing_attention") == 1
    assert "s-blocked" not in text and "kandev" not in text and "srv0" not in text  # counts, never names


def test_attempts_agent_restarts_supersessions_and_evidence_kinds_are_counted_from_the_ledger_by_one_collector():
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from agentctl.daemon.metrics import DaemonCounts
    from agentctl.daemon.metrics_collector import DaemonCollector
    from agentctl.evidence.contract.report import Identity
    from agentctl.evidence.ledger import Ledger
    from agentctl.evidence.seeds import ServerSeed

    ident = Identity(task_id="t", session_id="s", execution_id="e", instance_id="i", agent_id="a",
                     agent_profile_id="p")
    ledger = Ledger(ident)
    counts = DaemonCounts(ledger)
    registry = CollectorRegistry(auto_describe=False)
    ctx = SimpleNamespace(ledger=ledger, upstream=None, endpoint=None, spec=parse_spec(spec_toml().encode()))
    registry.register(DaemonCollector(ctx, counts))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ledger.update_agent(protocol="passthrough", state="starting", started_at=t0)
    seeds = [ServerSeed(name=HOSTILE, source="profile", transport="http", target="http://127.0.0.1:1")]
    for n in range(4):  # a passthrough CLI restarted three times: four attempts, three restarts and supersessions
        attempt, _ = ledger.begin_attempt("passthrough_start", seeds)
        ledger.record("delivered", attempt, HOSTILE, transport="http", target="http://127.0.0.1:1")
        if n:
            ledger.update_agent(state="starting", started_at=t0 + timedelta(seconds=n))
        ledger.update_agent(state="running")
    samples = {(s.name, tuple(s.labels.items())): s.value
               for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    assert samples[("agentctl_attempts_total", ())] == 4
    assert samples[("agentctl_agent_restarts_total", ())] == 3
    assert samples[("agentctl_evidence_events_total", (("kind", "attempt_superseded"),))] == 3
    assert samples[("agentctl_agent_running", ())] == 1
    assert samples[("agentctl_evidence_events_total", (("kind", "configured"),))] == 4
    assert samples[("agentctl_evidence_events_total", (("kind", "delivered"),))] == 4
    assert samples[("agentctl_servers", (("state", "delivered"),))] == 1
    assert not any(name.startswith("agentctl_upstream") for name, _ in samples), "no [upstream]: no upstream metrics"
    assert HOSTILE not in generate_latest(registry).decode()
    counts.close()
