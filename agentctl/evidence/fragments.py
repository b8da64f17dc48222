"""Owns matching registered secrets by fragment: a normalized view of text mapped back to its original spans,
and the set of every long-enough run of each secret (as written, reversed and ROT13) to look windows up in.

An agent that echoes a secret may cut it, wrap it, escape it or spell it out; the sanitizer must still find
what is left of it. The text is read as the secret would be after the same normalization: case-folded, NFKC
(fullwidth letters), zero-width characters, soft hyphens, control and ANSI sequences and all whitespace
removed, percent-encoding, `\\u` / `\\x` / HTML numeric escapes decoded and any other backslash dropped.
Every normalized character remembers the original span it came from, so a match is redacted in the text
as it was written, breaks and escapes included.

Any window of the normalized text that is a run of at least `fragment_length(secret)` characters of a
registered secret (or of its reversed or ROT13 form) is redacted, and consecutive windows merge, so the
span grows while the text keeps following the secret. A value shorter than its fragment length is only
matched whole. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "RANDOM_FRAGMENT",
    "WHOLE_ONLY",
    "WORDLIKE_FRAGMENT",
    "FragmentMatcher",
    "fragment_length",
    "looks_random",
    "normalize",
    "normalized_view",
]

# Chosen from bench/redact_fragments.py (its table is in bench/RESULTS.md): the shortest lengths at which
# no random secret, and no passphrase built from the corpus's own words, redacted anything in ordinary text.
# 7 characters of a high-entropy secret left visible are at most ~36 bits of it (36 symbols once folded);
# for a passphrase they are less than two of its words.
RANDOM_FRAGMENT = 8
WORDLIKE_FRAGMENT = 12

# One pattern finds everything that is not a plain printable ASCII character the normalized view copies:
# each alternative is either removed or decoded. Possessive runs keep a 16 KiB blob linear.
_SPECIAL = re.compile(
    r"(?P<ansi>\x1b(?:\[[0-?]*+[ -/]*+[@-~]|\][^\x07\x1b]*+(?:\x07|\x1b\\)?|[@-Z\\-_]))"
    r"|\\u\{?(?P<u>[0-9A-Fa-f]{4})\}?|\\U(?P<U>[0-9A-Fa-f]{8})|\\x(?P<x>[0-9A-Fa-f]{2})"
    r"|&#(?:[xX](?P<hx>[0-9A-Fa-f]{1,6})|(?P<dec>[0-9]{1,7}));"
    r"|(?P<pct>(?:%[0-9A-Fa-f]{2})++)"
    r"|(?P<drop>\\[nrt]|\\|[\x00-\x20\x7f]++)"
    r"|(?P<wide>[^\x00-\x7f])"
)
_REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
_ROT13 = str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm")
_HEX = re.compile(r"[0-9a-f]+")


@functools.lru_cache(maxsize=4096)
def _fold(ch: str) -> str:
    """One character of the view: NFKC then case-folded; removed (empty) when it only breaks or hides text."""
    if unicodedata.category(ch) in _REMOVED_CATEGORIES or ch.isspace():
        return ""
    out = unicodedata.normalize("NFKC", ch).casefold()
    return "".join(c for c in out if not c.isspace() and unicodedata.category(c) not in _REMOVED_CATEGORIES)


def _decoded(code: int) -> str:
    if code > 0x10FFFF:
        return ""
    return _fold(chr(code)) if code > 0x7F else chr(code).lower() if chr(code).isprintable() and code != 32 else ""


def normalize(text: str) -> tuple[str, list[int], list[int]]:
    """The normalized view of `text`, and for each of its characters the original span [start, end) it
    came from (several view characters may share one span: `%41` or a ligature)."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for match in _SPECIAL.finditer(text):
        begin, finish = match.span()
        if begin > pos:
            out.append(text[pos:begin].lower())
            starts.extend(range(pos, begin))
            ends.extend(range(pos + 1, begin + 1))
        pos = finish
        kind = match.lastgroup
        if kind in ("ansi", "drop"):
            continue
        if kind == "pct":
            _percent(match.group(), begin, out, starts, ends)
            continue
        assert kind is not None, "every alternative of the pattern is a named group"
        value = match.group(kind)
        if kind == "wide":
            piece = _fold(value)
        elif kind == "dec":
            piece = _decoded(int(value))
        else:
            piece = _decoded(int(value, 16))
        if piece:
            out.append(piece)
            starts.extend([begin] * len(piece))
            ends.extend([finish] * len(piece))
    if pos < len(text):
        out.append(text[pos:].lower())
        starts.extend(range(pos, len(text)))
        ends.extend(range(pos + 1, len(text) + 1))
    return "".join(out), starts, ends


# Plain ASCII text with nothing to decode (the common case) has a view one substitution away; the character
# map is only built when a window matched.
_DECODABLE = re.compile(r"[%\\&\x1b]")
_ASCII_DROPPED = re.compile(r"[\x00-\x20\x7f]+")


def normalized_view(text: str) -> str:
    """normalize(text)'s view alone, without the character map: what a search needs."""
    if text.isascii() and not _DECODABLE.search(text):
        return _ASCII_DROPPED.sub("", text).lower()
    return normalize(text)[0]


