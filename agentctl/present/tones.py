"""The tone of a display state (green, amber, red, grey; `plain` claims nothing), one name on every surface: the
terminal maps it to ANSI, the hub page to its stylesheet's colours, the probe's report to ANSI too."""

from __future__ import annotations

from typing import Literal

Tone = Literal["green", "amber", "red", "grey", "plain"]

# Display status -> tone. `configured` stays plain: it claims nothing.
STATE_TONES: dict[str, Tone] = {
    "active": "green",
    "connected": "amber",
    "delivered": "amber",
    "failed": "red",
    "filtered": "grey",
    "unavailable": "grey",
}


def state_tone(status: str) -> Tone:
    """The tone a server row's display state is shown in."""
    return STATE_TONES.get(status, "plain")


def reported_tone(state: str) -> Tone:
    """The tone of a state an agent reported of a server: connected, a failure (or a login it needs), else unsure."""
    if state == "connected":
        return "green"
    return "red" if state in ("failed", "needs_auth") else "amber"
