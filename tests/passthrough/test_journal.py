"""The workspace journal refuses what it cannot trust: entries and directories of another user, symlinks in
its way, entries it cannot read; each with one clear line, none acted on, the user's file untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough.base import MaterializeError
from agentctl.agent.passthrough.journal import Journal, MergeRecord, entry_name
from tests.passthrough.support import request, spec_for

NOBODY = 65534  # a real second uid (the tests run as root, so chown makes the file really someone else's)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    return wd


def merge(workdir: Path, state: Path):
    req = request(spec_for("cursor"), workdir)
    return get_strategy("cursor").materialize(type(req)(req.spec, req.builtin, req.workdir, req.tmpdir, journal=Journal(state)))


def planted(state: Path, workdir: Path, original: bytes) -> Path:
    """A journal entry naming <workdir>/.cursor/mcp.json whose 'original' is attacker-chosen bytes."""
    (state / "journal").mkdir(parents=True, mode=0o700, exist_ok=True)
    record = MergeRecord(workdir=str(workdir), parts=[".cursor", "mcp.json"], original=original, mode=0o644,
                         created_dirs=[], written_sha256="0" * 64, changed=[], pid=1, recorded_at=0.0)
    path = state / "journal" / entry_name(workdir, (".cursor", "mcp.json"))  # where a real entry would be
    path.write_bytes(msgspec.json.encode(record))
    path.chmod(0o600)
    return path


def user_file(workdir: Path) -> Path:
    target = workdir / ".cursor" / "mcp.json"
    target.parent.mkdir()
    target.write_text('{"mcpServers": {"mine": {"command": "x"}}}')
    return target


def test_an_entry_another_user_planted_is_never_acted_on_and_blocks_only_that_file(tmp_path, workdir):
    target = user_file(workdir)
    before = target.read_bytes()
    entry = planted(tmp_path / "state", workdir, b'{"mcpServers": {"evil": {"command": "/tmp/x"}}}')
    os.chown(entry, NOBODY, NOBODY)
    (outcome,) = Journal(tmp_path / "state").recover()
    assert not outcome.done and outcome.detail == "not a journal entry of this user; left alone"
    assert target.read_bytes() == before and entry.exists()
    with pytest.raises(MaterializeError, match="could not be undone .not a journal entry of this user"):
        merge(workdir, tmp_path / "state")
    assert target.read_bytes() == before


def test_a_journal_directory_of_another_user_or_a_symlink_is_refused(tmp_path, workdir):
    state = tmp_path / "state"
    state.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "journal").symlink_to(elsewhere)
    with pytest.raises(MaterializeError, match="a symlink is in the way"):
        merge(workdir, state)
    assert list(elsewhere.iterdir()) == [] and list(workdir.iterdir()) == []
    (state / "journal").unlink()
    (state / "journal").mkdir(mode=0o700)
    os.chown(state / "journal", NOBODY, NOBODY)
    with pytest.raises(MaterializeError, match="belongs to uid 65534, not to this user"):
        merge(workdir, state)
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("content", [
    pytest.param(b"not json at all", id="not_json"),
    pytest.param(b'{"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", id="an_unknown_field_200000_levels_deep"),
])
def test_an_unreadable_entry_is_kept_reported_and_refuses_a_merge_into_its_file(tmp_path, workdir, content):
    target = user_file(workdir)
    entry = planted(tmp_path / "state", workdir, b"{}")
    entry.write_bytes(content)
    (outcome,) = Journal(tmp_path / "state").recover()
    assert (outcome.done, outcome.detail) == (False, "unreadable journal entry; left in place")
    assert outcome.file == str(entry), "the entry itself is named: removing it is the user's call"
    with pytest.raises(MaterializeError, match="could not be undone"):
        merge(workdir, tmp_path / "state")
    assert json.loads(target.read_text()) == {"mcpServers": {"mine": {"command": "x"}}}


def test_a_merge_is_journaled_0600_before_the_file_changes_and_the_entry_goes_with_the_undo(tmp_path, workdir):
    from agentctl.agent.passthrough.workspace import cleanup

    state = tmp_path / "state"
    state.mkdir()  # the daemon's state directory, made at its start
    target = user_file(workdir)
    original = target.read_bytes()
    mat = merge(workdir, state)
    (entry,) = (state / "journal").iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600 and (state / "journal").stat().st_mode & 0o777 == 0o700
    record = msgspec.json.decode(entry.read_bytes(), type=MergeRecord)
    assert record.original == original and (".cursor", "mcp.json") == tuple(record.parts)
    assert sorted(tuple(c) for c in record.changed) == [("mcpServers", n) for n in ("docs", "events", "fs", "kandev")]
    cleanup(mat)
    assert target.read_bytes() == original and list((state / "journal").iterdir()) == []


def test_an_entry_whose_undo_fails_unexpectedly_is_kept_in_one_line_and_another_entry_is_still_recovered(tmp_path):
    import hashlib

    from agentctl.agent.passthrough.recovery import recover

    state, bad, good = tmp_path / "state", tmp_path / "bad", tmp_path / "good"
    for wd in (bad, good):
        wd.mkdir()
    bad_target = user_file(bad)
    before = bad_target.read_bytes()
    entry = planted(state, bad, b"{}")
    record = msgspec.json.decode(entry.read_bytes(), type=MergeRecord)
    entry.write_bytes(msgspec.json.encode(msgspec.structs.replace(record, changed=[[]])))  # a key path of nothing
    good_target = user_file(good)
    good_target.write_bytes(b'{"ours": 1}')
    good_entry = planted(state, good, b'{"the user": "original"}')
    record = msgspec.json.decode(good_entry.read_bytes(), type=MergeRecord)
    good_entry.write_bytes(msgspec.json.encode(msgspec.structs.replace(
        record, written_sha256=hashlib.sha256(b'{"ours": 1}').hexdigest())))
    outcomes = {o.file: o for o in recover(state, tmp_path / "no-private-dirs")}
    kept = outcomes[str(bad_target)]
    assert not kept.done and "(IndexError)" in kept.detail and "kept for a person to decide" in kept.detail
    assert bad_target.read_bytes() == before and entry.exists()
    assert outcomes[str(good_target)].done and good_target.read_bytes() == b'{"the user": "original"}'
    assert not good_entry.exists()
