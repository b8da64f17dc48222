"""Daemon lifecycle: ready line, probes, ordered shutdown on signals or the trigger, report persisted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import urllib.request
import urllib.error


from agentctl.evidence.store import read_report
from tests.conftest import REPO, agentctl_cmd, write_spec


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_prints_one_ready_line_then_sigterm_drains_and_persists(tmp_path, short_tmp, serve):
    spec = write_spec(tmp_path)
    sock = short_tmp / "ctl" / "control.sock"
    daemon = serve(spec, sock)
    ready = daemon.ready
    assert set(ready) == {"event", "control_socket", "mcp_url", "instance_id", "execution_id", "pid"}
    assert ready["event"] == "ready" and ready["execution_id"] == "exec-test"
    assert ready["control_socket"] == str(sock) and ready["pid"] == daemon.proc.pid
    assert ready["mcp_url"].startswith("http://127.0.0.1:") and ready["mcp_url"].endswith("/mcp")
    base = ready["mcp_url"][: -len("/mcp")]
    assert _get(base + "/livez") == (200, {"live": True})
    assert _get(base + "/readyz")[0] == 200
    assert oct(sock.stat().st_mode & 0o777) == "0o600"

    assert daemon.stop(signal.SIGTERM) == 0
    rest = daemon.proc.stdout.read()
    assert rest == b"", "exactly one line on stdout"
    assert not sock.exists(), "control socket removed at shutdown"
    report = read_report(tmp_path / "state", "exec-test")
    assert report.identity.instance_id == ready["instance_id"]


def test_sigint_also_exits_zero(tmp_path, serve):
    daemon = serve(write_spec(tmp_path))
    assert daemon.stop(signal.SIGINT) == 0


async def test_readyz_verbose_lists_checks_and_turns_503_as_soon_as_stop_is_requested(tmp_path, short_dir,
                                                                                        in_process_daemon):
    d = await in_process_daemon(write_spec(tmp_path), short_dir / "c.sock")
    base = d.ctx.mcp_base
    status, body = await asyncio.to_thread(_get, base + "/readyz?verbose")
    assert status == 200
    assert body["checks"]["control_socket"]["ok"] and body["checks"]["mcp_listener"]["ok"]
    d.ctx.request_stop()  # the trigger tests fire instead of a signal
    status, body = await asyncio.to_thread(_get, base + "/readyz?verbose")
    assert status == 503 and body["stopping"] is True
    assert (await asyncio.to_thread(_get, base + "/livez"))[0] == 200
    await d.stop()
    assert not (short_dir / "c.sock").exists()


def test_systemd_notifications_arrive_ready_then_watchdog_then_stopping(tmp_path, short_tmp, serve):
    notify_path = short_tmp / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    listener.settimeout(10)
    try:
        daemon = serve(write_spec(tmp_path), env={"NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "200000"})
        messages: list[str] = []
        while not any("WATCHDOG=1" in m for m in messages):
            messages.append(listener.recv(4096).decode())
        daemon.proc.send_signal(signal.SIGTERM)
        while not any("STOPPING=1" in m for m in messages):
            messages.append(listener.recv(4096).decode())
        assert daemon.proc.wait(timeout=15) == 0
    finally:
        listener.close()
    first = messages[0].splitlines()
    assert first[0] == "READY=1" and any(line.startswith("STATUS=") for line in first)
    kinds = [m.splitlines()[0] for m in messages]
    assert kinds.index("READY=1") < kinds.index("WATCHDOG=1") < kinds.index("STOPPING=1")


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        agentctl_cmd(*args), capture_output=True, text=True, timeout=30, cwd=REPO, env={**os.environ, **(env or {})}
    )


def _assert_one_clear_line(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agentctl: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_malformed_spec_gives_one_line_and_nonzero_exit(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[identity\n")
    _assert_one_clear_line(_run_cli("serve", str(bad)), "bad.toml", "invalid TOML")


def test_unknown_key_in_spec_gives_one_line(tmp_path):
    spec = write_spec(tmp_path, "[mcp]\nwhatever = 1\n")
    _assert_one_clear_line(_run_cli("serve", str(spec)), "mcp", "whatever")


def test_unusable_state_dir_gives_one_line(tmp_path, short_tmp):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    spec = write_spec(tmp_path, state_dir=blocker / "state")
    _assert_one_clear_line(_run_cli("serve", str(spec), "--socket", str(short_tmp / "c.sock")), "state")


def test_socket_path_over_107_bytes_gives_one_line(tmp_path):
    long_path = "/tmp/" + "x" * 120 + "/control.sock"
    _assert_one_clear_line(_run_cli("serve", str(write_spec(tmp_path)), "--socket", long_path), "107")


def test_second_daemon_on_the_same_socket_is_refused_and_first_keeps_serving(tmp_path, serve):
    first = serve(write_spec(tmp_path))
    sock = first.socket
    other = tmp_path / "other"
    other.mkdir()
    second = _run_cli("serve", str(write_spec(other, execution_id="exec-two")), "--socket", str(sock))
    _assert_one_clear_line(second, "already")
    base = first.ready["mcp_url"][: -len("/mcp")]
    assert _get(base + "/readyz")[0] == 200
    assert sock.exists()
    assert first.stop() == 0


def test_a_corrupt_task_store_gives_one_line_naming_the_component(tmp_path, short_tmp):
    state = tmp_path / "state"
    state.mkdir()
    (state / "tasks.sqlite3").write_bytes(b"not a database" * 100)
    spec = write_spec(tmp_path, state_dir=state)
    _assert_one_clear_line(_run_cli("serve", str(spec), "--socket", str(short_tmp / "c.sock")), "task store")
    assert not (short_tmp / "c.sock").exists()
