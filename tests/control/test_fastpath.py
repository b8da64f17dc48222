"""The exec probe's fast path (agentctl.fastpath): `health [--ready] [--json]` and `status --json` print the same
bytes and exit with the same codes as the full CLI, for live, not-ready, degraded, missing, dead and hung
daemons, while importing neither the parser tree nor http.client, email or ssl.

Each command runs twice in a fresh interpreter against the real control app (the `served` fixture, whose
readiness the test sets): once as `agentctl` runs it, once with the fast path switched off.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import typing
from pathlib import Path

import msgspec
import pytest

from agentctl import fastpath
from agentctl.exit_codes import EXIT_USAGE
from agentctl.evidence.contract.control import AgentReadiness, CheckState, HealthResponse
from tests.conftest import REPO
from tests.control.control_support import EXECUTION_ID, Served

# `agentctl.cli.main` in a fresh interpreter; "slow" switches the fast path off. Whether the fast path answered,
# and every module loaded, go to a side file so stdout and stderr stay the command's own.
_HARNESS = """
import json, os, sys
import agentctl.fastpath as fastpath
real, answered = fastpath.run, []
if os.environ.get("FASTPATH_TIMEOUT"):
    fastpath.TIMEOUT = float(os.environ["FASTPATH_TIMEOUT"])
fastpath.run = (lambda argv: None) if sys.argv[1] == "slow" else (lambda argv: answered.append(real(argv)) or answered[-1])
from agentctl.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(os.environ["FASTPATH_REPORT"], "w") as report:
    json.dump({"fast": answered not in ([], [None]), "modules": sorted(sys.modules)}, report)
sys.exit(code)
"""

# Never loaded when the fast path answers: the full client's stack and the parser tree's command modules.
_HEAVY = ("http.client", "email", "ssl", "agentctl.control.client", "agentctl.control.commands",
          "agentctl.diagnostics.commands", "agentctl.probe.commands", "agentctl.hub.commands", "aiohttp")


async def _cli(mode: str, args: list[str], tmp_path: Path, env: dict[str, str] | None = None):
    report = tmp_path / f"report-{mode}.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HARNESS, mode, *args, cwd=REPO, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "FASTPATH_REPORT": str(report), **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return (proc.returncode, out.decode(), err.decode()), json.loads(report.read_text())


async def _both(args: list[str], tmp_path: Path, *, fast: bool, env: dict[str, str] | None = None,
                slow_args: list[str] | None = None) -> tuple[int, str, str]:
    """The command's (exit, stdout, stderr). Where the fast path answers, the full CLI's must be the same;
    where it declines, the full CLI ran in that very call."""
    if not fast:
        result, report = await _cli("fast", args, tmp_path, env)
        assert not report["fast"], args
        return result
    (fast_result, fast_report), (slow_result, _) = await asyncio.gather(
        _cli("fast", args, tmp_path, env), _cli("slow", slow_args or args, tmp_path, env))
    assert fast_result == slow_result, (args, fast_result, slow_result)
    assert fast_report["fast"], args
    loaded = [m for m in fast_report["modules"] if m in _HEAVY or m.split(".")[0] in _HEAVY]
    assert not loaded, f"the fast path loaded {loaded}"
    if "--json" not in args:
        assert "msgspec" not in fast_report["modules"]
    return fast_result


def _ready(served: Served) -> None:
    served.ctx.readiness.set("mcp_listener", True)


async def test_a_live_ready_daemon_is_answered_by_the_fast_path_with_the_full_clis_bytes(served: Served, tmp_path):
    _ready(served)
    sock = str(served.socket_path)
    assert await _both(["health", "--socket", sock], tmp_path, fast=True) == (0, "live\n", "")
    assert await _both(["health", "--ready", f"--socket={sock}"], tmp_path, fast=True) == (0, "ready\n", "")
    code, out, _ = await _both(["health", "--json", "--ready", "--socket", sock], tmp_path, fast=True)
    assert code == 0 and json.loads(out)["ready"] is True
    code, out, _ = await _both(["status", "--json", "--socket", sock], tmp_path, fast=True)
    assert code == 0 and json.loads(out)["identity"]["execution_id"] == EXECUTION_ID
    # The same location rules as the full CLI (agentctl.control.socket.named_socket): --execution under the
    # runtime directory, else $AGENTCTL_SOCKET, and a command-line option wins over the environment.
    env = {"AGENTCTL_RUNTIME_DIR": str(served.socket_path.parent.parent), "AGENTCTL_SOCKET": "/nonexistent/c.sock"}
    assert await _both(["health", "--execution", EXECUTION_ID], tmp_path, fast=True, env=env) == (0, "live\n", "")
    assert await _both(["health"], tmp_path, fast=True, env={"AGENTCTL_SOCKET": sock}) == (0, "live\n", "")


async def test_a_not_ready_or_degraded_daemon_gets_the_full_clis_words_and_exit_code(served: Served, tmp_path):
    sock = str(served.socket_path)
    _ready(served)
    served.ctx.readiness.set("upstream", False, "connecting")
    code, out, _ = await _both(["health", "--ready", "--socket", sock], tmp_path, fast=False)
    assert (code, out) == (4, "not ready (failing: upstream (connecting))\n")
    code, out, _ = await _both(["health", "--ready", "--json", "--socket", sock], tmp_path, fast=True)
    assert code == 4 and json.loads(out)["checks"]["upstream"] == {"ok": False, "detail": "connecting"}
    served.ctx.readiness.set("upstream", True)
    served.ctx.readiness.degraded["persistence"] = "report_write_failed"
    code, out, _ = await _both(["health", "--ready", "--socket", sock], tmp_path, fast=False)
    assert code == 0 and "degraded" in out


async def test_missing_and_dead_daemons_and_unusual_arguments_are_left_to_the_full_cli(served: Served, tmp_path,
                                                                                        short_tmp):
    missing = await _both(["health", "--ready", "--socket", str(short_tmp / "none" / "c.sock")], tmp_path, fast=False)
    assert missing[0] == 2 and "no socket there" in missing[2]
    dead = short_tmp / "dead.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(dead))  # bound, never listening: a daemon killed with SIGKILL leaves such a file
    code, _, err = await _both(["health", "--socket", str(dead)], tmp_path, fast=False)
    assert code == 2 and "nobody is listening" in err
    sock = str(served.socket_path)
    assert await _both(["health", "--timeout", "3", "--socket", sock], tmp_path, fast=False) == (0, "live\n", "")
    code, _, err = await _both(["health", "--socket", "--json"], tmp_path, fast=False)
    assert code == EXIT_USAGE and "expected one argument" in err


class _Hung:
    """A control socket that accepts and reads, and never answers (a wedged daemon)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


