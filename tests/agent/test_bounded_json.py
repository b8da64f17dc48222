"""Bounded JSON parsing (agentctl/agent/bounded_json.py): whatever bytes an agent writes, the answer is a
value or Unparseable with a reason naming a bound, never RecursionError, a big-integer ValueError or
quadratic time; comments and strings are read as Cursor and Gemini CLI read them."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctl.agent import bounded_json
from agentctl.agent.bounded_json import MAX_BYTES, MAX_DEPTH, MAX_NUMBER_CHARS, Unparseable, loads, loads_object

HOSTILE = [
    pytest.param(b"[" * 200_000 + b"]" * 200_000, "is nested deeper than 64 levels", id="200000_levels_deep"),
    pytest.param(b'{"a":' * 200_000, "is nested deeper than 64 levels", id="deep_and_cut_short"),
    pytest.param(b'{"n": ' + b"9" * 5_000 + b"}", "holds a number longer than 100 characters", id="5000_digit_integer"),
    pytest.param(b'{"n": 1e999}', "holds a number too large for a double", id="an_infinite_float"),
    pytest.param(b'{"n": NaN}', "holds NaN, which is not JSON", id="nan"),
    pytest.param(b'{"a": "\xff\xfe"}', "is not UTF-8 text", id="invalid_utf8"),
    pytest.param(b"\x00\x01binary\x7f", "is not valid JSON", id="binary"),
    pytest.param(b" \n\t ", "is empty", id="blank"),
    pytest.param(b'{"a": 1} /* never closed', None, id="an_unclosed_comment_runs_to_the_end"),
]


@pytest.mark.parametrize(("data", "reason"), HOSTILE)
def test_hostile_json_is_unparseable_with_a_reason_naming_the_bound_never_a_crash(data: bytes, reason: str | None) -> None:
    if reason is None:
        assert loads(data) == {"a": 1}
        return
    with pytest.raises(Unparseable) as caught:
        loads(data)
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError), "callers that caught ValueError still do"


def test_depth_and_number_length_up_to_the_bound_are_accepted_and_one_more_is_not() -> None:
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(Unparseable):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert loads("9" * MAX_NUMBER_CHARS) == int("9" * MAX_NUMBER_CHARS)
    with pytest.raises(Unparseable):
        loads("9" * (MAX_NUMBER_CHARS + 1))
    assert loads('["' + "[" * 1000 + "9" * 1000 + '"]') == ["[" * 1000 + "9" * 1000], "strings are not looked into"


def test_more_than_the_size_bound_is_refused_before_anything_is_parsed() -> None:
    with pytest.raises(Unparseable, match="is larger than"):
        loads(b'{"a": "' + b"x" * MAX_BYTES + b'"}')


def test_comments_are_whitespace_and_strings_are_kept_whole() -> None:
    text = '\ufeff// head\n{"u": "http://x//y /* z */", /* a */ "q\\"//": 1/**/}\n// tail'
    assert loads(text) == {"u": "http://x//y /* z */", 'q"//': 1}
    with pytest.raises(Unparseable):
        loads("[1/**/2]")  # a comment separates tokens, as strip-json-comments' whitespace does
    assert loads_object(b"") == {} and loads_object("\ufeff  ") == {}
    with pytest.raises(Unparseable, match="is not a JSON object"):
        loads_object("[1]")


@pytest.mark.parametrize("text", [
    pytest.param("/*" * (MAX_BYTES // 4), id="megabytes_of_unclosed_comments"),
    pytest.param('"\\' * (MAX_BYTES // 4), id="megabytes_of_unclosed_strings"),
    pytest.param("[" * (MAX_BYTES // 2), id="megabytes_of_brackets"),
])
def test_the_worst_texts_within_the_size_bound_are_refused_in_one_pass(text: str) -> None:
    # A backtracking pattern takes hours on these (the test's timeout ends it); bench/bounded_json.py times them.
    with pytest.raises(Unparseable):
        loads(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=2048) | st.text(alphabet='[]{}"\\/*,:0123456789eE-+. \nab', max_size=2048).map(str.encode))
def test_any_bytes_give_a_value_or_unparseable_and_nothing_else(data: bytes) -> None:
    try:
        loads(data)
    except Unparseable as exc:
        assert exc.reason and "\n" not in exc.reason


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_ordinary_json_within_the_bounds_reads_as_the_standard_library_reads_it(value: object) -> None:
    text = json.dumps(value)
    try:
        bounded_json.check_bounds(text)
    except Unparseable:
        return  # a long integer drawn by hypothesis: refused by design
    assert loads(text) == json.loads(text)
