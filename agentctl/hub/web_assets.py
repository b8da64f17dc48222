"""The hub page's static files as served: read once, gzip-compressed once (at first use), answered compressed to
a client that accepts gzip, with an ETag so a browser revalidates for a bodyless 304 instead of fetching again.

Why it matters beyond speed: the page's assets need no token, and the largest (the vendored xterm.js, 488 KB)
was read from disk in a worker thread and sent whole for every request. Someone who asks for it on many
connections and never reads made the hub write half a megabyte per request into buffers nobody empties; the
compressed copy is a quarter of that, and a revalidation costs nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

GZIP_LEVEL = 9
# Assets are not versioned in their URLs (an upgrade changes them in place): a browser keeps them and asks
# whether they changed (If-None-Match) before each use, and gets a 304 without a body while they did not.
CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class Asset:
    plain: bytes
    compressed: bytes
    etag: str


def build_asset(path: Path) -> Asset:
    """Read and compress one file (blocking: run it in a worker thread)."""
    plain = path.read_bytes()
    compressed = gzip.compress(plain, compresslevel=GZIP_LEVEL, mtime=0)
    return Asset(plain, compressed, '"' + hashlib.sha256(plain).hexdigest()[:32] + '"')


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding header accepts gzip (a `q=0` refuses it)."""
    for part in header.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        name, _, value = params.strip().partition("=")
        if name.strip().lower() != "q":
            return True
        try:
            return float(value) > 0
        except ValueError:
            return False
    return False


def not_modified(request: web.Request, etag: str) -> bool:
    tags = request.headers.get("If-None-Match", "")
    return any(tag.strip() in (etag, "*", "W/" + etag) for tag in tags.split(",")) if tags else False


class AssetCache:
    """Each asset built once (in a worker thread: at `preload`, else on first use), then kept for the process's
    life. Requests that arrive while it is built wait for that one build: a burst of first requests never
    queues one compression each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, asyncio.Future[Asset]] = {}

    async def preload(self, names: Iterable[str]) -> None:
        await asyncio.gather(*(self.get(name) for name in names))

    async def get(self, name: str) -> Asset:
        built = self._built.get(name)
        if built is None or (built.done() and built.exception() is not None):  # a failed read is tried again
            built = self._built[name] = asyncio.ensure_future(asyncio.to_thread(build_asset, self.root / name))
        return await asyncio.shield(built)

    def handler(self, name: str, kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            asset = await self.get(name)
            headers = {"Cache-Control": CACHE_CONTROL, "ETag": asset.etag, "Vary": "Accept-Encoding"}
            if not_modified(request, asset.etag):
                return web.Response(status=304, headers=headers)
            if accepts_gzip(request.headers.get("Accept-Encoding", "")):
                headers["Content-Encoding"] = "gzip"
                body = asset.compressed
            else:
                body = asset.plain
            return web.Response(body=body, content_type=kind, charset="utf-8", headers=headers)

        return serve
