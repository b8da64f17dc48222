"""Owns loading an execution spec from its file: the bytes read, parsed by the pure agentctl.spec, then the
agent's working directory and executable checked against this host (the file system and $PATH), so `run`,
`serve` and `spec check` refuse a spec that could never start before starting anything."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from agentctl.bundled import bundled_command
from agentctl.spec import Spec, SpecError, parse_spec, spec_error


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file; raises SpecError with a one-line, value-free message."""
    p = Path(path)
    source = str(p)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{source}: file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{source}: is a directory, expected a TOML or JSON file") from None
    except PermissionError:
        raise SpecError(f"{source}: permission denied") from None
    except OSError as exc:
        raise SpecError(f"{source}: cannot read ({exc.strerror})") from None
    spec = parse_spec(raw, source=source, fmt="json" if p.suffix.lower() == ".json" else "toml")
    if (problem := unusable_workdir(spec)) is not None:
        raise spec_error(source, "agent.workdir", problem)
    if (problem := missing_executable(spec)) is not None:
        raise spec_error(source, "agent.command", problem)
    return spec


def unusable_workdir(spec: Spec) -> str | None:
    """Why the agent cannot start in its `workdir`, or None: a directory that does not exist, is not a
    directory, or cannot be entered. Relative to where agentctl runs, as the agent's start takes it. Checked
    at load like the executable, naming the directory (a path the spec chose, not a secret)."""
    if spec.agent is None or spec.agent.workdir is None:
        return None
    workdir = spec.agent.workdir
    shown = _quote(workdir)
    if not workdir:
        return "must be a directory path (leave it out to run the agent where agentctl runs)"
    if not os.path.exists(workdir):
        return f"directory {shown} does not exist"
    if not os.path.isdir(workdir):
        return f"{shown} is not a directory"
    if not os.access(workdir, os.X_OK):
        return f"directory {shown} cannot be entered (permission denied)"
    return None


def missing_executable(spec: Spec) -> str | None:
    """Why the agent's executable cannot be started, or None: a bare name that is not on PATH (nor beside
    this interpreter, nor bundled), or a path that does not exist or is not an executable file.

    Resolved as the agent's start resolves it (agentctl.agent.manager.resolve_command); a relative path is
    relative to `workdir`. Checked when the spec is loaded, so `run` and `serve` say it before starting
    anything rather than recording `agent_start_failed` for a daemon that could never have worked. The
    name is quoted (it is the program, never an argument); the message stays one printable line.
    """
    if spec.agent is None:
        return None
    first = spec.agent.command[0]
    shown = _quote(first)
    if os.sep not in first:
        search = os.pathsep.join(filter(None, [os.environ.get("PATH", ""), os.path.dirname(sys.executable)]))
        if shutil.which(first, path=search) is None and bundled_command(first) is None:
            return f"executable {shown} not found on PATH"
        return None
    path = os.path.join(spec.agent.workdir or ".", first)
    if not os.path.exists(path):
        return f"executable {shown} does not exist"
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        return f"{shown} is not an executable file"
    return None


def _quote(text: str, limit: int = 120) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
