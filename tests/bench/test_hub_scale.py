"""The scale-curve benchmark (bench/hub_scale.py) at its smallest point, so the script cannot rot: real hubs,
real publishers, the page streams, the database checked. Its figures are not judged here (bench/RESULTS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import NOT_INSTALLED, find_bindir, unavailable

REPO = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, configs: str) -> list[dict]:
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "hub_scale.py"), "--configs", configs,
                           "--publishers", "12", "--seconds", "1", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["results"]


def assert_point_is_whole(r: dict) -> None:
    assert r["nothing_lost"] is True  # the database held every session's final history exactly
    assert r["flat_events"] > 0 and r["ingest_events_per_s"] > 0
    assert r["probes"] > 0 and r["probes_missing"] == 0
    assert 0 < r["p50_ms_every_view"] <= r["p99_ms_every_view"]
    assert r["rss_kb_per_daemon"] is not None and r["db_bytes_per_event"] > 0


def test_the_smallest_point_on_sqlite_measures_ingest_latency_memory_and_growth_with_nothing_lost(tmp_path):
    [r] = run_bench(tmp_path, "sqlite:1")
    assert (r["engine"], r["hubs"], r["publishers"]) == ("sqlite", 1, 12)
    assert_point_is_whole(r)
    assert r["db_server_cpu_ms_per_1000"] is None


@pytest.mark.timeout(150)
def test_two_hubs_on_postgresql_show_each_probe_on_both_pages_through_notify(tmp_path):
    if find_bindir() is None:
        unavailable(NOT_INSTALLED)
    [r] = run_bench(tmp_path, "pg:2")
    assert (r["engine"], r["hubs"]) == ("pg", 2)
    assert_point_is_whole(r)
    # Every view's delay is at least the probe's own hub's: the other hub learns of it through the database.
    assert r["p50_ms_every_view"] >= r["p50_ms_own_hub"]
    assert r["db_server_cpu_ms_per_1000"] > 0
