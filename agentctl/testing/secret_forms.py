"""Owns the ways a hostile agent mangles a secret it echoes (the forms) and the secret shapes they are tried on.

Shared by the redaction table test, its hypothesis property, the bench and the reference agent's hostile-echo
mode, so every one of them means the same thing by "form". Pure: string functions only.
"""

from __future__ import annotations

import codecs
import json
import string
from collections.abc import Callable
from urllib.parse import quote

from agentctl.evidence.fragments import normalize

__all__ = ["FORMS", "ORDINARY_MESSAGES", "SHAPES", "fragment_hits", "longest_run", "mangle", "view_hits"]

# The shapes a secret has in practice. Fixed values: a table must read the same on every run.
SHAPES: dict[str, str] = {
    "random16": "Xq7vP2mK9sL4tR8w",
    "random33": "Xq7vP2mK9sL4tR8wZ1nB6cF3hJ5dG0yAe",
    "random43": "Xq7vP2mK9sL4tR8wZ1nB6cF3hJ5dG0yAeU2oI7uY4k",
    "hex40": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudGN0bCJ9.Q2x5dGVyMzQ1Njc4OTBhYmNkZWZnaGlq",
    "passphrase34": "correct-horse-battery-staple-2024x",
    "short6": "Zp4qW9",
}


def _every_char(fn: Callable[[str], str]) -> Callable[[str], str]:
    return lambda secret: "".join(fn(ch) for ch in secret)


def _halves(secret: str) -> str:
    half = len(secret) // 2
    # Two messages in one text: a summary of each half must hide each (see test: "split across messages").
    return f"{secret[:half]} ... later: {secret[half:]}"


def _insert_every(sep: str, step: int = 8) -> Callable[[str], str]:
    return lambda secret: sep.join(secret[i : i + step] for i in range(0, len(secret), step))


# Each form is what an agent may print for a secret `s`: none of them is hiding it on purpose.
FORMS: dict[str, Callable[[str], str]] = {
    "whole": lambda s: s,
    "upper": str.upper,
    "prefix23": lambda s: s[:23],
    "suffix23": lambda s: s[-23:],
    "prefix_all_but_1": lambda s: s[:-1],
    "middle18": lambda s: s[len(s) // 2 - 9 : len(s) // 2 + 9],
    "halves": _halves,
    "lf": lambda s: s[: len(s) // 2] + "\n" + s[len(s) // 2 :],
    "crlf": lambda s: s[: len(s) // 2] + "\r\n" + s[len(s) // 2 :],
    "space": lambda s: s[: len(s) // 2] + " " + s[len(s) // 2 :],
    "zwsp": _insert_every("\u200b", 3),
    "soft_hyphen": _insert_every("\u00ad", 3),
    "ansi_reset": _insert_every("\x1b[0m", 5),
    "percent_all": _every_char(lambda ch: "".join(f"%{b:02X}" for b in ch.encode())),
    "u_escape_all": _every_char(lambda ch: f"\\u{ord(ch):04x}"),
    "x_escape_all": _every_char(lambda ch: f"\\x{ord(ch):02x}"),
    "html_entities": _every_char(lambda ch: f"&#{ord(ch)};"),
    "stray_backslash": lambda s: s[:5] + "\\" + s[5:],
    "json_string": lambda s: json.dumps({"error": s})[1:-1],
    "json_nested": lambda s: json.dumps(json.dumps({"e": s})),
    "spaced": lambda s: " ".join(s),
    "fullwidth": _every_char(lambda ch: chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch),
    "reversed": lambda s: s[::-1],
    "rot13": lambda s: codecs.encode(s, "rot13"),
    "url_query": lambda s: "https://mcp.example.com/mcp?key=" + quote(s, safe=""),
}

# Ordinary agent text, including the generic parts of a server's URL and its name: none of it is secret.
ORDINARY_MESSAGES = (
    "Run /mcp for the error.",
    "MCP server docs failed to connect: see /mcp and /sse for details",
    "Connecting to https://mcp.example.com (server docs) failed: connection refused",
    "Authentication is required: run the login command and try again.",
    "The battery is correct; a horse needs a staple diet in 2024.",
    "Tool call read_file returned 3 results in 120 ms",
    "context window 200000 tokens, 5 servers, 42 tools",
)


def mangle(form: str, secret: str) -> str:
    """`secret` as `form` prints it, inside a sentence the way an agent's error carries it."""
    return f"session failed: {FORMS[form](secret)} (retrying)"


def fragment_hits(text: str, secret: str, size: int) -> list[str]:
    """The runs of `size` characters of `secret` that occur in `text`, case-insensitively (what a reader with
    the text could learn of the secret)."""
    folded = text.casefold()
    low = secret.casefold()
    return sorted({low[i : i + size] for i in range(len(low) - size + 1) if low[i : i + size] in folded})


_ROT13 = str.maketrans(string.ascii_lowercase, string.ascii_lowercase[13:] + string.ascii_lowercase[:13])


def view_hits(text: str, secret: str, size: int) -> list[str]:
    """The runs of `size` characters of `secret` (as written, reversed or ROT13) in the normalized view of
    `text`: what a reader could learn after undoing escapes, spacing and case."""
    view, norm = normalize(text)[0], normalize(secret)[0]
    found: set[str] = set()
    for form in {norm, norm[::-1], norm.translate(_ROT13), norm[::-1].translate(_ROT13)}:
        found |= {form[i : i + size] for i in range(len(form) - size + 1) if form[i : i + size] in view}
    return sorted(found)


def longest_run(text: str, secret: str) -> int:
    """The longest run of `secret` (any of view_hits' forms) readable in `text`'s normalized view."""
    size = len(normalize(secret)[0])
    while size and not view_hits(text, secret, size):
        size -= 1
    return size
