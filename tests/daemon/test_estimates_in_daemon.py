"""A daemon with token estimates on never holds the o200k_base vocabulary: a helper process counts its built-in
catalog at start, and the first tools/list of a real MCP client is recorded with estimates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO, write_spec

# A fresh interpreter running the real daemon in process, so its sys.modules and heap can be looked at.
_PROBE = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from agentctl.cli import main  # noqa: F401  (the console script's module, as `agentctl serve` loads it)
    from agentctl.control.client import ControlClient
    from agentctl.daemon.app import Daemon
    from agentctl.spec_loader import load_spec
    from tests.conftest import eventually

    async def _catalog(recorded):
        current = await recorded()
        return current if any(r.get("catalog") for r in current["servers"]) else None

    async def go():
        daemon = Daemon(load_spec(sys.argv[1]), socket_path=sys.argv[2])
        await daemon.start()
        try:
            ctl = ControlClient(sys.argv[2])
            assert (await asyncio.to_thread(ctl.post, "/v1/session/new"))[0] == 200
            config = (await asyncio.to_thread(ctl.get, "/v1/mcp-config"))[1]
            # Counted in the background since start: a cold cache waits for one helper run.
            assert await asyncio.to_thread(daemon.endpoint.estimator_loader.wait, 60)
            async with httpx2.AsyncClient(headers=config["headers"]) as http:
                async with Client(streamable_http_client(config["url"], http_client=http), mode="2026-07-28") as c:
                    await c.list_tools()
            async def recorded():
                return (await asyncio.to_thread(ctl.get, "/v1/report"))[1]["current"]

            current = await eventually(lambda: _catalog(recorded), 30, "the listing recorded")
            rows, events = current["servers"], current["evidence"]
            catalog = next(r["catalog"] for r in rows if r.get("catalog"))
            listed = sum(1 for e in events if e.get("kind") == "tools_list_observed")
            gc.collect()
            biggest = max((len(o) for o in gc.get_objects() if isinstance(o, dict)), default=0)
            loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tiktoken", "tiktoken_ext", "regex"))
            return dict(catalog=catalog, listed=listed, biggest_dict=biggest, loaded=loaded)
        finally:
            await daemon.stop()

    print(json.dumps(asyncio.run(go())))
    """
)


def test_a_daemon_lists_its_tools_with_estimates_and_never_loads_the_vocabulary(tmp_path, short_tmp):
    env_cache = tmp_path / "cold-cache"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(write_spec(tmp_path)), str(short_tmp / "c.sock")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "AGENTCTL_ESTIMATE_CACHE_DIR": str(env_cache)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    catalog = seen["catalog"]
    assert catalog and catalog["estimator"] == "o200k_base:mcp-tool-json-v1"
    assert all(t.get("token_estimate", 0) > 0 for t in catalog["tools"])
    assert seen["listed"] == 1, "the first listing already had its estimates"
    assert seen["loaded"] == [], "the vocabulary's modules are not in the daemon"
    # The ranks are a dict of ~200,000 entries; nothing of the daemon's comes near.
    assert seen["biggest_dict"] < 20_000, seen["biggest_dict"]
    assert len(list(env_cache.glob("*.json"))) == 1, "the counts were cached for the next daemon"
