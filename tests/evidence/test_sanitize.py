"""Release-safe text: targets, redaction, bounded summaries (agentctl.evidence.sanitize)."""

from __future__ import annotations

import json
import re
import string
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentctl.evidence.contract.report import MAX_SUMMARY_BYTES, ErrorSummary
from agentctl.evidence.sanitize import (
    ELLIPSIS,
    INVALID_REASON_CODE,
    PATH_MARKER,
    REDACTED,
    UNPARSEABLE_TARGET,
    bounded_text,
    opaque_id,
    redact,
    summarize,
    target_for_command,
    target_for_url,
    truncate_utf8,
)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TARGET_SHAPE = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#@]+")
URL_SAFE = string.ascii_letters + string.digits + "-_.~"
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
# Mixed case on purpose: a target lowercases its host, so a canary can never hide inside one by accident.
CANARY_PREFIX = "CaNaRy7Q"


# ---- target_for_url --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com", "https://example.com"),
        ("HTTPS://Example.COM/", "https://example.com"),
        ("https://user:pass@example.com:8443/a/b?token=x#frag", "https://example.com:8443"),
        ("https://user@example.com/path", "https://example.com"),
        ("http://127.0.0.1:9/mcp?x=1", "http://127.0.0.1:9"),
        ("http://[::1]:8080/mcp", "http://[::1]:8080"),
        ("http://[2001:DB8::0001]/", "http://[2001:db8::1]"),
        ("http://[fe80::1%25eth0]:80/", "http://[fe80::1]:80"),
        ("  ws://localhost:3000/socket  ", "ws://localhost:3000"),
        ("svn+ssh://a:b@svn.example.org/repo", "svn+ssh://svn.example.org"),
        ("http://example.com:/x", "http://example.com"),
        ("http://example.com:0080/", "http://example.com:80"),
    ],
)
def test_target_drops_user_info_path_query_and_fragment(url: str, expected: str) -> None:
    assert target_for_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "not a url",
        "example.com/path",
        "localhost:8080",
        "//example.com/x",
        "file:///etc/passwd",
        "mailto:alice@example.com",
        "http://[::1",
        "http://[not-an-ip]/",
        "http://example.com:99999/",
        "http://example.com:port/",
        "http://exa mple.com/",
        "http://exa\\mple.com/",
        "http://%41.example.com/",
        "http://<redacted>.example.com/",
        "1http://example.com/",
    ],
)
def test_target_is_the_marker_for_anything_without_a_clean_scheme_and_host(url: str) -> None:
    assert target_for_url(url) == UNPARSEABLE_TARGET


# ---- target_for_command ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("npx", "npx"),
        ("/usr/bin/npx", "npx"),
        ("/usr/bin/npx -y @scope/server --token abc", "npx"),
        ("  uvx   mcp-server-fetch  ", "uvx"),
        ("node\t/home/alice/server.js", "node"),
        ("C:\\tools\\uvx.exe --flag", "uvx.exe"),
        ('"C:\\Program Files\\nodejs\\npx.cmd" -y pkg', "npx.cmd"),
        ("API_TOKEN=s3cr3t-value npx server", "npx"),
        ("A=1 B='x y' /opt/bin/python -m srv", "python"),
        ("env FOO=bar node", "env"),
    ],
)
def test_command_target_is_the_executable_basename_only(command: str, expected: str) -> None:
    assert target_for_command(command) == expected


@pytest.mark.parametrize("command", ["", "   ", "/usr/bin/", "TOKEN=abc", "FOO='unterminated npx"])
def test_command_target_is_the_marker_when_there_is_no_executable(command: str) -> None:
    assert target_for_command(command) == UNPARSEABLE_TARGET


