"""Estimates-on memory: an MCP-only daemon whose built-in tools were listed with token estimates, against the same
daemon with estimates off, side by side in one run.

Run:  .venv/bin/python bench/estimates_memory.py [--rounds 3] [--json PATH]

Each round starts both variants (interleaved), opens a session, lists the tools once with a real modern MCP
client, waits until the daemon's report carries the listing (with estimates, for "on"), then takes the
settled RSS and PSS. "On" is the default daemon with a warm host-wide estimate cache (the helper ran once,
before the rounds, as it does once per catalog on a host); "off" names an encoding file that does not exist,
so no estimate is ever computed. The issue's goal: on within +2 MB of off. Before this change a daemon that
listed its tools loaded the vocabulary itself (~+76 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import os

import _common as c

VARIANTS = ("estimates on", "estimates off")


async def _list(config: dict) -> None:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=config["headers"]) as http:
        async with Client(streamable_http_client(config["url"], http_client=http), mode="2026-07-28") as client:
            await client.list_tools()


def one(root, name: str, n: int, cache: str) -> dict:
    env = {"AGENTCTL_ESTIMATE_CACHE_DIR": cache}
    if name == "estimates off":
        env["AGENTCTL_O200K_PATH"] = str(root / "no-such-encoding")
    daemon = c.start_daemon(root / f"{name.split()[1]}-{n}", agent=None, env=env, execution_id=f"est-{n}")
    try:
        ctl = daemon.control()
        assert ctl.post("/v1/session/new")[0] == 200
        asyncio.run(_list(ctl.get("/v1/mcp-config")[1]))

        def listed() -> dict | None:
            rows = ctl.get("/v1/report")[1]["current"]["servers"]
            return next((r["catalog"] for r in rows if r.get("catalog")), None)

        catalog = c.wait_until(listed, 60, "the listing recorded")
        if name == "estimates on":
            catalog = c.wait_until(lambda: (listed() or {}).get("estimator") and listed(), 60, "estimates")
        c.settled_rss(daemon.pid)
        return {**c.memory(daemon.pid), "estimator": catalog.get("estimator")}
    finally:
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    with c.temp_dir("estimates-") as root:
        cache = str(root / "cache")
        one(root, "estimates on", -1, cache)  # warms the host-wide cache, as the first daemon on a host does
        samples: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for n, name in c.interleaved(args.rounds, VARIANTS):
            samples[name].append(one(root, name, n, cache))
            print(f"#   round {n} {name}: RSS {samples[name][-1]['rss'] / c.MB:.1f} MB", flush=True)
    assert all(s["estimator"] for s in samples["estimates on"]), "a listing without estimates"
    med = {v: {k: c.median(s[k] for s in samples[v]) for k in ("rss", "pss")} for v in VARIANTS}
    on, off = med["estimates on"], med["estimates off"]
    result = {"bench": "estimates_memory", "params": {"rounds": args.rounds}, "samples": samples, "figures": [
        c.figure("MCP-only daemon RSS after a listing, estimates on vs off", on["rss"], off["rss"], unit="B",
                 reference_name="estimates off"),
        c.figure("  difference (on - off), RSS", on["rss"] - off["rss"], unit="B", target=("value", "<=", 2 * c.MB)),
        c.figure("  difference (on - off), PSS", on["pss"] - off["pss"], unit="B", target=("value", "<=", 2 * c.MB)),
    ]}
    c.emit(result, args.json)


if __name__ == "__main__":
    os.environ.pop("AGENTCTL_O200K_PATH", None)
    main()
