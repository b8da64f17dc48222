"""Which directories agentctl trusts with private files, how it opens files in them, walks below a workspace
and writes durably (agentctl.safe_files). Other owners are real: entries chowned to uid 65534 (the suite runs
as root); crashes are real: a writer SIGKILLed at each step of a write, chosen with the test-only pause hook."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentctl.safe_files import (
    ENV_PAUSE_AT,
    ENV_PAUSE_FILE,
    UnsafePath,
    WalkError,
    create_exclusive_at,
    ensure_private_dir,
    existing_dirs,
    is_own_temp,
    open_below,
    open_own_dir,
    open_private,
    write_atomic,
    write_atomic_at,
)
from tests.conftest import REPO, poll

OTHER = 65534


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return Path(os.path.realpath(tmp_path))


def test_a_missing_directory_is_created_0700_whatever_the_umask(base: Path) -> None:
    old = os.umask(0o022)
    try:
        made = ensure_private_dir(base / "a" / "b")
    finally:
        os.umask(old)
    assert made == base / "a" / "b"
    assert stat.S_IMODE(os.stat(base / "a").st_mode) == 0o700 and stat.S_IMODE(os.stat(made).st_mode) == 0o700


def test_an_existing_directory_of_ours_readable_by_others_is_fine_writable_by_others_is_not(base: Path) -> None:
    (base / "d").mkdir(mode=0o755)
    assert ensure_private_dir(base / "d") == base / "d"
    for mode in (0o775, 0o757, 0o1777):
        os.chmod(base / "d", mode)
        with pytest.raises(UnsafePath, match=f"writable by other users \\(mode {mode:04o}\\)"):
            ensure_private_dir(base / "d")


def test_an_ancestor_others_could_rename_entries_in_is_a_warning_once_and_a_sticky_one_is_fine(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (base / "pub").mkdir()
    os.chmod(base / "pub", 0o1777)
    assert ensure_private_dir(base / "pub" / "mine") == base / "pub" / "mine"
    assert not caplog.records
    (base / "shared").mkdir()
    os.chmod(base / "shared", 0o2777)  # a Kubernetes emptyDir with an fsGroup: the best a pod has
    for _ in range(2):
        assert ensure_private_dir(base / "shared" / "mine") == base / "shared" / "mine"
    assert [r.getMessage() for r in caplog.records if r.name == "agentctl.files"] == [
        f"{base / 'shared'} is writable by other users (mode 2777) and not sticky: another user could swap the "
        "private directory below it; prefer a parent only you (or root) can write",
    ]


@pytest.mark.parametrize("depth", [1, 3], ids=["parent", "grandparent"])
def test_an_ancestor_owned_by_another_user_is_refused_and_nothing_is_made_below_it(base: Path, depth: int) -> None:
    (base / "theirs").mkdir(mode=0o755)
    os.chown(base / "theirs", OTHER, OTHER)  # even read-only to them: its owner can chmod it at will
    inner = base / "theirs" / "a" / "b" if depth == 3 else base / "theirs"
    if depth == 3:
        inner.mkdir(parents=True, mode=0o700)
    with pytest.raises(UnsafePath) as refused:
        ensure_private_dir(inner / "state")
    assert str(refused.value) == (
        f"{base / 'theirs'} is owned by uid 65534, who could swap the private directory below it (and send its "
        "files anywhere); use a directory whose parents are yours or root's"
    )
    assert not (inner / "state").exists()
    # Reached through a link of ours, the directory it leads into is checked all the same.
    (base / "link").symlink_to(base / "theirs")
    with pytest.raises(UnsafePath, match="theirs is owned by uid 65534, who could swap"):
        ensure_private_dir(base / "link" / "state")


def test_a_directory_owned_by_another_user_is_refused(base: Path) -> None:
    (base / "theirs").mkdir()
    os.chown(base / "theirs", OTHER, OTHER)
    with pytest.raises(UnsafePath, match="owned by uid 65534, not by this user"):
        ensure_private_dir(base / "theirs")


def test_a_link_of_ours_is_followed_to_its_real_path_and_a_link_of_another_user_is_refused(base: Path) -> None:
    (base / "real").mkdir(mode=0o700)
    (base / "ours").symlink_to(base / "real")
    (base / "rel").symlink_to("real")
    assert ensure_private_dir(base / "ours" / "sub") == base / "real" / "sub"
    assert ensure_private_dir(base / "rel") == base / "real"
    (base / "planted").symlink_to(base / "real")
    os.chown(base / "planted", OTHER, OTHER, follow_symlinks=False)
    with pytest.raises(UnsafePath, match="planted is a symbolic link owned by uid 65534"):
        ensure_private_dir(base / "planted")
    (base / "loop").symlink_to(base / "loop")
    with pytest.raises(UnsafePath, match="too many levels of symbolic links"):
        ensure_private_dir(base / "loop")


def test_a_file_in_the_way_is_not_a_directory(base: Path) -> None:
    (base / "f").write_text("x")
    for path in (base / "f", base / "f" / "below"):
        with pytest.raises(NotADirectoryError):
            ensure_private_dir(path)


def test_a_private_file_is_created_0600_never_through_a_link_and_only_if_it_is_ours(base: Path) -> None:
    old = os.umask(0)
    try:
        os.close(open_private(base / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(base / "new").st_mode) == 0o600
    (base / "loose").touch(mode=0o644)
    os.chmod(base / "loose", 0o644)
    os.close(open_private(base / "loose"))
    assert stat.S_IMODE(os.stat(base / "loose").st_mode) == 0o600  # ours, tightened
    (base / "link").symlink_to(base / "new")
    with pytest.raises(UnsafePath, match="is a symbolic link; refusing to follow it"):
        open_private(base / "link", os.O_RDWR | os.O_CREAT)
    os.chown(base / "loose", OTHER, OTHER)
    with pytest.raises(UnsafePath, match="owned by uid 65534, not by this user: it may have been planted"):
        open_private(base / "loose")
    assert stat.S_IMODE(os.stat(base / "loose").st_mode) == 0o600


# -- walking below a workspace ----------------------------------------------------------------------


def test_a_walk_below_a_root_never_follows_a_link_and_says_how_deep_it_got(base: Path) -> None:
    (base / "elsewhere").mkdir()
    (base / "root" / "a").mkdir(parents=True)
    (base / "root" / "a" / "link").symlink_to(base / "elsewhere")
    (base / "root" / "a" / "file").write_text("x")
    for name, code in (("link", errno.ELOOP), ("file", errno.ENOTDIR)):
        for create in (False, True):
            with pytest.raises(WalkError) as info:
                open_below(base / "root", ("a", name, "b"), create=create)
            assert (info.value.errno, info.value.depth) == (code, 2)
    assert list((base / "elsewhere").iterdir()) == []
    with pytest.raises(WalkError) as info:
        existing_dirs(base / "root", ("a", "link"))
    assert (info.value.errno, info.value.depth) == (errno.ELOOP, 2)
    assert existing_dirs(base / "root", ("a", "missing", "b")) == 1
    with pytest.raises(WalkError) as info:
        open_below(base / "gone", ("a",))
    assert (info.value.errno, info.value.depth) == (errno.ENOENT, 0)


def test_a_walk_that_creates_records_only_the_levels_it_made(base: Path) -> None:
    (base / "root" / "a").mkdir(parents=True)
    created: list[tuple[str, ...]] = []
    os.close(open_below(base / "root", ("a", "b", "c"), create=True, created=created))
    assert created == [("a", "b"), ("a", "b", "c")] and (base / "root" / "a" / "b" / "c").is_dir()


def test_an_own_directory_is_opened_without_a_link_tightened_and_refused_when_another_users(base: Path) -> None:
    (base / "d").mkdir(mode=0o755)
    os.chmod(base / "d", 0o755)
    os.close(open_own_dir(base / "d"))
    assert stat.S_IMODE(os.stat(base / "d").st_mode) == 0o700
    (base / "link").symlink_to(base / "d")
    with pytest.raises(OSError) as info:
        open_own_dir(base / "link")
    assert info.value.errno in (errno.ELOOP, errno.ENOTDIR) and not isinstance(info.value, UnsafePath)
    os.chown(base / "d", OTHER, OTHER)
    with pytest.raises(UnsafePath, match=f"^{base / 'd'} belongs to uid 65534, not to this user$"):
        open_own_dir(base / "d")


# -- durable writes ---------------------------------------------------------------------------------


def _dir_fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_an_atomic_write_has_exactly_the_mode_asked_whatever_the_umask(base: Path) -> None:
    fd = _dir_fd(base)
    old = os.umask(0o277)
    try:
        write_atomic_at(fd, "a", b"1", mode=0o640)
        write_atomic(base / "b", b"2")
    finally:
        os.umask(old)
        os.close(fd)
    assert stat.S_IMODE(os.stat(base / "a").st_mode) == 0o640 and (base / "a").read_bytes() == b"1"
    assert stat.S_IMODE(os.stat(base / "b").st_mode) == 0o600 and (base / "b").read_bytes() == b"2"
    assert sorted(os.listdir(base)) == ["a", "b"]


def test_an_atomic_write_refuses_a_link_at_the_name_unless_told_to_replace_the_link_itself(base: Path) -> None:
    (base / "target").write_bytes(b"theirs")
    (base / "name").symlink_to(base / "target")
    fd = _dir_fd(base)
    try:
        with pytest.raises(OSError) as info:
            write_atomic_at(fd, "name", b"ours")
        assert info.value.errno == errno.ELOOP and (base / "name").is_symlink()
        assert sorted(os.listdir(base)) == ["name", "target"]  # no temporary file left
        write_atomic(base / "name", b"ours")  # the report's path: the link replaced, never followed
    finally:
        os.close(fd)
    assert not (base / "name").is_symlink() and (base / "name").read_bytes() == b"ours"
    assert (base / "target").read_bytes() == b"theirs"


def test_an_exclusive_create_never_replaces_an_entry_and_holds_its_lock(base: Path) -> None:
    (base / "taken").write_bytes(b"first")
    fd = _dir_fd(base)
    try:
        with pytest.raises(FileExistsError):
            create_exclusive_at(fd, "taken", b"second")
        entry = create_exclusive_at(fd, "new", b"data")
    finally:
        os.close(fd)
    try:
        assert (base / "taken").read_bytes() == b"first" and (base / "new").read_bytes() == b"data"
        assert stat.S_IMODE(os.stat(base / "new").st_mode) == 0o600
        assert sorted(os.listdir(base)) == ["new", "taken"]
        other = os.open(base / "new", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        os.close(entry)


_WRITER = """
import os, sys
from agentctl.safe_files import create_exclusive_at, write_atomic_at
fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
if sys.argv[1] == "replace":
    write_atomic_at(fd, "file", b"new content", step="w")
