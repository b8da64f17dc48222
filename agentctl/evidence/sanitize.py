"""Owns release-safe text: network and stdio targets, secret redaction and bounded error summaries.

Everything free-form that leaves the daemon (a target, an error summary) passes through here first, with
the registry of known secrets (agentctl.evidence.secret_registry) where the caller has one; registered
secrets are matched by fragment on a normalized view of the text (agentctl.evidence.fragments). Pure: no I/O,
no logging; the only state kept is compiled patterns, cached against the registry's version.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from agentctl.evidence.contract.report import MAX_SUMMARY_BYTES, ErrorSummary
from agentctl.evidence.fragments import FragmentMatcher
from agentctl.evidence.secret_registry import MIN_SECRET_LENGTH, SecretRegistry

__all__ = [
    "ELLIPSIS",
    "INVALID_REASON_CODE",
    "MAX_SUMMARY_BYTES",
    "MIN_SECRET_LENGTH",
    "PATH_MARKER",
    "REDACTED",
    "UNPARSEABLE_TARGET",
    "bounded_text",
    "opaque_id",
    "redact",
    "redact_in_place",
    "scrub",
    "summarize",
    "target_for_command",
    "target_for_url",
    "truncate_utf8",
]

UNPARSEABLE_TARGET = "<unparseable>"
REDACTED = "<redacted>"
PATH_MARKER = "<path>"
INVALID_REASON_CODE = "invalid_reason_code"
ELLIPSIS = "…"

_MARKERS = (REDACTED, PATH_MARKER)
_REASON_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_HOST_PUNCTUATION = frozenset("-._")

# Patterns below use possessive quantifiers and start-of-run lookbehinds so that a long unbroken run
# (16 KiB of base64 in agent stderr) costs linear time instead of backtracking quadratically.


# ---- targets ---------------------------------------------------------------------------------------


def target_for_url(url: str) -> str:
    """`scheme://host[:port]` of a URL, lowercased; UNPARSEABLE_TARGET without a clean scheme and host."""
    if not isinstance(url, str):
        return UNPARSEABLE_TARGET
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return UNPARSEABLE_TARGET
    scheme = parts.scheme.lower()
    if not host or not _SCHEME.fullmatch(scheme):
        return UNPARSEABLE_TARGET
    if parts.netloc.rpartition("@")[2].startswith("["):
        host = _bracketed_ipv6(host)
        if host is None:
            return UNPARSEABLE_TARGET
    elif not _plain_host_ok(host):
        # Whatever urlsplit tolerated here (spaces, backslashes, '%', '<') is not a host we can vouch for,
        # and echoing it could carry a fragment of the path or user info across.
        return UNPARSEABLE_TARGET
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"


def _bracketed_ipv6(host: str) -> str | None:
    # The zone id names an interface on the reporting machine only; it means nothing upstream.
    try:
        address = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return None
    return f"[{address.compressed}]"


def _plain_host_ok(host: str) -> bool:
    return any(ch.isalnum() for ch in host) and all(ch.isalnum() or ch in _HOST_PUNCTUATION for ch in host)


_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def target_for_command(command: str) -> str:
    """The executable's basename (`/usr/bin/npx -y pkg` -> `npx`); never an argument or a directory."""
    if not isinstance(command, str):
        return UNPARSEABLE_TARGET
    text = command.strip()
    if not text:
        return UNPARSEABLE_TARGET
    if text[0] in "\"'":
        # A quoted executable is how Windows paths with spaces arrive ("C:\Program Files\...\npx.cmd").
        closing = text.find(text[0], 1)
        executable = text[1:closing] if closing > 0 else text[1:]
    elif _ENV_ASSIGNMENT.match(text):
        # `TOKEN=... npx` runs npx; taking the first word would publish the assignment's value.
        try:
            words = shlex.split(text)
        except ValueError:
            return UNPARSEABLE_TARGET
        rest = [word for word in words if not _ENV_ASSIGNMENT.match(word)]
        if not rest:
            return UNPARSEABLE_TARGET
        executable = rest[0]
    else:
        executable = text.split(None, 1)[0]
    # A trailing separator names a directory, not an executable: no basename to report.
    name = executable.replace("\\", "/").rpartition("/")[2]
    if name in ("", ".", "..") or any(unicodedata.category(ch)[0] in "CZ" for ch in name):
        return UNPARSEABLE_TARGET
    return name


# ---- redaction -------------------------------------------------------------------------------------

_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]


