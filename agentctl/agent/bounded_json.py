"""Bounded parsing of JSON (with `//` and `/* */` comments) that a user or an agent wrote: size, nesting depth and number length checked before any parser recursion or big-integer conversion can run. Pure: no I/O.

A file that an agent may write (a workspace's `.cursor/mcp.json`, `.gemini/settings.json`, Gemini's own
settings) is hostile input: JSON nested 200,000 levels deep makes `json.loads` (and every later
`copy.deepcopy`, `==` or `json.dumps` of the result) raise RecursionError, an integer of 5,000 digits raises
ValueError, and a megabyte of `/*` makes a backtracking comment pattern quadratic. Here every pattern is
possessive (linear in the text), the checks run on the text before it is parsed, and whatever fails any of
them is `Unparseable`, with a reason that names a bound, never a value: the caller leaves such a file alone.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64  # real configurations nest a handful of levels; Python's recursion limit is 1,000
MAX_NUMBER_CHARS = 100  # a double needs 24; Python refuses integers over 4,300 digits with a ValueError

# Possessive (`*+`, `++`): a token never backtracks, so one pass over the text is linear whatever it holds. An
# unterminated string or block comment runs to the end (as strip-json-comments reads it) instead of failing.
_STRING = r'"(?:[^"\\]++|\\.)*+"?'
_TOKEN = re.compile(rf'{_STRING}|//[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/)?', re.DOTALL)
_STRING_ONLY = re.compile(_STRING, re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_LONG_NUMBER = re.compile(rf"[-+.0-9eE]{{{MAX_NUMBER_CHARS + 1}}}")
_EMPTY = "is empty"
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class Unparseable(ValueError):
    """The text is not JSON this module will hand back: `reason` says which bound or rule, never a value,
    worded to follow the file's name ("is nested deeper than 64 levels", "holds a number longer than ...")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _keep_strings(match: re.Match[str]) -> str:
    token = match.group(0)
    return token if token.startswith('"') else " "  # a comment is whitespace: `1/**/2` stays two tokens


def strip_comments(text: str) -> str:
    """JSON with `//` and `/* */` comments (as Cursor, Gemini CLI and strip-json-comments read it) as plain
    JSON: comments become a space, strings are kept whole (a `//` inside one is not a comment)."""
    return _TOKEN.sub(_keep_strings, text)


def check_bounds(text: str, *, max_depth: int = MAX_DEPTH, max_number_chars: int = MAX_NUMBER_CHARS,
                 skeleton: str | None = None) -> None:
    """Raise Unparseable when comment-free JSON text nests deeper than `max_depth` or holds a number token
    longer than `max_number_chars` (strings are not looked into; `skeleton` is the text with every string
    emptied, when the caller has it)."""
    if skeleton is None:
        skeleton = _STRING_ONLY.sub('""', text)
    brackets = _NOT_BRACKET.sub("", skeleton)
    if brackets and max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth:
        raise Unparseable(f"is nested deeper than {max_depth} levels")
    pattern = _LONG_NUMBER if max_number_chars == MAX_NUMBER_CHARS else re.compile(
        rf"[-+.0-9eE]{{{max_number_chars + 1}}}")
    if pattern.search(skeleton):
        raise Unparseable(f"holds a number longer than {max_number_chars} characters")


def _refuse_constant(name: str) -> Any:
    raise Unparseable(f"holds {name}, which is not JSON")


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise Unparseable("holds a number too large for a double")
    return value


def loads(data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
          max_number_chars: int = MAX_NUMBER_CHARS) -> Any:
    """Parse JSON with comments within bounds; anything else raises Unparseable (a ValueError), never
    RecursionError, MemoryError or a big-integer ValueError. Empty or blank text is Unparseable too: the
    caller decides what an empty file means."""
    if len(data) > max_bytes:
        raise Unparseable(f"is larger than {max_bytes} bytes")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise Unparseable("is not UTF-8 text") from None
    elif data.startswith("\ufeff"):
        data = data[1:]
    skeleton = _STRING_ONLY.sub('""', data)
    if "/" in skeleton:  # a comment, or a stray slash: only then is the slower comment pass needed
        data = strip_comments(data)
        skeleton = _STRING_ONLY.sub('""', data)
    text = data
    if not skeleton.strip():
        raise Unparseable(_EMPTY)
    check_bounds(text, max_depth=max_depth, max_number_chars=max_number_chars, skeleton=skeleton)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except Unparseable:
        raise
    except (ValueError, RecursionError, MemoryError):
        raise Unparseable("is not valid JSON") from None


def loads_object(data: bytes | str, **bounds: int) -> dict[str, Any]:
    """`loads`, refusing anything but a JSON object; empty text (blank, or comments only) is the empty object."""
    try:
        doc = loads(data, **bounds)
    except Unparseable as exc:
        if exc.reason == _EMPTY:
            return {}
        raise
    if not isinstance(doc, dict):
        raise Unparseable("is not a JSON object")
    return doc
