"""Which directories agentctl trusts with private files, and how it opens files in them
(agentctl.private_files). Other owners are real: entries chowned to uid 65534 (the suite runs as root)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentctl.private_files import UnsafePath, ensure_private_dir, open_private

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
    (base / "theirs").mkdir()
    os.chown(base / "theirs", OTHER, OTHER)
    for _ in range(2):
        assert ensure_private_dir(base / "shared" / "mine") == base / "shared" / "mine"
        assert ensure_private_dir(base / "theirs" / "mine") == base / "theirs" / "mine"
    assert [r.getMessage() for r in caplog.records if r.name == "agentctl.files"] == [
        f"{base / 'shared'} is writable by other users (mode 2777) and not sticky: another user could swap the "
        "private directory below it; prefer a parent only you (or root) can write",
        f"{base / 'theirs'} is owned by uid 65534: another user could swap the private directory below it; "
        "prefer a parent only you (or root) can write",
    ]


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
