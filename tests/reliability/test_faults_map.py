"""FAULTS.md stays true: every test it names exists, so the map cannot point at a renamed or deleted proof."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

MAP = REPO / "tests" / "reliability" / "FAULTS.md"


def _test_names(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith(("test_", "Test"))}


def test_every_test_the_fault_map_names_exists():
    named = re.findall(r"(tests/[\w/]+\.py)::(\w+)", MAP.read_text())
    assert len(named) >= 25  # the map covers the whole fault list
    missing = [f"{path}::{name}" for path, name in named
               if not (REPO / path).is_file() or name not in _test_names(REPO / path)]
    assert missing == []
