"""agentctl's folder-trust decision equals the installed Gemini CLI's own, layout by layout.

Each layout is a throw-away HOME and working directory whose workspace settings configure one MCP server;
`gemini mcp list` prints it `Disabled` under a warning in a folder it does not trust, tries to connect to it
in one it trusts, and exits 52 on a trust file it cannot read. `--skip-trust` is not checked here: `mcp list`
does not take the flag (the pure tests cover it).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from agentctl.agent.clis.gemini import decide_for
from tests.clis.conftest import clean_env, gemini_home_and_workspace

UNTRUSTED_WARNING = "disabled because this folder is untrusted"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _settings(enabled) -> str:
    return json.dumps({"security": {"folderTrust": {"enabled": enabled}}})


# name: (trusted-folders rules with {ws} and {root} placeholders or None, user settings, system settings, env,
# run through a symlink to the workspace)
LAYOUTS = {
    "no_rule_and_a_workspace_that_tries_to_switch_trust_off": (None, None, None, {}, False),
    "a_trusted_parent": ({"{root}": "TRUST_FOLDER"}, None, None, {}, False),
    "a_trusted_parent_and_a_distrusted_folder": ({"{root}": "TRUST_FOLDER", "{ws}": "DO_NOT_TRUST"}, None, None, {}, False),
    "trust_parent_on_a_sibling_reached_through_a_symlink": ({"{root}/other": "TRUST_PARENT"}, None, None, {}, True),
    "folder_trust_off_in_user_settings": (None, _settings(False), None, {}, False),
    "system_settings_in_a_world_writable_folder_are_ignored": (None, _settings(False), _settings(True), {}, False),
    "restricted_mode_despite_a_rule": ({"{ws}": "TRUST_FOLDER"}, None, None, {"GEMINI_RESTRICTED_MODE": "true"}, False),
    "an_invalid_trust_level": ({"{ws}": "YES"}, None, None, {}, False),
}
# The value types of `security.folderTrust.enabled` (user settings, no trusted-folders rule): trusted exactly
# where Gemini reads the setting as off.
ENABLED_VALUES = {"the_string_false": "false", "the_string_FALSE": "FALSE", "the_string_false_untrimmed": " false",
                  "the_string_true": "true", "the_string_no": "no", "the_empty_string": "", "zero": 0, "minus_zero": -0.0,
                  "a_fraction": 0.5, "null": None, "an_empty_array": [], "an_empty_object": {}}
LAYOUTS.update({f"folder_trust_enabled_is_{name}": (None, _settings(value), None, {}, False)
                for name, value in ENABLED_VALUES.items()})


def _layout(base: Path, rules, user, system, env, via_link) -> tuple[Path, dict[str, str]]:
    home, root = base / "home", base / "root"
    ws = root / "proj"
    (ws / ".gemini").mkdir(parents=True)
    (home / ".gemini").mkdir(parents=True)
    (ws / ".gemini" / "settings.json").write_text(json.dumps(
        {"mcpServers": {"probe": {"httpUrl": "http://127.0.0.1:9/mcp"}}, "security": {"folderTrust": {"enabled": False}}}))
    if rules is not None:
        text = json.dumps({k.format(ws=ws, root=root): v for k, v in rules.items()})
        (home / ".gemini" / "trustedFolders.json").write_text(text)
    if user is not None:
        (home / ".gemini" / "settings.json").write_text(user)
    if system is not None:
        (base / "system.json").write_text(system)
    cwd = ws
    if via_link:
        (base / "link").symlink_to(ws)
        cwd = base / "link"
    return cwd, clean_env(home, GEMINI_CLI_SYSTEM_SETTINGS_PATH=str(base / "system.json"), **env)


async def _mcp_list(gemini: Path, cwd: Path, env: dict[str, str], gate: asyncio.Semaphore) -> tuple[int | None, str]:
    """`gemini mcp list` run in `cwd`: its exit code and its output without colour codes."""
    async with gate:
        proc = await asyncio.create_subprocess_exec(
            str(gemini), "mcp", "list", cwd=cwd, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode, _ANSI.sub("", out.decode(errors="replace"))


async def _gemini_trusts(gemini: Path, cwd: Path, env: dict[str, str], gate: asyncio.Semaphore) -> bool | None:
    returncode, text = await _mcp_list(gemini, cwd, env, gate)
    if returncode == 52 and "Please fix the configuration file" in text:
        return None
    assert returncode == 0 and "probe: http://127.0.0.1:9/mcp" in text, text
    untrusted = UNTRUSTED_WARNING in text
    assert untrusted == ("probe: http://127.0.0.1:9/mcp (http) - Disabled" in text), text
    return not untrusted


async def test_our_decision_equals_gemini_clis_for_every_layout(real_cli, tmp_path: Path) -> None:
    gemini = real_cli("gemini")
    gate = asyncio.Semaphore(3)  # a Gemini start costs seconds of CPU; the machine is shared
    cases = {name: _layout(tmp_path / name, *spec) for name, spec in LAYOUTS.items()}
    answers = await asyncio.gather(*(_gemini_trusts(gemini, cwd, env, gate) for cwd, env in cases.values()))
    theirs = dict(zip(cases, answers, strict=True))
    ours = {name: decide_for(cwd, env).trusted for name, (cwd, env) in cases.items()}
    assert ours == theirs
    assert set(theirs.values()) == {True, False, None}, "the layouts cover every outcome"



async def test_where_the_gemini_strategy_filters_for_trust_the_real_cli_disables_what_it_would_have_been_given(
    real_cli, tmp_path: Path
) -> None:
    from agentctl.agent.clis import get_strategy
    from agentctl.agent.passthrough.base import BuiltinEndpoint, MaterializeRequest
    from agentctl.agent.passthrough.workspace import cleanup
    from tests.passthrough.support import spec_for

    gemini = real_cli("gemini")
    home, ws, folders = gemini_home_and_workspace(tmp_path)
    folders.write_text(json.dumps({str(ws): "TRUST_FOLDER"}))
    env = clean_env(home)
    builtin = BuiltinEndpoint("kandev", "http://127.0.0.1:9/mcp", "http://127.0.0.1:9/sse", "TOKEN-CANARY-gem")
    strategy = get_strategy("gemini")

    def materialize():
        tmp = tmp_path / f"private{len(list(tmp_path.iterdir()))}"
        tmp.mkdir(mode=0o700)
        return strategy.materialize(MaterializeRequest(spec_for("gemini", servers=""), builtin, ws, tmp, environ=env))

    trusted = materialize()
    assert [e.name for e in trusted.delivered] == ["kandev"]
    gate = asyncio.Semaphore(1)
    assert await _gemini_lists(gemini, ws, env, gate) is True
    folders.write_text(json.dumps({str(ws): "DO_NOT_TRUST"}))  # the user distrusts the folder
    # The settings the strategy wrote for the trusted folder, read by the real CLI in the distrusted one:
    assert await _gemini_lists(gemini, ws, env, gate) is False, "Gemini CLI disables them"
    cleanup(trusted)
    distrusted = materialize()
    assert distrusted.delivered == [] and [(o.name, o.reason_code) for o in distrusted.filtered] == [
        ("kandev", "untrusted_folder")], "and there the strategy says filtered, never delivered"
    assert not (ws / ".gemini").exists() and json.loads(folders.read_text()) == {str(ws): "DO_NOT_TRUST"}


async def _gemini_lists(gemini: Path, cwd: Path, env: dict[str, str], gate: asyncio.Semaphore) -> bool:
    """`gemini mcp list` in `cwd`: True when it tries the built-in server, False when it lists it disabled."""
    returncode, text = await _mcp_list(gemini, cwd, env, gate)
    assert returncode == 0 and "kandev: http://127.0.0.1:9/mcp" in text, text
    disabled = "kandev: http://127.0.0.1:9/mcp (http) - Disabled" in text
    assert disabled == (UNTRUSTED_WARNING in text), text
    return not disabled
