"""Owns saying why msgspec refused some input without repeating any value of that input. Pure: no I/O.

msgspec's messages quote the offending value (`Invalid enum value 'hunter2' - at `$.kind``), and the input
may be a spec, a frame or a request body holding secrets. Every place that reports a decode or validation
error passes it through `describe_decode_error`: the reason keeps msgspec's words and the names of fields,
every quoted value becomes `<value>`, and the field path is read only from where msgspec puts it (the very
end), so a value that imitates a path cannot move it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["DecodeErrorText", "describe_decode_error"]

# From the first quote to the last, of either kind: msgspec quotes a value with whichever quote it does not
# contain and escapes nothing, so only the outermost pair is known to enclose the value.
_QUOTED = re.compile(r"['\"].*['\"]", re.S)
# msgspec appends ` - at `$...`` last; a path is `$` then `.field`, `[index]` or `[...]` steps.
_PATH = re.compile(r" - at `(\$(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\]|\[\.\.\.\])*)`\Z")


class DecodeErrorText(NamedTuple):
    reason: str  # msgspec's reason, every quoted value replaced by <value>, one printable line
    path: str | None  # msgspec's field path (`$.servers[0].url`), None at the top level

    def text(self, *, with_path: bool = True, limit: int | None = None) -> str:
        """The reason (and ` - at `path``), cut to `limit` characters with an ellipsis."""
        out = self.reason + (f" - at `{self.path}`" if with_path and self.path else "")
        if limit is not None and len(out) > limit:
            out = out[: limit - 1] + "…"
        return out

    def field(self) -> str:
        """The path as a spec names fields (`servers[0].url`), or `(top level)`."""
        return (self.path or "$")[1:].lstrip(".") or "(top level)"


def describe_decode_error(error: Exception | str) -> DecodeErrorText:
    """The value-free reason and the field path of a msgspec DecodeError or ValidationError (or its text)."""
    message = str(error)
    match = _PATH.search(message)
    reason, path = (message[: match.start()], match.group(1)) if match else (message, None)
    reason = _QUOTED.sub("<value>", reason)
    # One line even when msgspec names an unknown key holding a line break (keys are named, values never).
    reason = "".join(ch if ch.isprintable() else "?" for ch in reason)
    return DecodeErrorText(reason, path)