def _keep_trailing_punctuation(match: re.Match[str], reduce_core: Callable[[str], str]) -> str:
    # Prose puts '.', ',' or ')' right after a URL or path; they belong to the sentence, not the secret.
    text = match.group()
    core = text.rstrip(".,;:!?)}")
    if "[" not in core:
        core = core.rstrip("]")
    return reduce_core(core) + text[len(core) :]


def _url_repl(match: re.Match[str]) -> str:
    def reduce(url: str) -> str:
        # JSON may escape '/' as '\/'; the URL inside is the same URL.
        target = target_for_url(url.replace("\\/", "/"))
        return REDACTED if target == UNPARSEABLE_TARGET else target

    return _keep_trailing_punctuation(match, reduce)


def _path_repl(match: re.Match[str]) -> str:
    return _keep_trailing_punctuation(match, lambda _: PATH_MARKER)


# Markers may sit inside a URL already (a known secret as its password); the URL is still one URL.
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+:\\?/\\?/(?:<redacted>|<path>|[^\s\"'`<>])*+")

# A Cookie header carries several name=value pairs, and the names are not secret-looking.
_COOKIE = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])(?P<head>(?:set-)?cookie2?[ \t]*+:[ \t]*+)(?!<redacted>)"
    r"[^\s;,\"'<>]++(?:;[ \t]*+[^\s;,\"'<>=]++=[^\s;,\"'<>]*+)*+"
)

_TERMS = (
    r"(?:token|secret|passw(?:or)?d|passphrase|pwd|key|auth|credential|session|cookie|signature|bearer|jwt)"
)
_KEY_CHARS = r"[A-Za-z0-9_.-]"
_AUTH_SCHEME = r"(?:bearer|basic|token|digest|negotiate|ntlm)"
_VALUE = (
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*+\"|'[^'\n]*+'|\[[^\]\n]*+\]|<redacted>|<path>"
    # An unterminated quote still opens a value; without this the value would slip through.
    r"|[\"']?+[^\s,;&\"'<>()\[\]{}]++)"
)
# Any key that merely contains a term counts ("x-api-key", "AWS_SECRET_ACCESS_KEY", "authToken"): a
# redacted `monkey=3` is a cheap price for never missing a credential with an unusual name.
_KEY_VALUE = re.compile(
    rf"(?P<q>[\"']?)(?<!{_KEY_CHARS})(?={_KEY_CHARS}*?{_TERMS})(?P<key>{_KEY_CHARS}++)(?P=q)"
    rf"(?P<sep>\s*+(?:=>|:=|[:=])\s*+)(?P<scheme>{_AUTH_SCHEME}\s++)?{_VALUE}",
    re.IGNORECASE,
)
# `--token abc`: the value follows the flag after whitespace, so there is no separator to anchor on.
_FLAG_VALUE = re.compile(
    rf"(?<!\S)(?P<key>--?(?={_KEY_CHARS}*?{_TERMS}){_KEY_CHARS}++)(?P<sep>[ \t]++)(?!-|<redacted>|<path>)"
    r"(?P<scheme>)(?P<value>\"(?:[^\"\\\n]|\\.)*+\"|'[^'\n]*+'|[^\s\"'<>]++)",
    re.IGNORECASE,
)


def _key_value_repl(match: re.Match[str]) -> str:
    value = match.group("value")
    opening = value[0] if value[0] in "\"'" else ""
    closing = opening if opening and len(value) > 1 and value[-1] == opening else ""
    quoted_key = match.groupdict().get("q") or ""
    return (
        f"{quoted_key}{match.group('key')}{quoted_key}{match.group('sep')}{match.group('scheme') or ''}"
        f"{opening}{REDACTED}{closing}"
    )


_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_-])(?P<head>bearer\s++[\"']?+)(?!<redacted>)[^\s\"'<>,;]++")
_BASIC = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])(?P<head>basic\s++)(?P<value>[A-Za-z0-9+/]++={0,2}+)(?![A-Za-z0-9+/=])"
)


def _basic_repl(match: re.Match[str]) -> str:
    # "Basic idea" is prose; "Basic dXNlcjpwYXNz" decodes to user:password. Only the latter is a credential.
    try:
        decoded = base64.b64decode(match.group("value"), validate=True)
    except (binascii.Error, ValueError):
        return match.group()
    return match.group("head") + REDACTED if b":" in decoded else match.group()


