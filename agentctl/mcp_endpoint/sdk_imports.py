"""How the MCP SDK enters the daemon: its submodules without the `mcp` package's eager re-exports, and
sse-starlette without its uvicorn hook. Two guards, nothing stood in for, no SDK file changed.

- `mcp/__init__.py` re-exports the whole client (`mcp.Client`, `stdio_client`, sessions) and so imports it and
  its HTTP stack, which a daemon only needs once it tests an endpoint. The `mcp` package is registered from its
  own spec with its `__init__` not yet run: `import mcp.server` and every other submodule import as usual (the
  package's path is set), and the first read of an attribute the package itself defines (`mcp.Client`,
  `from mcp import ClientSession`, `mcp.__all__`) runs that `__init__`, once, in the same module object. After
  that the package is exactly what `import mcp` makes.
- httpx2 (the HTTP client) is imported by the server side only for `HttpResource.read()`
  (`mcp.server.mcpserver.resources.types` does `import httpx2` and uses it in that method alone), which the
  daemon's built-in server never serves. It is registered the same way as `mcp`: its `__init__` (the whole
  client, ~2 MB) runs at the first attribute read, i.e. when the MCP client is first used (an endpoint test)
  or a resource is fetched over HTTP.
- sse-starlette, imported by the SDK's HTTP transports, tries `import uvicorn` (which brings click and
  multiprocessing) only to hook uvicorn's signal handler for a graceful drain; it treats an ImportError as
  "not running under uvicorn", and it catches that ImportError itself. The daemon serves through aiohttp, never
  uvicorn, so sse-starlette is imported once with uvicorn reported missing. uvicorn stays importable for
  anything that asks for it later, and sse-starlette's other shutdown check (reading uvicorn's server off the
  SIGTERM handler) does not import it.

- `MCPServer(...)` configures logging with a rich handler when rich is importable (rich is installed for
  httpx2's command line). agentctl.mcp_endpoint.sdk removes whatever handler the constructor adds, so the
  constructor runs with rich reported missing (`missing("rich")`): it falls back to a plain handler, removed
  the same way, and rich's console stack is never loaded.

The first three happen once, before the SDK is first imported (this package's `__init__`), in the importing thread; when
the SDK is already loaded (a process that imported it first) they change nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The heavy top-level modules these guards keep out of an idle daemon (tests pin the whole set).
KEPT_OUT = ("uvicorn", "click", "mcp.client", "rich", "httpx2")
# Packages whose `__init__` runs at the first read of one of its own attributes, not at import.
DEFERRED_INITS = ("mcp", "httpx2")


def import_sdk_lean() -> None:
    """Register `mcp` and httpx2 with their `__init__` deferred and import sse-starlette without uvicorn (see
    above)."""
    for name in DEFERRED_INITS:
        if name not in sys.modules:
            _defer_package_init(name)
    if "sse_starlette" not in sys.modules and "uvicorn" not in sys.modules:
        with missing("uvicorn"):
            try:
                import sse_starlette.sse  # noqa: F401
            except ImportError:
                pass  # an SDK without sse-starlette does not need the guard


def _defer_package_init(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = importlib.util.module_from_spec(spec)
    lock = threading.RLock()
    ran: list[bool] = []

    def __getattr__(attribute: str) -> Any:
        # Called only for a name the package does not have yet; once its __init__ ran, a miss is a real miss.
        with lock:
            if not ran:
                ran.append(True)
                spec.loader.exec_module(package)  # type: ignore[union-attr]
        try:
            return package.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = package


class _Missing(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextmanager
def missing(name: str) -> Iterator[None]:
    """While in this block, importing `name` (or a submodule) fails as if it were not installed; a module already
    imported is unaffected. For imports the importing code itself guards with `except ImportError`."""
    finder = _Missing(name)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
