"""`agentctl hub` commands and the in-process hub `agentctl run` uses (`embedded_hub`)."""

from __future__ import annotations

import json
import subprocess

from agentctl.cli import main
from agentctl.daemon.app import Daemon
from agentctl.spec import parse_spec
from agentctl.hub.embedded import embedded_hub
from tests.conftest import REPO, agentctl_cmd, spec_toml
from tests.upstream.procs import start_hub
from tests.upstream.support import eventually


async def test_embedded_hub_serves_a_daemon_in_process_and_the_cli_reads_what_it_kept(short_dir, capsys):
    async with embedded_hub(short_dir) as socket_path:
        spec = parse_spec(spec_toml(execution_id=None, identity={"session_id": "session-e"},
                                    state_dir=f"{short_dir}/state", upstream=socket_path).encode())
        async with Daemon(spec, socket_path=short_dir / "c.sock") as daemon:
            await eventually(lambda: daemon.ctx.upstream.connected, what="connected to the embedded hub")
            attempt, _ = daemon.open_attempt("manual")
        # The daemon has stopped: its final snapshot reached the hub before the hub stops.

    db = str(short_dir / "hub.sqlite3")
    assert main(["hub", "status", "--db", db, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    [session] = status["sessions"]
    assert session["session_id"] == "session-e" and session["current_attempt"]["attempt_id"] == attempt
    assert session["connected"] is False

    assert main(["hub", "status", "--db", db]) == 0
    text = capsys.readouterr().out
    assert "session session-e (task task-1)" in text and "kandev" in text and "daemon not connected" in text

    assert main(["hub", "report", "session-e", "--db", db]) == 0
    assert "executions, newest first:" in capsys.readouterr().out

    assert main(["hub", "report", "nope", "--db", db]) == 1
    assert capsys.readouterr().err.strip() == "agentctl: the hub has no session 'nope'"
    assert main(["hub", "report", "session-e", "--execution", "nope", "--db", db]) == 1
    capsys.readouterr()
    assert main(["hub", "status", "--db", str(short_dir / "missing.sqlite3")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentctl: no hub database at") and err.count("\n") == 1


def test_a_second_hub_on_a_live_socket_refuses_to_start_with_one_line(short_dir):
    first = start_hub(short_dir)
    try:
        second = subprocess.run(
            agentctl_cmd("hub", "serve", "--socket", str(short_dir / "hub.sock"), "--db", str(short_dir / "other.sqlite3")),
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )
        assert second.returncode == 2
        assert second.stderr.startswith("agentctl: hub socket: ") and "already serving" in second.stderr
        assert second.stderr.count("\n") == 1 and second.stdout == ""
        assert first.popen.poll() is None, "the first hub keeps serving"
    finally:
        assert first.stop() == 0
    assert not (short_dir / "hub.sock").exists(), "socket removed at shutdown"


def test_an_empty_hub_prints_an_empty_sessions_list_not_a_missing_field(short_dir, capsys):
    from agentctl.hub.hub_store import HubStore

    HubStore(short_dir / "hub.sqlite3").close()
    assert main(["hub", "status", "--db", str(short_dir / "hub.sqlite3"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == []
