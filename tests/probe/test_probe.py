"""`agentctl probe mcp` against the real reference agent (a subprocess speaking ACP through the SDK), in
each of its modes, with the real sentinel (SDK MCPServer on loopback HTTP/SSE, or the stdio sentinel
process the agent spawns). Nothing here is faked; every wait is bounded by the probe's own timeout."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import psutil
import pytest

from agentctl.cli import main
from agentctl.evidence.contract.probe import ProbeReport
from agentctl.probe.report import render_report
from agentctl.probe.run import DEFAULT_PROMPT, Probe, ProbeOptions, run_probe
from agentctl.probe.sentinel import SERVER_NAME, TOOL_NAME

REPO = Path(__file__).resolve().parents[2]
REF = [sys.executable, "-m", "agentctl.testing.reference_agent"]


async def probe(tmp_path: Path, *flags: str, prompt: str | None = None, timeout: float = 10.0,
                env: dict[str, str] | None = None) -> tuple[ProbeReport, int]:
    opts = ProbeOptions(command=[*REF, *flags], prompt=prompt, timeout=timeout, workdir=str(tmp_path), env=env or {})
    return await run_probe(opts)


def cli(*args: str, cwd: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "agentctl.cli", "probe", "mcp", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


# ---- findings, mode by mode --------------------------------------------------------------------


async def test_a_normal_agent_with_a_prompt_shows_every_finding_in_order(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, prompt=DEFAULT_PROMPT)
    assert code == 0 and report.ran and report.error is None
    assert report.agent is not None and report.agent.name == "agentctl-reference-agent"
    assert report.agent.mcp_capabilities is not None
    assert (report.agent.mcp_capabilities.http, report.agent.mcp_capabilities.sse) == (True, True)
    session = report.session
    assert session is not None and session.transport == "http" and session.accepted is True
    assert session.server_name == SERVER_NAME and session.target.startswith("http://127.0.0.1:")
    init, tools, call = report.initialize, report.tools_list, report.tool_call
    assert init is not None and tools is not None and call is not None
    assert init.client is not None and init.client.name == "agentctl-reference-agent" and init.client.version
    assert init.era == "legacy" and init.protocol_version and init.credential_seen is True
    # The legacy connection id relies on a private SDK attribute (observe.legacy_connection): fail loudly.
    assert init.connection_id and init.connection_id.startswith("conn_")
    assert tools.tool_count == 1 and tools.connection_id == init.connection_id
    assert call.tool_name == TOOL_NAME and call.outcome == "ok"
    assert report.prompt is not None and report.prompt.default_text and report.prompt.stop_reason == "end_turn"
    assert report.advertised_elapsed_s <= session.delivered_elapsed_s <= init.elapsed_s <= tools.elapsed_s <= call.elapsed_s
    assert report.unobserved is None and report.raw_frames_recorded is False
    text = render_report(report)
    assert text.startswith("agentctl probe mcp · agentctl-reference-agent")
    for label in ("advertised  mcpCapabilities: http, sse", "session     accepted", "initialize  observed",
                  "tools/list  observed: 1 tool", f"tool call   observed: {TOOL_NAME} (ok)",
                  "raw frames: not recorded"):
        assert label in text
    assert "\x1b[" not in text and "note:" not in text
    # An agent that reaches the sentinel without the delivered header is told apart (Kandev's endpoint needs it).
    stripped = [msgspec.structs.replace(c, credential_seen=False) for c in report.contacts]
    assert "the Authorization header delivered with the sentinel did not reach it" in render_report(
        msgspec.structs.replace(report, contacts=stripped)
    )


async def test_an_agent_that_ignores_mcp_is_unobserved_not_failed(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--ignore-mcp", timeout=1.0)
    assert code == 0 and report.ran
    assert report.session is not None and report.session.accepted is True
    assert report.first_contact is None and report.initialize is None and report.contacts == []
    assert report.unobserved == "unobserved: the agent did not contact the sentinel within 1 s"
    text = render_report(report)
    assert "unobserved: the agent did not contact the sentinel within 1 s" in text
    assert "fail" not in text.lower()


async def test_a_failed_stop_logs_its_type_and_keeps_the_traceback_for_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A fake, said so: the real stop runs (nothing is left behind), then fails the way a bug would,
    # with text that could quote the agent.
    real_stop = Probe._stop_all

    async def stop_then_fail(self: Probe) -> None:
        await real_stop(self)
        raise OSError("agent said AGENT-CANARY-31f0")

    monkeypatch.setattr(Probe, "_stop_all", stop_then_fail)
    caplog.set_level(logging.INFO, logger="agentctl")
    report, code = await probe(tmp_path, "--ignore-mcp", timeout=0.2)
    assert code == 0 and report.ran
    (line,) = [r for r in caplog.records if r.name == "agentctl.probe.run" and "stopping" in r.getMessage()]
    assert line.getMessage() == "stopping the probe failed (OSError)" and line.exc_info is None
    assert "AGENT-CANARY-31f0" not in caplog.text and "Traceback" not in caplog.text
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="agentctl")
    await probe(tmp_path, "--ignore-mcp", timeout=0.2)
    assert "Traceback" in caplog.text and "AGENT-CANARY-31f0" in caplog.text


async def test_a_lazy_agent_without_a_prompt_is_unobserved(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--lazy", timeout=1.0)
    assert code == 0 and report.prompt is None and report.session.accepted is True
    assert report.unobserved is not None and report.initialize is None


async def test_a_lazy_agent_attaches_when_prompted(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--lazy", prompt=DEFAULT_PROMPT)
    assert code == 0 and report.prompt is not None
    init, call = report.initialize, report.tool_call
    assert init is not None and report.tools_list is not None and call is not None
    # Lazy: nothing before the session was answered; everything after the prompt went out.
    assert init.elapsed_s >= report.prompt.sent_elapsed_s >= report.session.answered_elapsed_s
    assert call.tool_name == TOOL_NAME


async def test_a_strict_agent_that_gives_up_reports_its_own_error(tmp_path: Path) -> None:
    # Honest, not staged: with a zero connect timeout the strict reference agent really cannot attach in
    # time and fails session/new naming the server (whatever the sentinel saw meanwhile is kept apart).
    report, code = await probe(tmp_path, env={"AGENTCTL_REF_MODE": "strict,connect-timeout=0"})
    assert code == 0 and report.ran
    session = report.session
    assert session is not None and session.accepted is False and session.error is not None
    assert session.error.reason_code == "session_rejected"
    assert f"'{SERVER_NAME}'" in session.error.summary and "unreachable" in session.error.summary
    assert "rejected by the agent" in render_report(report)


async def test_without_mcp_capabilities_the_stdio_sentinel_is_delivered_and_everything_is_stopped(
    tmp_path: Path,
) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    pidfile = tmp_path / "pids"
    report, code = await probe(
        tmp_path, "--no-mcp-capabilities", "--fork-grandchildren", prompt=DEFAULT_PROMPT,
        env={"AGENTCTL_REF_PIDFILE": str(pidfile)},
    )
    assert code == 0
    session = report.session
    assert session is not None and session.transport == "stdio" and session.accepted is True
    assert session.target == os.path.basename(sys.executable)
    first, init, call = report.first_contact, report.initialize, report.tool_call
    assert first is not None and first.kind == "contact" and first.transport == "stdio"
    assert first.credential_seen is True  # the env value delivered with the server reached it
    assert init is not None and init.transport == "stdio" and init.client.name == "agentctl-reference-agent"
    assert init.connection_id == first.connection_id and init.connection_id.startswith("conn_")
    assert report.tools_list is not None and report.tools_list.tool_count == 1
    assert call is not None and call.tool_name == TOOL_NAME and call.outcome == "ok"
    # Every process spawned for the probe is gone: the agent, its grandchildren (one escaped with setsid)
    # and the stdio sentinel it started.
    grandchildren = [int(line) for line in pidfile.read_text().split()]
    assert len(grandchildren) == 2
    for pid in grandchildren:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert report.agent.state == "exited" and report.agent.stopped_by_daemon


async def test_an_sse_only_agent_gets_the_sentinel_over_sse(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--sse-only")
    assert code == 0
    assert report.agent.mcp_capabilities.http is False and report.agent.mcp_capabilities.sse is True
    assert report.session.transport == "sse" and report.session.accepted is True
    assert report.first_contact.http_route == "GET /sse"
    init = report.initialize
    assert init is not None and init.transport == "sse" and init.era == "legacy" and init.connection_id
    assert report.tools_list is not None and report.tools_list.transport == "sse"


async def test_a_modern_era_client_is_observed_without_a_connection_id(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--modern")
    assert code == 0
    init = report.initialize
    assert init is not None and init.era == "modern" and init.protocol_version == "2026-07-28"
    assert init.connection_id is None and init.client.name == "agentctl-reference-agent"
    assert report.tools_list is not None and report.tools_list.era == "modern"


async def test_an_agent_that_dies_before_initialize_means_the_probe_could_not_run(tmp_path: Path) -> None:
    report, code = await probe(tmp_path, "--crash-before-initialize")
    assert code == 2 and report.ran is False and report.error is not None
    assert report.error.reason_code == "agent_exited"
    assert report.error.summary == "the agent exited with code 2 before answering ACP initialize"
    assert report.session is None and report.agent.exit_code == 2
    assert "could not run: the agent exited with code 2" in render_report(report)


# ---- the command line --------------------------------------------------------------------------


def test_a_missing_executable_means_the_probe_could_not_run(tmp_path: Path) -> None:
    missing = cli("--", "no-such-agent-executable-here", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "agentctl: probe mcp: could not run: cannot start agent: executable not found"


def test_usage_errors_are_one_line_and_start_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "mcp", "--timeout", "1"]) == 1
    assert capsys.readouterr().err.startswith("agentctl: probe mcp: no agent command")
    assert main(["probe", "mcp", "--workdir", str(tmp_path / "nope"), "--", *REF]) == 1
    assert "--workdir is not a directory" in capsys.readouterr().err
    assert main(["probe", "mcp", "--jsonl", str(tmp_path / "no" / "dir.jsonl"), "--", *REF]) == 1
    assert "cannot open the --jsonl file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["probe", "mcp", "--timeout", "0", "--", *REF])
    assert exited.value.code == 1


def test_raw_frames_go_only_to_the_jsonl_file_never_to_the_summary(tmp_path: Path) -> None:
    prompt = "CANARY-PROMPT-7f3a please call the sentinel"
    jsonl = tmp_path / "frames.jsonl"
    result = cli(
        "--json", "--jsonl", str(jsonl), "--prompt", prompt, "--env", "CANARY_ENV=canary-env-value-91c2",
        "--", *REF, "--canary-arg-5d1e", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["raw_frames_recorded"] is True and report["tool_call"]["tool_name"] == TOOL_NAME

    assert stat.S_IMODE(jsonl.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    frames = [line for line in lines if line["type"] == "acp"]
    assert {f["direction"] for f in frames} == {"to_agent", "from_agent"}
    methods = [f["frame"].get("method") for f in frames if f["direction"] == "to_agent"]
    assert methods[:3] == ["initialize", "session/new", "session/prompt"]
    new_session = next(f["frame"] for f in frames if f["frame"].get("method") == "session/new")
    assert new_session["params"]["cwd"] == str(tmp_path.resolve())
    credential = new_session["params"]["mcpServers"][0]["headers"][0]["value"].removeprefix("Bearer ")
    assert prompt in jsonl.read_text()  # raw frames really are raw
    markers = [line for line in lines if line["type"] == "sentinel"]
    assert {m["contact"]["kind"] for m in markers} >= {"contact", "initialize", "tools_list", "tool_call"}
    assert all(m["at"] and m["contact"]["at"] for m in markers)
    assert any(m["contact"].get("connection_id", "").startswith("conn_") for m in markers)

    for canary in (prompt, "CANARY-PROMPT", "canary-env-value-91c2", "--canary-arg-5d1e", credential):
        assert canary not in result.stdout and canary not in result.stderr
    for raw in ('"jsonrpc"', "session/new", "mcpServers", "Bearer"):
        assert raw not in result.stdout


# ---- an agent not written here -----------------------------------------------------------------


FAST_AGENT = os.environ.get("AGENTCTL_FAST_AGENT")


@pytest.mark.skipif(
    not FAST_AGENT,
    reason="set AGENTCTL_FAST_AGENT to a fast-agent executable (pip install fast-agent-mcp==0.10.48, Python >= 3.12)",
)
def test_fast_agent_attaches_and_calls_the_sentinel(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "agentctl.cli", "probe", "mcp", "--json", "--timeout", "60",
         "--prompt", f"***CALL_TOOL {SERVER_NAME}__{TOOL_NAME} {{}}",
         "--", str(FAST_AGENT), "acp", "--model", "passthrough"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["agent"]["name"].startswith("fast-agent")
    assert report["session"]["transport"] == "http" and report["session"]["accepted"] is True
    assert report["initialize"]["client"]["name"] == "fast-agent-mcp"
    assert report["tools_list"]["tool_count"] == 1
    assert report["tool_call"]["tool_name"] == TOOL_NAME and report["tool_call"]["outcome"] == "ok"
    assert report["agent"]["permissions_granted"] >= 1
