"""How the MCP SDK and aiohttp enter the daemon: their submodules without the eager re-exports of the `mcp`,
httpx2 and aiohttp packages, and sse-starlette without its uvicorn hook. Nothing stood in for, no SDK file
changed.

- `mcp/__init__.py` re-exports the whole client (`mcp.Client`, `stdio_client`, sessions) and so imports it and
  its HTTP stack, which a daemon only needs once it tests an endpoint. The `mcp` package is registered from its
  own spec with its `__init__` not yet run: `import mcp.server` and every other submodule import as usual (the
  package's path is set), and the first read of an attribute the package itself defines (`mcp.Client`,
  `from mcp import ClientSession`, `mcp.__all__`) runs that `__init__`, once, in the same module object. After
  that the package is exactly what `import mcp` makes.
- httpx2 (the HTTP client) is imported by the server side only for `HttpResource.read()`
  (`mcp.server.mcpserver.resources.types` does `import httpx2` and uses it in that method alone), which the
  daemon's built-in server never serves. It is registered the same way as `mcp`: its `__init__` (the whole
  client, 0.7 MB) runs at the first attribute read, i.e. when the MCP client is first used (an endpoint test)
  or a resource is fetched over HTTP.
- aiohttp's `__init__` re-exports its client (sessions, connector, resolver, cookie jar, tracing: 4.2 MB
  measured), which the daemon never uses: it serves (`aiohttp.web`) and dials nothing over HTTP. aiohttp is
  registered the same way, with two differences its own submodules need: `from . import hdrs` (a submodule)
  imports that submodule alone, and `__version__`, which `aiohttp.http` reads from the package while it is
  imported, is set beforehand from the line of `__init__.py` that declares it (when there is no such line,
  aiohttp is imported as usual). `aiohttp.ClientSession` or `from aiohttp import WSMsgType` runs the
  `__init__`; agentctl's daemon modules import such names from their submodules (`aiohttp.web`).
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

These happen once, before the SDK or aiohttp is first imported (this package's `__init__`, which
agentctl.daemon imports first), in the importing thread; a package already loaded (a process that imported it
first) is left as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The heavy top-level modules these guards keep out of an idle daemon (tests pin the whole set).
KEPT_OUT = ("uvicorn", "click", "mcp.client", "rich", "httpx2", "aiohttp.client")
# Packages whose `__init__` runs at the first read of one of its own attributes, not at import.
DEFERRED_INITS = ("mcp", "httpx2", "aiohttp")
# What a package's own submodules read from it while they are imported (aiohttp.http: `from . import
# __version__`), set from the line of its `__init__` that declares it.
_SEEDS = {"aiohttp": ("__version__",)}


def import_sdk_lean() -> None:
    """Register `mcp`, httpx2 and aiohttp with their `__init__` deferred and import sse-starlette without
    uvicorn (see above)."""
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
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)
    for attribute in _SEEDS.get(name, ()):
        value = _declared(spec.origin, attribute)
        if value is None:
            return  # a release that no longer declares it plainly: imported as usual (the pin test says so)
        setattr(package, attribute, value)
    lock = threading.RLock()
    ran: list[bool] = []

    def __getattr__(attribute: str) -> Any:
        # Called only for a name the package does not have yet; once its __init__ ran, a miss is the package's
        # own (its own module __getattr__, if it has one, answers as it would have).
        if not ran and attribute.isidentifier() and not attribute.startswith("__") and \
                importlib.util.find_spec(f"{name}.{attribute}") is not None:
            # A submodule (`from . import hdrs` inside the package): imported alone, as the import system
            # would, so a submodule's own imports never run the __init__ half-way through a chain.
            return importlib.import_module(f"{name}.{attribute}")
        with lock:
            if not ran:
                ran.append(True)
                try:
                    loader.exec_module(package)
                except BaseException:
                    ran.clear()  # as a failed import: the next read tries again and sees the real error
                    raise
        try:
            return package.__dict__[attribute]
        except KeyError:
            own = package.__dict__.get("__getattr__")
            if own is not None and own is not __getattr__:
                return own(attribute)
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    # A module-level __getattr__ (PEP 562) is set on the module object; typeshed declares ModuleType's as a method.
    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = package


def _declared(origin: str | None, attribute: str) -> str | None:
    """The string the package's `__init__` assigns to `attribute` on a line of its own, or None."""
    if origin is None:
        return None
    try:
        with open(origin, encoding="utf-8") as source:
            text = source.read()
    except OSError:
        return None
    found = re.search(rf'^{re.escape(attribute)} = "([^"\\]*)"$', text, re.MULTILINE)
    return found.group(1) if found else None


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
