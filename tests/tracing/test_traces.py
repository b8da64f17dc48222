"""Attachment attempts as OpenTelemetry traces, exported to a real OTLP receiver (Arize Phoenix, conftest.py) and
read back through its REST API: one trace per attempt, from session/new to the agent's kandev tool call, with the
MCP semantic conventions and nothing of the prompt, arguments, results, URLs, tokens or error text."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from agentctl import tracing
from agentctl.testing._acp_agent import REFUSAL_CANARY
from tests.agent.serve_support import agent_spec
from tests.conftest import REPO, agentctl_cmd, write_spec

DEMO = REPO / "examples" / "demo.toml"


def _env(phoenix, project: str) -> dict[str, str]:
    # Phoenix files spans under the project their resource names: each test reads only its own.
    return {**os.environ, "NO_COLOR": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}", "OTEL_BSP_SCHEDULE_DELAY": "200"}


def _run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agentctl_cmd("run", *args), cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def _by_name(spans: list[dict]) -> dict[str, dict]:
    return {s["name"]: s for s in spans}


def _demo_trace(phoenix, tmp_path: Path, project: str, arguments: str) -> dict[str, dict]:
    """The spans of `agentctl run` of the demo whose prompt calls update_task with `arguments`, by name."""
    env = {**_env(phoenix, project), "STATE_DIRECTORY": "", "XDG_STATE_HOME": str(tmp_path / "xdg")}
    done = _run(tmp_path, env, str(DEMO), "--prompt", f"CALL update_task {arguments}")
    assert done.returncode == 0, done.stderr
    return _by_name(phoenix.wait_spans(project, 5))


def test_one_attempt_is_one_trace_from_session_new_to_the_agents_kandev_tool_call_with_no_payload(
        phoenix, tmp_path):
    project = f"attempt-{uuid.uuid4().hex[:8]}"
    canary = "TRACECANARY9191"
    spans = _demo_trace(phoenix, tmp_path, project, f'{{"description": "{canary}"}}')
    print(json.dumps(list(spans.values()), indent=1))  # the trace as the receiver shows it (-s to see it)
    assert set(spans) == {"attachment_attempt", "session/new", "initialize", "tools/list", "tools/call update_task"}
    root, session = spans["attachment_attempt"], spans["session/new"]
    assert len({s["context"]["trace_id"] for s in spans.values()}) == 1, "one attempt, one trace"
    assert root["parent_id"] is None and session["parent_id"] == root["context"]["span_id"]
    # The agent carried session/new's traceparent (its `_meta`) into every MCP request it made to kandev.
    for name in ("initialize", "tools/list", "tools/call update_task"):
        assert spans[name]["parent_id"] == session["context"]["span_id"], name
        assert spans[name]["attributes"]["mcp.method.name"] == name.split()[0]
        assert spans[name]["attributes"]["mcp.protocol.version"] == "2025-11-25"
    call = spans["tools/call update_task"]["attributes"]
    assert call["gen_ai.tool.name"] == "update_task" and call["gen_ai.operation.name"] == "execute_tool"
    assert "error.type" not in call and spans["tools/call update_task"]["status_code"] != "ERROR"
    assert root["attributes"]["agentctl.attempt.origin"] == "session_new"
    events = [e["name"] for e in root["events"]]
    assert events.index("delivered") < events.index("initialize_observed") < events.index("tool_call_observed")
    raw = phoenix.raw(project)
    # Not the prompt or the tool's argument or result, not the demo's third-party URL or its bearer header,
    # not the daemon's MCP URL.
    for leak in (canary, "docs.example.invalid", "example-not-a-real-token", "127.0.0.1", "Bearer"):
        assert leak not in raw, leak


def test_a_refused_session_new_marks_its_span_and_attempt_with_error_type_and_no_error_text(phoenix, tmp_path):
    project = f"refused-{uuid.uuid4().hex[:8]}"
    spec = agent_spec(tmp_path, "--refuse-auth")
    done = _run(tmp_path, _env(phoenix, project), str(spec))
    assert done.returncode != 0
    spans = _by_name(phoenix.wait_spans(project, 2))
    session, root = spans["session/new"], spans["attachment_attempt"]
    assert session["status_code"] == "ERROR" and session["attributes"]["error.type"] == "session_rejected"
    assert root["status_code"] == "ERROR" and root["attributes"]["error.type"] == "session_rejected"
    assert not session["status_message"] and not session["events"], "no exception, no message"
    raw = phoenix.raw(project)
    assert REFUSAL_CANARY not in raw and "Authentication required" not in raw and "API_KEY" not in raw


async def test_the_http_traceparent_of_the_attempts_trace_is_continued_and_a_foreign_one_stays_in_the_attempt(
        phoenix, tmp_path, short_dir, monkeypatch):
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from agentctl.daemon.app import Daemon
    from agentctl.spec_loader import load_spec

    project = f"header-{uuid.uuid4().hex[:8]}"
    env = _env(phoenix, project)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", env["OTEL_RESOURCE_ATTRIBUTES"])
    daemon = Daemon(load_spec(write_spec(tmp_path)), socket_path=short_dir / "d.sock", environ=env)
    await daemon.start()
    try:
        attempt_id, token = daemon.open_attempt("manual")
        ours = tracing.session_meta(daemon.ledger, attempt_id, "session/new")["traceparent"]
        foreign = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        for traceparent in (ours, foreign):
            headers = {"Authorization": f"Bearer {token}", "traceparent": traceparent}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with Client(streamable_http_client(daemon.ctx.mcp_url, http_client=http), mode="legacy") as c:
                    await c.list_tools()
    finally:
        await daemon.stop()
    spans = phoenix.wait_spans(project, 6)
    root = _by_name(spans)["attachment_attempt"]
    session = _by_name(spans)["session/new"]
    trace_id = root["context"]["trace_id"]
    requests = sorted((s for s in spans if s["name"] in ("initialize", "tools/list")), key=lambda s: s["start_time"])
    assert [s["name"] for s in requests] == ["initialize", "tools/list", "initialize", "tools/list"]
    assert {s["context"]["trace_id"] for s in requests} == {trace_id}, "a foreign trace never splits the attempt"
    assert [s["parent_id"] for s in requests] == [session["context"]["span_id"]] * 2 + [root["context"]["span_id"]] * 2


def test_tracing_is_on_only_when_an_otlp_endpoint_is_configured():
    assert not tracing.enabled({})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "})


def test_an_endpoint_without_the_otel_extra_is_one_warning_and_the_daemon_serves_untraced(tmp_path, short_dir):
    # A fresh interpreter in which the SDK cannot be imported, as on an install without agentctl[otel].
    probe = (
        "import asyncio, sys\n"
        "from agentctl.mcp_endpoint.sdk_imports import missing\n"
        "from agentctl.daemon.app import Daemon\n"
        "from agentctl.spec_loader import load_spec\n"
        "async def go():\n"
        "    with missing('opentelemetry.sdk'):\n"
        "        d = Daemon(load_spec(sys.argv[1]), socket_path=sys.argv[2],\n"
        "                   environ={'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9'})\n"
        "        await d.start()\n"
        "    d.open_attempt('manual')\n"
        "    await d.stop()\n"
        "    print('served', 'opentelemetry.sdk' in sys.modules)\n"
        "asyncio.run(go())\n"
    )
    done = subprocess.run([os.sys.executable, "-c", probe, str(write_spec(tmp_path)), str(short_dir / "m.sock")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["served", "False"]
    warnings = [line for line in done.stderr.splitlines() if "traces are off" in line]
    assert len(warnings) == 1 and "agentctl[otel]" in warnings[0], done.stderr
    assert "127.0.0.1:9" not in done.stderr


def test_an_unreachable_receiver_is_one_warning_without_its_url_and_the_run_loses_nothing(tmp_path):
    with contextlib.closing(socket.socket()) as sock:  # a port nobody listens on: connections are refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "NO_COLOR": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
           "OTEL_BSP_SCHEDULE_DELAY": "200", "STATE_DIRECTORY": "", "XDG_STATE_HOME": str(tmp_path / "xdg")}
    done = _run(tmp_path, env, str(DEMO), "--prompt", 'CALL update_task {"description": "x"}')
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s+used\s+kandev: update_task \(ok\)$", done.stdout, re.MULTILINE), done.stdout
    assert list((tmp_path / "xdg" / "agentctl").glob("*/report.json")), "the report is persisted as always"
    failures = [line for line in done.stderr.splitlines() if "traces could not be exported" in line]
    assert len(failures) >= 1 and str(port) not in done.stderr and "/v1/traces" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_tool_call_that_fails_is_marked_tool_error_and_keeps_neither_its_argument_nor_the_error_text(
        phoenix, tmp_path):
    project = f"toolerr-{uuid.uuid4().hex[:8]}"
    canary = "BADSTATUS5150"
    spans = _demo_trace(phoenix, tmp_path, project, f'{{"status": "{canary}"}}')
    call = spans["tools/call update_task"]
    assert call["status_code"] == "ERROR" and call["attributes"]["error.type"] == "tool_error", call
    assert not call["status_message"] and not call["events"]
    raw = phoenix.raw(project)
    assert canary not in raw and "validation" not in raw.lower(), "no argument, no error text"
