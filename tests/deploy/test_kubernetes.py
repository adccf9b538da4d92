"""deploy/kubernetes, rendered and checked offline: every overlay renders (``kubectl
kustomize`` where installed, else ``kustomize_lite``, which is held to kubectl's output
where both exist); every resource validates against the Kubernetes OpenAPI schemas
(``kubernetes-validate``, strict: unknown fields are errors) of the oldest and newest
versions we target; and the pieces fit: probes, selectors, ports, config, secrets,
grace period, ServiceMonitor, HPA."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.settings import Settings, load_settings
from tests.deploy import kustomize_lite
from tests.support import ROOT

KUBE = ROOT / "deploy/kubernetes"
OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())  # the oldest supported, the newest known
CRDS = {"monitoring.coreos.com/v1"}  # custom resources: checked by hand below
KUBECTL = shutil.which("kubectl")

Resource = dict[str, Any]


def kubectl_render(folder: Path) -> list[Resource] | None:
    if KUBECTL is None:
        return None
    result = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def render(overlay: str) -> list[Resource]:
    rendered = kubectl_render(KUBE / "overlays" / overlay)
    return rendered if rendered is not None else kustomize_lite.build(KUBE / "overlays" / overlay)


def by_kind(resources: list[Resource], kind: str) -> dict[str, Resource]:
    return {r["metadata"]["name"]: r for r in resources if r["kind"] == kind}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_overlays_exist() -> None:
    assert {"dev", "production"} <= set(OVERLAYS)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: kustomize_lite renders alone")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomize_lite_renders_what_kubectl_does(overlay: str) -> None:
    key = lambda r: (r["kind"], r["metadata"]["name"])  # noqa: E731
    real = sorted(kubectl_render(KUBE / "overlays" / overlay) or [], key=key)
    assert sorted(kustomize_lite.build(KUBE / "overlays" / overlay), key=key) == real


def test_kustomize_lite_refuses_what_it_does_not_do(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(kustomize_lite.Unsupported, match="namePrefix"):
        kustomize_lite.build(tmp_path)


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_validates_against_the_schemas(overlay: str, version: str) -> None:
    for r in render(overlay):
        if r["apiVersion"] in CRDS:
            continue
        try:
            kubernetes_validate.validate(r, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{overlay}: {r['kind']}/{r['metadata']['name']} ({version}): {exc.message}") from None


def test_the_schema_check_catches_a_mistake() -> None:
    deployment = by_kind(render("production"), "Deployment")["triage-gateway"]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def gateway(resources: list[Resource]) -> tuple[Resource, dict[str, Any]]:
    deployment = by_kind(resources, "Deployment")["triage-gateway"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, next(c for c in containers if c["name"] == "gateway")


def config_settings(resources: list[Resource], container: dict[str, Any], tmp_path: Path) -> Settings:
    """The gateway's settings as the pod would load them: the ConfigMap's file."""
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    mount = next(m for m in container["volumeMounts"] if env["TRIAGE_CONFIG"].startswith(m["mountPath"]))
    pod = gateway(resources)[0]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = by_kind(resources, "ConfigMap")[volume["configMap"]["name"]]
    file = Path(env["TRIAGE_CONFIG"]).relative_to(mount["mountPath"])
    path = tmp_path / "triage.yaml"
    path.write_text(config_map["data"][str(file)])
    return load_settings(path)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_deployment_fits_together(overlay: str, tmp_path: Path) -> None:
    resources = render(overlay)
    deployment, container = gateway(resources)
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert ":" in container["image"] and not container["image"].endswith(":latest")

    settings = config_settings(resources, container, tmp_path)
    assert settings.host == "0.0.0.0" and settings.port == 8000 and settings.backends
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > sleep + settings.drain_timeout_s

    secret = container["envFrom"][0]["secretRef"]["name"]
    secrets = by_kind(resources, "Secret")
    if overlay == "dev":  # production's is created beside the overlay (docs/operations.md)
        assert secret in secrets
    for name, data in ((n, s.get("stringData", {})) for n, s in secrets.items()):
        for key in data:
            assert key.startswith("TRIAGE_") and key.removeprefix("TRIAGE_").lower() in Settings.model_fields, key
        if name == secret:
            assert load_settings(None, **{k.removeprefix("TRIAGE_").lower(): yaml.safe_load(v) for k, v in data.items()})

    service = by_kind(resources, "Service")["triage-gateway"]
    assert matches(service["spec"]["selector"], labels)
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    pdb = by_kind(resources, "PodDisruptionBudget")["triage-gateway"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] < deployment["spec"].get("replicas", 1)

    for other in by_kind(resources, "Service").values():  # every Service selects some pods
        pods = [d["spec"]["template"]["metadata"]["labels"] for d in by_kind(resources, "Deployment").values()]
        assert any(matches(other["spec"]["selector"], p) for p in pods), other["metadata"]["name"]


def test_production_monitors_and_scales_the_gateway() -> None:
    resources = render("production")
    deployment, _ = gateway(resources)
    assert deployment["spec"]["replicas"] == 3
    assert all(r["metadata"].get("namespace") == "triage" for r in resources)
    service = by_kind(resources, "Service")["triage-gateway"]
    (monitor,) = by_kind(resources, "ServiceMonitor").values()
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    (hpa,) = by_kind(resources, "HorizontalPodAutoscaler").values()
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", deployment["metadata"]["name"])
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert metrics["External"]["external"]["metric"]["name"] == "triage_queue_depth"
    assert hpa["spec"]["minReplicas"] >= 2