def _percent(run: str, begin: int, out: list[str], starts: list[int], ends: list[int]) -> None:
    # ASCII bytes map one to one; a multi-byte UTF-8 sequence is decoded whole and shares its span.
    pending: list[int] = []
    pending_at = begin

    def flush(at: int) -> None:
        if pending:
            piece = "".join(_fold(c) for c in bytes(pending).decode("utf-8", "replace"))
            out.append(piece)
            starts.extend([pending_at] * len(piece))
            ends.extend([at] * len(piece))
            pending.clear()

    for i in range(0, len(run), 3):
        byte = int(run[i + 1 : i + 3], 16)
        at = begin + i
        if byte < 0x80:
            flush(at)
            piece = _decoded(byte)
            if piece:
                out.append(piece)
                starts.append(at)
                ends.append(at + 3)
        else:
            if not pending:
                pending_at = at
            pending.append(byte)
    flush(begin + len(run))


def looks_random(value: str) -> bool:
    """Whether `value` reads as machine-made (hex, base64, mixed classes) rather than as words: a word-like
    secret shares its runs with ordinary prose, so it needs longer fragments before they mean it."""
    if len(value) >= 16 and _HEX.fullmatch(value.lower()):
        return True
    kinds = ["d" if ch.isdigit() else "u" if ch.isupper() else "l" for ch in value if ch.isalnum()]
    if len(kinds) < 2:
        return False
    switches = sum(a != b for a, b in zip(kinds, kinds[1:]))
    letters = [ch.lower() for ch in value if ch.isalpha()]
    vowels = sum(ch in "aeiouy" for ch in letters)
    if letters and len(letters) >= 8 and vowels * 100 < len(letters) * 15:
        return True  # no language spells this way: a random lowercase run
    # Random base64 switches class about every other character; words with a number or CamelCase rarely.
    return switches * 3 >= len(kinds)


# Word-like command-line words (a flag, a file path, a package): they name things every agent prints ("the
# claude-code-acp package", "--dangerously-skip-permissions"), so only the whole word is the registered value.
_NAMING_WORD = re.compile(r"-|\.{0,2}/|~|@?[\w.-]+/|[A-Za-z]:[\\/]|[\w.-]+@[\w.^~-]+$")
WHOLE_ONLY = 1 << 30


def fragment_length(value: str) -> int:
    """The shortest run of `value` that counts as a fragment of it (see RANDOM_FRAGMENT); WHOLE_ONLY for a
    word-like flag, file path or package name."""
    if looks_random(value):
        return RANDOM_FRAGMENT
    return WHOLE_ONLY if _NAMING_WORD.match(value.strip()) else WORDLIKE_FRAGMENT


class FragmentMatcher:
    """Every registered secret's fragments, by window length, for one registry version.

    `public` strings (a target's host, a server name) are what every report shows: a fragment inside one
    is not a fragment of a secret worth hiding, so it is not registered.
    """

    def __init__(self, secrets: Iterable[str], public: Iterable[str] = ()) -> None:
        shown = [normalize(text)[0] for text in public if isinstance(text, str) and text]
        self._grams: dict[int, set[str]] = {}
        whole: set[str] = set()
        for secret in secrets:
            if not isinstance(secret, str):
                continue
            norm = normalize(secret)[0]
            if len(norm) < 4:
                continue
            size = fragment_length(secret)
            forms = {norm, norm[::-1], norm.translate(_ROT13), norm[::-1].translate(_ROT13)}
            if len(norm) <= size:
                whole.update(form for form in forms if not any(form in text for text in shown))
                continue
            grams = self._grams.setdefault(size, set())
            for form in forms:
                grams.update(form[i : i + size] for i in range(len(form) - size + 1))
        for size, grams in self._grams.items():
            grams.difference_update({g for g in grams if any(g in text for text in shown)})
        self._whole = re.compile("(?=(" + "|".join(map(re.escape, sorted(whole, key=len, reverse=True))) + "))") \
            if whole else None
        self.empty = not whole and not any(self._grams.values())

    def _view_spans(self, norm: str) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for size, grams in self._grams.items():
            found += [(i, i + size) for i in range(len(norm) - size + 1) if norm[i : i + size] in grams]
        if self._whole is not None:
            found += [m.span(1) for m in self._whole.finditer(norm)]
        return found

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The original spans of `text` that carry a fragment, sorted and merged (touching spans join)."""
        if self.empty or not text:
            return []
        found = self._view_spans(normalized_view(text))
        if not found:
            return []
        _, starts, ends = normalize(text)
        merged: list[list[int]] = []
        for a, b in sorted(found):
            start, end = starts[a], ends[b - 1]
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [(a, b) for a, b in merged]

    def search(self, text: str) -> bool:
        if self.empty or not text:
            return False
        return bool(self._view_spans(normalized_view(text)))

    def mask(self, text: str, marker: str) -> str:
        """`text` with each fragment span replaced by one `marker`."""
        spans = self.spans(text)
        if not spans:
            return text
        out: list[str] = []
        last = 0
        for start, end in spans:
            out += (text[last:start], marker)
            last = end
        out.append(text[last:])
        return "".join(out)
