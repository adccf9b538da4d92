"""The compose stack without Docker: files exist, configs parse, dashboards query real metrics."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable

import httpx
import pytest
import yaml

from tests.e2e.observability.conftest import scrape, stream_chat
from tests.support import ROOT

COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = ROOT / "deploy/grafana/dashboards/triage.json"


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_services_and_profiles() -> None:
    services = compose()["services"]
    for name in ("redis", "gateway", "lb", "sim-1", "sim-2", "otel-collector", "jaeger", "prometheus", "grafana"):
        assert name in services, name
    assert services["redis"]["image"].startswith("redis:7")
    assert services["gateway"]["deploy"]["replicas"] == 2
    assert services["sim-1"]["command"] == [
        "triage", "sim", "--host", "0.0.0.0", "--port", "9001", "--profile", "llama-8b-h100"
    ]
    assert services["loadtest"]["profiles"] == ["loadtest"]
    assert " ".join(services["loadtest"]["command"]) == (
        "triage loadtest --url http://lb:8000 --workload mixed --duration 120 --out /tmp/loadtest-out"
    )
    for gpu in ("vllm-1", "vllm-2"):
        assert services[gpu]["profiles"] == ["gpu"] and services[gpu]["image"].startswith("vllm/vllm-openai")
        assert services[gpu]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    # whichever profile serves them, the backends answer to the same names
    aliases = {s: services[s]["networks"]["default"]["aliases"][0] for s in ("sim-1", "sim-2", "vllm-1", "vllm-2")}
    assert aliases == {"sim-1": "backend-1", "sim-2": "backend-2", "vllm-1": "backend-1", "vllm-2": "backend-2"}
    assert "COMPOSE_PROFILES=sim" in (ROOT / ".env").read_text()
    env = services["gateway"]["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"


def test_every_file_compose_names_exists() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source}"
        if "build" in service:
            assert (ROOT / service["build"]["context"] / "Dockerfile").is_file()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    gateway_config = yaml.safe_load((ROOT / "deploy/gateway/triage.yaml").read_text())
    assert {b["url"] for b in gateway_config["backends"]} == {"http://backend-1:9001", "http://backend-2:9001"}
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    assert "server gateway:8000" in nginx and "proxy_buffering off" in nginx


def test_collector_prometheus_and_grafana_configs_parse() -> None:
    collector = yaml.safe_load((ROOT / "deploy/otel-collector/config.yaml").read_text())
    pipelines = collector["service"]["pipelines"]
    assert pipelines["traces"]["exporters"] == ["otlp/jaeger"]
    assert pipelines["metrics"]["exporters"] == ["prometheus"]
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    exported_at = collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]

    prometheus = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert prometheus["rule_files"] == ["alerts.yml"]
    assert jobs["gateway"]["dns_sd_configs"][0]["names"] == ["gateway"]
    assert jobs["backends"]["static_configs"][0]["targets"] == ["backend-1:9001", "backend-2:9001"]
    assert jobs["otel-collector"]["static_configs"][0]["targets"] == [f"otel-collector:{exported_at}"]

    provisioning = ROOT / "deploy/grafana/provisioning"
    for path in provisioning.rglob("*.yaml"):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "triage" and dashboard["panels"]


def dashboard_metrics() -> set[str]:
    exprs = [
        t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel.get("targets", [])
    ]
    # every query names its metrics with a selector: metric{...}
    return {m for expr in exprs for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr)}


async def test_dashboard_queries_name_exported_metrics(observed: Callable[..., str], sim_url: str) -> None:
    base = observed()
    async with httpx.AsyncClient(timeout=120) as client:
        for i, hint in enumerate((5, 50, 500, 20)):
            headers = {"x-triage-expected-tokens": str(hint)}
            await stream_chat(client, base, 4000, prompt=f"q{i}", ignore_eos=False, headers=headers)
        backend_text = (await client.get(f"{sim_url}/metrics")).text
    exported = set(await scrape(base))
    exported |= {line.split("{")[0].split(" ")[0] for line in backend_text.splitlines() if line and line[0] != "#"}
    wanted = dashboard_metrics()
    assert wanted, "no metric found in the dashboard's queries"
    assert wanted <= exported, sorted(wanted - exported)


def _compose_command() -> list[str] | None:
    """``docker compose`` (the plugin) or, failing that, the standalone ``docker-compose``."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


def test_docker_compose_config() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed; the file checks above stand in")
    env = {**os.environ, "COMPOSE_PROFILES": "sim,gpu,loadtest"}
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert result.returncode == 0, result.stderr
