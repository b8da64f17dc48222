"""A real OTLP receiver for the trace tests: Arize Phoenix (`arize-phoenix` from PyPI, in its own venv under
.ci-cache/phoenix, which .ci/run installs best effort), started once per module on loopback ports."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, free_socket, poll

REQUIRE = "AGENTCTL_REQUIRE_PHOENIX"  # .ci/run sets it when Phoenix installed: then a missing one fails the test
INSTALL = "pip install arize-phoenix==20.26.1 into .ci-cache/phoenix (.ci/run does), or set AGENTCTL_PHOENIX"


def phoenix_path() -> str | None:
    for candidate in (os.environ.get("AGENTCTL_PHOENIX"), str(REPO / ".ci-cache" / "phoenix" / "bin" / "phoenix")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class Phoenix:
    def __init__(self, url: str) -> None:
        self.url = url

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span Phoenix stored for `project` (empty while it has none)."""
        try:
            with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?limit=1000", timeout=10) as r:
                return json.load(r)["data"]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def raw(self, project: str) -> str:
        with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?limit=1000", timeout=10) as r:
            return r.read().decode()

    def wait_spans(self, project: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []

        def enough() -> list[dict[str, Any]] | None:
            seen[:] = self.spans(project)
            return seen if len(seen) >= count else None

        try:
            return poll(enough, timeout=timeout, interval=0.2, what=f"{count} spans of {project}")
        except pytest.fail.Exception:
            pytest.fail(f"Phoenix has {len(seen)} spans of {project}, not {count}: {[s['name'] for s in seen]}")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    exe = phoenix_path()
    if exe is None:
        if os.environ.get(REQUIRE):
            pytest.fail(f"Phoenix is not installed ({INSTALL}); {REQUIRE} is set", pytrace=False)
        pytest.skip(f"Phoenix is not installed: {INSTALL}")
    work: Path = tmp_path_factory.mktemp("phoenix")
    with free_socket() as http_sock, free_socket() as grpc_sock:
        http_port, grpc_port = http_sock.getsockname()[1], grpc_sock.getsockname()[1]
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(http_port), "PHOENIX_GRPC_PORT": str(grpc_port),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    for name in [n for n in env if n.startswith("OTEL_")]:
        del env[name]
    log = (work / "phoenix.log").open("wb")
    proc = subprocess.Popen([exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{http_port}"
    try:
        def healthy() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"Phoenix exited ({proc.poll()}): "
                            f"{(work / 'phoenix.log').read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        poll(healthy, timeout=180, interval=0.3, what="Phoenix to answer /healthz")
        yield Phoenix(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
