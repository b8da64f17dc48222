"""Shared parts of the stdio witness's tests: the servers behind it (a Python one on the MCP SDK, the npm
filesystem server, hostile ones) as [[mcp.servers]] tables, and the run that reads what came of them."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

from agentctl.daemon.app import Daemon
from agentctl.daemon.run import run_main_job
from agentctl.evidence.contract.report import AttachmentHistory, ServerRow, decode_history
from agentctl.spec_loader import load_spec
from tests.agent.serve_support import REFERENCE_AGENT
from tests.conftest import write_spec

FIXTURES = Path(__file__).parent / "fixtures"
PY_SERVER = Path(__file__).resolve().parents[1] / "diagnostics" / "fixtures" / "stdio_server.py"
HOSTILE = FIXTURES / "hostile_stdio_server.py"
CANARY = "envCANARYw1"


def filesystem_server() -> Path:
    """The npm filesystem server from tests/clis (installed by .ci/run): skips or fails as the real CLIs do."""
    from tests.clis.conftest import find_cli

    return find_cli("mcp-server-filesystem")


def stdio_server(name: str, command: list[str], *, observe: str | None = "witness", required: bool = False,
                 env: dict[str, str] | None = None) -> str:
    """A [[mcp.servers]] table for a stdio server, its env carrying the canary unless told otherwise."""
    env = {"SERVER_SECRET": CANARY} if env is None else env
    lines = [f'\n[[mcp.servers]]\nname = "{name}"\ntype = "stdio"\ncommand = {json.dumps(command)}']
    lines.append("env = {" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + "}")
    if observe:
        lines.append(f'observe = "{observe}"')
    if required:
        lines.append("required = true")
    return "\n".join(lines) + "\n"


async def run_prompt(spec: Path, sock: Path, prompt: str = "hello") -> tuple[Daemon, int, str, float]:
    daemon = Daemon(load_spec(spec), socket_path=sock)
    out = io.StringIO()
    began = time.monotonic()
    code = await run_main_job(daemon, prompt=prompt, out=out)
    return daemon, code, out.getvalue(), time.monotonic() - began


def persisted(text: str) -> AttachmentHistory:
    path = Path(text.rsplit("report persisted to ", 1)[1].strip())
    return decode_history(path.read_bytes())


def row(history: AttachmentHistory, name: str) -> ServerRow:
    assert history.current is not None
    return next(r for r in history.current.servers if r.name == name)


def python() -> str:
    return sys.executable


def witness_agent_spec(directory: Path, servers: str, *flags: str) -> Path:
    """The reference agent over ACP with `servers`; a connect timeout that fits two Python starts (witness and
    server) on a loaded machine: the witness is measured in bench/, not here."""
    command = json.dumps([*REFERENCE_AGENT, *flags, "--connect-timeout", "60", "--call-timeout", "60"])
    return write_spec(directory, f"[agent]\ncommand = {command}\nstop_grace = 0.3\n{servers}",
                      execution_id="exec-test", identity={"task_id": "task-1"})
