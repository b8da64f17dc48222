"""sd_notify in pure Python: READY/STATUS/WATCHDOG/STOPPING datagrams to $NOTIFY_SOCKET, and the watchdog pinger."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends sd_notify datagrams when run under systemd; a silent no-op otherwise."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = env.get("NOTIFY_SOCKET") or None
        self.watchdog_interval = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *lines: str) -> bool:
        if self._address is None:
            return False
        address = self._address
        if address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace socket
        payload = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(address)
                sock.sendall(payload)
            return True
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc.strerror or type(exc).__name__)
            return False

    async def watchdog(self) -> None:
        """Ping at half the interval systemd asked for, until cancelled."""
        if self.watchdog_interval is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval / 2)


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None  # the watchdog is meant for another process
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1_000_000 if value > 0 else None
