"""Starts the daemon for `serve` and `run` once agentctl.daemon.entry has its signal handlers in: logging, the
spec, the daemon built and its job run in a fresh loop, a start-up failure turned into one line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Coroutine
from typing import Any

from agentctl.backend.embedded import TaskStoreError
from agentctl.cli_support import EXIT_NO_DAEMON, fail
from agentctl.commands.targets import TARGETS, resolve
from agentctl.daemon.app import Daemon, StartupError, describe_error
from agentctl.daemon.metrics_listener import parse_metrics_listen
from agentctl.evidence.contract.base import encode
from agentctl.evidence.contract.control import DaemonReady
from agentctl.evidence.store import StateDirError
from agentctl.lifecycle import Signals, run
from agentctl.logs import configure_logging
from agentctl.spec import SpecError
from agentctl.spec_loader import load_spec
from agentctl.unix_socket import ControlSocketError


def run_daemon(args: argparse.Namespace, command: str, signals: Signals) -> int:
    """`serve` (the daemon until a signal) or `run` (the main job, agentctl.daemon.run) for `args`."""
    configure_logging(args.log_level, args.log_format)
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    run_main_job = resolve(TARGETS["run job"]) if command == "run" else None

    def job(daemon: Daemon) -> Coroutine[Any, Any, int]:
        if run_main_job is None:
            return daemon.serve(_print_ready, signals=signals)
        return run_main_job(daemon, prompt=args.prompt, as_json=args.json, signals=signals)  # type: ignore[no-any-return]

    try:
        listen = parse_metrics_listen(args.metrics_listen) if args.metrics_listen else None
        daemon = Daemon(spec, socket_path=args.socket, metrics_listen=listen)
    except (ControlSocketError, StateDirError, ValueError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    try:
        return run(job(daemon))
    except (ControlSocketError, StateDirError, StartupError, TaskStoreError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    except Exception as exc:
        # Never a traceback at default verbosity (it may quote a payload); --log-level debug shows it.
        if logging.getLogger("agentctl").isEnabledFor(logging.DEBUG):
            raise
        return fail(describe_error(exc, spec), EXIT_NO_DAEMON)


def _print_ready(info: DaemonReady) -> None:
    sys.stdout.write(encode(info).decode() + "\n")
    sys.stdout.flush()
