"""Fixtures of the passthrough tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.passthrough.support import World


@pytest.fixture(autouse=True)
def gemini_trusts_the_workdir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini CLI trusts the test's folder (as `GEMINI_CLI_TRUST_WORKSPACE=true` makes it), so the tests of
    writing and restoring its settings see them written; tests of an untrusted folder delete the variable."""
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")


@pytest.fixture
def world(tmp_path: Path, short_tmp: Path) -> World:
    w = World(tmp_path, tmp_path / "work", tmp_path / "state", tmp_path / "private", short_tmp)
    for d in (w.workdir, w.private):
        d.mkdir()
    return w
