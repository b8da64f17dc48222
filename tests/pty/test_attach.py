"""`agentctl attach` against `agentctl serve`: real CLIs on real PTYs, one writer and many readers, detach and
re-attach with the screen replayed, `--take`, refusals; each viewer's terminal restored when it leaves."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import aiohttp
import pytest

from agentctl.attach_command import detach_byte
from agentctl.cli_support import UsageError
from tests.conftest import agentctl_cmd, eventually, start_serve, write_spec
from tests.pty.conftest import TUI_CMD


def _serve(tmp: Path):
    argv = ", ".join(json.dumps(a) for a in TUI_CMD)
    spec = write_spec(tmp, f'[agent]\ncommand = [{argv}]\nprotocol = "passthrough"\nstrategy = "none"\n'
                                f'terminal = true\nstop_grace = 0.5\n')
    sock = Path(tempfile.mkdtemp(prefix="actl-", dir="/tmp")) / "c.sock"
    daemon = start_serve(spec, sock)
    try:
        yield daemon, sock
    finally:
        daemon.stop()
        shutil.rmtree(sock.parent, ignore_errors=True)


@pytest.fixture
def served(tmp_path: Path):
    """A daemon of its own: the test ends its agent."""
    yield from _serve(tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One daemon for the tests that leave its agent running."""
    yield from _serve(tmp_path_factory.mktemp("attach"))


def test_two_viewers_one_writer_detach_reattach_take_and_the_agents_exit(served, on_pty):
    daemon, sock = served
    attach = agentctl_cmd("attach", "--socket", str(sock))
    a = on_pty(attach)
    a_before = a.stty()
    a.wait_for("you hold the keyboard")
    a.wait_for("tty=True ctty=True fg=True")  # the start line, replayed
    a.send(b"hello\r")
    a.wait_for("echo hello")

    b = on_pty(attach)
    b_before = b.stty()
    b.wait_for("read-only (another viewer holds the keyboard")
    b.wait_for("echo hello")  # the screen so far, replayed on attach
    b.send(b"nope\r")
    b.wait_for("read-only: another viewer holds the keyboard")
    a.send(b"again\r")
    b.wait_for("echo again")
    assert "echo nope" not in a.output().decode() and "echo nope" not in b.output().decode()

    b.send(b"\x1d")  # Ctrl-]: detach
    assert b.wait() == 1, "keys it typed were refused: never exit 0 with input lost"
    assert "detached; the agent keeps running" in b.output().decode()
    assert ("5 of the 5 bytes of your input did not reach the agent: another viewer held the keyboard"
            in b.output().decode())
    assert b.stty() == b_before, "the reader's terminal is restored when it detaches"

    c = on_pty([*attach, "--take"])
    c.wait_for("you hold the keyboard")
    c.wait_for("echo again")
    a.wait_for("read-only now: another viewer holds the keyboard")
    a.send(b"ignored\r")
    c.send(b"mine\r")
    a.wait_for("echo mine")
    assert "echo ignored" not in c.output().decode()
    c.send(b"quit\r")  # the agent exits 7: every viewer is told, and leaves
    assert c.wait() == 0, "all its keys reached the agent"
    assert a.wait() == 1 and "8 of the 20 bytes of your input did not reach the agent" in a.output().decode()
    assert "the agent's terminal closed (the agent exited)" in a.output().decode()
    assert a.stty() == a_before

    # Once the agent is gone, an attach is refused in one line.
    late = subprocess.run(attach, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert late.returncode == 1 and "terminal is closed" in late.stderr
    status = json.loads(subprocess.run(agentctl_cmd("status", "--socket", str(sock), "--json"), capture_output=True,
                                       text=True, timeout=60).stdout)
    assert status["agent"]["exit_code"] == 7
    assert daemon.proc.poll() is None, "the daemon keeps running after its agent's exit"


async def test_the_terminal_route_is_not_on_tcp_and_refuses_a_plain_request(shared):
    daemon, sock = shared
    mcp = daemon.ready["mcp_url"].rsplit("/mcp", 1)[0]
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as over_tcp:
            await session.ws_connect(f"{mcp}/v1/agent/terminal")
        assert over_tcp.value.status == 404
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as session:
        async with session.get("http://localhost/v1/agent/terminal") as plain:
            assert plain.status == 400 and (await plain.json())["reason_code"] == "websocket_required"
        ws = await session.ws_connect("http://localhost/v1/agent/terminal")
        hello = json.loads((await ws.receive()).data)
        assert hello["type"] == "hello" and "never persisted" in hello["warning"]
        await ws.send_str('{"type": "resize", "rows": 0, "cols": 80}')
        await ws.send_str("not json")
        notices = []
        while len(notices) < 2:
            msg = await ws.receive(timeout=30)
            if msg.type == aiohttp.WSMsgType.TEXT:
                notices.append(json.loads(msg.data))
        assert [n["reason_code"] for n in notices] == ["bad_message", "bad_message"]
        await ws.send_bytes(b"still here\r")  # after bad messages the viewer still types
        seen = b""
        while b"echo still here" not in seen:
            msg = await ws.receive(timeout=30)
            assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT)
            seen += msg.data if msg.type == aiohttp.WSMsgType.BINARY else b""
        await ws.close()


