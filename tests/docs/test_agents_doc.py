"""docs/agents.md: every spec on the page loads, names a protocol and strategy that exist, and, where the CLI
is installed, the strategy's configuration is read back by the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from agentctl.agent.clis import get_strategy, strategy_names
from agentctl.agent.passthrough.base import BuiltinEndpoint, Materialization, MaterializeRequest
from agentctl.spec import Spec, parse_spec
from tests.conftest import REPO, spec_toml

DOC = REPO / "docs" / "agents.md"
SPEC_BLOCK = re.compile(r"^```toml agent-spec:(?P<name>[a-z0-9-]+)\n(?P<body>.*?)^```", re.M | re.S)
# The agents issue 21 names: each has a tested spec, over each protocol people use it with.
EXPECTED = {
    "claude-agent-acp": ("acp", None, "claude-agent-acp"),
    "claude-cli": ("passthrough", "claude", "claude"),
    "claude-terminal": ("passthrough", "claude", "claude"),
    "codex-acp": ("acp", None, "codex-acp"),
    "codex-cli": ("passthrough", "codex", "codex"),
    "gemini-acp": ("acp", None, "gemini"),
    "gemini-cli": ("passthrough", "gemini", "gemini"),
    "opencode-cli": ("passthrough", "opencode", "opencode"),
    "opencode-acp": ("acp", None, "opencode"),
    "fast-agent": ("acp", None, "fast-agent"),
    "cursor-cli": ("passthrough", "cursor", "cursor-agent"),
}
# A directory holding the real CLIs (an npm prefix's node_modules/.bin, say); PATH is searched after it.
BIN_DIR_ENV = "AGENTCTL_AGENT_BIN"
STDIO_SERVER = REPO / "tests" / "diagnostics" / "fixtures" / "stdio_server.py"
CLI_TIMEOUT = 90  # a cold Node start on a loaded 2-core machine; each check takes a few seconds alone


def doc_specs() -> dict[str, Spec]:
    blocks = {m["name"]: m["body"] for m in SPEC_BLOCK.finditer(DOC.read_text())}
    return {name: parse_spec(body.encode(), source=f"docs/agents.md [{name}]") for name, body in blocks.items()}


def test_every_agent_spec_on_the_page_loads_and_names_a_protocol_and_strategy_that_exist() -> None:
    specs = doc_specs()
    assert set(specs) == set(EXPECTED), "one marked spec per agent the guide covers"
    for name, spec in specs.items():
        protocol, strategy, executable = EXPECTED[name]
        assert spec.agent is not None, name
        assert (spec.agent.protocol, spec.agent.strategy) == (protocol, strategy), name
        assert Path(spec.agent.command[0]).name == executable, name
        if strategy is not None:
            assert get_strategy(strategy) is not None and get_strategy(strategy).name == strategy
    used = {spec.agent.strategy for spec in specs.values() if spec.agent is not None}
    assert set(strategy_names()) <= used, "every passthrough strategy has a documented spec"


def _bin_path() -> str:
    """PATH with the real CLIs' directories first: AGENTCTL_AGENT_BIN, the pinned npm CLIs, fast-agent's."""
    clis = os.environ.get("AGENTCTL_CLIS_DIR")
    fast_agent = os.environ.get("AGENTCTL_FAST_AGENT")
    dirs = [os.environ.get(BIN_DIR_ENV), clis and str(Path(clis) / "node_modules" / ".bin"),
            fast_agent and str(Path(fast_agent).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    return os.pathsep.join(d for d in dirs if d)


def test_every_spec_block_on_the_page_passes_spec_check_as_written(tmp_path: Path) -> None:
    # Every ```toml block is a marked spec, so none escapes this check.
    assert DOC.read_text().count("```toml") == len(SPEC_BLOCK.findall(DOC.read_text()))
    path = _bin_path()
    for match in SPEC_BLOCK.finditer(DOC.read_text()):
        spec = tmp_path / f"{match['name']}.toml"
        spec.write_text(match["body"])
        done = subprocess.run([sys.executable, "-m", "agentctl.cli", "spec", "check", str(spec)], cwd=tmp_path,
                              env={**os.environ, "PATH": path, "NO_COLOR": "1"}, capture_output=True, text=True,
                              timeout=60)
        executable = EXPECTED[match["name"]][2]
        if shutil.which(executable, path=path):
            assert done.returncode == 0 and done.stdout.startswith(f"{spec}: ok: "), (match["name"], done.stderr)
        else:  # everything else of the spec was checked before its program was looked up
            assert done.returncode == 2 and done.stderr == (
                f"agentctl: {spec}: agent.command: executable '{executable}' not found on PATH\n"), done.stderr


def test_a_spec_block_that_does_not_load_is_caught() -> None:
    # The extraction is what protects the page: a block with a typo must reach parse_spec and fail there.
    identity = spec_toml(execution_id=None)
    broken = f'```toml agent-spec:broken\n{identity}\n[agent]\ncommand = ["x"]\nprotocl = "acp"\n```\n'
    [match] = SPEC_BLOCK.finditer(broken)
    with pytest.raises(Exception, match="protocl"):
        parse_spec(match["body"].encode())


def test_the_guide_is_linked_from_the_readme_and_the_docs_index() -> None:
    assert "(docs/agents.md)" in (REPO / "README.md").read_text()
    assert "(agents.md)" in (REPO / "docs" / "README.md").read_text()


# --- the real CLIs read what the strategies write ---------------------------------------------------------


def _find(executable: str) -> str | None:
    # AGENTCTL_AGENT_BIN first, then where .ci/run installs the pinned CLIs (AGENTCTL_CLIS_DIR), then PATH.
    clis = os.environ.get("AGENTCTL_CLIS_DIR")
    for bin_dir in (os.environ.get(BIN_DIR_ENV), clis and str(Path(clis) / "node_modules" / ".bin")):
        if bin_dir and os.access(Path(bin_dir) / executable, os.X_OK):
            return str(Path(bin_dir) / executable)
    return shutil.which(executable)


def _materialize(name: str, workdir: Path, tmpdir: Path) -> Materialization:
    """The page's spec plus one stdio server, materialized by its strategy for a dead built-in address."""
    spec = doc_specs()[name]
    spec.mcp.servers.append(
        parse_spec(spec_toml(execution_id=None, servers=[
            {"name": "local", "type": "stdio", "command": sys.executable, "args": [str(STDIO_SERVER)]},
        ]).encode()).mcp.servers[0]
    )
    strategy = get_strategy(spec.agent.strategy)  # type: ignore[union-attr]
    assert strategy is not None
    base = "http://127.0.0.1:1"
    builtin = BuiltinEndpoint("kandev", f"{base}/mcp", f"{base}/sse", "TOKEN-CANARY-agents-doc")
    plan = strategy.materialize(MaterializeRequest(spec, builtin, workdir, tmpdir, environ={}))
    assert [e.name for e in plan.delivered] == ["kandev", "local"] and plan.filtered == []
    return plan


