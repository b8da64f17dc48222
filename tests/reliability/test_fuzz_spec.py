"""Fuzzing the spec decoder (agentctl.spec): any document is a valid Spec or a one-line SpecError, nothing else.

The error names the file and never quotes a planted string value (tests/reliability/strategies.py MARK); a
spec that is accepted keeps every range its own error messages promise.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from agentctl.spec import Spec, SpecError, listen_address, parse_spec
from agentctl.spec_loader import load_spec
from tests.reliability.strategies import (
    FUZZ,
    MARK,
    assert_one_line_without_mark,
    canaries,
    json_values,
    mangled,
    mutated,
    nested,
)

SOURCE = "fuzz/spec-file.toml"
# As the spec's messages phrase them: "1-128 characters of letters, digits, '_', '.', ':' or '-'" (ids), and
# "1-64 characters of letters, digits, '_', '.' or '-'" (names).
ID_SHAPE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
NAME_SHAPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")

VALID: dict[str, Any] = {
    "identity": {"task_id": "t1", "session_id": "s1", "agent_id": "a1", "agent_profile_id": "p1",
                 "execution_id": "e1"},
    "agent": {"command": ["agent", "--flag"], "protocol": "acp", "env": {"K": "v"}, "permission": "deny",
              "initialize_timeout": 30.0, "session_timeout": 60.0, "stop_grace": 2.0, "linger": 1.0},
    "mcp": {
        "listen": "127.0.0.1:0",
        "profile": "task",
        "builtin_name": "kandev",
        "servers": [
            {"name": "docs", "type": "http", "url": "https://h.example/mcp", "headers": {"Authorization": "B x"}},
            {"name": "gh", "type": "stdio", "command": "npx", "args": ["-y", "pkg"], "env": {"T": "v"}},
        ],
    },
    "policy": {"transports": ["http", "sse", "stdio"]},
    "upstream": {"socket": "/tmp/up.sock"},
    "state": {"dir": "/tmp/state"},
    "daemon": {"shutdown_timeout": 10.0, "persist_delay": 0.2},
}


# ---- a small TOML writer (the standard library only reads TOML) ---------------------------------------


def _toml_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str | None:
    if value is None:
        return None  # TOML has no null: the key is left out
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list):
        items = [v for v in (_toml_value(item) for item in value) if v is not None]
        return "[" + ", ".join(items) + "]"
    pairs = [(k, _toml_value(v)) for k, v in value.items()]
    return "{" + ", ".join(f"{_toml_str(k)} = {v}" for k, v in pairs if v is not None) + "}"


def to_toml(doc: dict[str, Any]) -> bytes:
    pairs = [(k, _toml_value(v)) for k, v in doc.items()]
    lines = [f"{_toml_str(k)} = {v}" for k, v in pairs if v is not None]
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def to_json(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


# Values that probe the checks behind the type: ports in other digits, loopback look-alikes, odd URLs.
tricky = st.one_of(
    json_values,
    canaries,
    st.text(max_size=8).map(lambda port: f"127.0.0.1:{port}"),
    st.sampled_from(["127.0.0.1:\u00b2", "[::1]:\u0661", "localhost:-1", "::1", ":0", "127.0.0.1:99999"]),
    canaries.map(lambda c: f"https://{c}@h.example/{c}?t={c}"),
    canaries.map(lambda c: f"http://[{c}]:80/"),
    st.sampled_from([float("nan"), float("inf"), -0.0, 600.0, 600.0000001, 300.0, 10.0, 1e-300]),
    st.sampled_from(["acp", "passthrough", "claude", "http", "sse", "stdio", "task", "allow"]),
    st.integers(1, 40).map(nested),
)


mutated_specs = mutated(st.just(VALID), tricky)


def _outcome(raw: bytes, fmt: str, source: str = SOURCE) -> Spec | str:
    try:
        return parse_spec(raw, source=source, fmt=fmt)
    except SpecError as exc:
        return str(exc)
    # Any other exception type escapes and fails the test: that is the property.


def _check(outcome: Spec | str, source: str = SOURCE) -> None:
    if isinstance(outcome, str):
        assert_one_line_without_mark(outcome)
        assert outcome.startswith(f"{source}: "), outcome
        return
    _assert_within_documented_ranges(outcome)


def _assert_within_documented_ranges(spec: Spec) -> None:
    """What the spec's own error messages promise about an accepted spec (NaN is in no range)."""
    ident = spec.identity
    for value in (ident.task_id, ident.session_id, ident.agent_id, ident.agent_profile_id, ident.execution_id):
        assert value is None or ID_SHAPE.fullmatch(value)
    if spec.agent is not None:
        for value in (spec.agent.initialize_timeout, spec.agent.session_timeout, spec.agent.stop_grace):
            assert 0 < value <= 600, "must be > 0 and <= 600 seconds"
        assert spec.agent.linger is None or spec.agent.linger >= 0, "must be >= 0 seconds"
        assert spec.agent.command and spec.agent.command[0]
    assert 0 < spec.daemon.shutdown_timeout <= 300
    assert 0 <= spec.daemon.persist_delay <= 10
    host, port = listen_address(spec)
    assert host in ("127.0.0.1", "::1", "localhost") and 0 <= port <= 65535
    assert NAME_SHAPE.fullmatch(spec.mcp.builtin_name)
    assert all(NAME_SHAPE.fullmatch(s.name) for s in spec.mcp.servers)


