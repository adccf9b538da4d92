"""The predictor's text features: the quick searches answer exactly what the plain regexes do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.predictor.features import _CUES, FeatureSpec, _Search, _window

DATA = Path("/work/shared/data")
SEARCHES = [cue for _, cue in _CUES]
# pieces that sit at the edges of the cues' words: word characters a boundary does not see
# as one (an underscore, an accented letter, a digit)
PIECES = ["write", "rewrite", "_write", "éwrite", "2write", "in english", "tl;dr", "fix my grammar", "how many",
          "12 + 3", "4x5", "act as", "vs.", "yes/no", "one word", " ", "\n", "-", "_", "é", "a", "7",
          "you are a", "you are an", "role play", "roleplay", "tl", "dr", "i'll", "i will", "in detail"]  # fmt: skip


def spans(search: _Search | re.Pattern[str], text: str, pos: int = 0) -> object:
    found = search.search(text, pos)
    return found and (found.span(), found.groups())


def test_most_searches_skip_ahead_by_a_finder() -> None:
    assert sum(s.finder is not None for s in SEARCHES) >= len(SEARCHES) - 1  # only the greeting starts with ^


def test_cues_of_literal_alternatives_are_ruled_out_by_their_needles() -> None:
    needles = {name: cue.needles for name, cue in _CUES}
    assert needles["translate"] == ("translat", "in ")
    assert needles["summarize"] == ("summar", "tl", "shorten", "condense")  # tl;?dr: the ; is optional
    assert needles["roleplay"] == ("act as", "you are a", "pretend", "role", "imagine you")
    assert needles["math"] is None  # \d+ ...: no text every match holds
    assert needles["greet"] is None  # not a \b(...) pattern
    assert sum(n is not None for n in needles.values()) == len(_CUES) - 2


@pytest.mark.parametrize("text", ["", "rewrite this", "please _write it", "éwrite", "translate: in english", "4x5",
                                  "a4x5", "how many? 3 + 4"])  # fmt: skip
def test_every_search_answers_as_its_regex(text: str) -> None:
    for search in SEARCHES:
        assert spans(search, text) == spans(search.pattern, text), search.pattern.pattern


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.integers(min_value=0, max_value=20))
def test_any_text_of_cue_pieces_is_searched_as_by_the_regex(pieces: list[str], pos: int) -> None:
    text = "".join(pieces)
    for search in SEARCHES:
        assert spans(search, text, pos) == spans(search.pattern, text, pos), (search.pattern.pattern, text, pos)


@pytest.mark.skipif(not (DATA / "humaneval.jsonl").exists(), reason="shared data not present")
def test_real_prompts_are_read_as_by_the_regexes() -> None:
    """On the prompts the predictor meets (ShareGPT, GSM8K, HumanEval), each search finds
    what its regex finds."""
    spec = FeatureSpec()
    prompts = []
    for name in ("sharegpt_v3_first_turn.part01.jsonl", "gsm8k.part01.jsonl", "humaneval.jsonl"):
        with (DATA / name).open() as rows:
            prompts += [json.loads(row)["prompt"] for _, row in zip(range(150), rows, strict=False)]
    cues_seen = set()
    for prompt in prompts:
        low = _window(prompt, spec.head_chars, spec.tail_chars).lower()
        cue_text = _window(low, spec.cue_chars * 2 // 3, spec.cue_chars // 3)
        for name, cue in _CUES:
            assert (cue.search(cue_text) is None) == (cue.pattern.search(cue_text) is None), (name, cue_text)
            cues_seen.update([name] if cue.pattern.search(cue_text) else [])
    assert len(cues_seen) >= 10  # the prompts exercise most cues, not only their absence
