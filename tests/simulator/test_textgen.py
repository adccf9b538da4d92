"""The generated text and how a continuation is read from it (pure functions)."""

from __future__ import annotations

import pytest

from simulator.prompts import chat_prompt, completion_prompt
from simulator.protocol import ApiError
from simulator.textgen import WORDS, Run, Vocabulary

VOCAB = Vocabulary()


def test_every_word_has_one_successor() -> None:
    assert len(set(WORDS)) == len(WORDS)
    with pytest.raises(ValueError, match="distinct"):
        Vocabulary((" a", " b", " a"))
    with pytest.raises(ValueError, match="space"):
        Vocabulary((" a", "b"))


@pytest.mark.parametrize(
    ("text", "run"),
    [
        ("", Run(head=0, length=0, first=0)),
        ("Tell me about queues.", Run(head=21, length=0, first=0)),
        ("Question? the model says", Run(head=9, length=3, first=0)),
        ("Question? says the model", Run(head=14, length=2, first=0)),  # " says" does not precede " the"
        ("x once the", Run(head=1, length=2, first=len(WORDS) - 1)),  # the cycle wraps around
        ("bathe", Run(head=5, length=0, first=0)),  # words start at a space
        (" the model", Run(head=0, length=2, first=0)),
    ],
)
def test_the_trailing_run_is_the_longest_suffix_of_consecutive_words(text: str, run: Run) -> None:
    assert VOCAB.trailing_run(text) == run


def test_a_text_cut_anywhere_continues_from_its_last_word() -> None:
    full = VOCAB.text(5, 80)  # longer than the cycle
    prompt = "Write something!"
    for k in (1, 7, 32, 79):
        part = VOCAB.text(5, k)
        run = VOCAB.trailing_run(prompt + part)
        assert (run.head, run.length, run.first) == (len(prompt), k, 5)
        assert part + VOCAB.text((run.first + run.length) % len(VOCAB), 80 - k) == full


def test_a_completions_prompt_is_its_head_plus_the_run() -> None:
    fresh = completion_prompt("Tell me a story.", VOCAB)
    assert (fresh.original, fresh.run, fresh.tokens) == ("Tell me a story.", 0, 4)
    cont = completion_prompt(["Tell me a story." + VOCAB.text(3, 5)], VOCAB)
    assert (cont.original, cont.table_key, cont.run, cont.run_start) == (
        "Tell me a story.",
        "Tell me a story.",
        5,
        3,
    )
    assert cont.tokens == fresh.tokens + 5  # one token per word, not a quarter of its characters
    ids = completion_prompt([1, 2, 3], VOCAB)
    assert (ids.tokens, ids.run, ids.table_key) == (3, 0, None)


def test_a_chat_continuation_is_the_messages_before_the_assistant_text() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    fresh = chat_prompt(messages, False, VOCAB)
    assert fresh.original == "system\nBe brief.\nuser\nHi there"  # the key the natural length is drawn from
    assert (fresh.table_key, fresh.tokens) == ("Hi there", 5)

    cont = chat_prompt([*messages, {"role": "assistant", "content": VOCAB.text(9, 4)}], True, VOCAB)
    assert (cont.original, cont.text, cont.run, cont.run_start) == (fresh.original, fresh.text, 4, 9)
    assert cont.tokens == fresh.tokens + 4

    # Leading text that is not the model's own stays part of the original prompt.
    prefilled = chat_prompt(
        [*messages, {"role": "assistant", "content": "Sure:" + VOCAB.text(0, 2)}], True, VOCAB
    )
    assert prefilled.original == fresh.original + "\nassistant\nSure:" and prefilled.run == 2

    # Without continue_final_message, a final assistant message is just part of the prompt.
    plain = chat_prompt([*messages, {"role": "assistant", "content": VOCAB.text(9, 4)}], False, VOCAB)
    assert plain.run == 0 and plain.original.endswith("assistant\n" + VOCAB.text(9, 4))


def test_continuing_a_message_that_is_not_the_assistants_is_refused() -> None:
    with pytest.raises(ApiError, match="last message is not from the assistant"):
        chat_prompt([{"role": "user", "content": "Hi"}], True, VOCAB)


def test_role_marks_key_the_chat_text_but_are_not_counted() -> None:
    a = chat_prompt([{"role": "system", "content": "abcdefgh"}], False, VOCAB)
    b = chat_prompt([{"role": "user", "content": "abcdefgh"}], False, VOCAB)
    assert a.text.tokens == b.text.tokens == 2
    assert a.text.rendered != b.text.rendered