def _run(argv: list[str], cwd: Path, home: Path, env: dict[str, str]) -> str:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "NO_COLOR": "1", **env}
    result = subprocess.run(argv, cwd=cwd, env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=CLI_TIMEOUT)
    return result.stdout + result.stderr


def _claude(binary: str, plan: Materialization, cwd: Path, home: Path) -> None:
    # The stream-json init line lists each configured server with its status, before any model call;
    # the CLI is stopped as soon as it has printed it.
    argv = [binary, "-p", "hi", "--output-format", "stream-json", "--verbose", *plan.argv]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **plan.env}
    with subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as proc:
        timer = threading.Timer(CLI_TIMEOUT, proc.kill)
        timer.start()
        try:
            init = next((json.loads(line) for line in proc.stdout or () if '"subtype":"init"' in line), None)
        finally:
            timer.cancel()
            proc.kill()
    assert init is not None, "no init line"
    status = {s["name"]: s["status"] for s in init["mcp_servers"]}
    # A malformed entry would be silently absent; the stdio entry is read well enough to connect.
    assert set(status) >= {"kandev", "local"} and status["local"] == "connected", status


def _codex(binary: str, plan: Materialization, cwd: Path, home: Path) -> None:
    codex_home = home / "codex"
    codex_home.mkdir()  # Codex refuses a CODEX_HOME that does not exist
    out = _run([binary, "mcp", "list", *plan.argv], cwd, home, {**plan.env, "CODEX_HOME": str(codex_home)})
    assert re.search(r"^kandev\s+http://127\.0\.0\.1:1/mcp\s+AGENTCTL_MCP_BEARER_TOKEN\b", out, re.M), out
    assert re.search(rf"^local\s+{re.escape(sys.executable)}\s", out, re.M), out
    assert "TOKEN-CANARY" not in out


def _gemini(binary: str, plan: Materialization, cwd: Path, home: Path) -> None:
    # Without folder trust (no GEMINI_CLI_TRUST_WORKSPACE here) Gemini lists the servers but disables them:
    # the guide's warning, and no connection attempt, so the check stays fast.
    out = _run([binary, "mcp", "list"], cwd, home, plan.env)
    assert "disabled because this folder is untrusted" in out, out
    assert re.search(r"kandev: http://127\.0\.0\.1:1/mcp \(http\) - Disabled", out), out
    assert re.search(r"local: .*stdio_server\.py +\(stdio\) - Disabled", out), out


def _opencode(binary: str, plan: Materialization, cwd: Path, home: Path) -> None:
    out = _run([binary, "debug", "config"], cwd, home, plan.env)
    config = json.loads(out[out.index("{"):out.rindex("}") + 1])
    assert config["mcp"]["kandev"] == {
        "type": "remote", "url": "http://127.0.0.1:1/mcp", "enabled": True, "oauth": False,
        "headers": {"Authorization": "***"},  # opencode masks header values when it prints its config
    }
    assert config["mcp"]["local"]["command"] == [sys.executable, str(STDIO_SERVER)]


REAL = {
    "claude-cli": ("claude", _claude, "npm install @anthropic-ai/claude-code@2.1.332"),
    "codex-cli": ("codex", _codex, "npm install @openai/codex@0.171.0"),
    "gemini-cli": ("gemini", _gemini, "npm install @google/gemini-cli@0.61.0"),
    "opencode-cli": ("opencode", _opencode, "npm install opencode-ai@1.18.33"),
    "cursor-cli": ("cursor-agent", None, "curl https://cursor.com/install -fsS | bash"),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_real_cli_reads_the_configuration_its_strategy_writes_for_the_documented_spec(name: str) -> None:
    executable, check, install = REAL[name]
    binary = _find(executable)
    if binary is None:
        pytest.skip(f"{executable} is not installed (not in ${BIN_DIR_ENV} nor on PATH; {install})")
    if check is None:
        pytest.skip(f"no read-back check for {executable} yet: it was never available to measure")
    with tempfile.TemporaryDirectory(prefix="agents-doc-") as root:
        workdir, tmpdir, home = (Path(root) / part for part in ("work", "tmp", "home"))
        for d in (workdir, tmpdir, home):
            d.mkdir(mode=0o700)
        plan = _materialize(name, workdir, tmpdir)
        check(binary, plan, workdir, home)
