"""Helpers shared by the packaging tests: packaging/build.py loaded as a module."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.conftest import REPO


def load_build_module() -> ModuleType:
    # By path: the directory is called `packaging`, like the PyPI package that pip and setuptools import.
    spec = importlib.util.spec_from_file_location("agentctl_packaging_build", REPO / "packaging" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
