"""The tiny model's pure parts (building it needs torch and tokenizers, the engine's
Python's; tests/engines/ builds and serves one): its shape and its prompt corpus."""

from __future__ import annotations

from pathlib import Path

from loadtests.engines.tiny_model import SHAPE, SPECIAL, _texts, model_config


def test_the_config_is_a_llama_whose_heads_divide_its_width_and_whose_special_ids_match() -> None:
    config = model_config(4096)
    assert config["vocab_size"] == 4096 and config["model_type"] == "llama"
    assert SHAPE["hidden_size"] % SHAPE["num_attention_heads"] == 0
    assert SHAPE["num_attention_heads"] % SHAPE["num_key_value_heads"] == 0  # grouped-query attention
    # the tokenizer numbers SPECIAL in order: the model's ids must name the same tokens
    assert SPECIAL[config["bos_token_id"]] == "<s>" and SPECIAL[config["eos_token_id"]] == "</s>"


def test_the_corpus_reads_jsonl_prompts_or_plain_lines_up_to_a_limit(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"prompt": "first prompt"}\n\n  plain line  \n{"other": 1}\nnot reached\n')
    assert list(_texts(corpus, 4)) == ["first prompt", "plain line", ""]  # a row without a prompt: empty
