"""SIGKILL of a real `agentctl serve`, or of its agent's shim alone: nothing of the agent's tree survives it,
whatever the tree did to escape (setsid, a double fork, SIGTERM ignored), for an ACP agent and for a
passthrough CLI, without systemd."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.agent.serve_support import agent_pid, agent_spec, cli, gone, serving, status
from tests.conftest import ServeProcess, poll, write_spec

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


@contextlib.contextmanager
def acp_tree(tmp_path: Path, sock: Path, *flags: str) -> Iterator[tuple[ServeProcess, int, int, list[int]]]:
    """A real daemon whose reference agent forked stubborn grandchildren: (daemon, shim, agent, grandchildren)."""
    pidfile = tmp_path / "grandchildren.pids"
    spec = agent_spec(
        tmp_path, *flags, "--stubborn-grandchildren",
        agent_extra=f'env = {{ AGENTCTL_REF_PIDFILE = "{pidfile}" }}',
    )
    with serving(spec, sock) as daemon:
        agent = agent_pid(daemon)
        poll(pidfile.exists, timeout=15, what="the grandchildren's pidfile")
        grandchildren = [int(p) for p in pidfile.read_text().split()]
        assert len(grandchildren) == 3 and survivors([agent, *grandchildren]) == [agent, *grandchildren]
        shim = shim_of(daemon.proc.pid, agent)
        # The awkward cases are real: one left the session, one was re-parented (to the shim, a subreaper).
        escaped, orphan = grandchildren[1], grandchildren[2]
        assert os.getsid(escaped) == escaped and psutil.Process(orphan).ppid() == shim
        yield daemon, shim, agent, grandchildren


def test_sigkill_of_the_daemon_leaves_no_process_of_an_acp_agents_escaped_tree(tmp_path, short_tmp):
    with acp_tree(tmp_path, short_tmp / "c.sock", "--hang-on-shutdown") as (daemon, shim, agent, grandchildren):
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


def test_sigkill_of_the_shim_alone_ends_the_agents_escaped_tree_while_the_daemon_says_the_agent_exited(
    tmp_path, short_tmp
):
    sock = short_tmp / "c.sock"
    with acp_tree(tmp_path, sock) as (daemon, shim, agent, grandchildren):
        os.kill(shim, signal.SIGKILL)  # someone else's real SIGKILL, of the shim only: the daemon lives on
        tree = [shim, agent, *grandchildren]
        poll(lambda: not survivors(tree), timeout=DEADLINE, what=f"the agent tree to die with its shim: {survivors(tree)}")
        assert daemon.proc.poll() is None
        state = poll(lambda: (s := status(sock)["agent"]) and s["state"] == "exited" and s, timeout=10,
                     what="the agent shown exited")
        assert state["exit_reason"] == "exit status unknown: the agent's shim was killed by SIGKILL"
        # What status says ("the agent has exited") is now the whole truth: none of its tree still runs.
        done = cli(sock, "status")
        assert "the agent has exited" in done.stdout, done.stdout
        assert not survivors(tree)
