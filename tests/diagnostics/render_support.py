"""A real Ledger driven through every display state, with a deterministic clock, for the render tests."""

from __future__ import annotations

from pathlib import Path

from agentctl.context import DaemonContext, Readiness
from agentctl.diagnostics.diagnostics import build_diagnostics
from agentctl.evidence.contract.diagnostics import Diagnostics
from agentctl.evidence.contract.report import EndpointTestResult
from agentctl.evidence.ledger import Ledger
from agentctl.evidence.seeds import ServerSeed
from agentctl.spec import parse_spec
from tests.conftest import StepClock, identity, spec_toml

SPEC = spec_toml(
    execution_id="exec_0123456789abcdef",
    identity={"session_id": "sess-1"},
    servers=[
        {"name": "github", "type": "http", "url": "https://api.github.example/mcp"},
        {"name": "broken", "type": "http", "url": "https://broken.example/mcp"},
        {"name": "local-fs", "type": "stdio", "command": "/usr/bin/fs-server"},
        {"name": "cli-only", "type": "sse", "url": "https://sse.example/sse"},
        {"name": "later", "type": "http", "url": "https://later.example/mcp"},
    ],
).encode()


SEEDS = [
    ServerSeed(name="kandev", source="builtin", transport="http", target="http://127.0.0.1:40123"),
    ServerSeed(name="github", source="profile", transport="http", target="https://api.github.example"),
    ServerSeed(name="broken", source="profile", transport="http", target="https://broken.example"),
    ServerSeed(name="local-fs", source="profile", transport="stdio", target="fs-server"),
    ServerSeed(name="cli-only", source="profile", transport="sse", target="https://sse.example"),
    ServerSeed(name="later", source="profile", transport="http", target="https://later.example"),
]


def every_state_ctx() -> DaemonContext:
    """Previous attempt: kandev connected, then disconnected. Current: one row in each display state."""
    spec = parse_spec(SPEC)
    ledger = Ledger(identity(session="sess-1", execution="exec_0123456789abcdef", instance="inst_0123456789abcdef"),
                    clock=StepClock())
    old, _ = ledger.begin_attempt("session_new", SEEDS[:2])
    ledger.record("delivered", old, "kandev")
    ledger.record("delivered", old, "github")
    ledger.record("session_accepted", old, acp_session_id="acp-old")
    ledger.record("initialize_observed", old, "kandev", connection_id="conn_1", era="legacy")
    ledger.record("connection_closed", old, "kandev", connection_id="conn_1", era="legacy")

    now, _ = ledger.begin_attempt("reset", SEEDS)
    for name in ("kandev", "github", "broken"):
        ledger.record("delivered", now, name)
    ledger.record("filtered", now, "local-fs", reason_code="http_unsupported")
    ledger.record("unavailable", now, "cli-only", reason_code="no_passthrough_strategy")
    ledger.record("session_accepted", now, acp_session_id="acp-new")
    ledger.record("initialize_observed", now, "kandev", connection_id="conn_2", era="legacy")
    ledger.record("tools_list_observed", now, "kandev", connection_id="conn_2", tool_count=7)
    ledger.record("tool_call_observed", now, "kandev", tool_name="get_task", outcome="ok")
    ledger.record("tool_call_observed", now, "kandev", tool_name="update_task", outcome="error")
    ledger.record(
        "explicit_error", now, "broken", reason_code="session_rejected", summary="the agent could not reach it"
    )
    ledger.set_endpoint_test(
        now,
        "github",
        EndpointTestResult(succeeded=True, tested_at=ledger.now(), tool_count=12, latency_ms=48.25),
    )
    ledger.set_endpoint_test(
        now,
        "broken",
        EndpointTestResult(
            succeeded=False, tested_at=ledger.now(), reason_code="connect_failed", summary="could not connect", latency_ms=3.0
        ),
    )
    ledger.count_refusal("/mcp", "POST", 401)
    ledger.count_refusal("/mcp", "POST", 401)
    ledger.update_agent(
        protocol="acp", state="exited", name="reference-agent", version="0.1.0", protocol_version=1,
        exited_at=ledger.now(), exit_code=3, exit_reason="exited with code 3",
    )
    readiness = Readiness()
    readiness.set("mcp_listener", True)
    readiness.set("agent", False, "exited")
    return DaemonContext(spec=spec, ledger=ledger, state_dir=Path("/nonexistent"),
                         control_socket=Path("/nonexistent/control.sock"), readiness=readiness)


def every_state_diagnostics() -> Diagnostics:
    return build_diagnostics(every_state_ctx())