@FUZZ
@given(doc=mutated_specs, fmt=st.sampled_from(["toml", "json"]))
@example(doc={**VALID, "mcp": {**VALID["mcp"], "listen": "127.0.0.1:\u00b2"}}, fmt="json").via("unicode digit port")
@example(doc={**VALID, "agent": {"command": ["x"], "protocol": f"a'b\"{MARK}'"}}, fmt="json").via("mixed quotes")
@example(doc={**VALID, "agent": {"command": ["x"], "bo\ngus": 1}}, fmt="toml").via("newline key")
@example(doc={**VALID, "agent": {"command": ["x"], "protocol": f"' - at `${MARK}`"}}, fmt="json").via("imitated path")
@example(doc={**VALID, "policy": {"transports": [f"'{MARK}"]}}, fmt="toml").via("tag-style quoting")
@example(doc={**VALID, "agent": {"command": ["x"], "session_timeout": float("nan")}}, fmt="toml").via("nan")
@example(doc={**VALID, "daemon": {"persist_delay": float("nan")}}, fmt="toml").via("nan delay")
def test_a_mutated_spec_is_a_spec_in_range_or_a_one_line_error_naming_the_file_without_values(
    doc: dict[str, Any], fmt: str
) -> None:
    raw = to_toml(doc) if fmt == "toml" else to_json(doc)
    _check(_outcome(raw, fmt))


@FUZZ
@given(doc=json_values, fmt=st.sampled_from(["toml", "json"]))
def test_any_nested_value_as_a_document_is_a_spec_or_a_one_line_error(doc: Any, fmt: str) -> None:
    if fmt == "toml" and not isinstance(doc, dict):
        doc = {"identity": doc}  # a TOML document is always a table
    raw = to_toml(doc) if fmt == "toml" else to_json(doc)
    _check(_outcome(raw, fmt))


_VALID_TOML = to_toml(VALID)


@FUZZ
@given(
    raw=mangled(st.sampled_from([_VALID_TOML, to_json(VALID)])) | st.binary(max_size=200),
    suffix=st.sampled_from([".toml", ".json", ".TOML", ""]),
)
@example(raw=b"a = " + b"[" * 5000 + b"]" * 5000, suffix=".toml").via("deep TOML arrays")
@example(raw=b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}", suffix=".json").via("deep JSON arrays")
@example(raw=b"x = {" + b"a = {" * 3000 + b"}" * 3001, suffix=".toml").via("deep TOML tables")
def test_a_mangled_spec_file_is_a_spec_or_a_one_line_error_naming_that_file(raw: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory(prefix="actl-fuzz-") as d:
        path = Path(d) / f"spec{suffix}"
        path.write_bytes(raw)
        try:
            outcome: Spec | str = load_spec(path)
        except SpecError as exc:
            outcome = str(exc)
        _check(outcome, source=str(path))


def test_the_documented_valid_spec_is_accepted_by_both_formats() -> None:
    """The fuzzers above start from VALID: it must really be valid, in TOML and in JSON, and decode alike."""
    as_toml, as_json = _outcome(_VALID_TOML, "toml"), _outcome(to_json(VALID), "json")
    assert isinstance(as_toml, Spec) and as_toml == as_json
    assert msgspec.to_builtins(as_toml)["mcp"]["servers"][1]["args"] == ["-y", "pkg"]