async def test_a_daemon_that_never_answers_costs_the_probe_one_timeout_and_the_full_clis_message(tmp_path, short_tmp):
    hung = _Hung(short_tmp / "hung.sock")
    try:
        sock = str(short_tmp / "hung.sock")
        # The fast path's timeout is the full client's --timeout default; both are shortened alike here.
        for command, code in (("health", 4), ("status", 1)):
            result = await _both([command, "--json", "--socket", sock], tmp_path, fast=True,
                                 env={"FASTPATH_TIMEOUT": "0.5"},
                                 slow_args=[command, "--json", "--socket", sock, "--timeout", "0.5"])
            assert result == (code, "", f"agentctl: the agentctl daemon at {sock} did not answer GET "
                              f"/v1/{command} within 0.5 s\n")
    finally:
        hung.close()


@pytest.mark.parametrize("body", [
    {"live": True, "ready": True, "stopping": False, "checks": {}},
    {"live": True, "ready": True, "stopping": False, "checks": {"a": {"ok": True, "detail": None}}, "extra": 1},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "exited", "exit_code": 1}},
    {"live": 1, "ready": True, "stopping": False, "checks": {}},
    {"live": True, "ready": True, "stopping": False},
    {"live": True, "ready": True, "stopping": False, "checks": {"a": {"detail": "x"}}},
    {"live": True, "ready": True, "stopping": False, "checks": {"a": {"ok": True, "detail": 3}}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "degraded": {"a": 1}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "gone"}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "exited", "exit_code": True}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "exited", "exit_code": 1.0}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "exited", "exit_code": 1 << 64}},
    {"live": True, "ready": True, "stopping": False, "checks": {}, "agent": {"state": "exited", "exit_code": -1 << 63}},
    [], "live",
])
def test_the_fast_paths_health_check_accepts_exactly_what_the_full_clients_decoder_accepts(body):
    try:
        msgspec.json.decode(json.dumps(body), type=HealthResponse)
        accepted = True
    except msgspec.ValidationError:
        accepted = False
    assert fastpath.valid_health(body) is accepted


def test_a_health_body_with_a_required_server_gate_is_left_to_the_full_cli():
    gate = {"state": "waiting", "timeout": 30.0, "servers": []}
    body = {"live": True, "ready": True, "stopping": False, "checks": {}, "required": gate}
    msgspec.json.decode(json.dumps(body), type=HealthResponse)  # the full client reads it
    assert fastpath.valid_health(body) is False
    assert fastpath.valid_health({**body, "required": None}) is True


def test_a_health_body_msgspec_would_not_read_as_utf8_is_left_to_the_full_cli():
    body = json.dumps({"live": True, "ready": True, "stopping": False, "checks": {}}).encode("utf-16")
    assert fastpath._health_line(body, ready_mode=False) is None


def test_the_fast_paths_health_tables_name_every_field_of_the_contract():
    fields = {f.name: f for f in msgspec.structs.fields(HealthResponse)}
    assert set(fastpath._HEALTH_REQUIRED) == {name for name, f in fields.items() if f.required}
    # The optional ones it reads; `required` (the required-server gate) only to leave such a body to the full CLI.
    assert set(fields) - set(fastpath._HEALTH_REQUIRED) == {"degraded", "agent", "required"}
    assert set(fastpath._CHECK_FIELDS) == {f.name for f in msgspec.structs.fields(CheckState)}
    assert set(fastpath._AGENT_FIELDS) == {f.name for f in msgspec.structs.fields(AgentReadiness)}
    state = next(f for f in msgspec.structs.fields(AgentReadiness) if f.name == "state")
    assert set(typing.get_args(state.type)) == set(fastpath._AGENT_STATES)
