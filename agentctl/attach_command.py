"""`agentctl attach`: this terminal connected to a running daemon's agent terminal, over the control socket.

A WebSocket on the daemon's control server (`GET /v1/agent/terminal`, the same uid checks as every route). The
first viewer to come holds the keyboard, `--take` takes it from whoever does; the others watch read-only and are
told so, on connect and whenever the keyboard changes hands. The detach key (Ctrl-] unless `--detach-keys` says
otherwise) leaves the agent running. This terminal's settings are restored however the attachment ends.

Keys are sent whole and in order: a chunk of stdin is sent before the next is read, and the daemon reads no more
from this viewer while the agent has not read what came before (back-pressure to this terminal, or to the pipe).
Piped or redirected stdin is typed the same way, then the attachment detaches once it reached the agent. The daemon
says how many bytes of this viewer's keys reached the agent; when that is fewer than were read, one line says how
many did not and why, and the exit code is 1 (never 0 with input lost).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from agentctl.cli_support import EXIT_FAILED, EXIT_NO_DAEMON, EXIT_OK, UsageError, command, fail, locate_socket

DEFAULT_DETACH = "ctrl-]"
KEY_CHUNK = 16 * 1024  # stdin read (and sent as one frame) at a time: within the daemon's frame bound
READ_AHEAD = 1024 * 1024  # keys read from stdin before the daemon takes them (a paste, the detach key behind it)
# After the detach key, how long the keys before it may take to be sent and confirmed (the daemon refuses keys
# to an agent stalled for 15 s and waits at most 10 s for the rest at a detach: this is its safety net).
DETACH_WAIT = 40.0


def detach_byte(spec: str) -> bytes:
    """`ctrl-X` (X a letter or one of @[\\]^_) as the byte that key sends; UsageError otherwise."""
    text = spec.strip().lower()
    if text.startswith("ctrl-") and len(text) == 6:
        key = text[5].upper()
        if "@" <= key <= "_":
            return bytes([ord(key) - 0x40])
    raise UsageError(f"--detach-keys: expected ctrl-<letter> or ctrl-] (one of ctrl-@ .. ctrl-_), not {spec!r}")


def add_attach_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "attach",
        help="attach this terminal to the running agent's terminal (passthrough, [agent] terminal = true)",
        description="Connect this terminal to the running daemon's passthrough agent terminal. The first viewer "
        "holds the keyboard; others watch read-only until it leaves or they take it with --take. The detach key "
        f"({DEFAULT_DETACH}) leaves the agent running. What the terminal shows may be sensitive; it is never "
        f"persisted. Piped or redirected input is typed whole, then it detaches. Exit codes: {EXIT_OK} detached or "
        f"the agent exited with all the input delivered, {EXIT_FAILED} the daemon refused (no terminal, closed) or "
        f"some input did not reach the agent (one line says how much), {EXIT_NO_DAEMON} cannot connect.",
    )
    p.add_argument("--socket", metavar="PATH", help="control socket path")
    p.add_argument("--execution", metavar="ID", help="execution id: finds <runtime dir>/<ID>/control.sock")
    p.add_argument("--take", action="store_true", help="take the keyboard from whoever holds it")
    p.add_argument("--detach-keys", metavar="KEY", default=DEFAULT_DETACH, help=f"the detach key ({DEFAULT_DETACH})")
    p.set_defaults(func=cmd_attach)


@command
def cmd_attach(args: argparse.Namespace) -> int:
    key = detach_byte(args.detach_keys)
    path = locate_socket(args)
    # A signal to agentctl (SIGINT from outside: in raw mode Ctrl-C is a key for the agent) is 128+N, never 0:
    # keys read and not yet confirmed may be lost.
    return asyncio.run(_attach(path, key, args.take, args.detach_keys))


def _note(text: str) -> None:
    """A line of ours between the agent's output: from column 0, on its own line, in raw mode too."""
    os.write(2, f"\r\n[agentctl: {text}]\r\n".encode())


_REFUSED = {"read_only": "another viewer held the keyboard (--take takes it)",
            "input_stalled": "the agent read none of its input for a while, and the daemon refused more (is it hung?)"}