# ---- redact ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("connect with s3cr3t-value failed", ["s3cr3t-value"], f"connect with {REDACTED} failed"),
        ("x s3cr3t-value y s3cr3t-value", ("s3cr3t-value",), f"x {REDACTED} y {REDACTED}"),
        ("pw hunter22.", ["hunter22\n"], f"pw {REDACTED}."),
        ("pw hunter22 here", "hunter22", f"pw {REDACTED} here"),
        ("abc and abc", ["abc"], "abc and abc"),
        ("query=p%40ss%20w0rd%21", ["p@ss w0rd!"], f"query={REDACTED}"),
        (json.dumps({"v": 'a"b\\c-long'}), ['a"b\\c-long'], '{"v": "' + REDACTED + '"}'),
        ("ab-secret-cd", ["secret-cd", "ab-secret-cd"], REDACTED),
    ],
)
def test_redact_removes_every_known_secret_and_its_encoded_forms(text: str, secrets, expected: str) -> None:
    assert redact(text, secrets) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {REDACTED}"),
        ("authorization: bearer abc", f"authorization: bearer {REDACTED}"),
        ("got 401 for Bearer abc123 from server", f"got 401 for Bearer {REDACTED} from server"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
        ("sent Basic dXNlcjpwYXNz upstream", f"sent Basic {REDACTED} upstream"),
        ("Proxy-Authorization: Token abc", f"Proxy-Authorization: Token {REDACTED}"),
        ('header was Bearer "abc123"', f'header was Bearer "{REDACTED}"'),
        ("a Basic idea", "a Basic idea"),
    ],
)
def test_redact_hides_authorization_values_but_keeps_the_scheme(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token=abc", f"token={REDACTED}"),
        ("password: hunter2", f"password: {REDACTED}"),
        ('{"api_key": "abc", "name": "x"}', f'{{"api_key": "{REDACTED}", "name": "x"}}'),
        ("X-API-Key: abc", f"X-API-Key: {REDACTED}"),
        ("access_token=abc&scope=read", f"access_token={REDACTED}&scope=read"),
        ("AWS_SECRET_ACCESS_KEY=abc", f"AWS_SECRET_ACCESS_KEY={REDACTED}"),
        ("client-secret: 'abc def'", f"client-secret: '{REDACTED}'"),
        ("passwd=x pwd=y apikey=z", f"passwd={REDACTED} pwd={REDACTED} apikey={REDACTED}"),
        ("session_id=42 signature=abc", f"session_id={REDACTED} signature={REDACTED}"),
        ("credentials=[\"a\", \"b\"] ok", f"credentials={REDACTED} ok"),
        ("authToken => 'abc'", f"authToken => '{REDACTED}'"),
        ("Cookie: sid=abc; theme=dark; lang=en", f"Cookie: {REDACTED}"),
        ("--token abc --verbose", f"--token {REDACTED} --verbose"),
        ("--api-key=abc", f"--api-key={REDACTED}"),
        ("token: 'abc", f"token: '{REDACTED}"),
        ("name=alice count=3", "name=alice count=3"),
    ],
)
def test_redact_hides_values_of_secret_looking_keys(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "token",
    [
        "sk-proj1234567890abcdefghijklmnopqrst",
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "pk_live_TYooMQauvdEDq54NiTphI7jx",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxp-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA-1234567890abcdefghijklmnopqrstu",
        "glpat-xxxxxxxxxxxxxxxxxxxx",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_redact_hides_tokens_with_well_known_prefixes(token: str) -> None:
    assert redact(f"key {token} end") == f"key {REDACTED} end"
    assert token not in redact(f"x{token}y")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("id aB3dE5fG7hI9jK1lM3nO5pQ7rS9", f"id {REDACTED}"),
        ("md5 d41d8cd98f00b204e9800998ecf8427e", f"md5 {REDACTED}"),
        ("blob dGhpcyBpcyBhIHNlY3JldCB2YWx1ZQ==", f"blob {REDACTED}"),
        ("MCPServerInitializationTimeout", "MCPServerInitializationTimeout"),
        ("test_sanitize_redacts_everything_here", "test_sanitize_redacts_everything_here"),
        ("python3-11-site-packages-dir", "python3-11-site-packages-dir"),
        ("task-management-system-overview", "task-management-system-overview"),
        ("short abc123", "short abc123"),
    ],
)
def test_redact_hides_long_random_looking_runs_but_not_identifiers(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/home/alice/.config/x.json", PATH_MARKER),
        ("open ~/proj/notes.txt: denied", f"open {PATH_MARKER}: denied"),
        ("/Users/bob/Library/x", PATH_MARKER),
        ("spawn /usr/local/bin/node ENOENT", f"spawn {PATH_MARKER} ENOENT"),
        ("C:\\Users\\carol\\AppData\\x.exe", PATH_MARKER),
        ("C:/Users/carol/x", PATH_MARKER),
        ("\\\\fileserver\\share\\x", PATH_MARKER),
        ("(see /var/log/app.log).", f"(see {PATH_MARKER})."),
        ("scp host:/srv/data/x", f"scp host:{PATH_MARKER}"),
        ("tools/list failed over TCP/IP and/or HTTP/1.1", "tools/list failed over TCP/IP and/or HTTP/1.1"),
    ],
)
def test_redact_replaces_absolute_and_home_paths(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "GET https://user:pw@api.example.com:8443/v1/x?q=abc#frag failed.",
            "GET https://api.example.com:8443 failed.",
        ),
        ("(https://example.com/a/b)", "(https://example.com)"),
        ("postgres://u:p@db:5432/app", "postgres://db:5432"),
        ("http://[::1]:8080/mcp", "http://[::1]:8080"),
        ("file:///etc/passwd", REDACTED),
        ("url=HTTPS://Example.com/x", "url=https://example.com"),
        ('{"url":"https:\\/\\/u:pw@api.example.com\\/x"}', '{"url":"https://api.example.com"}'),
    ],
)
def test_redact_keeps_only_scheme_host_and_port_of_urls(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail alice@example.com now", f"mail {REDACTED}@example.com now"),
        ("u:p@db:5432", f"{REDACTED}@db:5432"),
        ("git@github.com:org/repo", f"{REDACTED}@github.com:org/repo"),
        ("root@localhost", f"{REDACTED}@localhost"),
        ("amqp user:pass@rabbit", f"amqp {REDACTED}@rabbit"),
        ("npx @scope/server@latest", "npx @scope/server@latest"),
        ("pkg@1.2.3", "pkg@1.2.3"),
    ],
)
def test_redact_hides_email_like_user_info(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "connection refused at 127.0.0.1:8080",
        "HTTP 401 Unauthorized",
        "initialize timed out after 30s",
        "tool 'create_task' returned an error",
        "",
    ],
)
def test_redact_leaves_ordinary_error_text_alone(text: str) -> None:
    assert redact(text) == text


