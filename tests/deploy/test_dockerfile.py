"""The Dockerfile, read statically (no Docker engine here): stages, the dependency layer
before the code, a serving image without the load tools' extras, non-root, healthcheck."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

from tests.support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
CODE = ("triage", "gateway", "scheduler", "simulator", "loadtests")


@dataclass
class Stage:
    name: str
    base: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (instruction, arguments)

    def args(self, instruction: str) -> list[str]:
        return [a for i, a in self.lines if i == instruction]


def stages() -> dict[str, Stage]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out: dict[str, Stage] = {}
    current: Stage | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"stage{len(out)}"
            current = out[name] = Stage(name, words[0])
        elif current is not None:
            current.lines.append((instruction, rest.strip()))
    return out


def lineage(all_stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage, its base stage, and so on up to the image it starts from."""
    chain = [all_stages[name]]
    while chain[-1].base in all_stages:
        chain.append(all_stages[chain[-1].base])
    return chain


def copied_from(stage: Stage) -> list[str]:
    return [a.split()[0].removeprefix("--from=") for a in stage.args("COPY") if a.startswith("--from=")]


def test_the_serving_stage_is_the_default_and_ships_no_load_tool_extras() -> None:
    all_stages = stages()
    assert list(all_stages)[-1] == "serve"  # `docker build .` builds the last stage
    serve = all_stages["serve"]
    assert copied_from(serve) == ["deps"]
    for stage in [*lineage(all_stages, "serve"), *(all_stages[s] for s in copied_from(serve))]:
        for run in stage.args("RUN"):
            assert "bench" not in run and "[test" not in run, f"{stage.name}: {run}"
    assert any("--no-deps" in run for run in serve.args("RUN"))  # the code only: deps came with the venv
    tools = all_stages["tools"]
    assert copied_from(tools) == ["tools-deps"]
    assert any("bench" in run for s in lineage(all_stages, "tools-deps") for run in s.args("RUN"))


def test_dependencies_install_before_any_code_is_copied() -> None:
    deps = stages()["deps"]
    sources = [a.split()[0] for a in deps.args("COPY")]
    assert not any(s.split("/")[0] in CODE for s in sources), sources
    assert "pyproject.toml" in sources
    for name in ("serve", "tools"):
        stage = stages()[name]
        order = [(i, a) for i, a in stage.lines if i in ("COPY", "RUN")]
        first_code = next(n for n, (i, a) in enumerate(order) if i == "COPY" and a.split()[0] in CODE)
        venv = next(n for n, (i, a) in enumerate(order) if i == "COPY" and a.startswith("--from="))
        assert venv < first_code


def test_runs_as_non_root_with_a_healthcheck() -> None:
    all_stages = stages()
    for name in ("serve", "tools"):
        users = all_stages[name].args("USER")
        assert users and users[-1] not in ("root", "0"), name
        assert any("--uid 10001" in run for run in all_stages[name].args("RUN"))
    checks = all_stages["serve"].args("HEALTHCHECK")
    assert len(checks) == 1
    command = json.loads(checks[0][checks[0].index("CMD") + 3:].strip())
    assert "http://127.0.0.1:8000/health" in " ".join(command)
    assert json.loads(all_stages["serve"].args("CMD")[-1])[:2] == ["triage", "serve"]


def test_every_copied_path_exists_and_is_not_docker_ignored() -> None:
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    excluded = {p for p in ignored if not p.startswith("!")}
    kept = {p[1:] for p in ignored if p.startswith("!")}
    for stage in stages().values():
        for args in stage.args("COPY"):
            if args.startswith("--from="):
                continue
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
                top = source.split("/")[0]
                assert top not in excluded or source in kept, f"{source} is excluded by .dockerignore"


def test_the_requirements_script_splits_base_and_extras() -> None:
    script = ROOT / "deploy/docker/requirements.py"

    def run(*extras: str) -> list[str]:
        out = subprocess.run([sys.executable, str(script), *extras], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    base = run()
    assert any(r.startswith("fastapi") for r in base) and any(r.startswith("uvicorn") for r in base)
    assert not any(r.startswith(("rich", "matplotlib", "pytest")) for r in base)
    bench = run("bench")
    assert set(base) < set(bench) and any(r.startswith("matplotlib") for r in bench)
    bad = subprocess.run([sys.executable, str(script), "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "no such extra" in bad.stderr