class _Input:
    """What this viewer typed and what became of it: `read` bytes taken from stdin to send (the detach key and
    what follows it excluded), `delivered` as the daemon last said (`detached` / `closed`: final), `refused`
    bytes it refused at once, by reason (read-only, a stalled agent)."""

    def __init__(self) -> None:
        self.read = 0
        self.delivered = 0
        self.refused: dict[str, int] = {}  # bytes refused at once, by reason code
        self.final = False
        self.abandoned = False  # detached without the keys before the detach key (the agent read nothing)

    def lost_line(self, ending: str) -> str | None:
        """One line when some of the input did not reach the agent, else None."""
        lost = self.read - self.delivered
        if lost <= 0:
            return None
        if self.abandoned or not self.final:
            return (f"up to {lost} of the {self.read} bytes of your input may not have reached the agent: the "
                    "daemon did not say what it delivered before the connection ended")
        whys = [_REFUSED[code] for code in sorted(self.refused, key=self.refused.__getitem__, reverse=True)
                if code in _REFUSED]
        if lost > sum(self.refused.values()):
            whys.append("the agent exited before reading them" if ending == "closed" else
                        "the agent had not read them when you detached")
        return f"{lost} of the {self.read} bytes of your input did not reach the agent: {'; '.join(whys)}"


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _read_stdin(loop: asyncio.AbstractEventLoop) -> bytes:
    """The next chunk of stdin (b"" at its end): a terminal, a pipe or a socket waited on, a regular file or
    /dev/null (which cannot be polled, and never block) read at once."""
    while True:
        ready: asyncio.Future[None] = loop.create_future()
        try:
            loop.add_reader(0, _wake, ready)
        except PermissionError:
            pass  # not pollable: a file, read at once
        except (OSError, ValueError):
            return b""  # stdin closed
        else:
            try:
                await ready
            finally:
                loop.remove_reader(0)
        try:
            return os.read(0, KEY_CHUNK)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            return b""


async def _send_input(ws: Any, loop: asyncio.AbstractEventLoop, key: bytes | None, typed: _Input) -> None:
    """stdin to the agent, in order. At most READ_AHEAD bytes are read ahead of what the daemon took (it takes no
    more while the agent has not read what came before: back-pressure to this terminal or the pipe), so a
    detach key typed behind a paste is still seen. At the detach key (a terminal only), or at the end of piped
    or redirected input, asks to detach once the keys reached the agent; on a terminal, when the daemon has not
    answered that within DETACH_WAIT, ends the connection and says the input may not have arrived."""
    import msgspec

    from agentctl.control.attach_protocol import Detach

    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    held = 0
    room = asyncio.Event()
    room.set()

    async def send() -> None:
        nonlocal held
        while (data := await queue.get()) is not None:
            await ws.send_bytes(data)
            held -= len(data)
            if held < READ_AHEAD:
                room.set()

    sender = loop.create_task(send(), name="attach-keys")
    try:
        while True:
            await room.wait()
            data = await _read_stdin(loop)
            if not data and key is not None:
                queue.put_nowait(None)  # the terminal hung up: what it typed is sent, and the screen watched on
                await sender
                return
            cut = data.find(key) if key is not None else -1
            if cut >= 0:
                data = data[:cut]
            if data:
                typed.read += len(data)
                held += len(data)
                queue.put_nowait(data)
                if held >= READ_AHEAD:
                    room.clear()
            if cut >= 0 or not data:
                break
        queue.put_nowait(None)
        if key is None:
            await sender  # piped input: as long as the agent takes to read it (the daemon bounds a stall)
            await ws.send_str(msgspec.json.encode(Detach()).decode())
            return
        deadline = loop.time() + DETACH_WAIT
        try:
            await asyncio.wait_for(asyncio.shield(sender), DETACH_WAIT)
            await ws.send_str(msgspec.json.encode(Detach()).decode())
            await asyncio.sleep(max(0.0, deadline - loop.time()))  # `detached` ends this task before
        except TimeoutError:
            pass
        typed.abandoned = True
        # Not a WebSocket close: that would queue behind what is unsent. The connection ends now.
        sock = ws.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
    finally:
        sender.cancel()


