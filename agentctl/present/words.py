"""The small words every surface shares: a count with its noun, a timestamp, a reason code beside its summary."""

from __future__ import annotations

from datetime import datetime


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def when(value: datetime | str) -> str:
    """A timestamp as `YYYY-MM-DD HH:MM:SS` (UTC, as stored); anything else verbatim."""
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    if len(text) >= 19 and text[10] in "T ":
        return text[:10] + " " + text[11:19]
    return text


def code_detail(reason: str | None, summary: str | None) -> str:
    """The detail beside a plain-language line: the bare reason code and the redacted summary."""
    code = reason or "no_reason_code"
    return f"{code}: {summary}" if summary else code
