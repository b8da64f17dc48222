"""What an agent writes into its workspace never stops the host: real `agentctl serve` daemons (cursor and
gemini strategies) whose workspace file is hostile (nested 200,000 levels, a 5,000-digit integer, huge,
invalid UTF-8, binary, empty, a symlink, a FIFO, a directory in its place) before the start, during the run,
or after the daemon's SIGKILL. Every daemon stops without a traceback, every other execution sharing the
state directory still starts and merges, `agentctl recover` exits 1 with one line per entry it kept, and
the user's original is never lost: the hostile thing is left exactly as it is, the original stays in the
journal for a person to decide.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough.base import MAX_WORKSPACE_FILE_BYTES, Materialization, MaterializeError
from agentctl.agent.passthrough.journal import JOURNAL_DIR, Journal, MergeRecord, entry_name
from agentctl.agent.passthrough.recovery import recover
from agentctl.agent.passthrough.workspace import cleanup
from tests.conftest import REPO
from tests.passthrough.support import World, journal, kill, ready, request, spec_for, tree

KINDS = ("deep", "number", "huge", "invalid-utf8", "binary", "empty", "symlink", "fifo", "directory")
STEPS = ("before", "during", "killed")  # before the start, during the run, after the daemon's SIGKILL
NO_SHRINK = (Phase.explicit, Phase.generate)  # each example runs real processes: a failure is reported as found
PARTS = {"cursor": (".cursor", "mcp.json"), "gemini": (".gemini", "settings.json")}


@dataclass(frozen=True)
class Hostile:
    kind: str
    n: int = 200_000  # depth, digits, or bytes over the size bound
    blob: bytes = b"\x00"


def original_for(i: int) -> bytes:
    return (f'// workspace {i}: the user\'s own file, comment included\n'
            f'{{"mcpServers": {{"mine-{i}": {{"command": "my-server"}}}}, "other": {{"kept": {i}}}}}\n').encode()


def place(path: Path, hostile: Hostile, elsewhere: Path) -> None:
    """Put the hostile thing where the workspace file is (whatever is there goes, as an agent would do it)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(exist_ok=True)
    kind, n = hostile.kind, hostile.n
    if kind == "symlink":
        elsewhere.write_bytes(b'{"mcpServers": {}}\n')
        path.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(path, 0o644)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"the agent's, or the user's")
    else:
        path.write_bytes({
            "deep": lambda: b"[" * n + b"]" * n,
            "number": lambda: b'{"mcpServers": {}, "n": ' + b"9" * n + b"}",
            "huge": lambda: b'{"mcpServers": {}, "pad": "' + b"x" * (MAX_WORKSPACE_FILE_BYTES + n) + b'"}',
            "invalid-utf8": lambda: b'{"mcpServers": {}, "s": "\xff\xfe"}',
            "binary": lambda: b"\x00" + hostile.blob,
            "empty": lambda: b"",
        }[kind]())


def snapshot(path: Path) -> tuple:
    """What is at `path`, exactly enough to tell whether anyone changed it."""
    st_ = os.lstat(path)
    if stat.S_ISLNK(st_.st_mode):
        return ("symlink", os.readlink(path), Path(os.readlink(path)).read_bytes())
    if stat.S_ISFIFO(st_.st_mode):
        return ("fifo", stat.S_IMODE(st_.st_mode))
    if stat.S_ISDIR(st_.st_mode):
        return ("directory", {p.name: p.read_bytes() for p in path.iterdir()})
    return ("file", hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st_.st_mode))


def kept_original(world: World, workdir: Path, parts: tuple[str, ...]) -> bytes | None:
    entry = world.state / JOURNAL_DIR / entry_name(workdir, parts)
    return msgspec.json.decode(entry.read_bytes(), type=MergeRecord).original


def assert_no_traceback(text: str) -> None:
    for sign in ("Traceback", "never retrieved", "RecursionError", "MemoryError"):
        assert sign not in text, text[-3000:]


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def another_execution_starts_and_merges(world: World, strategy: str = "cursor") -> None:
    """A fresh execution on the same state directory, its own workspace: it starts, merges, and restores."""
    other = world.root / "other-ws"
    other.mkdir()
    proc = world.serve(world.spec("exec-other", strategy, workdir=other), sock=f"{world.root.name[-12:]}-o.sock")
    try:
        ready(proc)
        assert json.loads((other.joinpath(*PARTS[strategy])).read_text())["mcpServers"], "its merge is in place"
    finally:
        stop(proc)
    assert tree(other) == [], "its file, which did not exist, is removed again"
    assert_no_traceback((world.root / "exec-other.log").read_text())


