"""Gemini CLI over ACP (`gemini --acp`, the real pinned CLI) and folder trust: agentctl never says `delivered` where
Gemini will not start the servers, and delivers where it will.

Measured with Gemini CLI 0.61.0 (docs/agents.md): it answers initialize with no key (`agentInfo.name` is
`gemini-cli`) and refuses session/new without one (-32000), so the agent gets a placeholder GEMINI_API_KEY: no
model is ever called, session/new only builds the session, and in a trusted folder that connects its MCP
servers. HOME is a throw-away directory; nothing of the user's Gemini settings is read or written.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentctl.spec_loader import load_spec
from tests.clis.conftest import clean_env, gemini_home_and_workspace
from tests.conftest import eventually, write_spec


def _spec(tmp_path: Path, gemini: Path, home: Path, ws: Path) -> Path:
    env = {k: v for k, v in clean_env(home).items() if k != "PATH"}
    env["GEMINI_API_KEY"] = "placeholder-not-a-key"  # session/new needs one; no model is called
    tmp_path.mkdir(parents=True, exist_ok=True)
    return write_spec(tmp_path, agent={
        "command": [str(gemini), "--acp"], "workdir": str(ws), "env": env, "stop_grace": 0.5,
        "initialize_timeout": 90, "session_timeout": 90})


def _rows(daemon) -> dict[str, tuple[str, str | None]]:
    return {r.name: (r.status, r.reason_code) for r in daemon.ledger.history.current.servers}


async def test_in_an_untrusted_folder_gemini_over_acp_gets_no_server_and_in_a_trusted_one_it_connects(
    real_cli, tmp_path: Path, in_process_daemon
) -> None:
    gemini = real_cli("gemini")
    home, ws, folders = gemini_home_and_workspace(tmp_path)
    daemon = await in_process_daemon(load_spec(_spec(tmp_path / "a", gemini, home, ws)))
    assert daemon.ledger.history.agent.name == "gemini-cli", "recognized by the name it declares"
    untrusted = await daemon.agent.acp.new_session()
    assert untrusted.accepted, untrusted.summary
    assert _rows(daemon) == {"kandev": ("filtered", "untrusted_folder")}, "never delivered where it is untrusted"
    folders.write_text(json.dumps({str(ws): "TRUST_FOLDER"}))  # the user trusts the folder (in the test's HOME)
    again = await daemon.agent.acp.new_session()
    assert again.accepted and _rows(daemon)["kandev"] == ("filtered", "untrusted_folder"), (
        "Gemini CLI read its trusted-folders file once, at its start: so does agentctl")
    await daemon.stop()

    daemon = await in_process_daemon(load_spec(_spec(tmp_path / "b", gemini, home, ws)))
    trusted = await daemon.agent.acp.new_session()
    assert trusted.accepted, trusted.summary
    await eventually(lambda: _rows(daemon)["kandev"][0] in ("connected", "active"), 60,
                     what="Gemini CLI to reach the built-in endpoint in the trusted folder")
    assert not (ws / ".gemini").exists() and json.loads(folders.read_text()) == {str(ws): "TRUST_FOLDER"}
