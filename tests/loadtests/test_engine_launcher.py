"""``triage engine vllm`` without vLLM: the command line the launcher builds, its flags,
the reasons it gives when there is no engine to start, and the process handling of
``start``/``running_vllm`` around a stand-in.

The stand-in is a Python whose path holds a package named ``vllm``: a version, and an
``entrypoints.openai.api_server`` that answers ``/health`` and ``/metrics`` on the port
it is given and starts a child of its own (as vLLM's engine core is), so stopping the
server's process group is seen to stop both. tests/engines runs the real vLLM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.engines import cli
from loadtests.engines.process import stop_group
from loadtests.engines.vllm import (
    ENV_PYTHON,
    MODEL_NAME,
    EngineUnavailable,
    VllmSpec,
    build_model,
    find_python,
    metric,
    parse_metrics,
    running_vllm,
    start,
    vllm_version,
)
from tests.support import eventually

STANDIN_VERSION = "0.0.0+standin"
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 3.0
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 5.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny-llama"} 2.0
vllm:broken{model_name="tiny-llama"} not-a-number
"""
API_SERVER = '''
import argparse, http.server, json, os, signal, subprocess, sys
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
args, _ = p.parse_known_args()
if os.environ.get("STANDIN_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["STANDIN_OUT"], "w") as f:
    json.dump({"argv": sys.argv[1:], "core": core.pid, "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
               "offline": os.environ.get("HF_HUB_OFFLINE"), "pid": os.getpid(), "pgid": os.getpgid(0),
               "sid": os.getsid(0)}, f)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b"", "/metrics": METRICS.encode()}.get(self.path)
        self.send_response(404 if body is None else 200)
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
'''


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Python with the stand-in ``vllm`` importable; ``$STANDIN_OUT`` is where it reports."""
    site = tmp_path / "site"
    server = site / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(f"__version__ = {STANDIN_VERSION!r}\n")
    for folder in (site / "vllm" / "entrypoints", server):
        (folder / "__init__.py").write_text("")
    (server / "api_server.py").write_text(f"METRICS = {METRICS!r}\n{API_SERVER}")
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("STANDIN_OUT", str(tmp_path / "standin.json"))
    monkeypatch.setenv(ENV_PYTHON, str(python))
    return python


def _built(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "triage-model.json").write_text("{}")
    return folder


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead
    except FileNotFoundError:
        return True


# the command line


def test_the_command_line_holds_the_cpu_flags_and_the_specs_choices(tmp_path: Path) -> None:
    spec = VllmSpec(model_dir=tmp_path / "m", max_num_seqs=3, scheduling_policy="priority", max_model_len=512,
                    kv_cache_bytes=1024, extra_args=("--seed", "7"))
    argv = spec.argv(Path("/py"), 8123)
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--model") == str(tmp_path / "m") and value("--served-model-name") == MODEL_NAME
    assert (value("--host"), value("--port")) == ("127.0.0.1", "8123")
    assert value("--max-num-seqs") == "3" and value("--max-model-len") == "512"
    assert value("--kv-cache-memory-bytes") == "1024" and value("--scheduling-policy") == "priority"
    assert value("--dtype") == "float32" and "--enforce-eager" in argv
    assert "--max-num-queued-reqs" not in argv and "--no-enable-prefix-caching" not in argv
    assert argv[-2:] == ["--seed", "7"]  # extra flags last


def test_optional_flags_appear_only_when_asked(tmp_path: Path) -> None:
    argv = VllmSpec(model_dir=tmp_path, max_num_queued_reqs=6, prefix_caching=False).argv(Path("/py"), 1)
    assert argv[argv.index("--max-num-queued-reqs") + 1] == "6"
    assert "--no-enable-prefix-caching" in argv


def test_the_cli_flags_and_their_defaults() -> None:
    args = cli.parser().parse_args([])
    assert args.model_dir is None and args.seed == 0 and args.port == 0
    assert (args.max_num_seqs, args.max_num_queued_reqs, args.scheduling_policy) == (8, None, "fcfs")
    assert args.build_only is False
    args = cli.parser().parse_args(["--scheduling-policy", "priority", "--max-num-queued-reqs", "4", "--build-only"])
    assert (args.scheduling_policy, args.max_num_queued_reqs, args.build_only) == ("priority", 4, True)
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--scheduling-policy", "lifo"])


# metrics


def test_metrics_are_parsed_by_sample_and_summed_by_label() -> None:
    samples = parse_metrics(METRICS)
    assert len(samples) == 4  # comments and a value that is not a number are dropped
    assert metric(samples, "vllm:num_requests_running") == 3.0
    assert metric(samples, "vllm:request_success_total") == 7.0
    assert metric(samples, "vllm:request_success_total", finished_reason="stop") == 2.0
    assert metric(samples, "vllm:request_success_total", finished_reason="abort") == 0.0
    assert metric(samples, "vllm:num_requests") == 0.0  # a name is matched whole, not as a prefix


# no engine to start


def test_a_missing_python_is_named_with_the_variable_that_points_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-venv" / "bin" / "python"
    monkeypatch.setenv(ENV_PYTHON, str(missing))
    with pytest.raises(EngineUnavailable, match=f"no vLLM Python at \\${ENV_PYTHON}={missing}"):
        find_python()
    assert cli.main(["--build-only", "--model-dir", str(tmp_path / "m")]) == 2
    assert f"triage engine vllm: no vLLM Python at ${ENV_PYTHON}" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_without_the_variable_the_repositorys_venv_is_the_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_PYTHON, raising=False)
    expected = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    try:
        assert find_python() == expected
    except EngineUnavailable as exc:
        assert str(expected) in str(exc) and f"set ${ENV_PYTHON}" in str(exc)


def test_a_python_without_vllm_is_refused_with_its_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_PYTHON, sys.executable)  # this venv has no vllm
    assert find_python() == Path(sys.executable)
    with pytest.raises(EngineUnavailable, match="cannot import vllm: ModuleNotFoundError"):
        vllm_version(Path(sys.executable))
    assert cli.main(["--build-only", "--model-dir", str(tmp_path / "m")]) == 2
    assert "cannot import vllm" in capsys.readouterr().err


def test_a_server_that_exits_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    spec = VllmSpec(model_dir=tmp_path, start_timeout_s=60)
    with pytest.raises(EngineUnavailable, match=r"(?s)exited with status 1 while starting.*No module named 'vllm'"):
        start(spec, Path(sys.executable), tmp_path / "logs" / "vllm.log")


# --build-only


def test_build_only_with_a_built_folder_reports_the_version_and_exits_0(
    standin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _built(tmp_path / "model")
    assert vllm_version(standin) == STANDIN_VERSION
    assert build_model(standin, folder) == folder  # built already: nothing is run
    assert cli.main(["--build-only", "--model-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"vLLM {STANDIN_VERSION} at {standin}" in out and f"model: {folder}" in out


def test_a_failed_build_is_reported_and_exits_2(
    standin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    with pytest.raises(EngineUnavailable, match="building the tiny model failed"):
        build_model(standin, folder, corpus=tmp_path / "missing.jsonl")
    code = cli.main(["--build-only", "--model-dir", str(folder), "--corpus", str(tmp_path / "missing.jsonl")])
    assert code == 2
    assert "triage engine vllm: building the tiny model failed" in capsys.readouterr().err


# start and stop


async def test_a_started_server_is_healthy_reads_its_metrics_and_stops_with_its_children(
    standin: Path, tmp_path: Path
) -> None:
    spec = VllmSpec(model_dir=_built(tmp_path / "model"), cpus="0", start_timeout_s=60)

    def serve_and_stop() -> tuple[dict[str, Any], int | None]:  # blocking: run off the event loop
        with running_vllm(spec) as server:
            seen = json.loads((tmp_path / "standin.json").read_text())
            assert server.model == MODEL_NAME and server.log_path == spec.model_dir / "vllm.log"
            assert seen["argv"][seen["argv"].index("--port") + 1] == server.url.rsplit(":", 1)[1]
            assert seen["bind"] == "0" and seen["offline"] == "1"
            # a process group of its own (stopped as one), in the launcher's session: a session of
            # its own is a scheduling group of its own, whose busy core starves the launcher's
            # threads that land there (tests/engines: the test's loop stalled for seconds)
            assert seen["pgid"] == seen["pid"] != os.getpgid(0) and seen["sid"] == os.getsid(0)
            assert httpx.get(f"{server.url}/health").status_code == 200
            assert metric(server.metrics(), "vllm:num_requests_waiting") == 1.0
            proc = server.proc
        return seen, proc.returncode

    seen, returncode = await asyncio.to_thread(serve_and_stop)
    assert returncode == -signal.SIGTERM
    await eventually(lambda: _gone(seen["core"]))  # the engine's own child went with its group


async def test_a_server_that_ignores_sigterm_is_killed(standin: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_IGNORE_TERM", "1")
    server = await asyncio.to_thread(start, VllmSpec(model_dir=tmp_path, start_timeout_s=60), standin,
                                     tmp_path / "vllm.log")
    core = json.loads((tmp_path / "standin.json").read_text())["core"]
    stop_group(server.proc, grace_s=0.2)
    assert server.proc.returncode == -signal.SIGKILL
    await eventually(lambda: _gone(core))
    stop_group(server.proc)  # stopping a stopped server is harmless


def test_stop_group_of_a_process_that_already_exited_returns() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    stop_group(proc)
    assert proc.returncode == 0  # its group is gone: nothing to signal, nothing raised