def assert_recover_reports(world: World, kept: list[Path]) -> None:
    result = world.recover(json_output=False)
    assert_no_traceback(result.stdout + result.stderr)
    assert result.returncode == (1 if kept else 0), result.stdout + result.stderr
    lines = result.stdout.splitlines()
    if not kept:
        assert lines == [f"nothing to recover (state directory {world.state})"]
        return
    assert sorted(line.split(": ", 1)[0] for line in lines) == sorted(f"left  {p}" for p in kept), lines
    assert all("kept for a person to decide" in line for line in lines)


# -- the report, as it was filed ------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "hostile"), [
    pytest.param("cursor", Hostile("deep", 200_000), id="cursor-200000_levels"),
    pytest.param("gemini", Hostile("number", 5_000), id="gemini-5000_digits"),
])
def test_a_hostile_file_written_during_the_run_stops_nothing_and_keeps_the_users_original(world, strategy, hostile):
    target = world.workdir.joinpath(*PARTS[strategy])
    target.parent.mkdir()
    target.write_bytes(original_for(0))
    proc = world.serve(world.spec(strategy=strategy))
    try:
        ready(proc)
        assert "kandev" in json.loads(target.read_text())["mcpServers"]
        place(target, hostile, world.root / "elsewhere")
        left = snapshot(target)
    finally:
        stop(proc)
    log = (world.root / "exec-test.log").read_text()
    assert_no_traceback(log)
    assert [line for line in log.splitlines() if "could not undo agentctl's merge" in line], log
    assert snapshot(target) == left, "what the agent wrote is left as it is"
    assert kept_original(world, world.workdir.resolve(), PARTS[strategy]) == original_for(0)
    another_execution_starts_and_merges(world, strategy)
    assert_recover_reports(world, [target])
    assert len(journal(world)) == 1, "the entry stays until a person decides"
    # A person decides: the hostile thing goes, the original comes back from the journal by hand, and the
    # next recover has nothing left to do.
    place(target, Hostile("empty"), world.root / "elsewhere")
    target.write_bytes(kept_original(world, world.workdir.resolve(), PARTS[strategy]))
    result = world.recover(json_output=False)
    assert result.returncode == 0 and result.stdout.startswith(f"recovered  {target}: "), result.stdout
    assert target.read_bytes() == original_for(0) and journal(world) == []


# -- every hostile kind at every step, many executions on one state directory -------------------------


def hostile_files() -> st.SearchStrategy[Hostile]:
    n_for = {"deep": st.integers(65, 200_000), "number": st.integers(101, 20_000), "huge": st.integers(1, 1 << 16)}
    return st.sampled_from(KINDS).flatmap(lambda kind: st.builds(
        Hostile, st.just(kind), n_for.get(kind, st.just(1)), st.binary(max_size=4096)))


def _rotation(shift: int) -> list[tuple[Hostile, str]]:
    return [(Hostile(kind, 200_000 if kind == "deep" else 5_000 if kind == "number" else 1), STEPS[(i + shift) % 3])
            for i, kind in enumerate(KINDS)]


@pytest.mark.timeout(400)
@settings(max_examples=1, deadline=None, derandomize=True, database=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases=st.lists(st.tuples(hostile_files(), st.sampled_from(STEPS)), min_size=1, max_size=3))
@example(cases=_rotation(0))  # every kind once, every step three times; the in-process test below takes every pair
def test_hostile_workspace_files_at_every_step_never_stop_another_execution_nor_lose_an_original(world, cases):
    run = world.root / f"run-{hashlib.sha256(repr(cases).encode()).hexdigest()[:8]}"
    run.mkdir()
    world = World(run, run / "unused", run / "state", world.private, world.short)
    workdirs = [run / f"ws{i}" for i in range(len(cases))]
    targets = [w.joinpath(*PARTS["cursor"]) for w in workdirs]
    snapshots: dict[int, tuple] = {}
    for i, ((hostile, step), workdir, target) in enumerate(zip(cases, workdirs, targets, strict=True)):
        target.parent.mkdir(parents=True)
        if step == "before":
            place(target, hostile, run / f"elsewhere{i}")
            snapshots[i] = snapshot(target)
        else:
            target.write_bytes(original_for(i))
    procs = [world.serve(world.spec(f"exec-{i}", workdir=w), sock=f"{run.name}-{i}.sock") for i, w in enumerate(workdirs)]
    try:
        for i, ((hostile, step), proc, target) in enumerate(zip(cases, procs, targets, strict=True)):
            ready(proc)
            if step == "before":
                continue
            assert "kandev" in json.loads(target.read_text())["mcpServers"]
            if step == "killed":
                kill(proc)
            place(target, hostile, run / f"elsewhere{i}")
            snapshots[i] = snapshot(target)
        for (_hostile, step), proc in zip(cases, procs, strict=True):
            if step != "killed":
                stop(proc)
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill(proc)
    for i, (_hostile, step) in enumerate(cases):
        assert_no_traceback((run / f"exec-{i}.log").read_text())
    another_execution_starts_and_merges(world)
    for i, ((_hostile, step), workdir, target) in enumerate(zip(cases, workdirs, targets, strict=True)):
        assert snapshot(target) == snapshots[i], f"workspace {i} ({step}): left exactly as it was"
        if step != "before":
            assert kept_original(world, workdir.resolve(), PARTS["cursor"]) == original_for(i)
    assert_recover_reports(world, [t for (_h, step), t in zip(cases, targets, strict=True) if step != "before"])


