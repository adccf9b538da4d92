"""Reading a request's prompt: the original prompt, and any of the model's output after it.

A paused generation is resumed by sending the text so far back as part of the prompt.
This module finds that text, so the reply can go on from it (``simulator/textgen.py``
has the rule) and the output length stays keyed on the original prompt:

- chat with ``continue_final_message``: the last message (the assistant's) is split into
  its trailing run of vocabulary words and what comes before it. The original prompt is
  the messages before it, plus an assistant message with that leading text if there is
  any; the run is the output already generated.
- completions: the prompt's trailing run is the output already generated; the text
  before it is the original prompt. A token-id prompt likewise ends in a run of output
  ids, and its head is the prompt whose ids the simulator told (``simulator/token_ids.py``).
- llama.cpp's mixed prompt (its dialect only): a text followed by output ids, the text a
  chat prompt as ``apply_template`` rendered it (that prompt, continued) or a completions
  prompt (read with the words the ids stand for after it).

Prompt tokens are the original prompt's estimate (``ceil(characters / 4)`` over the
message contents, or the prompt) plus one per word of the run, so a continuation counts
the original prompt plus the tokens already produced, as a real tokenizer would. The
original prompt is also kept cut into those tokens (``PromptText``), for the prefix cache.
"""

from __future__ import annotations

from typing import Any

from simulator.protocol import ApiError, Prompt, PromptText
from simulator.textgen import Vocabulary
from simulator.token_ids import REGISTRY, output_words


def chat_prompt(messages: Any, continue_final: bool, vocab: Vocabulary) -> Prompt:
    """The prompt of a chat request. Raises ``ApiError`` for bad messages."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "Missing required parameter: 'messages'.", param="messages")
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "Each message must be an object with a 'role'.", param="messages")
        turns.append((message["role"], content_text(message.get("content"))))

    run_length, run_start = 0, 0
    if continue_final:
        role, content = turns.pop()
        if role != "assistant":
            raise ApiError(
                400,
                "Cannot set `continue_final_message` to True when the last message is not "
                "from the assistant.",
                param="continue_final_message",
            )
        run = vocab.trailing_run(content)
        run_length, run_start = run.length, run.first
        if run.head:
            turns.append((role, content[: run.head]))

    users = [content for role, content in turns if role == "user"]
    # Only contents count toward the estimate; roles are part of the key, so that the same
    # words as system prompt and as user turn are different prompts.
    return Prompt(
        original="\n".join(part for turn in turns for part in turn),
        table_key=users[-1] if users else None,
        text=_rendered(turns),
        run=run_length,
        run_start=run_start,
    )


def completion_prompt(prompt: Any, vocab: Vocabulary, mixed: bool = False) -> Prompt:
    """The prompt of a completions request. Raises ``ApiError`` for an unsupported prompt.

    ``mixed``: a text followed by token ids is a prompt too (llama.cpp's)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if mixed and _is_mixed(prompt):
        return _mixed_prompt(prompt[0], prompt[1:], vocab)
    if isinstance(prompt, str):
        run = vocab.trailing_run(prompt)
        head = prompt[: run.head]
        text = PromptText(head, (len(head) + 3) // 4, 4, ((len(head), len(head)),))
        return Prompt(original=head, table_key=head, text=text, run=run.length, run_start=run.first)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        # Token ids: the count is exact; the prompt they stand for (or the ids themselves,
        # when unknown) keys the output length.
        return REGISTRY.read(prompt, len(vocab))
    raise ApiError(
        400, "Missing or unsupported 'prompt': send a string or a list of token ids.", param="prompt"
    )


def _is_mixed(prompt: Any) -> bool:
    return (
        isinstance(prompt, list) and len(prompt) > 1 and isinstance(prompt[0], str)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt[1:])
    )  # fmt: skip


def _mixed_prompt(text: str, ids: list[int], vocab: Vocabulary) -> Prompt:
    """llama.cpp's mixed prompt, ``text`` then token ``ids``: a chat prompt rendered by
    ``/apply-template`` continued by a run of output ids; else the text followed by the
    words the ids stand for, read as a text prompt (ids that stand for no word: as hex)."""
    known = REGISTRY.read_mixed(text, ids, len(vocab))
    if known is not None:
        return known
    words = output_words(ids, len(vocab))
    tail = "".join(vocab.words[w] for w in words) if words is not None else "".join(f"{t & 0xFFFFFFFF:08x}" for t in ids)
    return completion_prompt(text + tail, vocab)


def apply_template(prompt: Prompt) -> str:
    """A chat prompt as the simulator's ``/apply-template`` renders it (ChatML's marks), the
    assistant's turn opened; remembered, so a mixed prompt that begins with it reads back as
    ``prompt``."""
    turns = prompt.text.rendered.split("\x1e")[1:]
    out = "".join("<|im_start|>" + turn.replace("\x1f", "\n", 1) + "<|im_end|>\n" for turn in turns)
    rendered = out + "<|im_start|>assistant\n"
    REGISTRY.remember_rendered(rendered, prompt)
    return rendered


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(texts)
    raise ApiError(400, "Message content must be a string or a list of parts.", param="messages")


def _rendered(turns: list[tuple[str, str]]) -> PromptText:
    """Chat turns as the prefix cache sees them: each content after a mark holding its role."""
    parts: list[str] = []
    ends: list[tuple[int, int]] = []
    counted = rendered = 0
    for role, content in turns:
        mark = f"\x1e{role}\x1f"
        parts += (mark, content)
        counted += len(content)
        rendered += len(mark) + len(content)
        ends.append((counted, rendered))
    return PromptText("".join(parts), (counted + 3) // 4, 4, tuple(ends))
