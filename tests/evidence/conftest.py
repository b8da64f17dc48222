"""Fixtures of the evidence tests: a history inside one open attempt, with a clock the test moves by hand."""

from __future__ import annotations

import pytest

from tests.evidence.test_reducer import World


@pytest.fixture
def world() -> World:
    w = World()
    w.begin()
    return w
