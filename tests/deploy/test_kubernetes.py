"""The Kubernetes manifests (deploy/kubernetes/): rendered (base and the GPU overlay) by
deploy/kubernetes/render.py, every object valid against the Kubernetes API schemas
(kubernetes-validate, strict: no unknown field), and consistent with each other and with the
service: the ConfigMap's config loads through the service's own schema, ``--shard auto/N``
matches the replicas, probes and Services name ports that exist, selectors select pods."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from streamer.config import load_config
from streamer.foundation.shards import Shard
from tests.deploy.test_compose_and_systemd import LIVENESS_IN_IMAGE

PROJECT = Path(__file__).resolve().parents[2]
MANIFESTS = PROJECT / "deploy" / "kubernetes"
KUBERNETES = "1.31.0"  # the oldest version these manifests are for (PDB v1, StatefulSet, ...)
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}  # not in the core schemas


def _renderer() -> Any:
    spec = importlib.util.spec_from_file_location("render", MANIFESTS / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _renderer().render


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.fixture(params=["base", "overlays/gpu"])
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(MANIFESTS / request.param)


def test_every_object_is_valid_against_the_kubernetes_schemas(
    objects: list[dict[str, Any]],
) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for needed in [
        ("Deployment", "triton"),
        ("Service", "triton"),
        ("StatefulSet", "lpr-streamer"),
        ("ConfigMap", "lpr-config"),
        ("Secret", "lpr-secrets"),
        ("PodDisruptionBudget", "triton"),
        ("PodDisruptionBudget", "lpr-streamer"),
        ("NetworkPolicy", "triton"),
        ("ServiceMonitor", "lpr"),
    ]:
        assert needed in kinds
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            continue
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)  # raises when invalid
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "lpr"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "lpr"


def test_a_broken_object_is_refused() -> None:
    """The validation really checks: a misspelt field and a wrong type are errors."""
    service = by_kind(render(MANIFESTS / "base"), "Service")["triton"]
    misspelt = {**service, "spec": {**service["spec"], "clusterIp": "None"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBERNETES, strict=True)
    wrong = {**service, "spec": {**service["spec"], "ports": [{"port": "grpc"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES, strict=True)


def test_the_pieces_fit_together(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    streamer = by_kind(objects, "StatefulSet")["lpr-streamer"]
    triton = by_kind(objects, "Deployment")["triton"]
    services = by_kind(objects, "Service")
    # --shard auto/N with N the number of replicas; a pod's name gives its index.
    args = streamer["spec"]["template"]["spec"]["containers"][0]["args"]
    shard = args[args.index("--shard") + 1]
    replicas = streamer["spec"]["replicas"]
    assert shard == f"auto/{replicas}"
    assert Shard.parse(shard, hostname=f"lpr-streamer-{replicas - 1}").index == replicas - 1
    # The config loads through the service's schema, with the Secret's keys as environment.
    config = by_kind(objects, "ConfigMap")["lpr-config"]["data"]["site.yaml"]
    env = by_kind(objects, "Secret")["lpr-secrets"]["stringData"]
    path = tmp_path / "site.yaml"
    path.write_text(config)
    settings = load_config(path, env=env)
    assert settings.storage.backend == "postgresql" and settings.outbox.path.parent == Path("/data")
    assert settings.triton.url == "triton:8001"
    mount = streamer["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "data", "mountPath": "/data"} in mount
    assert [t["metadata"]["name"] for t in streamer["spec"]["volumeClaimTemplates"]] == ["data"]
    # Probes and Services name ports the containers have; selectors select the pods.
    for workload in (streamer, triton):
        pod = workload["spec"]["template"]
        container = pod["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            if "exec" in container[probe]:  # Triton's liveness: tests/deploy/test_compose_...
                assert container[probe]["exec"]["command"][1] == LIVENESS_IN_IMAGE
            else:
                assert container[probe]["httpGet"]["port"] in ports
        labels = pod["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        service = services[workload["metadata"]["name"]]
        assert service["spec"]["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    assert ports_of(streamer) == {"web": 8080, "metrics": settings.metrics.port}
    assert streamer["spec"]["serviceName"] == "lpr-streamer"
    for budget in by_kind(objects, "PodDisruptionBudget").values():
        name = budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        assert name in ("triton", "lpr-streamer")
    policy = by_kind(objects, "NetworkPolicy")["triton"]["spec"]
    allowed = policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert allowed.items() <= streamer["spec"]["template"]["metadata"]["labels"].items()


def ports_of(workload: dict[str, Any]) -> dict[str, int]:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_the_gpu_overlay_asks_for_a_gpu_on_gpu_nodes() -> None:
    base = by_kind(render(MANIFESTS / "base"), "Deployment")["triton"]
    gpu = by_kind(render(MANIFESTS / "overlays" / "gpu"), "Deployment")["triton"]
    assert (
        "nvidia.com/gpu"
        not in base["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    )
    pod = gpu["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    # The image docs/kubernetes.md builds (no tag of its own: nothing would build one).
    assert pod["containers"][0]["image"] == "lpr-triton:0.1.0"