def test_the_detach_key_is_parsed_or_refused_in_one_line():
    assert detach_byte("ctrl-]") == b"\x1d"
    assert detach_byte("Ctrl-A") == b"\x01"
    assert detach_byte("ctrl-@") == b"\x00"
    for bad in ("a", "ctrl-", "ctrl-ab", "ctrl-1", "alt-x"):
        with pytest.raises(UsageError, match="--detach-keys"):
            detach_byte(bad)


async def test_a_viewer_that_stops_reading_is_cut_off_and_neither_the_agent_nor_the_others_wait_for_it(shared):
    daemon, sock = shared
    url = "http://localhost/v1/agent/terminal"
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as stalled_session, \
            aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as session:
        stalled = await stalled_session.ws_connect(url, max_msg_size=0)  # reads its hello, then nothing more
        assert json.loads((await stalled.receive(timeout=30)).data)["role"] == "writer"
        ws = await session.ws_connect(url, params={"take": "1"}, max_msg_size=0)
        assert json.loads((await ws.receive(timeout=30)).data)["role"] == "writer"
        seen = bytearray()
        floods = 0

        async def flood() -> None:  # 4 MiB through the terminal, all of it read by ws
            nonlocal floods
            floods += 1
            await ws.send_bytes(b"flood\r")
            while seen.count(b"flood done") < floods:
                msg = await ws.receive(timeout=60)
                assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
                if msg.type == aiohttp.WSMsgType.BINARY:
                    seen.extend(msg.data)

        async def cut_off() -> bool:
            probe = await session.ws_connect(url)
            try:
                viewers = json.loads((await probe.receive(timeout=30)).data)["viewers"]
            finally:
                await probe.close()
            if viewers == 2:  # ws, and this probe
                return True
            # The socket buffers between the daemon and the stalled viewer may have taken all it was sent so far,
            # so nothing is blocked yet: more output fills them, and the viewer is cut when a send blocks.
            await flood()
            return False

        await flood()
        # It took nothing for its send timeout: cut off.
        await eventually(cut_off, timeout=60, what="the stalled viewer cut off", interval=0.2)
        got = 0
        while True:  # what the stalled viewer's socket held, then the end
            msg = await stalled.receive(timeout=30)
            if msg.type == aiohttp.WSMsgType.TEXT:
                continue  # who holds the keyboard now, that output was skipped
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            got += len(msg.data)
        assert msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.ERROR), msg
        assert got < 4 * 1024 * 1024, "the stalled viewer was cut off, not buffered for"
        await ws.send_bytes(b"after\r")  # the agent and the reading viewer carry on
        while b"echo after" not in seen:
            msg = await ws.receive(timeout=30)
            seen += msg.data if msg.type == aiohttp.WSMsgType.BINARY else b""
        await ws.close()


async def test_attach_to_a_daemon_whose_agent_has_no_terminal_is_refused_in_one_line(tmp_path, short_tmp):
    import asyncio

    from agentctl.daemon.app import Daemon
    from agentctl.spec_loader import load_spec

    daemon = Daemon(load_spec(write_spec(tmp_path)), socket_path=short_tmp / "c.sock")  # MCP only: no agent
    await daemon.start()
    try:
        proc = await asyncio.create_subprocess_exec(*agentctl_cmd("attach", "--socket", str(short_tmp / "c.sock")),
                                                    stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await daemon.stop()
    assert proc.returncode == 1
    assert err.decode().strip() == ("agentctl: the daemon refused to attach: the agent does not run on a terminal "
                                    "(a passthrough agent with [agent] terminal = true does)")
