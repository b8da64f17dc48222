"""The client commands (status, report, health, stop) run from argparse-produced args against a real
daemon app. They block (stdlib client), so they run in a thread while this loop serves."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import msgspec
import pytest

from agentctl.cli_support import EXIT_NO_DAEMON, EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE
from agentctl.evidence.contract.base import encode
from tests.control.control_support import EXECUTION_ID, Served, parse, seed_attempt


async def run(argv: list[str]) -> int:
    args = parse(argv)
    return await asyncio.to_thread(args.func, args)


def run_sync(argv: list[str]) -> int:
    args = parse(argv)
    return args.func(args)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("agentctl: ")
    assert "Traceback" not in err
    return lines[0]


# -- health ---------------------------------------------------------------------------------------------


async def test_health_exit_0_when_live(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["health", "--socket", str(served.socket_path)]) == EXIT_OK
    assert capsys.readouterr().out == "live\n"


async def test_health_ready_exit_0_when_every_check_passes(served: Served, capsys) -> None:
    served.ctx.readiness.set("mcp_listener", True)
    assert await run(["health", "--ready", "--socket", str(served.socket_path)]) == EXIT_OK
    assert capsys.readouterr().out == "ready\n"


async def test_health_ready_exit_4_when_a_check_fails(served: Served, capsys) -> None:
    served.ctx.readiness.set("mcp_listener", True)
    served.ctx.readiness.set("upstream", False, "connecting")
    assert await run(["health", "--ready", "--socket", str(served.socket_path)]) == EXIT_UNHEALTHY
    assert capsys.readouterr().out == "not ready (failing: upstream (connecting))\n"
    # Liveness is not readiness: the same daemon is live.
    assert await run(["health", "--socket", str(served.socket_path)]) == EXIT_OK


async def test_health_ready_exit_4_while_stopping(served: Served, capsys) -> None:
    served.ctx.readiness.set("mcp_listener", True)
    served.ctx.request_stop()
    assert await run(["health", "--ready", "--json", "--socket", str(served.socket_path)]) == EXIT_UNHEALTHY
    body = json.loads(capsys.readouterr().out)
    assert body["ready"] is False and body["stopping"] is True


def test_health_exit_2_when_no_daemon(short_dir: Path, capsys) -> None:
    path = short_dir / "none.sock"
    assert run_sync(["health", "--socket", str(path)]) == EXIT_NO_DAEMON
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_error_line(captured.err) == (
        f"agentctl: cannot connect to the agentctl daemon at {path}: no socket there (is the daemon running?)"
    )


def test_health_exit_2_on_a_stale_socket(short_dir: Path, capsys) -> None:
    path = short_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()
    assert run_sync(["health", "--ready", "--socket", str(path)]) == EXIT_NO_DAEMON
    assert "nobody is listening" in one_error_line(capsys.readouterr().err)


def test_health_exit_4_when_the_daemon_does_not_answer(short_dir: Path, capsys) -> None:
    path = short_dir / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(path))
    mute.listen(1)
    try:
        assert run_sync(["health", "--timeout", "0.3", "--socket", str(path)]) == EXIT_UNHEALTHY
    finally:
        mute.close()
    assert "did not answer" in one_error_line(capsys.readouterr().err)


def test_health_exit_1_on_bad_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        parse(["health", "--bogus"])
    assert info.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        parse(["health", "--timeout", "-3"])
    assert info.value.code == EXIT_USAGE
    assert "Traceback" not in capsys.readouterr().err


def test_health_exits_2_when_no_daemon_is_found_as_when_the_named_socket_does_not_answer(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_dir))  # an empty runtime dir: no daemon to find
    assert run_sync(["health", "--socket", str(short_dir / "none.sock")]) == EXIT_NO_DAEMON
    capsys.readouterr()
    assert run_sync(["health"]) == EXIT_NO_DAEMON
    line = one_error_line(capsys.readouterr().err)
    assert "cannot locate the control socket" in line and "--socket" in line and "--execution" in line


# -- locating the socket ---------------------------------------------------------------------------------


async def test_execution_id_locates_the_socket_through_the_runtime_dir(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # served puts the socket at <short dir>/<execution id>/control.sock
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", str(served.socket_path.parent.parent))
    assert await run(["status", "--json", "--execution", EXECUTION_ID]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["identity"]["execution_id"] == EXECUTION_ID


async def test_agentctl_socket_names_the_daemon_to_talk_to_and_an_option_wins_over_it(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("AGENTCTL_SOCKET", str(served.socket_path))
    assert await run(["status", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["identity"]["execution_id"] == EXECUTION_ID
    # An explicit --execution (or --socket) is what the user asked for: the variable does not override it.
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", str(served.socket_path.parent.parent))
    assert await run(["health", "--execution", "exec_nobody"]) == EXIT_NO_DAEMON
    assert "exec_nobody" in one_error_line(capsys.readouterr().err)
    monkeypatch.setenv("AGENTCTL_SOCKET", str(served.socket_path.parent / "nobody.sock"))
    assert await run(["health"]) == EXIT_NO_DAEMON
    assert "nobody.sock" in one_error_line(capsys.readouterr().err)
    assert await run(["health", "--socket", str(served.socket_path)]) == EXIT_OK


async def test_the_only_daemon_under_the_runtime_dir_is_found_without_arguments(
    served: Served, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(served.socket_path.parent.parent))
    assert await run(["health"]) == EXIT_OK


async def test_several_daemons_need_an_execution_id(served: Served, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    base = served.socket_path.parent.parent
    other = base / "exec_other" / "control.sock"
    other.parent.mkdir(mode=0o700)
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.bind(str(other))
    extra.listen(1)  # a second live daemon: one nobody listens on is a dead daemon's, never counted
    try:
        monkeypatch.setenv("RUNTIME_DIRECTORY", str(base))
        assert await run(["status"]) == EXIT_USAGE
    finally:
        extra.close()
    line = one_error_line(capsys.readouterr().err)
    assert "several daemons" in line and "exec_other" in line and EXECUTION_ID in line


# -- status / report / stop ----------------------------------------------------------------------------


async def test_status_human_output_without_a_tty_has_no_colour(served: Served, capsys) -> None:
    seed_attempt(served.ctx)
    assert await run(["status", "--socket", str(served.socket_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "\x1b[" not in out  # capsys is not a TTY
    assert "kandev" in out and "7 tools loaded, used" in out
    assert "delivered · connection unverified" in out
    assert EXECUTION_ID in out
    assert all(len(line) <= 80 for line in out.splitlines())


async def test_status_json_is_the_daemon_body(served: Served, capsys) -> None:
    attempt_id = seed_attempt(served.ctx)
    assert await run(["status", "--json", "--socket", str(served.socket_path)]) == EXIT_OK
    body = json.loads(capsys.readouterr().out)
    assert body["current"]["attempt_id"] == attempt_id


async def test_report_json_round_trips_the_contract(served: Served, capsys) -> None:
    seed_attempt(served.ctx)
    seed_attempt(served.ctx)
    assert await run(["report", "--json", "--socket", str(served.socket_path)]) == EXIT_OK
    out = capsys.readouterr().out
    from agentctl.evidence.contract.report import decode_history

    history = decode_history(out)
    assert len(history.previous) == 1


async def test_report_human_lists_previous_attempts(served: Served, capsys) -> None:
    first = seed_attempt(served.ctx)
    seed_attempt(served.ctx)
    assert await run(["report", "--socket", str(served.socket_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"Previous attempt {first} (session_new)" in out


def test_report_offline_from_the_state_dir(tmp_path: Path, capsys) -> None:
    from agentctl.evidence.store import report_path
    from tests.control.control_support import make_ctx

    ctx = make_ctx(tmp_path, tmp_path / "unused.sock")
    seed_attempt(ctx)
    path = report_path(tmp_path / "state", EXECUTION_ID)
    path.parent.mkdir(parents=True)
    path.write_bytes(encode(ctx.ledger.history))

    argv = ["report", "--json", "--state-dir", str(tmp_path / "state"), "--execution", EXECUTION_ID]
    assert run_sync(argv) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == msgspec.to_builtins(ctx.ledger.history)

    assert run_sync(["report", "--state-dir", str(tmp_path / "state"), "--execution", EXECUTION_ID]) == EXIT_OK
    assert "7 tools loaded, used" in capsys.readouterr().out


def test_report_offline_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert run_sync(["report", "--state-dir", str(tmp_path), "--execution", "exec_missing"]) == EXIT_USAGE
    assert "no report for execution exec_missing" in one_error_line(capsys.readouterr().err)

    bad = tmp_path / "exec_bad" / "report.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    assert run_sync(["report", "--state-dir", str(tmp_path), "--execution", "exec_bad"]) == EXIT_USAGE
    one_error_line(capsys.readouterr().err)

    assert run_sync(["report", "--state-dir", str(tmp_path)]) == EXIT_USAGE
    assert "needs --execution" in one_error_line(capsys.readouterr().err)


async def test_stop_command_stops_the_daemon(served: Served, capsys) -> None:
    assert await run(["stop", "--socket", str(served.socket_path)]) == EXIT_OK
    assert capsys.readouterr().out.startswith("stopping")
    await asyncio.wait_for(served.ctx.stop_event.wait(), timeout=5)


def test_stop_without_a_daemon_is_exit_2_one_line(short_dir: Path, capsys) -> None:
    assert run_sync(["stop", "--socket", str(short_dir / "x.sock")]) == EXIT_NO_DAEMON
    one_error_line(capsys.readouterr().err)


def test_too_long_a_socket_path_is_a_bad_argument(capsys) -> None:
    assert run_sync(["health", "--socket", "/tmp/" + "x" * 200]) == EXIT_USAGE
    assert "107-byte limit" in one_error_line(capsys.readouterr().err)
