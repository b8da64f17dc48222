"""Planted canaries (spec headers, env, arguments, URL user info / path / query, the agent's stderr) never
reach diagnostics, status, report, tools or endpoint-test output, as JSON or as text."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from agentctl import cli
from agentctl.evidence.store import read_report
from tests.diagnostics.conftest import FIXTURES, PY, McpServerFixture, http_server, running_daemon, spec_text, stdio_server
from tests.diagnostics.fixtures.noisy_agent import STDERR_CANARY

CANARIES = {
    "header": "cnry-hdr-41c7e2",
    "header2": "cnry-key-9b0d13",
    "user": "cnryuser77",
    "password": "cnry-pw-a81f",
    "path": "cnry-path-3e5b",
    "query": "cnry-query-c2d9",
    "server_env": "cnry-senv-6a2f",
    "server_arg": "--cnry-sarg-0f4e",
    "agent_env": "cnry-aenv-b7c1",
    "agent_arg": "--canary-cnry-aarg-d3e8",
    "dead_path": "cnry-dpath-5f60",
    "dead_query": "cnry-dq-71aa",
}


def _spec(state: Path, server: McpServerFixture) -> bytes:
    c = CANARIES
    url = f"http://{c['user']}:{c['password']}@127.0.0.1:{server.port}/{c['path']}/mcp?key={c['query']}"
    servers = http_server("web", url, headers=f'{{Authorization = "Bearer {c["header"]}", X-Api-Key = "{c["header2"]}"}}')
    servers += http_server("dead", f"http://127.0.0.1:1/{c['dead_path']}/mcp?t={c['dead_query']}")
    servers += stdio_server("local", "stdio_server.py", c["server_arg"], env=f'{{SERVER_SECRET = "{c["server_env"]}"}}')
    agent = f"""
[agent]
command = ["{PY}", "{FIXTURES / 'noisy_agent.py'}", "{c['agent_arg']}"]
env = {{ AGENT_SECRET = "{c['agent_env']}" }}
"""
    return spec_text(state, servers, agent)


def _leaks(text: str) -> list[str]:
    found = [name for name, value in CANARIES.items() if value.lstrip("-") in text]
    if STDERR_CANARY in text:
        found.append("agent stderr")
    return found


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = await asyncio.to_thread(cli.main, list(argv))
    out = capsys.readouterr()
    assert code in (0, 3), (argv, code, out.err)
    return out.out + out.err


async def test_no_canary_reaches_any_diagnostics_or_status_output(
    short_dir: Path, mcp_server: McpServerFixture, capsys: pytest.CaptureFixture[str]
):
    sock = short_dir / "c.sock"
    async with running_daemon(_spec(short_dir / "state", mcp_server), sock) as d:
        status, session = await d.control.post("/v1/session/new")
        assert status == 200 and session["accepted"], session
        for name in ("web", "dead", "local", "kandev"):
            status, body = await d.control.post("/v1/test-endpoint", {"name": name, "timeout": 10})
            assert status == 200, body
            assert body["result"]["succeeded"] is (name != "dead"), body
        # The canaries were really planted: the server got the stored header, the agent wrote its stderr.
        # (httpx turns URL user info into Basic credentials, which win over a stored Authorization header.)
        basic = "Basic " + base64.b64encode(f"{CANARIES['user']}:{CANARIES['password']}".encode()).decode()
        assert basic in mcp_server.seen.auth and CANARIES["header2"] in mcp_server.seen.api_keys
        assert any(CANARIES["path"] in p for p in mcp_server.seen.paths)
        stderr = await d.control.get("/v1/stderr")
        assert any(STDERR_CANARY in line for line in stderr["lines"])

        outputs = {
            route: json.dumps(await d.control.get(route))
            for route in ("/v1/diagnostics", "/v1/status", "/v1/report", "/v1/tools")
        }
        for argv in (
            ("diagnostics",),
            ("diagnostics", "--json"),
            ("status",),
            ("status", "--json"),
            ("report",),
            ("tools",),
            ("tools", "get_task"),
            ("test-endpoint", "dead"),
            ("test-endpoint", "web", "--json"),
        ):
            outputs[" ".join(argv)] = await _cli(capsys, *argv, "--socket", str(sock))
        await d.daemon.persister.flush()
        persisted = read_report(short_dir / "state", "exec-diag")

    outputs["persisted report"] = json.dumps(__import__("msgspec").to_builtins(persisted))
    leaks = {where: _leaks(text) for where, text in outputs.items() if _leaks(text)}
    assert leaks == {}
    # And the outputs are not empty shells: they describe what happened.
    assert "test failed: could not connect to the server" in " ".join(outputs["diagnostics"].split())
    assert "connect_failed" in outputs["diagnostics"]
    assert "reachable from the daemon" in outputs["diagnostics"]
    assert '"status": "active"' in outputs["status --json"]
