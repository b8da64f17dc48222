"""What a daemon loads and keeps: the ACP SDK (~8 MB, ~0.4 s of pydantic schema) only once an ACP agent starts;
the MCP SDK without its client, uvicorn or rich (agentctl.mcp_endpoint.sdk_imports) and nothing else new from
its dependencies; the start-up heap frozen out of the garbage collector once started."""

from __future__ import annotations

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
    from agentctl.spec import load_spec

    async def go():
        daemon = Daemon(load_spec(sys.argv[1]), socket_path=sys.argv[2])
        await daemon.start()
        before = "acp" in sys.modules
        frozen = gc.get_freeze_count()
        third_party = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names))
        with open(sys.argv[3], "w") as out:
            out.write(" ".join([*third_party, *(m for m in sys.modules if m.startswith("mcp.client"))]))
        await daemon.stop()
        return before, frozen

    before, frozen = asyncio.run(go())
    print(f"frozen={frozen}", "acp-before" if before else "no-acp", "acp-after" if "acp" in sys.modules else "")
    """
)


def _run(spec, sock) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(spec), str(sock), str(sock.parent / "modules")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    frozen, *imports = proc.stdout.split()
    # The SDKs' schemas and modules (~100,000 objects) are out of reach of every later full collection.
    assert int(frozen.removeprefix("frozen=")) > 50_000, frozen
    return imports


# Every top-level module outside the standard library that an idle MCP-only daemon has loaded once started. An SDK
# upgrade that changes it fails here: look at what came (python -X importtime) before adding it.
IDLE_MCP_ONLY = {
    "aiohappyeyeballs", "aiohttp", "aiosignal", "annotated_types", "anyio", "attr", "frozenlist", "idna",
    "multidict", "propcache", "yarl",  # aiohttp
    "mcp", "mcp_types", "pydantic", "pydantic_core", "typing_extensions", "typing_inspection", "starlette",
    "sse_starlette",  # the MCP server and its two eras' models
    "python_multipart",  # starlette's form parser, imported by starlette.requests and guarded there only by
    # ModuleNotFoundError: reporting it missing would take forms away from the SDK's own routes
    "cryptography", "_cffi_backend", "_openssl",  # mcp.server.request_state: the sealed request-state codec
    "opentelemetry",  # mcp.server._otel, imported by the low-level server unconditionally
    "httpx2",  # mcp.server.mcpserver.resources.types (HTTP resources)
    "msgspec", "psutil", "platformdirs",  # agentctl's own
    "prometheus_client",  # the /metrics route's collectors (agentctl.daemon.metrics), about 1 MB at start
}
# Build and run-time artefacts that are modules by name only.
_NOT_DEPENDENCIES = ("__main__", "_distutils_hack", "_sysconfigdata_", "__editable__", "_cython_", "cython_runtime",
                     "agentctl")


def test_an_idle_mcp_only_daemon_loads_only_the_pinned_dependencies_and_not_the_mcp_client(tmp_path, short_tmp):
    assert _run(write_spec(tmp_path), short_tmp / "c.sock") == ["no-acp"]
    loaded = (short_tmp / "modules").read_text().split()
    clients = [m for m in loaded if m.startswith("mcp.client")]
    assert not clients, f"the MCP client is loaded before any endpoint test: {clients}"
    found = {m for m in loaded if not m.startswith(_NOT_DEPENDENCIES) and not m.startswith("mcp.client")}
    new, gone = sorted(found - IDLE_MCP_ONLY), sorted(IDLE_MCP_ONLY - found)
    assert not new and not gone, (
        f"an idle MCP-only daemon now loads {new or 'nothing new'} and no longer {gone or 'lacks nothing'}: "
        "a dependency changed what it imports; keep heavy modules out (agentctl.mcp_endpoint.sdk_imports) "
        "or pin the new set here with the reason")
    for kept_out in ("uvicorn", "click", "rich", "multiprocessing"):
        assert kept_out not in found and kept_out not in loaded, kept_out


def test_a_daemon_with_an_acp_agent_imports_the_sdk_when_it_starts_the_agent(tmp_path, short_tmp):
    spec = write_spec(tmp_path, '[agent]\ncommand = ["agentctl-reference-agent"]\nprotocol = "acp"\n')
    assert _run(spec, short_tmp / "c.sock") == ["acp-before", "acp-after"]