# ---- summarize -------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["a", "mcp_initialize_failed", "x9", "a" * 64])
def test_summary_keeps_a_well_formed_reason_code(code: str) -> None:
    assert summarize(code, "boom") == ErrorSummary(reason_code=code, summary="boom")


@pytest.mark.parametrize("code", ["", "A", "1abc", "_a", "bad-code", "a" * 65, "ok\n", "é", "has space"])
def test_summary_replaces_a_malformed_reason_code(code: str) -> None:
    assert summarize(code, "boom").reason_code == INVALID_REASON_CODE


@pytest.mark.parametrize("text", [None, ""])
def test_summary_of_no_text_is_empty(text: str | None) -> None:
    assert summarize("agent_exited", text) == ErrorSummary(reason_code="agent_exited", summary="")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("line one\n\n\tline two\r\n", "line one line two"),
        ("a\x00b\x1b[31mc", "a b [31mc"),
        ("left\u202eright\u200bend", "left right end"),
        ("lone \udc80 surrogate", "lone \ufffd surrogate"),
    ],
)
def test_summary_is_one_line_without_control_characters(text: str, expected: str) -> None:
    assert summarize("x", text).summary == expected


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("before multi\nline-secret after", "multi\nline-secret"),
        ("before multi\nline-secret after", "multi\r\nline-secret"),
        ("before abcd\n\tefgh after", "abcd efgh"),
        ("before abcd efgh after", "abcd\nefgh"),
    ],
)
def test_summary_redacts_a_known_secret_split_across_lines(text: str, secret: str) -> None:
    summary = summarize("x", text, [secret]).summary
    assert summary == f"before {REDACTED} after"


def test_summary_is_cut_to_the_byte_bound_with_an_ellipsis() -> None:
    summary = summarize("x", "y" * 1000).summary
    assert summary.endswith(ELLIPSIS)
    assert len(summary.encode()) == MAX_SUMMARY_BYTES


def test_summary_of_exactly_the_bound_is_not_marked_truncated() -> None:
    text = "z" * MAX_SUMMARY_BYTES
    assert summarize("x", text).summary == text


def test_summary_is_cut_on_a_character_boundary() -> None:
    summary = summarize("x", "€" * 200).summary
    assert summary == "€" * 84 + ELLIPSIS
    assert len(summary.encode()) <= MAX_SUMMARY_BYTES


def test_summary_redacts_before_cutting_so_no_fragment_of_a_secret_survives() -> None:
    token = "sk-" + "Q7w" * 10
    for pad in range(200, 280):
        summary = summarize("x", "p" * pad + " " + token + " tail").summary
        assert "sk-Q7" not in summary
        assert "<reda" not in summary or REDACTED in summary


