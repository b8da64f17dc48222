"""A real `agentctl serve` killed with SIGKILL at every step of writing or restoring a merged workspace file:
the user's file is never lost, never left holding the attempt's secrets once recovered, and agentctl's own
output is never taken for the user's original; private config directories of dead daemons are removed.

The daemon is stopped at a named step by the test-only hook (AGENTCTL_TEST_PAUSE_AT, which blocks the writer
there for good and drops a marker file), then SIGKILLed: the crash is real, only its timing is chosen.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, agentctl_cmd, poll
from tests.passthrough.support import CANARIES, World, journal, kill, mode, ready, tree

ORIGINAL = b"""// the user's own servers, with a comment agentctl must give back too
{
  "mcpServers": {
    "mine": {"command": "my-server", "args": []},
    "docs": {"url": "https://old.example.com/mcp"}
  },
  "other": {"kept": true}
}
"""
OURS = {"kandev", "docs", "events", "fs"}  # what the spec's servers put into the file


def user_file(world: World) -> None:
    world.target.parent.mkdir()
    world.target.write_bytes(ORIGINAL)
    world.target.chmod(0o644)


def killed_at(world: World, step: str | None) -> None:
    """Start a daemon, stop it for good at `step` (None: while the CLI runs), SIGKILL it there."""
    marker = world.root / "paused"
    env = {"AGENTCTL_TEST_PAUSE_AT": step, "AGENTCTL_TEST_PAUSE_FILE": str(marker)} if step else {}
    proc = world.serve(world.spec(), **env)
    try:
        if step is None or step.startswith("restore"):
            ready(proc)
            assert set(json.loads(world.target.read_text())["mcpServers"]) >= OURS
        if step is not None:
            if step.startswith("restore"):
                proc.send_signal(signal.SIGTERM)  # the ordered stop restores the file: killed in the middle
            poll(marker.exists, timeout=60, what=f"the daemon to reach {step}")
            assert marker.read_text() == step
    finally:
        kill(proc)


def secrets_in(paths: list[str]) -> list[str]:
    found = []
    for path in paths:
        data = Path(path).read_bytes()
        found += [f"{path}: {c}" for c in CANARIES if c.encode() in data]
    return found


def assert_recovered(world: World, result: subprocess.CompletedProcess[str], original: bytes | None) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    body = json.loads(result.stdout)
    assert body["left"] == []
    if original is None:
        assert tree(world.workdir) == [], "nothing of agentctl's is left, not even the .cursor directory it made"
    else:
        assert world.target.read_bytes() == original and mode(world.target) == 0o644
        assert tree(world.workdir) == [".cursor", ".cursor/mcp.json"], "no temp file is left beside it"
    assert journal(world) == [], "the journal entry (the user's original) is gone"
    assert list(world.private.iterdir()) == [], "the dead daemon's private directory is gone"
    assert secrets_in(world.leftovers()) == []
    return body


STEPS = ["journal-temp", "journal", "merge-temp", "merge", None, "restore-temp", "restore"]


@pytest.mark.parametrize("step", STEPS, ids=[s or "running" for s in STEPS])
def test_a_daemon_killed_at_any_step_of_a_merge_gives_the_users_file_back_byte_for_byte(world, step):
    user_file(world)
    killed_at(world, step)
    if step in ("merge", None, "restore-temp"):
        assert secrets_in([str(world.target)]), "the killed daemon's merge is still in the user's file"
    assert_recovered(world, world.recover(), ORIGINAL)
    assert json.loads(world.recover().stdout) == {"state_dir": str(world.state), "recovered": [], "left": []}


@pytest.mark.parametrize("step", ["journal", "merge", None], ids=["journal", "merge", "running"])
def test_a_file_that_did_not_exist_is_removed_with_the_directory_agentctl_made(world, step):
    killed_at(world, step)
    assert_recovered(world, world.recover(), None)


def test_the_next_daemon_for_the_workdir_recovers_first_and_never_takes_the_leftover_for_the_original(world):
    user_file(world)
    killed_at(world, None)
    leftover = world.target.read_bytes()
    proc = world.serve(world.spec("exec-next"), sock="n.sock")
    try:
        ready(proc)
        merged = world.target.read_bytes()
        assert merged != leftover, "a new merge with a new token, on top of the user's file"
        assert json.loads(merged)["other"] == {"kept": True}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert world.target.read_bytes() == ORIGINAL and mode(world.target) == 0o644
    assert "recovered after a killed daemon" in (world.root / "exec-next.log").read_text()
    assert journal(world) == [] and list(world.private.iterdir()) == []


def test_a_file_the_user_edited_after_the_crash_keeps_the_edits_and_loses_only_agentctls_entries(world):
    user_file(world)
    killed_at(world, None)
    doc = json.loads(world.target.read_text())
    doc["mcpServers"]["added-by-user"] = {"url": "https://user.example.com/mcp"}
    doc["other"] = {"kept": True, "edited": 1}
    world.target.write_text(json.dumps(doc))
    result = world.recover()
    assert result.returncode == 0, result.stdout
    assert [o["detail"] for o in json.loads(result.stdout)["recovered"] if o["file"] == str(world.target)] == [
        "took agentctl's entries out of the file the user edited since"]
    assert json.loads(world.target.read_text()) == {
        "mcpServers": {
            "mine": {"command": "my-server", "args": []},
            "docs": {"url": "https://old.example.com/mcp"},  # the user's own entry of that name is back
            "added-by-user": {"url": "https://user.example.com/mcp"},
        },
        "other": {"kept": True, "edited": 1},
    }
    assert secrets_in(world.leftovers()) == [] and journal(world) == []


def test_an_edit_that_broke_the_file_keeps_the_journal_until_it_is_fixed(world):
    user_file(world)
    killed_at(world, None)
    broken = world.target.read_text().replace("{", "{{", 1)
    world.target.write_text(broken)
    result = world.recover()
    assert result.returncode == 1
    (left,) = json.loads(result.stdout)["left"]
    assert left["file"] == str(world.target) and "no longer a JSON object" in left["detail"]
    assert world.target.read_text() == broken, "an unreadable edit is the user's: left as it is"
    assert len(journal(world)) == 1, "the original stays recoverable"
    # The next daemon for that file refuses to merge rather than take the broken file for the original.
    proc = world.serve(world.spec("exec-next"), sock="n.sock")
    try:
        ready(proc)
        status = json.loads(subprocess.run(agentctl_cmd("status", "--socket", str(world.short / "n.sock"), "--json"),
                                           cwd=REPO, capture_output=True, text=True, timeout=30).stdout)
        assert {r["name"]: r["status"] for r in status["current"]["servers"]} == dict.fromkeys(OURS, "unavailable")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    # Fixed back to exactly what agentctl wrote: that is agentctl's output, so the original comes back.
    world.target.write_text(broken.replace("{{", "{", 1))
    assert_recovered(world, world.recover(), ORIGINAL)


def test_a_live_daemons_files_are_left_alone_and_a_second_daemon_cannot_merge_into_them(world):
    user_file(world)
    first = world.serve(world.spec())
    try:
        ready(first)
        merged = world.target.read_bytes()
        entries = journal(world)
        assert [mode(p) for p in entries] == [0o600] and mode(world.state / "journal") == 0o700
        assert secrets_in([str(p) for p in entries]) == [], "the journal holds the original, never what agentctl wrote"
        (private,) = world.private.iterdir()
        result = world.recover()
        assert result.returncode == 0 and json.loads(result.stdout)["recovered"] == []
        assert world.target.read_bytes() == merged and private.exists() and entries[0].exists()
        second = world.serve(world.spec("exec-two"), sock="two.sock")
        try:
            ready(second)
            report = json.loads(subprocess.run(agentctl_cmd("report", "--socket", str(world.short / "two.sock"), "--json"),
                                               cwd=REPO, capture_output=True, text=True, timeout=30).stdout)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
        errors = [e for e in report["current"]["evidence"] if e["kind"] == "explicit_error"]
        assert [e["reason_code"] for e in errors] == ["materialize_failed"]
        assert "another running agentctl daemon" in errors[0]["summary"]
        assert world.target.read_bytes() == merged, "the second daemon neither merged nor restored"
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
    assert world.target.read_bytes() == ORIGINAL
    assert journal(world) == [] and list(world.private.iterdir()) == []


def test_a_dead_daemons_private_config_directory_is_removed_and_a_live_ones_kept(world):
    proc = world.serve(world.spec(strategy="claude"))
    try:
        ready(proc)
        (private,) = world.private.iterdir()
        assert secrets_in([str(p) for p in private.rglob("*") if p.is_file()]), "claude's --mcp-config file"
        assert json.loads(world.recover().stdout)["recovered"] == [] and private.exists()
    finally:
        kill(proc)
    assert private.exists(), "SIGKILL left it behind"
    body = assert_recovered(world, world.recover(), None)
    assert [o["file"] for o in body["recovered"]] == [str(private)]


def test_a_sigterm_while_the_merge_hangs_is_still_a_bounded_stop_and_the_journal_undoes_the_merge(world):
    # The writer is stuck for good after replacing the file (as on a hung disk): the stop cannot wait for it.
    user_file(world)
    spec = world.spec()
    spec.write_text(spec.read_text() + "\n[daemon]\nshutdown_timeout = 2\n")
    marker = world.root / "paused"
    proc = world.serve(spec, AGENTCTL_TEST_PAUSE_AT="merge", AGENTCTL_TEST_PAUSE_FILE=str(marker))
    try:
        poll(marker.exists, timeout=60, what="the merge to hang")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            kill(proc)
    assert time.monotonic() - started < 2 + 3 + 5 + 5, "shutdown_timeout, abort and the worker-thread bound"
    assert proc.stdout.read() == b"", "it never became ready"
    assert secrets_in([str(world.target)]), "the stuck writer's merge is in the file: the journal has it"
    assert_recovered(world, world.recover(), ORIGINAL)
