"""One smoke test per real CLI: the pinned version is installed, and it reads the MCP configuration
agentctl's strategy materializes and reaches the real built-in endpoint with it, with no API key. (Codex:
its app-server frames are pinned by real captured output in tests/agent/test_reported_codex.py, and a live
app-server run is tests/clis/test_codex_app_server_probe.py.)

Each CLI runs with a throw-away HOME and nothing of the user's environment; the built-in endpoint is the
real one, in process, and records what the CLI did on the attempt whose token the strategy wrote.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough.base import BuiltinEndpoint, MaterializeRequest
from agentctl.agent.passthrough.workspace import cleanup
from agentctl.agent.clis.claude import ClaudeInitReader
from tests.clis.conftest import PINNED, clean_env
from tests.conftest import eventually
from tests.passthrough.support import spec_for

BUILTIN = "kandev"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


async def _setup(make_harness, tmp_path: Path, strategy: str):
    harness = await make_harness()
    attempt, token = harness.new_attempt()
    workdir, tmpdir, home = tmp_path / "work", tmp_path / "private", tmp_path / "home"
    for d in (workdir, tmpdir, home):
        d.mkdir(mode=0o700)
    builtin = BuiltinEndpoint(BUILTIN, harness.url, harness.sse_url, token)
    # Gemini CLI is run with GEMINI_CLI_TRUST_WORKSPACE=true: the strategy decides trust from the same variable.
    environ = {**os.environ, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    req = MaterializeRequest(spec_for(strategy, servers=""), builtin, workdir, tmpdir, environ=environ)
    mat = get_strategy(strategy).materialize(req)
    assert [e.name for e in mat.delivered] == [BUILTIN]
    return harness, attempt, mat, workdir, home


async def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, _ANSI.sub("", out.decode(errors="replace"))


async def _version(cli: Path, home: Path) -> str:
    _, out = await _run([str(cli), "--version"], home, clean_env(home))
    return out


async def _observed_tools_list(harness, attempt: str) -> None:
    await eventually(lambda: harness.events(attempt, "tools_list_observed"), 20, "tools/list on the built-in endpoint")


async def test_claude_code_reads_the_mcp_config_and_its_init_event_lists_the_built_in_server_connected(
    real_cli, make_harness, tmp_path: Path
) -> None:
    claude = real_cli("claude")
    harness, attempt, mat, workdir, home = await _setup(make_harness, tmp_path, "claude")
    assert PINNED["claude"] in await _version(claude, home)
    _, out = await _run([str(claude), "-p", "hi", "--output-format", "stream-json", "--verbose", *mat.argv],
                        workdir, clean_env(home, **mat.env))
    reader = ClaudeInitReader([BUILTIN])
    reports = reader.feed(out.encode()) + reader.close()
    assert [(r.state, r.raw_state) for r in reports] == [("connected", "connected")], out[:2000]
    await _observed_tools_list(harness, attempt)
    served = harness.events(attempt, "tools_list_observed")[-1].tool_count
    assert served and reports[0].tool_count == served, "Claude Code lists every tool the endpoint served"
    cleanup(mat)


@pytest.mark.parametrize(("name", "extra_env", "listed"), [
    # Gemini starts no server in a folder it does not trust: the run trusts it for itself, writing nothing.
    pytest.param("gemini", {"GEMINI_CLI_TRUST_WORKSPACE": "true"}, rf"✓ {BUILTIN}: \S+ \(http\) - Connected",
                 id="gemini_cli_reads_the_workspace_settings"),
    pytest.param("opencode", {}, rf"{BUILTIN}\b.*connected", id="opencode_reads_its_config"),
])
async def test_mcp_list_connects_to_the_built_in_server_with_what_the_strategy_wrote(
    real_cli, make_harness, tmp_path: Path, name: str, extra_env: dict[str, str], listed: str
) -> None:
    cli = real_cli(name)
    harness, attempt, mat, workdir, home = await _setup(make_harness, tmp_path, name)
    assert PINNED[name] in await _version(cli, home)
    code, out = await _run([str(cli), "mcp", "list", *mat.argv], workdir, clean_env(home, **extra_env, **mat.env))
    assert code == 0 and re.search(listed, out), out
    await eventually(lambda: harness.events(attempt, "initialize_observed"), 20, "initialize on the built-in endpoint")
    cleanup(mat)
    assert sorted(p.name for p in workdir.rglob("*")) == [], "the workspace is left as it was"
