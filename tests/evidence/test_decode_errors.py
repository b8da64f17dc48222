"""msgspec's refusals said without the values they quote: the one helper the spec, the upstream protocol, the
control API and the hub page use. Real msgspec errors, each next to what a person is told."""

from __future__ import annotations

from typing import Literal

import msgspec
import pytest

from agentctl.evidence.decode_errors import DecodeErrorText, describe_decode_error

SECRET = "hunter2-canary"


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["a", "b"] = "a"


class Doc(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["a", "b"] = "a"
    n: int = 0
    items: list[Inner] = []
    tags: dict[str, int] = {}


def _error(raw: bytes) -> msgspec.ValidationError | msgspec.DecodeError:
    try:
        msgspec.json.decode(raw, type=Doc)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return exc
    raise AssertionError(f"{raw!r} decoded")


@pytest.mark.parametrize(
    ("raw", "reason", "path"),
    [
        (b'{"kind":"' + SECRET.encode() + b'"}', "Invalid enum value <value>", "$.kind"),
        # msgspec picks the quote kind the value does not contain; both kinds go.
        (b'{"kind":"it\'s ' + SECRET.encode() + b'"}', "Invalid enum value <value>", "$.kind"),
        (b'{"kind":"say \\"' + SECRET.encode() + b'\\""}', "Invalid enum value <value>", "$.kind"),
        (b'{"kind":"a\'b\\"' + SECRET.encode() + b'\'"}', "Invalid enum value <value>", "$.kind"),
        # A value that imitates msgspec's path suffix moves neither the path nor the end of the value.
        (b'{"kind":"x - at `$.' + SECRET.encode() + b'`"}', "Invalid enum value <value>", "$.kind"),
        (b'{"kind":"\' - at `$.' + SECRET.encode() + b'`"}', "Invalid enum value <value>", "$.kind"),
        (b'{"items":[{"kind":"' + SECRET.encode() + b'"}]}', "Invalid enum value <value>", "$.items[0].kind"),
        (b'{"tags":{"k":"v"}}', "Expected `int`, got `str`", "$.tags[...]"),
        (b'{"n":"5"}', "Expected `int`, got `str`", "$.n"),
        # Keys are names, not values: an unknown one is named, on one line.
        (b'{"bo\\ngus":1}', "Object contains unknown field `bo?gus`", None),
        (b"[1]", "Expected `object`, got `array`", None),
        (b'{"n":1e400}', "Number out of range", "$.n"),
        (b'{"n":', "Input data was truncated", None),
    ],
    ids=["single-quoted", "double-quoted", "single-quoted-with-doubles", "both-kinds", "imitated-path",
         "imitated-path-after-quote", "nested", "dict-value", "type", "newline-key", "top-level", "range",
         "syntax"],
)
def test_a_refusal_keeps_msgspecs_words_and_path_and_never_a_value(raw: bytes, reason: str, path: str | None) -> None:
    error = _error(raw)
    described = describe_decode_error(error)
    assert described == DecodeErrorText(reason, path)
    assert SECRET not in described.text() and described.text().isprintable()


@pytest.mark.parametrize(
    ("message", "reason", "path"),
    [
        # A key that imitates a path can only name a well-formed path; its text never leaves the reason.
        ("Object contains unknown field `x - at `$.fake`", "Object contains unknown field `x", "$.fake"),
        ("Invalid enum value 'x - at `$.a`' - at `$.b`", "Invalid enum value <value>", "$.b"),
        ("Expected `str` - at `$.bad path`", "Expected `str` - at `$.bad path`", None),
        ("Invalid enum value '" + SECRET + "\n' - at `$.kind`", "Invalid enum value <value>", "$.kind"),
    ],
)
def test_only_a_well_formed_path_at_the_very_end_counts_as_the_path(message: str, reason: str, path: str | None) -> None:
    assert describe_decode_error(message) == DecodeErrorText(reason, path)


def test_the_text_forms_the_spec_the_protocol_and_the_control_api_print() -> None:
    described = describe_decode_error(_error(b'{"items":[{"kind":"' + SECRET.encode() + b'"}]}'))
    assert described.text() == "Invalid enum value <value> - at `$.items[0].kind`"
    assert described.text(with_path=False) == "Invalid enum value <value>"
    assert described.field() == "items[0].kind"
    assert describe_decode_error(_error(b"[1]")).field() == "(top level)"
    cut = described.text(limit=12)
    assert cut == "Invalid enu…" and len(cut) == 12
