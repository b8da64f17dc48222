"""Hypothesis strategies and checks shared by the fuzz tests: planted canaries, JSON-ish values, one-line errors."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Fuzzing is a budget: every fuzz file together stays under ~45 s on a shared 2-CPU machine.
FUZZ = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# A planted value is `<noise>MARK<noise>`: the noise may hold quotes, backslashes and line breaks so that a
# quoting or escaping slip in an error formatter shows up as the marker surviving, even where the whole
# value does not. The marker itself occurs in no message text.
MARK = "CnRy7Qz"
_NOISE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6) | st.sampled_from(
    ["'", '"', "\\", "'\"", "\\'", '\\"', "\n", "`", "' - at `$.x`", "' - at `$", "%s"]
)
canaries = st.tuples(_NOISE, _NOISE).map(lambda p: f"{p[0]}{MARK}{p[1]}")

# Keys never carry the marker: a key may legitimately be named in an error ("unknown field `x`").
keys = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).filter(lambda k: MARK not in k)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 65535, 65536, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    canaries,
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value `depth` lists deep, to plant inside an otherwise valid document."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def assert_one_line_without_mark(message: str) -> None:
    assert message, "an empty error message"
    assert len(message.splitlines()) == 1, f"not one line: {message!r}"
    assert MARK not in message, f"a planted value leaked: {message!r}"


# ---- mutations of a valid document -------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


@st.composite
def mutated(draw: st.DrawFn, documents: st.SearchStrategy[Any], values: st.SearchStrategy[Any]) -> Any:
    """A valid JSON-ish document with 1-4 nodes replaced (type swaps, planted values), dropped or added."""
    doc = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        op = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
        if op == "drop":
            del parent[path[-1]]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return doc


@st.composite
def mangled(draw: st.DrawFn, originals: st.SearchStrategy[bytes]) -> bytes:
    """Valid bytes after 1-6 bit flips, inserts, deletions or truncations, then maybe a canary planted at the
    start of a value (after `= "` or `: "`: a planted key could rightly be named in an error)."""
    data = bytearray(draw(originals))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "truncate":
            del data[at:]
    spots = [m.end() for m in re.finditer(rb'(?:= |: )"', bytes(data))]
    if spots and draw(st.booleans()):
        at = draw(st.sampled_from(spots))
        data[at:at] = draw(canaries).encode("utf-8", "surrogatepass")
    return bytes(data)
