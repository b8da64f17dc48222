"""Reading upstream frames off an asyncio stream: the one place the frame protocol meets a live connection.

`protocol` owns the frames, their limits and their codec and does no I/O; this module turns a stream's bytes
into one frame's line at a time, refusing an oversized or truncated one with the protocol's own errors.
"""

from __future__ import annotations

import asyncio

from agentctl.upstream.protocol import MAX_FRAME_BYTES, ProtocolError

STREAM_LIMIT = MAX_FRAME_BYTES + 1  # asyncio StreamReader limit: a whole line including its newline


async def read_frame_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's bytes without its newline; None at a clean end of stream (between frames).

    The reader must be created with limit=STREAM_LIMIT so an oversized line is refused without reading it
    all into memory.
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError(
            "truncated_frame", f"the stream ended inside a frame ({len(exc.partial)} bytes without a newline)"
        ) from None
    except asyncio.LimitOverrunError:
        raise ProtocolError("frame_too_large", f"frame over {MAX_FRAME_BYTES} bytes") from None
    return line[:-1]
