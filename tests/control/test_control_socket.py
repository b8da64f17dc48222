"""Control socket placement: path resolution, 0600 inside 0700, no stealing a live socket, stale files,
the 107-byte limit, and cleanup."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from tests.conftest import spec_toml
from tests.control.control_support import EXECUTION_ID, is_root, make_ctx, serve_app

from agentctl.control.socket import (
    MAX_SOCKET_PATH_BYTES,
    ControlSocketError,
    cleanup_socket_path,
    env_socket,
    prepare_socket_path,
    resolve_socket_path,
    socket_base_dir,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- resolution ---------------------------------------------------------------------------------------


def test_cli_value_is_the_full_socket_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTCTL_SOCKET", "/ignored")
    assert resolve_socket_path(str(tmp_path / "x.sock"), EXECUTION_ID) == tmp_path / "x.sock"


def test_relative_cli_value_is_made_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_socket_path("ctl.sock", EXECUTION_ID) == tmp_path / "ctl.sock"


def test_env_dirs_get_execution_and_name_appended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", "/run/agentctl:/run/other")
    assert resolve_socket_path(None, "e1") == Path("/run/agentctl/e1/control.sock")
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", "/srv/sockets")  # wins over RUNTIME_DIRECTORY
    assert resolve_socket_path(None, "e1") == Path("/srv/sockets/e1/control.sock")


def test_agentctl_socket_names_the_socket_itself(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", "/srv/sockets")
    monkeypatch.setenv("AGENTCTL_SOCKET", str(tmp_path / "exec" / "ctl.sock"))  # need not exist yet
    assert resolve_socket_path(None, "e1") == tmp_path / "exec" / "ctl.sock"
    assert env_socket() == tmp_path / "exec" / "ctl.sock"
    assert socket_base_dir() == Path("/srv/sockets")  # the directory of daemons is its own variable
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTCTL_SOCKET", "rel.sock")
    assert resolve_socket_path(None, "e1") == tmp_path / "rel.sock"


def test_a_directory_in_agentctl_socket_is_refused_with_one_line_naming_the_runtime_dir_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTCTL_SOCKET", str(tmp_path))
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", str(tmp_path / "other"))
    for resolve in (env_socket, lambda: resolve_socket_path(None, "e1")):
        with pytest.raises(ControlSocketError, match="names a directory") as raised:
            resolve()
        assert "AGENTCTL_RUNTIME_DIR" in str(raised.value) and str(tmp_path) not in str(raised.value)
    assert socket_base_dir() == tmp_path / "other"  # the directory of daemons comes from its own variable only


def test_a_directory_in_agentctl_socket_stops_a_client_command_and_serve_with_that_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import subprocess
    import sys

    env = {**os.environ, "AGENTCTL_SOCKET": str(tmp_path), "AGENTCTL_RUNTIME_DIR": str(tmp_path / "rt")}
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_toml())
    for argv, code in ((["status"], 1), (["serve", str(spec)], 2)):
        done = subprocess.run([sys.executable, "-m", "agentctl.cli", *argv], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == code and "names a directory" in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_platformdirs_runtime_dir_is_the_last_resort(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    xdg.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert resolve_socket_path(None, "e1") == xdg / "agentctl" / "e1" / "control.sock"


@pytest.mark.parametrize("bad", ["", ".", "..", "../escape", "a/b", "x\0y"])
def test_execution_id_cannot_escape_the_runtime_dir(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("AGENTCTL_RUNTIME_DIR", "/srv/sockets")
    with pytest.raises(ControlSocketError, match="execution id"):
        resolve_socket_path(None, bad)


# -- prepare / bind ---------------------------------------------------------------------------------


async def test_socket_is_0600_inside_a_0700_directory(short_dir: Path, tmp_path: Path) -> None:
    path = short_dir / "deeper" / EXECUTION_ID / "control.sock"
    old_umask = os.umask(0o022)
    try:
        s = await serve_app(make_ctx(tmp_path, path), path)
        try:
            assert stat.S_ISSOCK(os.lstat(path).st_mode)
            assert _mode(path) == 0o600
            assert _mode(path.parent) == 0o700
            assert _mode(path.parent.parent) == 0o700  # parents created here are private too
            assert os.lstat(path).st_uid == os.geteuid()
            # The umask was only borrowed for the bind.
            assert os.umask(0o022) == 0o022
        finally:
            await s.runner.cleanup()
            cleanup_socket_path(path)
    finally:
        os.umask(old_umask)
    assert not path.exists()
    assert not path.parent.exists()  # the directory prepare created is removed again when empty


async def test_second_daemon_on_a_live_path_is_refused(short_dir: Path, tmp_path: Path) -> None:
    path = short_dir / "e" / "control.sock"
    s = await serve_app(make_ctx(tmp_path, path), path)
    try:
        inode = os.lstat(path).st_ino
        with pytest.raises(ControlSocketError) as info:
            prepare_socket_path(path)
        assert str(info.value) == f"another agentctl process is already serving {path}"
        assert os.lstat(path).st_ino == inode  # the live socket was not touched
    finally:
        await s.runner.cleanup()
        cleanup_socket_path(path)


async def test_stale_socket_file_is_replaced(short_dir: Path, tmp_path: Path) -> None:
    path = short_dir / "e" / "control.sock"
    path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # bound, never listening, then gone: what a crashed daemon leaves behind
    dead.close()
    s = await serve_app(make_ctx(tmp_path, path), path)
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))  # the new daemon answers
        probe.close()
    finally:
        await s.runner.cleanup()
        cleanup_socket_path(path)


def test_regular_file_at_the_path_is_never_removed(short_dir: Path) -> None:
    path = short_dir / "e" / "control.sock"
    path.parent.mkdir(mode=0o700)
    path.write_text("not a socket")
    with pytest.raises(ControlSocketError, match="exists and is not a socket"):
        prepare_socket_path(path)
    assert path.read_text() == "not a socket"


def test_path_over_107_bytes_is_refused_clearly(short_dir: Path) -> None:
    base = str(short_dir) + "/"
    too_long = Path(base + "d" * (MAX_SOCKET_PATH_BYTES + 1 - len(base) - len("/c.sock")) + "/c.sock")
    assert len(os.fsencode(too_long)) == 108
    with pytest.raises(ControlSocketError) as info:
        prepare_socket_path(too_long)
    message = str(info.value)
    assert "108 bytes" in message and "107-byte limit" in message and str(too_long) in message
    assert "\n" not in message
    assert not too_long.parent.exists()  # refused before creating anything

    just_fits = Path(base + "d" * (MAX_SOCKET_PATH_BYTES - len(base) - len("/c.sock")) + "/c.sock")
    assert len(os.fsencode(just_fits)) == 107
    prepare_socket_path(just_fits)  # no error


def test_existing_own_directory_is_tightened_to_0700(short_dir: Path) -> None:
    d = short_dir / "e"
    d.mkdir()
    d.chmod(0o755)
    prepare_socket_path(d / "control.sock")
    assert _mode(d) == 0o700


@pytest.mark.skipif(not is_root(), reason="needs root to create a directory owned by another uid")
def test_directory_owned_by_someone_else_is_refused(short_dir: Path) -> None:
    d = short_dir / "e"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(ControlSocketError, match="owned by uid 65534"):
        prepare_socket_path(d / "control.sock")


def test_shared_sticky_directory_is_refused_not_chmodded(short_dir: Path) -> None:
    d = short_dir / "shared"
    d.mkdir()
    d.chmod(0o1777)
    with pytest.raises(ControlSocketError, match="shared directory"):
        prepare_socket_path(d / "control.sock")
    assert _mode(d) == 0o1777


def test_parent_that_is_a_file_is_a_clear_error(short_dir: Path) -> None:
    (short_dir / "file").write_text("x")
    with pytest.raises(ControlSocketError, match="not a directory"):
        prepare_socket_path(short_dir / "file" / "control.sock")


async def test_cleanup_leaves_a_socket_it_did_not_bind(short_dir: Path, tmp_path: Path) -> None:
    path = short_dir / "e" / "control.sock"
    s = await serve_app(make_ctx(tmp_path, path), path)
    await s.runner.cleanup()
    # Something else took the path since (e.g. an operator restarted a daemon by hand). The old file is
    # moved aside, not unlinked, so the new one cannot reuse its inode number.
    os.rename(path, short_dir / "old.sock")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    try:
        cleanup_socket_path(path)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        other.close()
