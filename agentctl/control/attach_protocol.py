"""The messages of `GET /v1/agent/terminal` (a WebSocket): the agent's terminal bytes travel as binary frames both
ways; these JSON text frames say who holds the keyboard, resize the terminal and end the attachment.

Not part of the evidence contract: nothing here is recorded, persisted or sent upstream.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from agentctl.agent.pty_host import MAX_DIMENSION
from agentctl.present.output import ATTACH_WARNING

Role = Literal["writer", "reader"]
Dimension = Annotated[int, msgspec.Meta(ge=1, le=MAX_DIMENSION)]

TERMINAL_ROUTE = "/v1/agent/terminal"


class Hello(msgspec.Struct, tag="hello", tag_field="type"):
    """The first frame: this viewer's role, the terminal's size, how many watch; then the replayed screen."""

    role: Role
    rows: int
    cols: int
    viewers: int
    warning: str = ATTACH_WARNING


class RoleChanged(msgspec.Struct, tag="role", tag_field="type"):
    """The keyboard changed hands: this viewer's role now, and whether anyone holds it."""

    role: Role
    held: bool


class Closed(msgspec.Struct, tag="closed", tag_field="type"):
    """The terminal is gone (the agent exited, or the daemon stops); the server closes the socket next.
    `delivered`: how many bytes of this viewer's keys were written to the agent's terminal, in all."""

    reason: str
    delivered: int = 0


class Detached(msgspec.Struct, tag="detached", tag_field="type"):
    """The answer to `detach`, once this viewer's keys reached the agent (or a bound passed and the rest was
    dropped): `delivered` bytes of its keys were written to the agent's terminal, in all; the server closes next."""

    delivered: int


class Notice(msgspec.Struct, tag="notice", tag_field="type"):
    """A request this viewer made was refused or ignored (e.g. keys from a reader), with a reason code;
    `undelivered`: bytes of this viewer's keys that this refusal kept from the agent."""

    reason_code: str
    message: str
    undelivered: int = 0


ServerMessage = Hello | RoleChanged | Closed | Detached | Notice


class Resize(msgspec.Struct, tag="resize", tag_field="type", forbid_unknown_fields=True):
    rows: Dimension
    cols: Dimension


class Take(msgspec.Struct, tag="take", tag_field="type", forbid_unknown_fields=True):
    """Take the keyboard from whoever holds it."""


class Release(msgspec.Struct, tag="release", tag_field="type", forbid_unknown_fields=True):
    """Give the keyboard up (to the viewer attached longest)."""


class Detach(msgspec.Struct, tag="detach", tag_field="type", forbid_unknown_fields=True):
    """Leave once the keys sent before this reached the agent; answered with `detached`."""


ClientMessage = Resize | Take | Release | Detach
