"""Redaction by fragment (agentctl.evidence.fragments through agentctl.evidence.sanitize): every form an agent
may print a secret in, for every secret shape, leaves no run of N or more characters of it, and ordinary
agent text (the generic parts of a server's URL, its host, its name) stays readable."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctl.evidence.fragments import (
    RANDOM_FRAGMENT,
    WHOLE_ONLY,
    WORDLIKE_FRAGMENT,
    FragmentMatcher,
    fragment_length,
    normalize,
    normalized_view,
)
from agentctl.evidence.sanitize import REDACTED, bounded_text, opaque_id, redact, scrub, summarize
from agentctl.evidence.secret_registry import SecretRegistry, generic
from agentctl.spec import parse_spec, secret_registry
from agentctl.testing.secret_forms import FORMS, ORDINARY_MESSAGES, SHAPES, fragment_hits, mangle, view_hits
from tests.conftest import spec_toml

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _size(secret: str) -> int:
    return min(fragment_length(secret), len(secret))


def test_the_fragment_lengths_are_the_measured_ones_random_8_word_like_12():
    assert (RANDOM_FRAGMENT, WORDLIKE_FRAGMENT) == (8, 12)
    assert {name: fragment_length(s) for name, s in SHAPES.items()} == {
        "random16": 8, "random33": 8, "random43": 8, "hex40": 8, "jwt": 8, "passphrase34": 12, "short6": 8,
    }
    assert fragment_length("--dangerously-skip-permissions") == WHOLE_ONLY
    assert fragment_length("/usr/lib/node_modules/@zed-industries/claude-code-acp/dist/index.js") == WHOLE_ONLY


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("form", list(FORMS))
def test_no_form_of_any_secret_shape_leaves_a_fragment_of_n_or_more_characters(form: str, shape: str):
    secret = SHAPES[shape]
    text = mangle(form, secret)
    size = _size(secret)
    out = summarize("session_failed", text, SecretRegistry([f"Bearer {secret}"])).summary
    assert view_hits(out, secret, size) == [], (text, out)
    assert fragment_hits(out, secret, size) == [], (text, out)
    # Whatever was left, the sentence around the secret was kept: the redaction is a span, not the text.
    assert out.startswith("session failed: ") and "(retrying)" in out or form in ("json_nested",), out


@pytest.mark.parametrize("shape", ["random33", "passphrase34"])
def test_a_secret_split_across_two_messages_is_redacted_in_each(shape: str):
    secret = SHAPES[shape]
    registry = SecretRegistry([secret])
    half = len(secret) // 2
    first = summarize("x", f"token part one: {secret[:half]}", registry).summary
    second = summarize("x", f"and the rest: {secret[half:]} done", registry).summary
    assert first == f"token part one: {REDACTED}" and second == f"and the rest: {REDACTED} done"


@pytest.mark.parametrize("shape", ["random33", "passphrase34"])
def test_a_fragment_one_shorter_than_n_is_what_n_allows_and_stays(shape: str):
    secret = SHAPES[shape]
    size = fragment_length(secret)
    kept = f"seen {secret[: size - 1]} before"
    assert summarize("x", kept, SecretRegistry([secret])).summary == kept
    assert summarize("x", f"seen {secret[:size]} before", SecretRegistry([secret])).summary == f"seen {REDACTED} before"


def test_the_span_grows_while_the_text_follows_the_secret_and_stops_where_it_leaves():
    secret = SHAPES["random33"]
    out = redact(f"id={secret[:20]}ZZZZ tail", [secret])
    assert out == f"id={REDACTED}ZZZZ tail"
    out = redact(f"a {secret[:10]}\n{secret[10:]} b", [secret])
    assert out == f"a {REDACTED} b"


def test_a_short_secret_is_redacted_only_whole_in_every_form():
    secret = SHAPES["short6"]
    assert redact(f"pin {secret[:5]} ok", [secret]) == f"pin {secret[:5]} ok"
    for form in ("whole", "spaced", "percent_all", "fullwidth", "reversed", "rot13", "zwsp"):
        assert secret.lower() not in normalize(redact(mangle(form, secret), [secret]))[0], form


def _spec_registry(tmp_path, url: str, header: str) -> SecretRegistry:
    text = spec_toml(
        agent=["claude-code-acp", "--dangerously-skip-permissions"], state_dir=tmp_path,
        servers=[{"name": "docs", "type": "http", "url": url, "headers": {"Authorization": f"Bearer {header}"}}],
    )
    return secret_registry(parse_spec(text.encode()))


@pytest.mark.parametrize("message", ORDINARY_MESSAGES)
def test_ordinary_agent_messages_are_left_readable_with_a_real_spec_registered(tmp_path, message: str):
    registry = _spec_registry(tmp_path, "https://mcp.example.com/mcp", SHAPES["random33"])
    registry.add(SHAPES["passphrase34"])
    out = summarize("x", message, registry).summary
    # Only the generic URL rule may act (a URL becomes its target); no registered fragment matched.
    assert out == redact(message) and REDACTED not in out, out


def test_generic_route_paths_and_public_names_are_never_secrets(tmp_path):
    registry = _spec_registry(tmp_path, "https://mcp.example.com/sse", SHAPES["random33"])
    assert generic("/mcp") and generic("/sse/") and generic("/api/v1/mcp") and not generic("/t-8f3k2j9x/mcp")
    assert not {"/mcp", "/sse", "mcp"} & registry.values()
    assert {"docs", "mcp.example.com", "claude-code-acp"} <= registry.public()
    text = "Run /mcp for the error; /sse is down at mcp.example.com for docs"
    assert summarize("x", text, registry).summary == text
    # The host of a URL that is a registered value whole (an argument) is still shown where it is the target.
    assert FragmentMatcher(["https://mcp.example.com/t0kenXq7vP2mK9"], ["mcp.example.com"]).spans(
        "reach mcp.example.com now") == []


def test_the_path_of_a_third_party_url_is_redacted_by_fragment_but_its_route_word_is_not(tmp_path):
    registry = _spec_registry(tmp_path, "https://mcp.example.com/t-8f3k2Jx9qLmz/mcp?key=Qv7Lm2Xp9Rt4", "h")
    out = summarize("x", "GET /t-8f3k2Jx9q failed, key Qv7Lm2Xp then Run /mcp", registry).summary
    assert out == f"GET {REDACTED} failed, key {REDACTED} then Run /mcp", out


def test_every_entry_point_uses_the_fragment_matcher():
    secret = SHAPES["random33"]
    mangled = FORMS["percent_all"](secret[:12])
    assert scrub(f"bad {mangled}", [secret]) == f"bad {REDACTED}"
    assert opaque_id(secret[3:14], secrets=[secret]) is None
    assert bounded_text(f"agent {' '.join(secret[:9])}", secrets=[secret]) == f"agent {REDACTED}"
    assert redact(f"x {secret[::-1][:9]} y", [secret]) == f"x {REDACTED} y"


def test_the_normalized_view_maps_each_character_back_to_where_it_was_written():
    view, starts, ends = normalize("A%42\\u0043 \u200bＤ\x1b[0m&#69;\\\\F")
    assert view == "abcdef"
    assert [("A%42\\u0043 \u200bＤ\x1b[0m&#69;\\\\F")[s:e] for s, e in zip(starts, ends)] == [
        "A", "%42", "\\u0043", "Ｄ", "&#69;", "F"]


@PROPERTY
@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_the_plain_ascii_shortcut_reads_text_exactly_as_the_full_normalized_view(text):
    assert normalized_view(text) == normalize(text)[0]


# ---- the property --------------------------------------------------------------------------------------

_ALPHABETS = {
    "base62": string.ascii_letters + string.digits,
    "base64url": string.ascii_letters + string.digits + "-_",
    "hex": "0123456789abcdef",
}
_FILLER = st.text(alphabet=string.ascii_letters + string.digits + " .,:;()-_/\n", max_size=60)


@st.composite
def _secret(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        alphabet = _ALPHABETS[draw(st.sampled_from(sorted(_ALPHABETS)))]
        return draw(st.text(alphabet=alphabet, min_size=16, max_size=48))
    words = draw(st.lists(st.sampled_from(["correct", "horse", "battery", "staple", "orange", "river", "lamp",
                                             "quantum", "pepper", "violet", "marble", "tiger"]), min_size=3, max_size=5))
    return "-".join(words) + "-" + str(draw(st.integers(1000, 9999)))


@PROPERTY
@given(secret=_secret(), form=st.sampled_from(sorted(FORMS)), before=_FILLER, after=_FILLER)
def test_no_mangling_of_a_random_secret_in_random_text_leaves_a_fragment_of_n(secret, form, before, after):
    size = _size(secret)
    text = f"{before} {FORMS[form](secret)} {after}"
    out = summarize("x", text, SecretRegistry([secret])).summary
    assert view_hits(out, secret, size) == [], (form, text, out)
    assert fragment_hits(out, secret, size) == [], (form, text, out)
