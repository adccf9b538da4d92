"""Write a tiny Llama with random weights, from a seed, as one GGUF file llama.cpp serves.

The GGUF counterpart of ``tiny_model.py``: the same shape, special tokens and chat template,
written straight with ``gguf``'s writer (llama.cpp's ``convert_hf_to_gguf.py`` refuses a
tokenizer whose pre-tokenizer it does not know by hash, and the word-level vocabulary of
``tiny_model.py`` has no GGUF form). The tokenizer is a byte-level BPE trained on the prompt
file (GPT-2's pre-tokenizer, which llama.cpp implements as ``gpt-2``), so any text encodes.
Its catch, the reason ``tiny_model.py`` is word-level: the text of a generation may
re-encode to other tokens (BPE merges are not unique), so a resume on llama.cpp sends
token ids, never text.

Random weights would also emit tokens that print nothing: a lone byte of a multi-byte
character, or a control token. llama.cpp holds a stream's text back while it ends in an
unfinished UTF-8 character, so a run of such bytes kept some replies silent for hundreds
of tokens (seen: the first text after 269 of 321 tokens), and a benchmark's TTFT measured
that run's decode time, not the wait for a slot. Those tokens' rows of ``output.weight``
are zero (``muted``), so their logit is 0 where the others' are random: greedy decoding
never picks one, and every token a reply makes is text of its own.

The weights are drawn from a seeded normal distribution (numpy), so two builds with one
seed are equal. Runs under llama.cpp's own venv (gguf, tokenizers, numpy):
``python tiny_gguf.py OUT.gguf --corpus FILE``. It imports nothing from the project but
its sibling ``tiny_model.py``'s constants.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

try:  # run as a script (llama.cpp's venv, this folder on sys.path)
    from tiny_model import CHAT_TEMPLATE, SHAPE, SPECIAL, VOCAB_SIZE, _texts, run
except ImportError:  # imported as part of the project
    from loadtests.engines.tiny_model import CHAT_TEMPLATE, SHAPE, SPECIAL, VOCAB_SIZE, _texts, run

CONTEXT = 16384


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the printable character that stands for each byte."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]  # printable as themselves
    chars = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return chars


_CHAR_OF = _byte_chars()
_BYTE_OF = {c: b for b, c in _CHAR_OF.items()}


def byte_level(raw: bytes) -> str:
    """A byte string as a byte-level BPE token spells it."""
    return "".join(_CHAR_OF[b] for b in raw)


def muted(tokens: list[str], eos: str = "</s>") -> list[int]:
    """The ids of the tokens that print nothing by themselves: control tokens (but the
    end of sequence, which ``ignore_eos`` already bans) and tokens whose bytes are not
    whole UTF-8 (part of a character)."""
    out = []
    for i, token in enumerate(tokens):
        if token in SPECIAL:
            if token != eos:
                out.append(i)
            continue
        try:
            bytes(_BYTE_OF[c] for c in token).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            out.append(i)
    return out


def train_tokenizer(corpus: Path, vocab_size: int = VOCAB_SIZE) -> tuple[list[str], list[str]]:
    """The vocabulary (ids in order) and the merges of a byte-level BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_texts(corpus, 3000), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


def build(out: Path, corpus: Path, seed: int = 0) -> dict[str, object]:
    import gguf
    import numpy as np

    tokens, merges = train_tokenizer(corpus)
    vocab = len(tokens)
    hidden, ff = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    heads, kv_heads, layers = SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"], SHAPE["num_hidden_layers"]
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    special = set(SPECIAL)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<s>"))
    w.add_eos_token_id(tokens.index("</s>"))
    w.add_unk_token_id(tokens.index("<unk>"))
    w.add_pad_token_id(tokens.index("<unk>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    params = 0

    def tensor(name: str, value: np.ndarray) -> None:
        nonlocal params
        params += value.size
        w.add_tensor(name, value)

    tensor("token_embd.weight", rand(vocab, hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", ones(hidden))
        tensor(f"blk.{i}.attn_q.weight", rand(heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_k.weight", rand(kv_heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_v.weight", rand(kv_heads * head_dim, hidden))
        tensor(f"blk.{i}.attn_output.weight", rand(hidden, heads * head_dim))
        tensor(f"blk.{i}.ffn_norm.weight", ones(hidden))
        tensor(f"blk.{i}.ffn_gate.weight", rand(ff, hidden))
        tensor(f"blk.{i}.ffn_up.weight", rand(ff, hidden))
        tensor(f"blk.{i}.ffn_down.weight", rand(hidden, ff))
    tensor("output_norm.weight", ones(hidden))
    head = rand(vocab, hidden)
    silent = muted(tokens)
    head[silent] = 0.0  # logit 0 against random ones: greedy decoding never picks them
    tensor("output.weight", head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    summary = {
        "seed": seed, "parameters": params, "vocab_size": vocab, "muted_tokens": len(silent), "corpus": str(corpus),
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
    }  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    return run(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
