"""`agentctl serve` and `agentctl run`: their signal handlers go in first, before the daemon's imports (a stop
during start-up is a drain, not a kill); agentctl.daemon.start, loaded after them, starts the daemon."""

from __future__ import annotations

import argparse

from agentctl.commands.targets import TARGETS, resolve
from agentctl.lifecycle import Signals


def _daemon_command(args: argparse.Namespace, command: str) -> int:
    signals = Signals().install()
    try:
        return int(resolve(TARGETS["daemon"])(args, command, signals))
    finally:
        signals.uninstall()


def cmd_serve(args: argparse.Namespace) -> int:
    return _daemon_command(args, "serve")


def cmd_run(args: argparse.Namespace) -> int:
    return _daemon_command(args, "run")
