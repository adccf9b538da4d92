"""Every ``command:`` of the compose files that runs the ``triage`` CLI parses with the
CLI's own argparse parser (nothing is run); the images are pinned; the gateway has a
healthcheck."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.settings import load_settings
from tests.support import ROOT
from triage.cli import build_parser

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def compose_files() -> list[Path]:
    """docker-compose.yml and any other compose file under deploy/."""
    found = [ROOT / "docker-compose.yml"]
    for pattern in ("**/docker-compose*.yml", "**/docker-compose*.yaml", "**/compose*.yml", "**/compose*.yaml"):
        found += sorted((ROOT / "deploy").glob(pattern))
    return found


def services() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for path in compose_files():
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            out.append((path.name, name, service))
    return out


def interpolate(word: str) -> str:
    """Compose's ``${VAR:-default}``, with the defaults (no environment)."""
    return _VAR.sub(lambda m: m.group(2) or "", word)


def built_here(service: dict[str, Any]) -> bool:
    return "build" in service


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if command is None:  # the image's CMD: `triage serve --host 0.0.0.0`
        return ["triage", "serve", "--host", "0.0.0.0"]
    words = command.split() if isinstance(command, str) else list(command)
    return [interpolate(str(w)) for w in words]


def parse(words: list[str]) -> argparse.Namespace:
    assert words[0] == "triage", words
    try:
        return build_parser(words[1]).parse_args(words[1:])
    except SystemExit as exc:  # argparse's way of saying no
        raise AssertionError(f"`{' '.join(words)}` does not parse (exit {exc.code})") from None


OURS = [(f, n, s) for f, n, s in services() if built_here(s)]


def test_the_compose_files_are_found() -> None:
    names = {n for _, n, _ in OURS}
    assert {"gateway", "sim-1", "sim-2", "loadtest"} <= names


@pytest.mark.parametrize(("file", "name", "service"), OURS, ids=[f"{f}:{n}" for f, n, _ in OURS])
def test_each_triage_command_parses(file: str, name: str, service: dict[str, Any]) -> None:
    args = parse(argv(service))
    assert callable(args.func)
    if args.command == "loadtest":
        assert args.url == ["http://lb:8000"] and args.workload == "mixed"
    if args.command == "serve":
        config = service.get("environment", {}).get("TRIAGE_CONFIG")
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}
        assert config in mounts, f"{name}: TRIAGE_CONFIG {config} is not mounted"
        settings = load_settings(ROOT / mounts[config])
        assert settings.host == "0.0.0.0" and settings.backends


def test_a_bad_flag_is_caught() -> None:
    with pytest.raises(AssertionError, match="does not parse"):
        parse(["triage", "loadtest", "--target", "http://lb:8000"])


@pytest.mark.parametrize(("file", "name", "service"), services(), ids=[f"{f}:{n}" for f, n, _ in services()])
def test_images_are_pinned(file: str, name: str, service: dict[str, Any]) -> None:
    image = interpolate(service.get("image", ""))
    if built_here(service):
        assert image.endswith(":local"), f"{name}: the locally built image is tagged :local"
        return
    assert ":" in image, f"{name}: {image} has no tag"
    tag = image.rsplit(":", 1)[1]
    assert tag != "latest" and re.search(r"\d+\.\d+\.\d+", tag), f"{name}: {image} is not pinned to x.y.z"


def test_gateway_healthcheck_and_lb_waits_for_it() -> None:
    svc = {n: s for _, n, s in services()}
    check = " ".join(svc["gateway"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/health" in check
    assert svc["lb"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert svc["gateway"]["build"]["target"] == "serve"
    assert svc["loadtest"]["build"]["target"] == "tools"  # the load tools' extras live there
    for sim in ("sim-1", "sim-2"):  # the image's HEALTHCHECK, pointed at the simulator's port
        assert svc[sim]["environment"]["HEALTHCHECK_URL"].endswith(":9001/health")
