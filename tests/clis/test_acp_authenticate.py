"""ACP `authenticate` against the real adapters: codex-acp (@agentclientprotocol/codex-acp) and Gemini CLI `--acp`.

Each runs with a throw-away HOME and a placeholder API key: no model is ever called. Without `authenticate` the
adapter refuses the session ("Authentication required"); with the method agentctl picks from the variable in the
agent's environment, the session is accepted. The placeholder is a canary: it must not reach the persisted
report or the daemon's log. The adapters are found in AGENTCTL_CLIS_DIR (tests/clis/conftest.py: a missing one
skips, or fails where AGENTCTL_REQUIRE_REAL_CLIS=1).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentctl.spec_loader import load_spec
from tests.clis.conftest import clean_env, gemini_home_and_workspace
from tests.conftest import write_spec

CANARY = "sk-placeholder-CANARY-auth-29"


def _spec(tmp_path: Path, command: list[str], home: Path, ws: Path, key_var: str, **agent: object) -> Path:
    env = {k: v for k, v in clean_env(home).items() if k != "PATH"}
    env[key_var] = CANARY
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_spec(tmp_path, agent={
        "command": command, "workdir": str(ws), "env": env, "stop_grace": 0.5,
        "initialize_timeout": 90, "session_timeout": 90, **agent})


def _leaks(daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    where = [p for p in tmp_path.rglob("*") if p.is_file() and "state" in p.parts and CANARY.encode() in p.read_bytes()]
    return [str(p) for p in where] + [r.getMessage() for r in caplog.records if CANARY in r.getMessage()]


async def _codex_daemon(real_cli, tmp_path: Path, in_process_daemon, key_var: str, **agent: object):
    """codex-acp under an in-process daemon, its own HOME and workdir, the placeholder in `key_var`."""
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    return await in_process_daemon(load_spec(_spec(tmp_path, [str(real_cli("codex-acp"))], home, ws, key_var, **agent)))


async def test_codex_acp_with_its_key_in_the_agents_env_gets_its_session_once_agentctl_authenticates(
    real_cli, tmp_path: Path, in_process_daemon, caplog: pytest.LogCaptureFixture
) -> None:
    codex_acp = real_cli("codex-acp")
    caplog.set_level(logging.DEBUG)
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    daemon = await in_process_daemon(load_spec(_spec(tmp_path / "a", [str(codex_acp)], home, ws, "OPENAI_API_KEY")))
    agent = daemon.ledger.history.agent
    assert (agent.auth_method, agent.auth_result) == ("api-key", "accepted"), agent
    outcome = await daemon.agent.acp.new_session()
    assert outcome.accepted, outcome.summary
    await daemon.stop()
    assert _leaks(daemon, tmp_path / "a", caplog) == []

    # A fresh HOME: codex-acp keeps an accepted API-key login in its own $HOME/.codex (the agent's doing).
    fresh = tmp_path / "fresh-home"
    fresh.mkdir()
    refused = await in_process_daemon(load_spec(
        _spec(tmp_path / "b", [str(codex_acp)], fresh, ws, "OPENAI_API_KEY", auth_method="none")))
    assert refused.ledger.history.agent.auth_method is None
    outcome = await refused.agent.acp.new_session()
    assert not outcome.accepted and "authentication required" in (outcome.summary or "").lower(), (
        "the same agent without authenticate refuses: the step above is what made the difference")


async def test_a_named_method_the_agent_did_not_advertise_is_not_sent_and_the_status_says_so(
    real_cli, tmp_path: Path, in_process_daemon
) -> None:
    daemon = await _codex_daemon(real_cli, tmp_path, in_process_daemon, "OPENAI_API_KEY", auth_method="openai-api-key")
    agent = daemon.ledger.history.agent
    assert (agent.auth_method, agent.auth_result) == ("openai-api-key", "not_advertised")


async def test_gemini_over_acp_authenticates_with_its_api_key_method(
    real_cli, tmp_path: Path, in_process_daemon, caplog: pytest.LogCaptureFixture
) -> None:
    gemini = real_cli("gemini")
    caplog.set_level(logging.DEBUG)
    home, ws, _ = gemini_home_and_workspace(tmp_path)
    daemon = await in_process_daemon(load_spec(_spec(tmp_path / "a", [str(gemini), "--acp"], home, ws, "GEMINI_API_KEY")))
    agent = daemon.ledger.history.agent
    assert (agent.auth_method, agent.auth_result) == ("gemini-api-key", "accepted"), agent
    first = await daemon.agent.acp.new_session()
    assert first.accepted, first.summary
    loaded = await daemon.agent.acp.load_session(first.acp_session_id)
    # Gemini CLI 0.61.0 keeps no session that never had a prompt, so the load is refused, but for that reason:
    assert "no previous sessions" in (loaded.summary or "").lower(), loaded.summary
    await daemon.stop()
    assert _leaks(daemon, tmp_path / "a", caplog) == []

    # A fresh HOME: Gemini keeps the method it was authenticated with in its own settings (the agent's doing).
    fresh, _, _ = gemini_home_and_workspace(tmp_path / "fresh")
    unauthenticated = await in_process_daemon(load_spec(
        _spec(tmp_path / "b", [str(gemini), "--acp"], fresh, ws, "GEMINI_API_KEY", auth_method="none")))
    first = await unauthenticated.agent.acp.new_session()
    assert first.accepted, first.summary
    loaded = await unauthenticated.agent.acp.load_session(first.acp_session_id)
    assert "authentication required" in (loaded.summary or "").lower(), (
        "without authenticate, Gemini refuses session/load for want of it", loaded.summary)


async def test_a_refused_authenticate_is_shown_with_the_agents_reason_and_the_daemon_carries_on(
    real_cli, tmp_path: Path, in_process_daemon
) -> None:
    from agentctl.control.render import render_status

    # The method named, its key variable not set: codex-acp refuses authenticate.
    daemon = await _codex_daemon(real_cli, tmp_path, in_process_daemon, "UNRELATED_VAR", auth_method="api-key")
    agent = daemon.ledger.history.agent
    assert (agent.auth_method, agent.auth_result) == ("api-key", "rejected") and "is not set" in agent.auth_note
    assert "ACP authenticate with method api-key: rejected" in render_status(daemon.ledger.history, False)
    outcome = await daemon.agent.acp.new_session()
    assert not outcome.accepted and "authentication required" in (outcome.summary or "").lower()


async def test_probe_mcp_authenticates_codex_acp_the_same_way_and_gets_its_session(real_cli, tmp_path: Path) -> None:
    from agentctl.probe.run import ProbeOptions, run_probe

    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    env = {**{k: v for k, v in clean_env(home).items() if k != "PATH"}, "OPENAI_API_KEY": CANARY}
    report, _ = await run_probe(ProbeOptions(command=[str(real_cli("codex-acp"))], timeout=60, workdir=str(ws), env=env))
    assert (report.agent.auth_method, report.agent.auth_result) == ("api-key", "accepted")
    assert report.session is not None and report.session.accepted, report.session
    assert CANARY not in repr(report)
