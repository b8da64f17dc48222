"""Materialization refuses to write through symlinks or over things in the way, and leaves no trace.

Tests run as root, so "unwritable" is produced with a file or a symlink in the way, not with chmod.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough import workspace
from agentctl.agent.passthrough.base import MaterializeError
from tests.passthrough.support import CANARIES, TOKEN, request, spec_for, tree


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    return wd


def refused(strategy: str, workdir: Path) -> MaterializeError:
    with pytest.raises(MaterializeError) as info:
        get_strategy(strategy).materialize(request(spec_for(strategy), workdir))
    err = info.value
    assert err.reason_code == "materialize_failed"
    assert TOKEN not in err.summary and not any(c in err.summary for c in CANARIES)
    assert str(workdir) not in err.summary  # a path relative to the workdir, never where it lives
    return err


def test_a_symlinked_config_directory_is_refused_and_its_target_untouched(workdir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workdir / ".cursor").symlink_to(elsewhere)
    err = refused("cursor", workdir)
    assert err.summary == "symlink in the way at .cursor; refusing to write through it"
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_config_file_is_refused_and_its_target_untouched(workdir, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    (workdir / ".gemini").mkdir()
    (workdir / ".gemini" / "settings.json").symlink_to(victim)
    err = refused("gemini", workdir)
    assert err.summary == "symlink in the way at .gemini/settings.json; refusing to write through it"
    assert victim.read_text() == "{}" and (workdir / ".gemini" / "settings.json").is_symlink()
    assert tree(workdir) == [".gemini", ".gemini/settings.json"]  # no temporary file left


def test_a_file_where_the_config_directory_should_be_is_refused(workdir):
    (workdir / ".gemini").write_text("not a directory")
    err = refused("gemini", workdir)
    assert err.summary == ".gemini is in the way and is not a directory"
    assert (workdir / ".gemini").read_text() == "not a directory"


def test_a_config_file_that_is_not_json_is_left_untouched(workdir):
    (workdir / ".cursor").mkdir()
    (workdir / ".cursor" / "mcp.json").write_bytes(b"{ this is not json")
    err = refused("cursor", workdir)
    assert err.summary == ".cursor/mcp.json is not valid JSON; left untouched"
    assert (workdir / ".cursor" / "mcp.json").read_bytes() == b"{ this is not json"


def test_a_missing_workdir_is_refused(tmp_path):
    err = refused("cursor", tmp_path / "gone")
    assert err.summary == "the working directory does not exist"


def test_a_private_directory_replaced_by_a_file_is_refused(workdir):
    req = request(spec_for("claude"), workdir)
    os.rmdir(req.tmpdir)
    req.tmpdir.write_text("in the way")
    with pytest.raises(MaterializeError):
        get_strategy("claude").materialize(req)
    assert req.tmpdir.read_text() == "in the way"


def test_a_full_disk_fails_cleanly_and_removes_what_it_created(workdir, monkeypatch):
    # A fake, said so: ENOSPC cannot be produced for real here without mounting a filesystem.
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(workspace.os, "write", full)
    err = refused("cursor", workdir)
    assert err.summary == "no space left on device writing .cursor/mcp.json"
    assert tree(workdir) == []  # no temporary file, and the .cursor directory it created is gone


def test_a_full_disk_keeps_the_users_file_as_it_was(workdir, monkeypatch):
    (workdir / ".cursor").mkdir()
    original = b'{"mcpServers": {"mine": {"command": "x"}}}'
    (workdir / ".cursor" / "mcp.json").write_bytes(original)
    monkeypatch.setattr(workspace.os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    refused("cursor", workdir)
    assert (workdir / ".cursor" / "mcp.json").read_bytes() == original
    assert tree(workdir) == [".cursor", ".cursor/mcp.json"]
