"""Upstream end to end with real processes: `agentctl hub serve`, `agentctl serve` with the reference agent
or an MCP client, SIGTERM and SIGSTOP/SIGCONT on the hub."""

from __future__ import annotations

import json
import os
import signal

import httpx2
import psutil
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from agentctl.cli import main
from agentctl.evidence.store import read_report
from tests.conftest import poll
from tests.upstream.procs import (
    builtins,
    control,
    daemon_report,
    hub_history,
    readyz,
    start_daemon,
    start_hub,
    upstream_of,
    write_spec,
)


def test_the_hub_restarts_mid_run_and_ends_with_exactly_the_daemons_report(short_tmp, capsys):
    d = short_tmp
    hub = start_hub(d)
    daemon = start_daemon(d, write_spec(d, agent=True))
    hub2 = None
    try:
        status, body = control(daemon).post("/v1/session/new")
        assert status == 200 and body["accepted"], body
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="hub caught up")

        assert hub.stop() == 0
        status, reset = control(daemon).post("/v1/session/reset")  # evidence while the hub is down
        assert status == 200 and reset["accepted"]
        assert upstream_of(daemon)["state"] == "buffering"
        code, ready = readyz(daemon)
        assert code == 200 and ready["checks"]["upstream"] == {"ok": True, "detail": "buffering"}

        hub2 = start_hub(d, "hub2")
        poll(lambda: upstream_of(daemon)["state"] == "connected", timeout=30, interval=0.1, what="reconnect")
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="hub repaired")
        assert hub_history(d / "hub.sqlite3")["current"]["attempt_id"] == reset["attempt_id"]
        assert upstream_of(daemon)["connects"] == 2

        assert daemon.stop() == 0  # the final snapshot carries the agent's exit
        persisted = builtins(read_report(d / "state", "exec-1"))
        capsys.readouterr()
        assert main(["hub", "report", "session-1", "--db", str(d / "hub.sqlite3"), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["history"] == persisted
        assert persisted["agent"]["state"] == "exited"
        assert main(["hub", "status", "--db", str(d / "hub.sqlite3")]) == 0
        text = capsys.readouterr().out
        assert "session session-1" in text and "kandev" in text
    finally:
        daemon.kill()
        hub.kill()
        if hub2 is not None:
            hub2.kill()


async def test_a_stalled_hub_leaves_mcp_calls_working_daemon_memory_bounded_and_is_repaired_after(short_tmp):
    d = short_tmp
    hub = start_hub(d)
    daemon = start_daemon(d, write_spec(d, profile="external"))
    try:
        status, _ = control(daemon).post("/v1/session/new")
        assert status == 200
        status, config = control(daemon).get("/v1/mcp-config")
        assert status == 200
        headers = config["headers"]
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(config["url"], http_client=http), mode="legacy") as client:
                await client.list_tools()
                poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="healthy")
                rss_before = psutil.Process(daemon.pid).memory_info().rss
                os.kill(hub.pid, signal.SIGSTOP)
                try:
                    held = 0
                    for n in range(150):  # the hub reads nothing now; every call and list is evidence for it
                        result = await client.call_tool("describe_execution", {})
                        assert result.is_error is False
                        await client.list_tools()
                        if n % 25 == 24:
                            held = max(held, upstream_of(daemon)["buffered_bytes"])
                    # Frames were held back (the socket's buffers are full): the stall is real, and bounded.
                    assert held > 64 * 1024, "the hub never stopped reading: the stall was not real"
                    assert readyz(daemon)[0] == 200
                    rss_after = psutil.Process(daemon.pid).memory_info().rss
                    assert rss_after - rss_before < 40 * 1024 * 1024, (rss_before, rss_after)
                finally:
                    os.kill(hub.pid, signal.SIGCONT)
        poll(lambda: hub_history(d / "hub.sqlite3") == daemon_report(daemon), timeout=30, interval=0.1, what="repaired after resume")
    finally:
        daemon.kill()
        hub.kill()
