"""Fuzzing the sanitizers (agentctl.evidence.sanitize) beyond tests/evidence/test_sanitize.py: short outside text
and ids under arbitrary unicode (lone surrogates, NUL, format characters), and targets built around planted
user info, paths, queries and arguments with arbitrary text everywhere else."""

from __future__ import annotations

import re

from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from agentctl.evidence.contract.report import MAX_SUMMARY_BYTES
from agentctl.evidence.sanitize import (
    MIN_SECRET_LENGTH,
    UNPARSEABLE_TARGET,
    bounded_text,
    opaque_id,
    summarize,
    target_for_command,
    target_for_url,
)
from tests.reliability.strategies import FUZZ, MARK, canaries

# Every code point a peer can send us, and those it cannot send but a decoder may still hand over.
wild_text = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.one_of(
            st.characters(),
            st.integers(0xD800, 0xDFFF).map(chr),
            st.sampled_from("\x00\n\r\x85\u2028\u2029\u200b\u202e\ufeff\x1b€😀é<>"),
        ),
        max_size=300,
    ).map("".join),
)
secret_lists = st.lists(wild_text | canaries, max_size=3)


def _one_clean_line(text: str) -> None:
    text.encode("utf-8")  # strict: a lone surrogate raises here
    assert len(text.splitlines()) <= 1
    assert not any(ch in text for ch in "\x00\x1b\u200b\u202e\ufeff")


@FUZZ
@given(value=wild_text, max_bytes=st.integers(0, 400), secrets=secret_lists)
@example(value="\ud800" * 10, max_bytes=3, secrets=[]).via("lone surrogates at a tiny bound")
@example(value="a\x00b", max_bytes=1, secrets=["\x00\x00\x00\x00"]).via("NUL as a secret")
def test_short_outside_text_is_none_or_one_clean_line_within_its_byte_bound(
    value: str, max_bytes: int, secrets: list[str]
) -> None:
    out = bounded_text(value, max_bytes, secrets)
    if out is None:
        return
    assert out
    _one_clean_line(out)
    assert len(out.encode("utf-8")) <= min(max_bytes, MAX_SUMMARY_BYTES)


@FUZZ
@given(before=wild_text, after=wild_text, secret=canaries, max_bytes=st.integers(0, 200))
def test_short_outside_text_never_carries_a_known_secret(before: str, after: str, secret: str, max_bytes: int) -> None:
    out = bounded_text(before + secret + after, max_bytes, [secret])
    assert out is None or MARK not in out


@FUZZ
@given(text=wild_text, code=st.text(max_size=70), secrets=secret_lists)
def test_a_summary_with_any_secrets_stays_within_its_bound_on_one_clean_line(
    text: str, code: str, secrets: list[str]
) -> None:
    summary = summarize(code, text, secrets)
    _one_clean_line(summary.summary)
    assert len(summary.summary.encode("utf-8")) <= MAX_SUMMARY_BYTES
    for secret in secrets:
        if MARK in secret:
            assert secret not in summary.summary


ID_SHAPE = re.compile(r"[A-Za-z0-9_.:-]+")


@FUZZ
@given(value=wild_text | st.from_regex(ID_SHAPE, fullmatch=True), limit=st.integers(0, 200), secrets=secret_lists)
def test_an_opaque_id_is_the_value_itself_or_none_stably_and_never_holding_a_secret(
    value: str, limit: int, secrets: list[str]
) -> None:
    out = opaque_id(value, limit, secrets)
    assert out == opaque_id(value, limit, secrets)  # no state between calls
    if out is None:
        return
    assert out == value and 0 < len(out) <= limit and ID_SHAPE.fullmatch(out)
    assert opaque_id(out, limit, secrets) == out
    assert not any(len(s) >= MIN_SECRET_LENGTH and s in out for s in secrets)


# ---- targets: what surrounds the planted part is arbitrary --------------------------------------------

_TARGET_SHAPE = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#@\s]+")
# A host may be anything here, but the marker may only reach a target by being in the host.
hosts = st.one_of(
    st.text(max_size=20),
    st.from_regex(r"[A-Za-z0-9-]{1,10}(\.[a-z]{2,5})?(:[0-9]{0,6})?", fullmatch=True),
    st.sampled_from(["[::1]", "[fe80::1%25eth0]:80", "127.0.0.1:8080", "h:", "[::1", "a b", "ex%41mple.com"]),
).filter(lambda h: MARK.lower() not in h.lower())


@FUZZ
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ws", "svn+ssh", "", "1x"]) | st.text(max_size=6),
    user=st.text(max_size=10),
    host=hosts,
    spot=st.sampled_from(["user", "password", "path", "query", "fragment"]),
    noise=st.text(max_size=12),
    secret=canaries,
)
def test_a_target_from_any_url_text_carries_no_user_info_path_query_or_fragment(
    scheme: str, user: str, host: str, spot: str, noise: str, secret: str
) -> None:
    # Planted after the authority (or inside the user info, which ends at the last '@').
    assume(not any(ch in user for ch in "/?#@") and not any(ch in host for ch in "/?#@"))
    parts = {
        "user": f"{user}{secret}@{host}/{noise}",
        "password": f"{user}:{secret}@{host}/{noise}",
        "path": f"{host}/{noise}{secret}",
        "query": f"{host}?{noise}={secret}",
        "fragment": f"{host}#{noise}{secret}",
    }
    if spot in ("user", "password"):
        assume(not any(ch in secret for ch in "/?#@"))
    target = target_for_url(f"{scheme}://{parts[spot]}")
    event("parsed" if target != UNPARSEABLE_TARGET else "unparseable")
    assert target == UNPARSEABLE_TARGET or _TARGET_SHAPE.fullmatch(target), target
    assert MARK.lower() not in target.lower()


executables = st.from_regex(r"[A-Za-z0-9_.\\/~-]{1,30}", fullmatch=True)


@FUZZ
@given(executable=executables, args=st.lists(st.text(max_size=10) | canaries, min_size=1, max_size=4))
@example(executable="/usr/bin/npx", args=["-y", f"/tmp/{MARK}/pkg"]).via("a path argument")
def test_a_command_target_is_never_an_argument(executable: str, args: list[str]) -> None:
    args = [*args, MARK]  # at least one argument carries the marker
    target = target_for_command(" ".join([executable, *args]))
    assert MARK not in target
    assert target == UNPARSEABLE_TARGET or not any(ch.isspace() or ch in "/\\" for ch in target)
