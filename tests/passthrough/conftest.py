"""Fixtures of the passthrough tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def gemini_trusts_the_workdir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini CLI trusts the test's folder (as `GEMINI_CLI_TRUST_WORKSPACE=true` makes it), so the tests of
    writing and restoring its settings see them written; tests of an untrusted folder delete the variable."""
    monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
