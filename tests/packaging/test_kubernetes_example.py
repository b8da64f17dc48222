"""The Kubernetes example agrees with itself: a valid spec, and probes, socket, port and grace period that match it.

No cluster runs here and no YAML parser is a dependency, so the manifests are read as text for the few
values that must agree with the spec; the spec itself goes through agentctl's own loader.
"""

from __future__ import annotations

import re

from agentctl.spec import listen_address, load_spec
from tests.conftest import REPO

K8S = REPO / "packaging" / "kubernetes"


def _pod() -> str:
    return (K8S / "pod.yaml").read_text()


def test_the_example_spec_is_valid_and_fixes_a_loopback_port_for_probes():
    spec = load_spec(K8S / "spec.toml")
    host, port = listen_address(spec)
    assert host == "127.0.0.1" and port == 8765
    assert spec.agent is not None and spec.agent.command == ["agentctl-reference-agent"]
    # The state in a subdirectory the daemon makes its own: the emptyDir itself is root's and world-writable.
    assert spec.state.dir == "/var/lib/agentctl/state" and spec.upstream.socket == "/run/executor/agentctl.sock"


def test_exec_probes_ask_the_socket_the_sidecar_serves():
    pod = _pod()
    serve = re.search(r'args: \["serve", "/etc/agentctl/spec.toml", "--socket", "([^"]+)"\]', pod)
    assert serve, "the sidecar runs `agentctl serve` on the mounted spec with an explicit socket"
    socket = serve.group(1)
    probes = re.findall(r'command: \["agentctl", "health", (.*)\]', pod)
    assert probes == [f'"--ready", "--socket", "{socket}"'] * 2 + [f'"--socket", "{socket}"']
    assert "restartPolicy: Always" in pod and "secretRef:" in pod and "name: agentctl-spec" in pod


def test_grace_period_outlasts_the_specs_shutdown_bound():
    spec = load_spec(K8S / "spec.toml")
    grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", _pod()).group(1))
    assert spec.agent is not None
    assert grace > spec.daemon.shutdown_timeout + spec.agent.stop_grace


def test_httpget_variant_probes_the_specs_port_on_loopback_with_host_network():
    spec = load_spec(K8S / "spec.toml")
    _, port = listen_address(spec)
    patch = (K8S / "httpget" / "probes.yaml").read_text()
    assert "hostNetwork: true" in patch
    gets = re.findall(r"httpGet: \{host: (\S+), port: (\d+), path: (\S+)\}", patch)
    assert gets == [("127.0.0.1", str(port), "/readyz"), ("127.0.0.1", str(port), "/readyz"),
                    ("127.0.0.1", str(port), "/livez")]
    assert patch.count("exec: null") == 3, "each probe drops its exec handler (one handler per probe)"
