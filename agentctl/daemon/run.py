"""`agentctl run`: the main job for a person at a terminal, built on the same Daemon as `serve`."""

from __future__ import annotations

import sys

from agentctl.daemon.app import Daemon
from agentctl.evidence.contract import encode


async def run_main_job(daemon: Daemon, *, as_json: bool = False) -> int:
    from agentctl.control.render import render_status, use_color
    from agentctl.control.server import build_status

    await daemon.start()
    try:
        daemon.open_attempt("manual")
        assert daemon.persister is not None
        await daemon.persister.flush()
        history = daemon.ledger.history
        if as_json:
            sys.stdout.write(encode(history).decode() + "\n")
        else:
            status = build_status(daemon.ctx)
            sys.stdout.write(render_status(status, color=use_color(sys.stdout)) + "\n")
            sys.stdout.write(f"report persisted to {daemon.ctx.report_path}\n")
    finally:
        await daemon.stop()
    return 0