# Prefixes that also occur inside ordinary words ("task-", "highs_") need a word start or a long random tail.
_WORDISH_PREFIXES = (
    r"sk-|sk_live_|sk_test_|rk_live_|rk_test_|pk_live_|pk_test_|ghp_|gho_|ghs_|ghu_|ghr_|npm_|hf_"
)
# Prefixes no English word contains; a match anywhere is a token.
_DISTINCT_PREFIXES = (
    r"github_pat_|glpat-|gldt-|glrt-|xox[abposre]-|xapp-|AIza|whsec_|shpat_|shpss_|shpca_|dop_v1_|doo_v1_"
    r"|pypi-|ya29\."
)
_PREFIXED_TOKEN = re.compile(
    r"A(?:KIA|SIA)[A-Z0-9]{16}"
    r"|eyJ[A-Za-z0-9_-]{8,}+(?:\.[A-Za-z0-9_-]*+){0,2}+"
    rf"|(?:{_DISTINCT_PREFIXES})[A-Za-z0-9_-]{{8,}}+"
    rf"|(?<![A-Za-z0-9])(?:{_WORDISH_PREFIXES})[A-Za-z0-9_-]{{16,}}+"
    rf"|(?:{_WORDISH_PREFIXES})[A-Za-z0-9]{{20,}}+[A-Za-z0-9_-]*+"
)

# The local part before '@' is the personal or secret half (a mailbox, or `user:password@db:5432`).
_USERINFO_CHARS = r"[A-Za-z0-9._%+:!$&*=~-]"
_USERINFO = re.compile(rf"(?<!{_USERINFO_CHARS}){_USERINFO_CHARS}++(?=@[A-Za-z0-9\[])")
_HOSTISH = re.compile(
    r"(?:[A-Za-z0-9-]++\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])"  # a domain
    r"|[A-Za-z0-9.-]++:\d|\[|localhost\b|\d{1,3}(?:\.\d{1,3}){3}"
)


def _userinfo_repl(match: re.Match[str]) -> str:
    # `user:password@anyhost` is a credential whatever the host; a bare `name@x` only counts when x looks
    # like a domain, so that `server@latest` and `pkg@1.2.3` stay readable.
    if ":" in match.group() or _HOSTISH.match(match.string, match.end() + 1):
        return REDACTED
    return match.group()


_PATH_CHARS = r"[^\s\"'<>|`]"
_PATH = re.compile(
    rf"(?<![A-Za-z0-9])[A-Za-z]:(?:\\|/(?!/)){_PATH_CHARS}*+"  # C:\Users\..., C:/...
    rf"|(?<![A-Za-z0-9\\])\\\\[^\s\\\"'<>|`]++\\{_PATH_CHARS}*+"  # \\server\share\...
    rf"|(?<![A-Za-z0-9_.~/\\-])~[A-Za-z0-9_.-]*+/{_PATH_CHARS}*+"  # ~/..., ~alice/...
    # /a/b and //host/a: one component alone (/tmp) is too common in prose to say anything private.
    r"|(?<![A-Za-z0-9_.~/\\-])//?[^\s/\"'<>|`]++(?:/[^\s/\"'<>|`]*+)++"
)

_RUN_CHARS = r"[A-Za-z0-9+/=_-]"
_LONG_RUN = re.compile(rf"(?<!{_RUN_CHARS}){_RUN_CHARS}{{24,}}+")
_HEX = re.compile(r"[0-9A-Fa-f]+")


def _looks_random(run: str) -> bool:
    if len(run) >= 32 and _HEX.fullmatch(run):
        return True
    kinds = ["d" if ch.isdigit() else "u" if ch.isupper() else "l" for ch in run if ch.isalnum()]
    if len(set(kinds)) < 2:
        return False
    switches = sum(a != b for a, b in zip(kinds, kinds[1:]))
    if "d" in kinds:
        # Identifiers with a version number ("python3-11-site-packages") switch class only a few times.
        return switches >= 4
    # CamelCase switches case about once per word; random base64 letters do so every other character.
    return switches * 5 >= len(kinds) * 2


def _long_run_repl(match: re.Match[str]) -> str:
    return REDACTED if _looks_random(match.group()) else match.group()


# Order matters only for readability of the result, never for safety: each rule can only remove text.
# URLs go first so their paths and query strings are dropped whole rather than picked apart.
_RULES: tuple[_Rule, ...] = (
    (_URL, _url_repl),
    (_COOKIE, rf"\g<head>{REDACTED}"),
    (_KEY_VALUE, _key_value_repl),
    (_FLAG_VALUE, _key_value_repl),
    (_BEARER, rf"\g<head>{REDACTED}"),
    (_BASIC, _basic_repl),
    (_PREFIXED_TOKEN, REDACTED),
    (_USERINFO, _userinfo_repl),
    (_PATH, _path_repl),
    (_LONG_RUN, _long_run_repl),
)


