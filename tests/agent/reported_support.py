"""The captured CLI output of tests/agent/data/reported/ as the bytes the CLI wrote (see its README)."""

from __future__ import annotations

import json
import re
from pathlib import Path

DATA = Path(__file__).parent / "data" / "reported"
_STAMP = re.compile(rb"^ *\d+\.\d{3} ")


def stdout_of(name: str) -> bytes:
    """A CLI's stdout: a `.stdout` file as it is, a `.stamped` one without its time prefixes and EXIT line."""
    data = (DATA / name).read_bytes()
    if not name.endswith(".stamped"):
        return data
    lines = [_STAMP.sub(b"", line, count=1) for line in data.splitlines(keepends=True)]
    return b"".join(line for line in lines if not line.startswith(b"EXIT "))


def codex_stdout(name: str = "codex-app-server-nokey.jsonl") -> bytes:
    """Every frame Codex sent, one JSON line each, in the order it sent them."""
    frames = [json.loads(line) for line in (DATA / name).read_text().splitlines()]
    return b"".join(json.dumps(f["frame"], ensure_ascii=False).encode() + b"\n" for f in frames if f["dir"] == "in")