async def _attach(path: Path, key: bytes, take: bool, key_name: str) -> int:
    import aiohttp

    from agentctl.agent.pty_host import get_window_size
    from agentctl.agent.pty_local import ScreenModes, raw_mode, write_all
    from agentctl.control.attach_protocol import (
        TERMINAL_ROUTE,
        Closed,
        Detached,
        Hello,
        Notice,
        Resize,
        RoleChanged,
        ServerMessage,
    )
    from agentctl.control.client import ControlClient, ControlClientError
    import msgspec

    size = get_window_size(1) or get_window_size(0)
    query = {"take": "1" if take else "0"}
    if size is not None:
        query.update(rows=str(size.rows), cols=str(size.cols))
    decoder = msgspec.json.Decoder(ServerMessage)
    loop = asyncio.get_running_loop()
    modes = ScreenModes()
    interactive = os.isatty(0)
    typed = _Input()
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(path))) as session:
        try:
            ws = await session.ws_connect(f"http://localhost{TERMINAL_ROUTE}", params=query, max_msg_size=0,
                                          autoping=True)
        except aiohttp.WSServerHandshakeError:
            # The refusal is JSON on the plain route; ask it again without the upgrade to say why.
            try:
                status, body = ControlClient(path).get(TERMINAL_ROUTE)
            except ControlClientError as exc:
                return fail(str(exc), EXIT_NO_DAEMON)
            return fail(f"the daemon refused to attach: {body.get('error', f'HTTP {status}')}", EXIT_FAILED)
        except (aiohttp.ClientConnectionError, OSError) as exc:
            return fail(f"cannot connect to the agentctl daemon at {path}: {exc}", EXIT_NO_DAEMON)
        outcome = "the daemon closed the connection"
        ending = "dropped"
        sender: asyncio.Task[None] | None = None
        with contextlib.ExitStack() as stack:

            def on_winch() -> None:
                now = get_window_size(1) or get_window_size(0)
                if now is not None:
                    asyncio.ensure_future(ws.send_str(msgspec.json.encode(Resize(rows=now.rows, cols=now.cols)).decode()))

            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    modes.see(msg.data)
                    await asyncio.to_thread(write_all, 1, msg.data)
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                try:
                    event = decoder.decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # a newer daemon's message this agentctl does not know
                if isinstance(event, Hello):
                    role = "you hold the keyboard" if event.role == "writer" else "read-only (another viewer holds the keyboard; --take takes it)"
                    how = f"detach with {key_name}" if interactive else "detaching at the end of the input"
                    os.write(2, f"agentctl: attached to the agent's terminal ({event.viewers} viewer(s)): {role}; "
                                f"{how}\r\nagentctl: {event.warning}\r\n".encode())
                    if interactive:
                        stack.enter_context(raw_mode(0))
                        loop.add_signal_handler(signal.SIGWINCH, on_winch)
                        stack.callback(loop.remove_signal_handler, signal.SIGWINCH)
                    if sender is None:
                        sender = loop.create_task(_send_input(ws, loop, key if interactive else None, typed))
                elif isinstance(event, RoleChanged):
                    _note("you hold the keyboard now" if event.role == "writer" else
                          "read-only now: another viewer holds the keyboard" if event.held else
                          "nobody holds the keyboard")
                elif isinstance(event, Notice):
                    if event.undelivered:
                        typed.refused[event.reason_code] = typed.refused.get(event.reason_code, 0) + event.undelivered
                    if event.message:
                        _note(event.message)
                elif isinstance(event, Closed):
                    outcome, ending = event.reason, "closed"
                    typed.delivered, typed.final = event.delivered, True
                elif isinstance(event, Detached):
                    outcome, ending = "detached; the agent keeps running", "detached"
                    typed.delivered, typed.final = event.delivered, True
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):  # the connection went: said below
                    await sender
            if interactive:
                # The agent's screen stays as it is (it still runs): our line goes below it, not into it.
                with contextlib.suppress(OSError):
                    write_all(1, b"\x1b[999;1H" + modes.reset())
        if typed.abandoned:
            outcome = "detached; the agent keeps running"
        # Back in cooked mode: plain lines.
        print(f"agentctl: {outcome}", file=sys.stderr)
        lost = typed.lost_line(ending)
        if lost is not None:
            return fail(lost, EXIT_FAILED)
        return EXIT_OK