def _compile_secrets(values: Iterable[str], public: Iterable[str] = ()) -> FragmentMatcher | None:
    matcher = FragmentMatcher(values, public)
    return None if matcher.empty else matcher


@functools.lru_cache(maxsize=64)
def _compiled_for(values: frozenset[str]) -> FragmentMatcher | None:
    return _compile_secrets(SecretRegistry(values).values())


def _secret_pattern(secrets: Iterable[str] | SecretRegistry | None) -> FragmentMatcher | None:
    """The fragment matcher of every registered value and part (a plain list is registered on the way),
    cached against the registry's version."""
    if secrets is None:
        return None
    if isinstance(secrets, SecretRegistry):
        cached = secrets.compiled
        if cached is None or cached[0] != secrets.version:
            cached = secrets.compiled = (secrets.version, _compile_secrets(secrets.values(), secrets.public()))
        return cached[1]
    if isinstance(secrets, str):
        # A bare string would iterate as characters, all below the minimum, silently redacting nothing.
        secrets = (secrets,)
    return _compiled_for(frozenset(s for s in secrets if isinstance(s, str)))


def _redact(text: str, matcher: FragmentMatcher | None) -> str:
    # Registered secrets first, by fragment on the normalized view (agentctl.evidence.fragments): the
    # generic rules below only ever replace text with a marker or a lowercased target, and the matcher
    # folds case, so nothing they leave can become a fragment it would have missed.
    if matcher is not None:
        text = matcher.mask(text, REDACTED)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def redact(text: str, secrets: Iterable[str] | SecretRegistry = ()) -> str:
    """`text` with known secrets, credentials, token-like runs, paths and URL details replaced by markers."""
    if not text:
        return ""
    return _redact(text, _secret_pattern(secrets))


# ---- summaries -------------------------------------------------------------------------------------

_SPACE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_ASCII_SPACE = re.compile(r"[\x00-\x20\x7f]+")
_ASCII_BLANKS = {code: " " for code in (*range(0x21), 0x7F)}


def _collapse(text: str) -> str:
    """Runs of whitespace, control and format characters as one space, trimmed; lone surrogates as U+FFFD."""
    if text.isascii():
        return _ASCII_SPACE.sub(" ", text).strip(" ")
    out: list[str] = []
    pending_space = False
    for ch in text:
        category = unicodedata.category(ch)
        # Format characters (zero-width space, bidi overrides) would hide or reorder text in a terminal.
        if category in _SPACE_CATEGORIES or ch.isspace():
            pending_space = True
            continue
        if category == "Cs":
            # Lone surrogates (surrogateescape'd bytes) cannot be encoded as UTF-8 at all.
            ch = "\ufffd"
        if pending_space and out:
            out.append(" ")
        pending_space = False
        out.append(ch)
    return "".join(out)


def truncate_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """`text` cut to at most `max_bytes` of UTF-8 on a character boundary, and whether anything was cut."""
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text, False
    end = max_bytes
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass"), True


def _bounded(text: str, max_bytes: int) -> str:
    cut, truncated = truncate_utf8(text, max_bytes)
    room = max_bytes - len(ELLIPSIS.encode())
    if not truncated or room < 0:
        return cut
    cut, _ = truncate_utf8(text, room)
    start = cut.rfind("<")
    if start >= 0 and any(text.startswith(m, start) and len(cut) - start < len(m) for m in _MARKERS):
        # "<reda…" reads like a mangled value; drop the marker's stub instead.
        cut = cut[:start]
    return cut.rstrip(" ") + ELLIPSIS


# Far more than a summary keeps even when redaction shrinks the text 60-fold (long URLs and paths become a
# target or a marker): a megabyte error message is cut first instead of redacted whole.
_SUMMARY_INPUT = 16 * 1024
_LAST_WORD = re.compile(r"\S*\Z")


