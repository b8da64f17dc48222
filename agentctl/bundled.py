"""Owns how this agentctl runs itself again (venv, zipapp, frozen build) and the commands it bundles.

A spec may name `agentctl-reference-agent` as its agent. In a virtual environment that is a console
script beside the interpreter; a shiv zipapp or a PyInstaller build has no such file, so the same agent
is reached as the hidden `agentctl reference-agent` subcommand of whichever agentctl is running.
"""

from __future__ import annotations

import os
import sys
import zipfile

# Console scripts of the wheel, mapped to the hidden `agentctl` subcommand that runs the same code.
BUNDLED_COMMANDS = {"agentctl-reference-agent": "reference-agent"}


def self_command() -> list[str]:
    """argv that starts this same agentctl: the frozen binary, the zipapp, or the package's module."""
    if getattr(sys, "frozen", False):
        # PyInstaller: sys.executable is the bootloader binary, not a Python interpreter.
        return [sys.executable]
    launcher = sys.argv[0] if sys.argv else ""
    if launcher and os.path.isfile(launcher) and zipfile.is_zipfile(launcher):
        # A zipapp (shiv) runs with the archive as argv[0]; absolute because the agent's cwd differs.
        return [sys.executable, os.path.abspath(launcher)]
    return [sys.executable, "-m", "agentctl.cli"]


def bundled_command(name: str) -> list[str] | None:
    """argv for a console script this agentctl carries inside itself, or None for any other name."""
    sub = BUNDLED_COMMANDS.get(name)
    if sub is None:
        return None
    return [*self_command(), sub]
