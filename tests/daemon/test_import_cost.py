"""What a daemon loads and keeps: the ACP SDK (~8 MB, ~0.4 s of pydantic schema) and the agent supervisor (psutil)
only once an agent starts; the MCP SDK without its client, httpx2, uvicorn or rich, and aiohttp without its
client (agentctl.mcp_endpoint.sdk_imports), prometheus_client only at the first scrape, nothing of the OpenTelemetry
SDK while no OTLP endpoint is configured, and nothing else new from its dependencies; the start-up heap frozen out
of the garbage collector once started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO, write_spec

# A fresh interpreter: this test process has long imported the SDK through other tests.
_PROBE = textwrap.dedent(
    """
    import asyncio, gc, sys
    from agentctl.cli import main  # noqa: F401  (the console script's module, as `agentctl serve` loads it)
    from agentctl.daemon.app import Daemon
    from agentctl.spec_loader import load_spec

    # With no OTEL_EXPORTER_OTLP_* endpoint, tracing is off: none of the OpenTelemetry SDK or exporter.
    TRACING = ("opentelemetry.sdk", "opentelemetry.exporter", "agentctl.tracing.otel", "google.protobuf")

    async def go():
        daemon = Daemon(load_spec(sys.argv[1]), socket_path=sys.argv[2])
        await daemon.start()
        before = "acp" in sys.modules
        frozen = gc.get_freeze_count()
        third_party = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names))
        with open(sys.argv[3], "w") as out:
            out.write(" ".join([*third_party, *(m for m in sys.modules if m.startswith(("mcp.client", "httpx2.", *TRACING))),
                                *(["aiohttp-init"] if "ClientSession" in vars(sys.modules["aiohttp"]) else [])]))
        if before:
            await daemon.stop()
            return before, frozen, ""
        # What was kept out still comes when used, in this lean process: the MCP client and httpx2 (as an
        # endpoint test uses them) list the daemon's own tools; the first scrape imports the exposition.
        import httpx2
        from mcp.client import Client
        from mcp.client.streamable_http import streamable_http_client

        _, token = daemon.open_attempt("manual")
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with Client(streamable_http_client(daemon.ctx.mcp_url, http_client=http), mode="legacy") as c:
                tools = (await c.list_tools()).tools
            scraped = await http.get(f"{daemon.ctx.mcp_base}/metrics")
        await daemon.stop()
        used = f"tools={len(tools)}" if tools else "no-tools"
        return before, frozen, used + (" metrics" if "agentctl_attempts_total" in scraped.text else "")

    before, frozen, used = asyncio.run(go())
    print(f"frozen={frozen}", "acp-before" if before else "no-acp", "acp-after" if "acp" in sys.modules else "", used)
    """
)


def _run(spec, sock) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(spec), str(sock), str(sock.parent / "modules")], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
    assert proc.returncode == 0, proc.stderr
    frozen, *imports = proc.stdout.split()
    # The SDKs' schemas and modules (~100,000 objects) are out of reach of every later full collection.
    assert int(frozen.removeprefix("frozen=")) > 50_000, frozen
    return imports


# Every top-level module outside the standard library that an idle MCP-only daemon has loaded once started. An SDK
# upgrade that changes it fails here: look at what came (python -X importtime) before adding it.
IDLE_MCP_ONLY = {
    "aiohttp", "aiosignal", "annotated_types", "anyio", "attr", "frozenlist", "idna", "multidict", "propcache",
    "yarl",  # aiohttp's server (aiohttp.web); its client (aiohappyeyeballs, the connector) is deferred
    "mcp", "mcp_types", "pydantic", "pydantic_core", "typing_extensions", "typing_inspection", "starlette",
    "sse_starlette",  # the MCP server and its two eras' models
    "python_multipart",  # starlette's form parser (0.24 MB), imported by starlette.requests and guarded there
    # only by ModuleNotFoundError: reporting it missing would take forms away from the SDK's own routes
    "cryptography", "_cffi_backend", "_openssl",  # mcp.server.request_state: the sealed request-state codec
    "opentelemetry",  # mcp.server._otel, imported by the low-level server unconditionally
    "httpx2",  # registered by `import httpx2` in mcp.server.mcpserver.resources.types; its __init__ is deferred
    # (agentctl.mcp_endpoint.sdk_imports), so none of its submodules is loaded (checked below)
    "msgspec", "platformdirs",  # agentctl's own (psutil comes with an agent's supervisor)
}
# Build and run-time artefacts that are modules by name only.
_NOT_DEPENDENCIES = ("__main__", "_distutils_hack", "_sysconfigdata_", "__editable__", "_cython_", "cython_runtime",
                     "agentctl")


def test_an_idle_mcp_only_daemon_loads_only_the_pinned_dependencies_and_not_the_mcp_client(tmp_path, short_tmp):
    no_acp, used, metrics = _run(write_spec(tmp_path), short_tmp / "c.sock")
    assert no_acp == "no-acp" and used.startswith("tools=") and metrics == "metrics", (no_acp, used, metrics)
    loaded = (short_tmp / "modules").read_text().split()
    clients = [m for m in loaded if m.startswith(("mcp.client", "httpx2.")) or m == "aiohttp-init"]
    assert not clients, f"an HTTP client (the MCP SDK's, httpx2, aiohttp's) is loaded at idle: {clients}"
    traced = [m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "agentctl.tracing."))]
    assert not traced, f"tracing is off (no OTLP endpoint) yet the daemon loaded {traced}"
    found = {m for m in loaded if not m.startswith(_NOT_DEPENDENCIES)}
    new, gone = sorted(found - IDLE_MCP_ONLY), sorted(IDLE_MCP_ONLY - found)
    assert not new and not gone, (
        f"an idle MCP-only daemon now loads {new or 'nothing new'} and no longer {gone or 'lacks nothing'}: "
        "a dependency changed what it imports; keep heavy modules out (agentctl.mcp_endpoint.sdk_imports) "
        "or pin the new set here with the reason")
    # prometheus_client: imported at the first /metrics scrape (agentctl.daemon.metrics).
    for kept_out in ("uvicorn", "click", "rich", "multiprocessing", "prometheus_client", "aiohappyeyeballs",
                     "psutil"):
        assert kept_out not in found and kept_out not in loaded, kept_out


def test_a_daemon_with_an_acp_agent_imports_the_sdk_when_it_starts_the_agent(tmp_path, short_tmp):
    spec = write_spec(tmp_path, '[agent]\ncommand = ["agentctl-reference-agent"]\nprotocol = "acp"\n')
    assert _run(spec, short_tmp / "c.sock") == ["acp-before", "acp-after"]


def _package(root, name: str, init: str) -> None:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    (pkg / "hdrs.py").write_text("X = 1\n")
    # Like aiohttp.http: reads a submodule and a name of the package's own __init__ while it is imported.
    (pkg / "http.py").write_text("from . import __version__, hdrs\nVERSION = __version__\n")


def test_a_deferred_package_runs_its_init_at_first_use_and_one_that_does_not_declare_its_version_is_left_alone(
        tmp_path, monkeypatch):
    from agentctl.mcp_endpoint import sdk_imports

    _package(tmp_path, "agentctl_lean_a", '__version__ = "1.2"\nfrom .http import VERSION\nFULL = True\n')
    _package(tmp_path, "agentctl_lean_b", '__version__ = ".".join(["1", "2"])\nFULL = True\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sdk_imports, "_SEEDS", {"agentctl_lean_a": ("__version__",),
                                               "agentctl_lean_b": ("__version__",)})
    for name in ("agentctl_lean_a", "agentctl_lean_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.delitem(sys.modules, f"{name}.http", raising=False)
        monkeypatch.delitem(sys.modules, f"{name}.hdrs", raising=False)
        sdk_imports._defer_package_init(name)

    import agentctl_lean_a.http  # type: ignore[import-not-found]

    package = sys.modules["agentctl_lean_a"]
    assert agentctl_lean_a.http.VERSION == "1.2" and "FULL" not in vars(package), "the submodule alone, no __init__"
    assert package.FULL is True and package.VERSION == "1.2", "the first read of the package's own name ran it"
    assert "agentctl_lean_b" not in sys.modules, "no plain declaration: not deferred, imported as usual later"
    for name in [m for m in sys.modules if m.startswith("agentctl_lean_")]:
        del sys.modules[name]
