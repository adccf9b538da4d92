"""Write a tiny Llama with random weights, from a seed, that vLLM can serve.

No model hub: the config, a tokenizer and the weights are all made here. The
tokenizer is word-level, the most frequent words of a prompt file (so prompt token
counts are about a real tokenizer's), and round-trips exactly (see ``build_tokenizer``);
a chat template makes `/v1/chat/completions` work. The weights are
drawn from a seeded normal distribution, so two builds with one seed are equal.

This module runs under the engine's own Python (it needs torch, tokenizers and
safetensors, which the gateway does not install): `python tiny_model.py OUT`.
It imports nothing from the project.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

#: The template vLLM renders for chat requests. It ends an assistant turn it did
#: not start with nothing, so `continue_final_message` continues its text as is.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}"
    "{% if not loop.last %}</s>{% endif %}"
    "{% else %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]

#: The shape: about 3.2 million parameters with the default vocabulary.
SHAPE = {
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
VOCAB_SIZE = 4096
MAX_MODEL_LEN = 16384  # RoPE has no trained range here: long ShareGPT prompts fit


def _texts(corpus: Path, limit: int) -> Iterator[str]:
    with corpus.open(encoding="utf-8") as lines:
        for n, line in enumerate(lines):
            if n >= limit:
                return
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                yield str(json.loads(line).get("prompt", ""))
            else:
                yield line


def build_tokenizer(out: Path, corpus: Path, vocab_size: int = VOCAB_SIZE) -> int:
    """Write tokenizer.json (the corpus's most frequent whitespace-separated words) + its config.

    A word-level vocabulary split on whitespace round-trips exactly: decoding joins tokens
    with spaces, and encoding that text gives back the same tokens. Random weights emit
    arbitrary token sequences; with a byte-level BPE their text holds broken UTF-8
    (decoded as U+FFFD), which re-encodes to more tokens than were generated. Resuming a
    paused stream re-sends the text so far, so its token count must be the count that
    was generated. Returns the vocabulary size.
    """
    from collections import Counter

    from tokenizers import Tokenizer, models, pre_tokenizers

    counts: Counter[str] = Counter()
    for text in _texts(corpus, 3000):
        counts.update(text.split())
    words = [w for w, _ in counts.most_common() if not any(mark in w for mark in ("<", ">"))]
    vocab = {token: i for i, token in enumerate(SPECIAL)}
    for word in words[: vocab_size - len(SPECIAL)]:
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<unk>",
        "model_max_length": MAX_MODEL_LEN,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )
    return len(vocab)


def model_config(vocab: int) -> dict[str, object]:
    """The Hugging Face config of the tiny Llama."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "max_position_embeddings": MAX_MODEL_LEN,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        **SHAPE,
    }


def build_weights(out: Path, config: dict[str, object], seed: int) -> int:
    """Write model.safetensors with seeded random weights; returns the parameter count."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    h = int(config["hidden_size"])  # type: ignore[call-overload]
    inter = int(config["intermediate_size"])  # type: ignore[call-overload]
    heads = int(config["num_attention_heads"])  # type: ignore[call-overload]
    kv = int(config["num_key_value_heads"])  # type: ignore[call-overload]
    vocab = int(config["vocab_size"])  # type: ignore[call-overload]
    head_dim = h // heads

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    tensors = {
        "model.embed_tokens.weight": rand(vocab, h),
        "model.norm.weight": torch.ones(h),
        "lm_head.weight": rand(vocab, h),
    }
    for i in range(int(config["num_hidden_layers"])):  # type: ignore[call-overload]
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            p + "self_attn.q_proj.weight": rand(heads * head_dim, h),
            p + "self_attn.k_proj.weight": rand(kv * head_dim, h),
            p + "self_attn.v_proj.weight": rand(kv * head_dim, h),
            p + "self_attn.o_proj.weight": rand(h, heads * head_dim),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter),
        }
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    return sum(t.numel() for t in tensors.values())


def build(out: Path, corpus: Path, seed: int = 0) -> dict[str, object]:
    """Write the whole model folder; returns a summary (also written as triage-model.json)."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out, corpus)
    config = model_config(vocab)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2})
    )
    params = build_weights(out, config, seed)
    summary = {
        "seed": seed,
        "parameters": params,
        "vocab_size": vocab,
        "corpus": str(corpus),
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
    }
    (out / "triage-model.json").write_text(json.dumps(summary, indent=1))
    return summary


def run(build_fn: Callable[[Path, Path, int], dict[str, object]], description: str,
        argv: list[str] | None = None) -> int:
    """The command line of a model writer: ``OUT --corpus FILE [--seed N]``; prints its summary."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(build_fn(args.out, args.corpus, args.seed)))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