def _head(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, cut before the word the limit falls in: a value cut in half
    no longer matches its registered form, so its first half must not be kept either."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    last = _LAST_WORD.search(head)
    assert last is not None, "\\S*\\Z matches at the end of any text"
    return head[: last.start()] + ELLIPSIS


def summarize(reason_code: str, text: str | None, secrets: Iterable[str] | SecretRegistry = ()) -> ErrorSummary:
    """A stable reason code plus `text` redacted, on one line, within MAX_SUMMARY_BYTES of UTF-8."""
    if not (isinstance(reason_code, str) and _REASON_CODE.fullmatch(reason_code)):
        reason_code = INVALID_REASON_CODE
    if not text:
        return ErrorSummary(reason_code=reason_code)
    text = _head(text, _SUMMARY_INPUT)
    matcher = _secret_pattern(secrets)
    if matcher is not None:
        # On the text as written: collapsing first would turn an ANSI sequence's ESC into a space and leave
        # its `[0m` inside the secret, where the matcher no longer sees one run.
        text = matcher.mask(text, REDACTED)
    text = _redact(_collapse(text), None)
    # Redaction ran on the whole text: the cut below can shorten a marker, never expose what it replaced.
    return ErrorSummary(reason_code=reason_code, summary=_bounded(text, MAX_SUMMARY_BYTES))


def scrub(text: str, secrets: Iterable[str] | SecretRegistry = ()) -> str:
    """The last line of defence before text becomes evidence. When a fragment of a registered secret occurs
    in `text` (agentctl.evidence.fragments): its summary, redacted and bounded. Otherwise `text` as it is (a producer's own wording is
    kept), cut to the summary bound when longer: with no registered secret in the whole text, a cut cannot
    leave part of one. Producers summarize with the generic rules already; checking for the registry alone
    costs microseconds where a second full summary would cost up to a millisecond per event."""
    if not isinstance(text, str) or not text:
        return text
    matcher = _secret_pattern(secrets)
    if matcher is not None and matcher.search(_head(text, _SUMMARY_INPUT)):
        return summarize("x", text, secrets).summary
    return _bounded(text, MAX_SUMMARY_BYTES)


# ---- short outside text ------------------------------------------------------------------------------

_OPAQUE_ID = re.compile(r"[A-Za-z0-9_.:-]+")
# Enough for any name the bound keeps; a megabyte "client name" is not worth redacting in full.
_SHORT_TEXT_INPUT = 8192


def opaque_id(value: object, limit: int = 128, secrets: Iterable[str] | SecretRegistry = ()) -> str | None:
    """An id someone else chose (an agent's session id), kept only when it looks like an id: 1..`limit`
    characters of letters, digits and `_.:-`, and no known secret inside. Free text is None, never cut."""
    if not isinstance(value, str) or not 0 < len(value) <= limit or not _OPAQUE_ID.fullmatch(value):
        return None
    matcher = _secret_pattern(secrets)
    return None if matcher is not None and matcher.search(value) else value


def bounded_text(
    value: object, max_bytes: int = 128, secrets: Iterable[str] | SecretRegistry = ()
) -> str | None:
    """Short free text someone else chose (an agent's or client's name and version, a stop reason) as
    evidence: redacted, on one line, within `max_bytes` of UTF-8 (cut marked); None when nothing is left."""
    if not isinstance(value, str) or not value:
        return None
    text = summarize("x", _head(value, _SHORT_TEXT_INPUT), secrets).summary or ""
    return _bounded(text, max_bytes) or None


# ---- text another process sanitized ----------------------------------------------------------------

def _blanked(text: str) -> str:
    """`text` with every whitespace, control and format character as one space, character for character:
    the view the generic rules read, so that `Bearer\\x00X` is still a credential, while the spans they
    match stay the spans of `text`."""
    if text.isascii():
        return text.translate(_ASCII_BLANKS)
    return "".join(" " if ch.isspace() or unicodedata.category(ch) in _SPACE_CATEGORIES else ch for ch in text)


def redact_in_place(text: str, max_bytes: int = MAX_SUMMARY_BYTES) -> str:
    """`text` after the generic rules, within `max_bytes` of UTF-8 (cut marked), and otherwise exactly as it
    was: line breaks, control and format characters are kept for the renderer to make visible (a JSON reader
    gets them exact). For text another process already sanitized: only what a rule matches is replaced."""
    if not text:
        return ""
    text = _head(text, _SUMMARY_INPUT)
    view = _blanked(text)
    for pattern, replacement in _RULES:
        pieces: list[str] = []
        last = 0
        for match in pattern.finditer(view):
            new = match.expand(replacement) if isinstance(replacement, str) else replacement(match)
            if new == match.group():
                continue
            pieces += (text[last : match.start()], new)
            last = match.end()
        if pieces:
            text = "".join(pieces) + text[last:]
            view = _blanked(text)
    return _bounded(text, max_bytes)