# ---- truncate_utf8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "max_bytes", "expected"),
    [
        ("hello", 10, ("hello", False)),
        ("hello", 5, ("hello", False)),
        ("hello", 3, ("hel", True)),
        ("héllo", 2, ("h", True)),
        ("héllo", 3, ("hé", True)),
        ("€uro", 2, ("", True)),
        ("😀x", 4, ("😀", True)),
        ("😀x", 3, ("", True)),
        ("", 0, ("", False)),
        ("abc", 0, ("", True)),
    ],
)
def test_truncate_cuts_on_a_utf8_boundary(text: str, max_bytes: int, expected: tuple[str, bool]) -> None:
    assert truncate_utf8(text, max_bytes) == expected


def test_truncate_refuses_a_negative_bound() -> None:
    with pytest.raises(ValueError):
        truncate_utf8("abc", -1)


# ---- properties ------------------------------------------------------------------------------------

canaries = st.text(URL_SAFE, min_size=8, max_size=40).map(lambda tail: CANARY_PREFIX + tail)
surroundings = st.text(max_size=120)

# Where a known secret travels in real error text: as the value of a header, env var, flag or URL part.
PLACEMENTS = [
    "{s}",
    "https://{s}@example.com/p",
    "https://user:{s}@example.com/p",
    "https://example.com/{s}/x",
    "https://example.com/p?q={s}&r=1",
    "https://example.com/p#{s}",
    "Authorization: Bearer {s}",
    "token={s}",
    '{"password": "{s}"}',
    "--api-key {s}",
    "/home/alice/{s}/config.json",
    "C:\\Users\\{s}\\x",
    "mail {s}@example.com",
]


def _fixed(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=size, max_size=size)


prefixed_tokens = st.one_of(
    _fixed(ALNUM, 30).map(lambda t: "sk-" + t),
    _fixed(ALNUM, 24).map(lambda t: "sk_live_" + t),
    _fixed(ALNUM, 36).map(lambda t: "ghp_" + t),
    st.tuples(_fixed(ALNUM, 22), _fixed(ALNUM, 59)).map(lambda p: f"github_pat_{p[0]}_{p[1]}"),
    st.tuples(_fixed(string.digits, 12), _fixed(string.digits, 13), _fixed(ALNUM, 24)).map(
        lambda p: f"xoxb-{p[0]}-{p[1]}-{p[2]}"
    ),
    _fixed(B64URL, 20).map(lambda t: "glpat-" + t),
    _fixed(string.ascii_uppercase + string.digits, 16).map(lambda t: "AKIA" + t),
    _fixed(B64URL, 35).map(lambda t: "AIza" + t),
    st.tuples(_fixed(B64URL, 20), _fixed(B64URL, 40), _fixed(B64URL, 43)).map(
        lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[2]}"
    ),
)


@PROPERTY
@given(secret=canaries, placement=st.sampled_from(PLACEMENTS), before=surroundings, after=surroundings)
def test_a_known_secret_never_survives_wherever_it_is_embedded(
    secret: str, placement: str, before: str, after: str
) -> None:
    text = before + placement.replace("{s}", secret) + after
    assert secret not in redact(text, [secret])
    assert secret not in summarize("x", text, [secret]).summary


@PROPERTY
@given(
    head=canaries,
    tail=st.text(URL_SAFE, min_size=4, max_size=20),
    gap=st.text(" \t\r\n\x0b\x0c\x00\u2028", min_size=1, max_size=4),
    before=surroundings,
    after=surroundings,
)
def test_a_known_secret_split_by_line_breaks_never_survives_the_collapse(
    head: str, tail: str, gap: str, before: str, after: str
) -> None:
    secret = f"{head} {tail}"
    summary = summarize("x", f"{before} {head}{gap}{tail} {after}", [secret]).summary
    assert secret not in summary


@PROPERTY
@given(token=prefixed_tokens, placement=st.sampled_from(PLACEMENTS), before=surroundings, after=surroundings)
def test_a_prefixed_token_never_survives_even_when_nobody_named_it(
    token: str, placement: str, before: str, after: str
) -> None:
    text = before + placement.replace("{s}", token) + after
    assert token not in redact(text)
    assert token not in summarize("x", text).summary


any_text = st.one_of(
    st.text(max_size=600),
    st.lists(
        st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr), st.sampled_from("€😀é\n\x00")),
        max_size=600,
    ).map("".join),
)


@PROPERTY
@given(text=any_text, code=st.text(max_size=70))
def test_a_summary_never_exceeds_the_byte_bound_and_is_valid_utf8(text: str, code: str) -> None:
    summary = summarize(code, text)
    encoded = summary.summary.encode("utf-8")  # strict: raises on a lone surrogate
    assert len(encoded) <= MAX_SUMMARY_BYTES
    assert "\n" not in summary.summary and "\r" not in summary.summary
    assert re.fullmatch(r"[a-z][a-z0-9_]{0,63}", summary.reason_code)


