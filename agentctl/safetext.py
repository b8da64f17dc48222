"""Owns showing outside text to people safely: control and bidi characters become visible escapes.

Text that came from a frame, an agent or a server may carry an escape sequence (which rewrites a terminal),
a line break (which forges a log line or a status line) or a bidi override (which reorders what is shown).
Every log line and error line passes such text through `neutralize`, which shows each of those characters
as a visible escape (`\\x1b`, `\\x0a`, `\\u202e`): nothing is hidden or lost. Human renderings use
`neutralize_data`, which does the same except that tabs and line breaks become spaces (a tool description
written on two lines reads as one; no line can be forged either way). `--json` output needs none of this:
JSON escapes control characters itself, and it must stay exactly what was stored. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["neutralize", "neutralize_data"]

# C0 (tab and line breaks included: one field is one line), DEL, C1; the bidi embeddings, overrides and
# isolates, the implicit direction marks, and the Unicode line and paragraph separators.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SPACES = frozenset("\t\n\r\x0b\x0c\u2028\u2029")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _visible_or_space(match: re.Match[str]) -> str:
    return " " if match.group() in _SPACES else _visible(match)


def neutralize(text: str, *, spaces: bool = False) -> str:
    """`text` with every control, bidi and line-separator character written as a visible escape; with
    `spaces`, tabs and line breaks become spaces instead."""
    if not isinstance(text, str) or not text:
        return text
    return _UNSAFE.sub(_visible_or_space if spaces else _visible, text)


# Fields whose text keeps its line breaks: a tool's description, which renderers lay out line by line (each
# line indented under its heading, so a break can only start another line of the same description).
MULTILINE_FIELDS = frozenset({"description"})


def _multiline(text: Any) -> Any:
    if not isinstance(text, str):
        return neutralize_data(text)
    if not _UNSAFE.search(text):
        return text
    return "\n".join(neutralize(line, spaces=True) for line in text.split("\n"))


def neutralize_data(value: Any) -> Any:
    """`value` (builtins or contract structs, nested) with `neutralize(..., spaces=True)` applied to every
    string in it, keys included, for human rendering (MULTILINE_FIELDS keep their line breaks). Unchanged
    strings and structs are returned as they are, so clean data costs one scan."""
    if isinstance(value, str):
        return neutralize(value, spaces=True)
    if isinstance(value, dict):
        return {
            neutralize_data(k): _multiline(v) if k in MULTILINE_FIELDS else neutralize_data(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [neutralize_data(item) for item in value]
    if type(value) is tuple:
        return tuple(neutralize_data(item) for item in value)
    if hasattr(value, "__struct_fields__"):  # a contract struct (msgspec imported only when one comes)
        import msgspec

        changed = {}
        for name in value.__struct_fields__:
            item = getattr(value, name)
            clean = _multiline(item) if name in MULTILINE_FIELDS else neutralize_data(item)
            if clean is not item:
                changed[name] = clean
        return msgspec.structs.replace(value, **changed) if changed else value
    return value
