"""Shared pieces of the passthrough tests: a spec with canary secrets, requests, and real agent commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentctl.agent.passthrough.base import BuiltinEndpoint, MaterializeRequest
from agentctl.spec import Spec, parse_spec
from tests.conftest import REPO, agentctl_cmd, spec_toml, write_spec

TOKEN = "TOKEN-CANARY-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
HEADER_CANARY = "HDR-CANARY-61a7e0c2"
SSE_CANARY = "SSE-CANARY-5d0b9f31"
ARG_CANARY = "ARG-CANARY-c4e8a211"
ENV_CANARY = "ENV-CANARY-9b3f7d55"
CANARIES = (HEADER_CANARY, SSE_CANARY, ARG_CANARY, ENV_CANARY)
BASE = "http://127.0.0.1:4321"

IDENTITY = spec_toml(execution_id="exec-pt")  # the [identity] table alone, for specs written as text

def servers_toml(http_base: str = "https://docs.example.com", sse_base: str = "https://events.example.com",
                 stdio_command: str = "/usr/bin/fs-server") -> str:
    """One server of each transport, a canary in each secret-bearing place (header, argument, env value)."""
    return f"""
[[mcp.servers]]
name = "docs"
type = "http"
url = "{http_base}/mcp"
headers = {{ "X-Api-Key" = "{HEADER_CANARY}" }}

[[mcp.servers]]
name = "events"
type = "sse"
url = "{sse_base}/sse"
headers = {{ Authorization = "Bearer {SSE_CANARY}" }}

[[mcp.servers]]
name = "fs"
type = "stdio"
command = "{stdio_command}"
args = ["--root", "{ARG_CANARY}"]
env = {{ FS_TOKEN = "{ENV_CANARY}" }}
"""


SERVERS = servers_toml()
STDIO_SERVER = Path(__file__).resolve().parents[1] / "diagnostics" / "fixtures" / "stdio_server.py"


def reachable_and_closed_toml() -> str:
    """A reachable third-party server (a real stdio MCP server with tools ping and add) and a refused one."""
    return f"""
[[mcp.servers]]
name = "research"
type = "stdio"
command = "{sys.executable}"
args = ["{STDIO_SERVER}"]

[[mcp.servers]]
name = "closed"
type = "http"
url = "http://127.0.0.1:1/mcp"
"""

# Stays alive until SIGTERM; stands in for a CLI whose own format the reference agent cannot read.
SLEEPER = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); signal.pause()"]


DEAD = "http://127.0.0.1:1"  # refused at once: profile servers the agent cannot reach


def agent_section(strategy: str | None, command: list[str], workdir: Path, *, servers: bool = True) -> str:
    """The [agent] section (and canary-bearing servers) of a spec for a real daemon's passthrough CLI."""
    argv = ", ".join(json.dumps(a) for a in command)
    text = f'[agent]\ncommand = [{argv}]\nprotocol = "passthrough"\nworkdir = "{workdir}"\nstop_grace = 0.2\n'
    text += f'strategy = "{strategy or "none"}"\n'
    if servers:
        text += servers_toml(DEAD, DEAD, "/nonexistent/fs-server")
    return text


def spec_for(strategy: str | None, *, servers: str = SERVERS, extra: str = "", command: list[str] | None = None) -> Spec:
    argv = ", ".join(f'"{a}"' for a in (command or ["cli"]))
    strat = f'strategy = "{strategy or "none"}"'
    text = f'{IDENTITY}\n[agent]\ncommand = [{argv}]\nprotocol = "passthrough"\n{strat}\n{extra}\n{servers}'
    return parse_spec(text.encode())


def request(spec: Spec, workdir: Path) -> MaterializeRequest:
    tmpdir = Path(tempfile.mkdtemp(prefix="pt-", dir=workdir.parent))
    builtin = BuiltinEndpoint("kandev", f"{BASE}/mcp", f"{BASE}/sse", TOKEN)
    return MaterializeRequest(spec, builtin, workdir, tmpdir)


def mode(path: Path) -> int:
    return os.stat(path, follow_symlinks=False).st_mode & 0o777


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@dataclass
class World:
    """A real daemon's surroundings for the journal tests: a workdir, a state dir, a private TMPDIR."""

    root: Path
    workdir: Path
    state: Path
    private: Path  # TMPDIR of every daemon here: where their private config directories go
    short: Path

    @property
    def target(self) -> Path:
        return self.workdir / ".cursor" / "mcp.json"

    def spec(self, execution_id: str = "exec-test", strategy: str = "cursor", workdir: Path | None = None) -> Path:
        directory = self.root / execution_id
        directory.mkdir(exist_ok=True)
        return write_spec(directory, agent_section(strategy, SLEEPER, workdir or self.workdir), state_dir=self.state,
                          execution_id=execution_id)

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "TMPDIR": str(self.private), **extra}

    def serve(self, spec: Path, sock: str = "c.sock", **env: str) -> subprocess.Popen:
        log = open(self.root / f"{spec.parent.name}.log", "ab")  # noqa: SIM115 - closed with the process
        try:
            return subprocess.Popen(agentctl_cmd("serve", str(spec), "--socket", str(self.short / sock)), cwd=REPO,
                                    env=self.env(**env), stdout=subprocess.PIPE, stderr=log)
        finally:
            log.close()

    def recover(self, *, json_output: bool = True) -> subprocess.CompletedProcess[str]:
        args = ("recover", "--state-dir", str(self.state), *(("--json",) if json_output else ()))
        return subprocess.run(agentctl_cmd(*args), cwd=REPO, env=self.env(), capture_output=True, text=True,
                              timeout=60)

    def leftovers(self) -> list[str]:
        """Every file below the workdir, the state dir and the private temp dir that may hold a secret."""
        return [str(p) for base in (self.workdir, self.state, self.private) for p in base.rglob("*") if p.is_file()]


def ready(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, "agentctl serve exited before ready"
    return json.loads(line)


def kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=10)


def journal(world: World) -> list[Path]:
    directory = world.state / "journal"
    return sorted(directory.iterdir()) if directory.exists() else []