@PROPERTY
@given(text=any_text, max_bytes=st.integers(0, 700))
def test_truncate_returns_a_prefix_within_the_bound(text: str, max_bytes: int) -> None:
    cut, truncated = truncate_utf8(text, max_bytes)
    assert text.startswith(cut)
    assert len(cut.encode("utf-8", "surrogatepass")) <= max_bytes
    assert truncated == (cut != text)


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,15}[A-Za-z0-9])?"
hostnames = st.from_regex(rf"{_LABEL}(\.{_LABEL}){{0,3}}", fullmatch=True)
hosts = st.one_of(
    hostnames.map(lambda h: (h, h.lower())),
    st.ip_addresses(v=4).map(lambda a: (str(a), str(a))),
    st.ip_addresses(v=6).map(lambda a: (f"[{a}]", f"[{a.compressed}]")),
)


@st.composite
def urls_hiding_a_canary(draw: st.DrawFn) -> tuple[str, str, str]:
    canary = draw(canaries)
    scheme = draw(st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,9}", fullmatch=True))
    host, expected_host = draw(hosts)
    port = draw(st.none() | st.integers(0, 65535))
    spots = draw(st.sets(st.sampled_from(["user", "password", "path", "query", "fragment"]), min_size=1))
    noise = lambda: quote(draw(st.text(max_size=12)), safe="")  # noqa: E731
    userinfo = ""
    if spots & {"user", "password"}:
        user = noise() + (canary if "user" in spots else "")
        password = (":" + noise() + canary) if "password" in spots else ""
        userinfo = f"{user}{password}@"
    path = "/" + noise() + ("/" + canary if "path" in spots else "")
    query = f"?a={noise()}&token={canary}" if "query" in spots else ""
    fragment = f"#{canary}{noise()}" if "fragment" in spots else ""
    authority = host if port is None else f"{host}:{port}"
    expected = f"{scheme.lower()}://{expected_host}" + ("" if port is None else f":{port}")
    return f"{scheme}://{userinfo}{authority}{path}{query}{fragment}", canary, expected


@PROPERTY
@given(case=urls_hiding_a_canary())
def test_a_url_target_never_carries_user_info_path_query_or_fragment(case: tuple[str, str, str]) -> None:
    url, canary, expected = case
    assume(canary.lower() not in expected)
    target = target_for_url(url)
    assert canary not in target
    assert target == UNPARSEABLE_TARGET or TARGET_SHAPE.fullmatch(target)
    assert target == expected


@PROPERTY
@given(url=st.one_of(st.text(max_size=80), st.text(max_size=60).map(lambda t: "http://" + t)))
def test_a_url_target_of_any_text_is_host_shaped_or_the_marker(url: str) -> None:
    target = target_for_url(url)
    assert target == UNPARSEABLE_TARGET or TARGET_SHAPE.fullmatch(target)


@PROPERTY
@given(command=st.text(max_size=80))
def test_a_command_target_of_any_text_is_one_name_without_directories(command: str) -> None:
    target = target_for_command(command)
    assert target == UNPARSEABLE_TARGET or not any(ch.isspace() or ch in "/\\" for ch in target)


# ---- ids and short text chosen by someone else -------------------------------------------------------


@pytest.mark.parametrize("value", ["sess_01HX", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "a" * 128, "urn:acp:7"])
def test_an_id_shaped_value_is_kept_as_is(value: str) -> None:
    assert opaque_id(value) == value


@pytest.mark.parametrize("value", ["", "a" * 129, "session for alice@example.com", "id\nnext", "é", None, 7])
def test_free_text_or_an_over_long_value_is_no_id_at_all(value: object) -> None:
    assert opaque_id(value) is None


def test_an_id_carrying_a_known_secret_is_no_id() -> None:
    assert opaque_id("s-CaNaRy7Q-secret", secrets=["CaNaRy7Q-secret"]) is None


def test_short_text_is_redacted_one_line_and_cut_on_its_own_bound() -> None:
    assert bounded_text("client Bearer CaNaRy7Qxyz\nv2", secrets=()) == f"client Bearer {REDACTED} v2"
    assert bounded_text("name-CaNaRy7Q-secret", secrets=["CaNaRy7Q-secret"]) == f"name-{REDACTED}"
    cut = bounded_text("é" * 200, 128)
    assert cut is not None and cut.endswith(ELLIPSIS) and len(cut.encode()) <= 128
    assert bounded_text(" \t ") is None and bounded_text(None) is None and bounded_text(5) is None
