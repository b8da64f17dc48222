"""Generated blocks inside committed docs: replace the text between two markers, and the `--doc PATH` entry
point the generators share (`make schema` runs them; drift tests compare the docs with the generators)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path


def replace_block(path: str, begin: str, end: str, body: str) -> None:
    """Rewrite `path` with `body` between its one `begin` ... `end` pair of markers (kept)."""
    doc = Path(path)
    block = f"{begin}\n{body}{end}"
    text, count = re.subn(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, doc.read_text(), flags=re.S)
    if count != 1:
        raise SystemExit(f"{path}: no {begin!r} ... {end!r} markers")
    doc.write_text(text)


def markdown_table(header: tuple[str, str], rows: list[tuple[str, str]]) -> str:
    """A two-column Markdown table, as the generated blocks carry one."""
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows)]
    return "\n".join(lines) + "\n"


def doc_main(render: Callable[[], str], begin: str, end: str) -> None:
    """`python -m MODULE` prints the generated text; `python -m MODULE --doc PATH` updates PATH's block."""
    if sys.argv[1:2] == ["--doc"] and len(sys.argv) == 3:
        replace_block(sys.argv[2], begin, end, render())
    else:
        sys.stdout.write(render())