else:
    create_exclusive_at(fd, "entry", b"new entry", step="w")
"""


def _killed_at(base: Path, how: str, step: str) -> list[str]:
    marker = base / "paused"
    env = {**os.environ, ENV_PAUSE_AT: step, ENV_PAUSE_FILE: str(marker)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, how, str(base / "d")], cwd=REPO, env=env)
    try:
        poll(marker.exists, timeout=30, what=f"the writer paused at {step}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    return sorted(os.listdir(base / "d"))


@pytest.mark.parametrize("step", ["w-temp", "w"])
def test_a_writer_killed_at_each_step_of_a_replace_leaves_the_old_or_the_new_file_whole(base: Path, step) -> None:
    (base / "d").mkdir()
    (base / "d" / "file").write_bytes(b"old")
    left = _killed_at(base, "replace", step)
    if step == "w-temp":
        assert (base / "d" / "file").read_bytes() == b"old"
        [temp] = [n for n in left if n != "file"]
        assert is_own_temp(temp, "file") and (base / "d" / temp).read_bytes() == b"new content"
    else:
        assert left == ["file"] and (base / "d" / "file").read_bytes() == b"new content"


@pytest.mark.parametrize("step", ["w-temp", "w"])
def test_a_writer_killed_at_each_step_of_an_exclusive_create_leaves_no_entry_or_a_whole_one(base: Path, step) -> None:
    (base / "d").mkdir()
    left = _killed_at(base, "create", step)
    if step == "w-temp":
        [temp] = left
        assert is_own_temp(temp, "entry")
    else:
        assert left == ["entry"] and (base / "d" / "entry").read_bytes() == b"new entry"
    leftover = os.open(base / "d" / left[0], os.O_RDONLY)
    try:
        fcntl.flock(leftover, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its writer is dead: the lock is free
    finally:
        os.close(leftover)
