"""SIGKILL of a real `agentctl serve`: nothing of its agent's tree survives it, whatever the tree did to escape
(setsid, a double fork, SIGTERM ignored), for an ACP agent and for a passthrough CLI, without systemd."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil

from tests.agent.serve_support import agent_pid, agent_spec, gone, serving
from tests.conftest import poll, write_spec

FIXTURES = Path(__file__).parent / "fixtures"
TREE = ("agent", "plain", "ignores_term", "escaped", "double_forked")
# Zero survivors within a few seconds: the shim gives the tree 1 s of SIGTERM, then SIGKILLs it.
DEADLINE = 8.0


def shim_of(daemon_pid: int, agent: int) -> int:
    shim = psutil.Process(agent).ppid()
    assert psutil.Process(shim).ppid() == daemon_pid, "the agent's parent is the daemon's shim"
    return shim


def survivors(pids: list[int]) -> list[int]:
    return [p for p in pids if not gone(p)]


def test_sigkill_of_the_daemon_leaves_no_process_of_an_acp_agents_escaped_tree(tmp_path, short_tmp):
    pidfile = tmp_path / "grandchildren.pids"
    spec = agent_spec(
        tmp_path, "--hang-on-shutdown", "--stubborn-grandchildren",
        agent_extra=f'env = {{ AGENTCTL_REF_PIDFILE = "{pidfile}" }}',
    )
    with serving(spec, short_tmp / "c.sock") as daemon:
        agent = agent_pid(daemon)
        poll(pidfile.exists, timeout=15, what="the grandchildren's pidfile")
        grandchildren = [int(p) for p in pidfile.read_text().split()]
        assert len(grandchildren) == 3 and survivors([agent, *grandchildren]) == [agent, *grandchildren]
        shim = shim_of(daemon.proc.pid, agent)
        # The awkward cases are real: one left the session, one was re-parented (to the shim, a subreaper).
        escaped, orphan = grandchildren[1], grandchildren[2]
        assert os.getsid(escaped) == escaped and psutil.Process(orphan).ppid() == shim
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
        tree = [shim, agent, *grandchildren]
        poll(lambda: not survivors(tree), timeout=DEADLINE, what=f"the agent tree to die with its daemon: {survivors(tree)}")


def test_sigkill_of_the_daemon_leaves_no_process_of_a_passthrough_clis_escaped_tree(tmp_path, short_tmp):
    outdir = tmp_path / "pids"
    outdir.mkdir()
    command = [sys.executable, str(FIXTURES / "tree_agent.py"), str(outdir), "--stubborn"]
    spec = write_spec(tmp_path, f'[agent]\ncommand = {json.dumps(command)}\nprotocol = "passthrough"\nstrategy = "none"\n')
    with serving(spec, short_tmp / "c.sock") as daemon:
        poll(lambda: all((outdir / f"{n}.pid").exists() for n in TREE), timeout=15, what="the CLI's tree")
        pids = {n: int((outdir / f"{n}.pid").read_text()) for n in TREE}
        shim = shim_of(daemon.proc.pid, pids["agent"])
        assert psutil.Process(pids["double_forked"]).ppid() == shim
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
        tree = [shim, *pids.values()]
        poll(lambda: not survivors(tree), timeout=DEADLINE, what=f"the CLI's tree to die with its daemon: {survivors(tree)}")