# -- every kind at every step, in process: the same strategy, journal and recovery code a daemon runs -----

_MERGE_AND_WAIT = """
import dataclasses, signal, sys
from pathlib import Path
from agentctl.agent.clis import get_strategy
from agentctl.agent.passthrough.journal import Journal
from tests.passthrough.support import request, spec_for
state, workdir, strategy = sys.argv[1:]
req = request(spec_for(strategy), Path(workdir))
get_strategy(strategy).materialize(dataclasses.replace(req, journal=Journal(Path(state))))
print("merged", flush=True)
signal.pause()  # held until the test kills it
"""


def merge(strategy: str, workdir: Path, state: Path) -> Materialization:
    req = request(spec_for(strategy), workdir)
    return get_strategy(strategy).materialize(dataclasses.replace(req, journal=Journal(state)))


def merged_then_sigkilled(strategy: str, workdir: Path, state: Path) -> None:
    """A real process merges (journal entry written, lock held) and is SIGKILLed while the merge stands."""
    proc = subprocess.Popen([sys.executable, "-c", _MERGE_AND_WAIT, str(state), str(workdir), strategy], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "merged\n", proc.stderr.read()
    finally:
        kill(proc)


def every_kind_at_every_step(test):
    """Explicit examples: each hostile kind at each step (the issue's sizes), the strategies taking turns."""
    for i, (hostile, _step) in enumerate(_rotation(0)):
        for j, step in enumerate(STEPS):
            test = example(hostile=hostile, step=step, strategy=sorted(PARTS)[(i + j) % 2])(test)
    return test


@settings(max_examples=20, deadline=None, derandomize=True, database=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile=hostile_files(), step=st.sampled_from(STEPS), strategy=st.sampled_from(sorted(PARTS)))
@every_kind_at_every_step
def test_every_hostile_kind_at_every_step_is_left_alone_reported_in_one_line_and_blocks_no_other_merge(
        tmp_path, caplog, hostile, step, strategy):
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    state, workdir, other = root / "state", root / "ws", root / "other"
    for d in (state, workdir, other):
        d.mkdir()
    target = workdir.joinpath(*PARTS[strategy])
    target.parent.mkdir()
    caplog.clear()
    if step == "before":
        place(target, hostile, root / "elsewhere")
        before = snapshot(target)
        try:
            cleanup(merge(strategy, workdir, state))  # an empty file is merged into, and given back as it was
        except MaterializeError as exc:
            assert "\n" not in exc.summary and hostile.kind != "empty"
        assert snapshot(target) == before and journal_entries(state) == []
    else:
        target.write_bytes(original_for(1))
        if step == "during":
            mat = merge(strategy, workdir, state)
            place(target, hostile, root / "elsewhere")
            left = snapshot(target)
            cleanup(mat)  # the stop: raises nothing, logs one line
        else:
            merged_then_sigkilled(strategy, workdir, state)
            place(target, hostile, root / "elsewhere")
            left = snapshot(target)
        assert snapshot(target) == left, "what is in the file's place is left exactly as it is"
        (outcome,) = recover(state, root / "no-private-dirs")  # what a daemon's start and `agentctl recover` run
        assert not outcome.done and outcome.file == str(target) and "\n" not in outcome.detail
        assert snapshot(target) == left
        assert msgspec.json.decode(journal_entries(state)[0].read_bytes(), type=MergeRecord).original == original_for(1)
    cleanup(merge(strategy, other, state))  # another execution on the same state directory merges and restores
    assert tree(other) == []
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in caplog.records)


def journal_entries(state: Path) -> list[Path]:
    directory = state / JOURNAL_DIR
    return sorted(directory.iterdir()) if directory.exists() else []
