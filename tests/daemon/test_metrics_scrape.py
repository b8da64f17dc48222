"""The daemon's metrics where an operator's tools look: the metrics-only listener of a real `agentctl serve`
(`--metrics-listen`, what a pod's address is bound to), its exposition checked by `promtool check metrics` and
scraped by a real Prometheus server; bounded labels and no secret in any of it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from agentctl.evidence.contract.report import EVIDENCE_KINDS
from agentctl.mcp_endpoint.latency import METHODS, RequestLatency, method_label
from tests.conftest import agentctl_cmd, poll

URL_SECRET = "CANARYpath-s3cret"
SESSION = "session-CANARYsid"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("AGENTCTL_REQUIRE_PROMETHEUS"):
            pytest.fail(f"{name} is not installed (.ci/run installs Debian's prometheus package)")
        pytest.skip(f"{name} is not installed (apt-get install prometheus; .ci/run does)")
    return path


def _pod_address() -> str:
    """The machine's first non-loopback IPv4 address (a pod's own address in Kubernetes), else loopback."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return "127.0.0.1"


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


@pytest.fixture
def metrics_daemon(serve, short_dir: Path):
    host = _pod_address()
    port = _free_port(host)
    daemon = serve(execution_id="exec-metrics", identity={"task_id": "task-CANARYtask", "session_id": SESSION},
                   servers=[{"name": "docs", "type": "http", "url": f"http://127.0.0.1:1/{URL_SECRET}/mcp"}],
                   extra_args=("--metrics-listen", f"{host}:{port}"))
    return daemon, f"http://{host}:{port}"


def test_the_metrics_listener_serves_metrics_alone_without_a_token_and_promtool_accepts_them(metrics_daemon):
    daemon, base = metrics_daemon
    status, text = poll(lambda: (got := _get(f"{base}/metrics"))[0] == 200 and got, what="the metrics listener")
    assert "agentctl_build_info{" in text and "process_resident_memory_bytes" in text and "python_info{" in text
    # Nothing else of the daemon is reachable through it: not the control API, MCP, health or diagnostics.
    for path in ("/v1/status", "/mcp", "/sse", "/readyz", "/healthz", "/v1/diagnostics", "/"):
        assert _get(f"{base}{path}")[0] == 404, path
    request = urllib.request.Request(f"{base}/metrics", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    for secret in ("CANARY", URL_SECRET, "exec-metrics", SESSION):
        assert secret not in text, secret
    check = subprocess.run([_tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check


def test_a_real_prometheus_scrapes_the_daemon_on_the_pod_address_and_answers_queries_about_it(metrics_daemon,
                                                                                               short_dir: Path):
    daemon, base = metrics_daemon
    prometheus = _tool("prometheus")
    target = urllib.parse.urlsplit(base).netloc
    config = short_dir / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "agentctl", "static_configs": [{"targets": [target]}]}],
    }))
    port = _free_port("127.0.0.1")
    log = (short_dir / "prometheus.log").open("wb")
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={short_dir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}/api/v1/query?query="

    def query(expr: str) -> list[dict]:
        status, body = _get(api + urllib.parse.quote(expr))
        return json.loads(body)["data"]["result"] if status == 200 else []

    try:
        up = poll(lambda: query('up{job="agentctl"}'), timeout=60, what="Prometheus's first scrape")
        assert up[0]["value"][1] == "1", up
        info = poll(lambda: query("agentctl_build_info"), timeout=30, what="agentctl_build_info in Prometheus")
        assert info[0]["metric"]["version"] and info[0]["metric"]["instance"] == target
        kinds = query("count(agentctl_evidence_events_total)")
        assert kinds and kinds[0]["value"][1] == str(len(EVIDENCE_KINDS)), kinds
        assert query("process_resident_memory_bytes > 0")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_a_bad_metrics_listen_address_is_refused_in_one_line_and_no_daemon_starts(short_dir: Path):
    from tests.conftest import write_spec

    spec = write_spec(short_dir)
    for value, says in (("9464", "not HOST:PORT"), ("pod.example:9464", "must be an IP address"),
                        ("0.0.0.0:99999", "not HOST:PORT")):
        done = subprocess.run(agentctl_cmd("serve", str(spec), "--socket", str(short_dir / "c.sock"),
                                           "--metrics-listen", value), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and not done.stdout, done
        assert done.stderr.count("\n") == 1 and "--metrics-listen" in done.stderr and says in done.stderr, done.stderr


def test_a_method_no_client_may_name_is_timed_as_other_so_the_label_set_stays_bounded():
    latency = RequestLatency()
    for method in ("tools/call", "CANARY/invented", "x" * 10_000, None):
        latency.observe(method, 0.002)
    assert set(latency.buckets) == {"tools/call", "other"} <= set(METHODS)
    assert method_label("CANARY/invented") == "other"
    assert latency.cumulative("other")[-1] == ("+Inf", 3) and latency.cumulative("other")[1] == ("0.001", 0)
    assert latency.cumulative("other")[2] == ("0.0025", 3)
