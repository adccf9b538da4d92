"""Turn one request into the sparse feature vector the length predictor reads.

Everything here is a pure function of a :class:`~scheduler.types.PredictInput`:
no state, no I/O, so a feature vector is the same on every replica and after a
restart. Feature names are hashed into ``2**bits`` slots with CRC-32 (Python's
``hash`` is salted per process, which would scramble the shared weights).

The work is bounded: only the first ``head_chars`` and last ``tail_chars`` of a
prompt are read. The opening usually says what is wanted ("Write an essay...")
and the end often restates it ("...in 300 words."); the middle of a long prompt
is pasted material whose words say little about the answer, while its *size*
still enters through the length buckets, which use the full counts.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass

from scheduler.types import PredictInput

_WORD = re.compile(r"[^\W_]+")


_META = frozenset("\\()[]{}?*+.^$|")
_OPTIONAL = frozenset("?*{")


def _needles(body: str) -> tuple[str, ...] | None:
    """Text every match of the alternation ``body`` (``a|b(c|d)|e?f``) contains: each
    alternative's leading literal characters (a character made optional by ``?``, ``*`` or
    ``{`` left out). None where an alternative starts with no literal (``\\d+``, ``[ab]``):
    then nothing is certain to be in every match."""
    alternatives, depth, start = [], 0, 0
    for i, char in enumerate(body):
        if char == "\\":
            continue
        if char in "([" and (i == 0 or body[i - 1] != "\\"):
            depth += 1
        elif char in ")]" and body[i - 1] != "\\":
            depth -= 1
        elif char == "|" and depth == 0:
            alternatives.append(body[start:i])
            start = i + 1
    alternatives.append(body[start:])
    needles = []
    for alternative in alternatives:
        end = 0
        while end < len(alternative) and alternative[end] not in _META:
            end += 1
        if end < len(alternative) and alternative[end] in _OPTIONAL:
            end -= 1
        if end <= 0:
            return None
        needles.append(alternative[:end])
    return tuple(needles)


class _Search:
    """A regex searched in lower-cased text, its answers those of ``re.search``.

    Most patterns here are ``\\b(...)``: a word boundary, then alternatives. Two shortcuts
    keep their answers and cut their cost:

    * a boundary keeps the regex engine from skipping ahead: it tries the whole pattern at
      every position. Such a pattern's ``finder`` is the pattern without that boundary,
      which the engine can skip through to the characters its alternatives start with; each
      place it finds is then tried with the whole pattern. The whole pattern can only match
      where the finder does.
    * where every alternative starts with literal text (``translat``, ``in ``, ``fix ``), a
      match contains one of those ``needles``; most cues are absent from most prompts, and a
      substring test for each needle costs less than one regex search.

    ``tests/scheduler/predictor/test_features.py`` holds every answer equal to the plain
    search's, on generated texts and on the real prompts."""

    __slots__ = ("finder", "needles", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern)
        self.finder = re.compile(pattern[2:]) if pattern.startswith(r"\b") else None
        body = re.fullmatch(r"\\b\((.*)\)(\\b)?", pattern)
        self.needles = _needles(body.group(1)) if body is not None else None

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        """``self.pattern.search(text, pos)``."""
        needles = self.needles
        if needles is not None:  # a loop, not any(): a generator's frames cost what a short text's search does
            rest = text[pos:] if pos else text
            for needle in needles:
                if needle in rest:
                    break
            else:
                return None
        finder = self.finder
        if finder is None:
            return self.pattern.search(text, pos)
        match = self.pattern.match
        at = finder.search(text, pos)
        while at is not None:
            start = at.start()
            found = match(text, start)
            if found is not None:
                return found
            at = finder.search(text, start + 1)
        return None


# Marks of source code, counted with str.count: a regex for the same costs ~0.4 ms
# on a long window, a third of the whole budget.
_CODE_MARKS = ("```", ";\n", "{\n", "}\n", "def ", "=>", "import ", "#include", "function", "return ", "    ")
_QUESTION_START = frozenset(
    "what who when where which why how is are can could does do did should would will was were".split()
)
# A number followed by a unit of output size: "in 500 words", "10 bullet points",
# "a 1000-word essay". Its magnitude is the strongest explicit length signal there is.
_ASKED_SIZE = re.compile(
    r"\b(\d{1,5})[\s-]*(words?|sentences?|paragraphs?|pages?|lines?|bullet|points?|items?|"
    r"examples?|ideas?|questions?|tips?|steps?|ways?|names?|titles?|options?|reasons?|characters?|"
    r"tweets?|posts?|slides?|days?|chapters?|scenes?)\b"
)
_UNIT_WORDS = {
    "word": 1.0,
    "sentence": 20.0,
    "paragraph": 100.0,
    "page": 400.0,
    "line": 10.0,
    "character": 0.2,
}
_NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "twenty": 20, "fifty": 50, "hundred": 100,
}  # fmt: skip


# Task cues, each a regex on lower-cased text. They overlap with the hashed words on
# purpose: a cue pools the evidence of many phrasings into one well-trained weight,
# which matters most while little has been learned.
_CUES: tuple[tuple[str, _Search], ...] = tuple(
    (name, _Search(pattern))
    for name, pattern in (
        ("translate", r"\b(translat|in (english|french|spanish|german|chinese|japanese|korean)\b)"),
        ("rewrite", r"\b(rewrite|rephrase|paraphrase|proofread|fix (the |my )?(grammar|spelling)|correct)"),
        ("summarize", r"\b(summar|tl;?dr|shorten|condense)"),
        ("essay", r"\b(essay|article|blog|story|poem|script|speech|chapter|report|letter|cover letter)\b"),
        ("write", r"\b(write|generate|compose|create|draft|make)\b"),
        ("explain", r"\b(explain|describe|discuss|elaborate|in detail|detailed|comprehensive|step by step)"),
        ("list", r"\b(list|bullet|outline|ideas|examples|suggestions|steps|tips)\b"),
        (
            "code",
            r"\b(code|python|javascript|typescript|java|sql|function|script|program|api|regex|html|css)\b",
        ),
        ("math", r"\b(calculate|solve|how many|how much|equation|sum of|percent|\d+\s*[-+*/x]\s*\d+)"),
        (
            "brief",
            r"\b(one word|single word|briefly|brief|concise|short|in one sentence|one line|few words)\b",
        ),
        ("yesno", r"\b(yes or no|true or false|yes/no)\b"),
        (
            "only",
            r"\b(only (reply|respond|answer|say|write)|just (say|reply|answer)|do not explain|don't explain)",
        ),
        (
            "ack",
            r"\b(acknowledge|reply with ok|say ok|understood|wait for|i will (send|give|provide)|"
            r"i'll (send|give|provide)|until i|next message|remember this)",
        ),
        ("roleplay", r"\b(act as|you are an?|pretend|role ?play|imagine you)"),
        ("classify", r"\b(classify|categori[sz]e|sentiment|label|which (one|of))\b"),
        ("continue", r"\b(continue|go on|keep going|more)\b"),
        ("compare", r"\b(compare|difference|differences|vs\.?|versus|pros and cons)\b"),
        ("plan", r"\b(plan|schedule|itinerary|curriculum|course|strategy|proposal)\b"),
        ("table", r"\b(table|csv|json|markdown)\b"),
        ("greet", r"^\s*(hi|hello|hey|thanks|thank you|ok|okay)\b"),
    )
)


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """How the text is read. Part of the model: changing it invalidates learned weights."""

    bits: int = 18
    head_chars: int = 1000
    tail_chars: int = 400
    max_words: int = 160  # of the window, for the bag: 3/4 from the start, 1/4 from the end
    cue_chars: int = 600  # the cue regexes read this many characters: 2/3 start, 1/3 end
    # Every feature but the bias and the bag of words is multiplied by this. With a
    # per-coordinate step size (AdaGrad) a smaller value is a smaller effective
    # learning rate: a first word or a length bucket is seen often, and at full
    # scale such features memorise noise (measured: Kendall's tau 0.32 -> 0.36
    # on held-out ShareGPT folds, none of them the evaluation file).
    dense_scale: float = 0.15
    # Each feature is also added once more, prefixed with the tenant: a shared
    # weight plus a per-tenant correction ("frustratingly easy domain adaptation",
    # Daume 2007), so a math tutor and a chat app can read "how many" differently.
    cross_tenant: bool = True


def slot(name: str, bits: int) -> int:
    """The stable slot of a feature name."""
    return zlib.crc32(name.encode()) & ((1 << bits) - 1)


TEMPLATE_BUCKETS = 4096  # system prompts per model and tenant told apart: bounds the learned state


def template_key(inp: PredictInput) -> str:
    """Who shares a length profile: same model, tenant and system prompt.

    The system prompt's hash is folded into ``TEMPLATE_BUCKETS``: a client that sends a
    new system prompt with every request (a user name or date in it) would otherwise
    grow the predictor's state, here and in Redis, by four fields a request, forever.
    Two templates that share a bucket share a correction."""
    return f"{inp.model}|{inp.tenant}|{zlib.crc32(inp.system.encode()) % TEMPLATE_BUCKETS:03x}"


def _bucket(x: float) -> int:
    """Logarithmic bucket, two per doubling, so neighbours share a similar size."""
    return int(2 * math.log2(1 + x))


def _window(text: str, head: int, tail: int) -> str:
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + text[-tail:]


def _asked_size(text: str) -> float | None:
    """The output size the prompt asks for, in rough words, or None."""
    best: float | None = None
    for match in _ASKED_SIZE.finditer(text):
        count = float(match.group(1))
        unit = match.group(2).rstrip("s")
        size = count * _UNIT_WORDS.get(unit, 40.0)  # list-like units: ~40 words an item
        best = size if best is None else max(best, size)
    return best


def names(inp: PredictInput, spec: FeatureSpec) -> dict[str, float]:
    """Named features with their values (before hashing); handy for reading a model."""
    text = _window(inp.prompt, spec.head_chars, spec.tail_chars)
    low = text.lower()
    words = _WORD.findall(low)
    n_words = len(words) if len(text) == len(inp.prompt) else int(len(words) * len(inp.prompt) / len(text))
    if len(words) > spec.max_words:
        head = spec.max_words * 3 // 4
        words = words[:head] + words[head - spec.max_words :]
    cue_text = _window(low, spec.cue_chars * 2 // 3, spec.cue_chars // 3)
    feats: dict[str, float] = {f"m:{inp.model}": 1.0, f"t:{inp.tenant}": 1.0}

    if words:
        feats["first:" + words[0]] = 1.0
        feats["first2:" + " ".join(words[:2])] = 1.0
        feats["last:" + words[-1]] = 1.0
        if words[0] in _QUESTION_START:
            feats["question_start"] = 1.0
    for name, cue in _CUES:
        if cue.search(cue_text) is not None:
            feats["cue:" + name] = 1.0
    asked = _asked_size(low)
    if asked is not None:
        feats["asked_log"] = math.log1p(asked) / 5.0
        feats[f"asked_b:{_bucket(asked)}"] = 1.0
    for word, number in _NUMBER_WORDS.items():
        if f" {word} " in low:
            feats["asked_wordnum"] = math.log1p(number) / 3.0
            break

    # The client's cap: a cap, not a guess, but clients that ask for 64 tokens and
    # clients that ask for 4,096 expect different replies. A client that sends one cap
    # for everything makes this a constant, which the model learns to ignore.
    if inp.max_tokens is not None:
        feats[f"cap_b:{_bucket(inp.max_tokens)}"] = 1.0
        feats["cap_log"] = math.log1p(inp.max_tokens) / 8.0

    # Size of the whole request (not just the window).
    n_chars = max(inp.prompt_chars, len(inp.prompt))
    feats[f"chars_b:{_bucket(n_chars)}"] = 1.0
    feats[f"words_b:{_bucket(n_words)}"] = 1.0
    feats["chars_log"] = math.log1p(n_chars) / 10.0
    feats[f"lines_b:{_bucket(text.count(chr(10)))}"] = 1.0
    feats[f"msgs_b:{_bucket(inp.n_messages)}"] = 1.0
    if text.rstrip().endswith("?"):
        feats["ends_question"] = 1.0
    if "?" in text:
        feats[f"questions_b:{_bucket(text.count('?'))}"] = 1.0
    code_hits = sum(text.count(mark) for mark in _CODE_MARKS)
    if code_hits:
        feats[f"code_b:{_bucket(code_hits)}"] = 1.0

    # Script: tokens per character differ a lot (CJK is ~1 token a character).
    non_ascii = (len(text) - len(text.encode("ascii", "ignore"))) / max(1, len(text))
    if non_ascii > 0.02:
        feats[f"nonascii_b:{min(4, int(non_ascii * 5))}"] = 1.0

    # The system prompt names the app: apps reuse templates, and a template's
    # replies have similar lengths. The hash identifies it; its size says a little.
    if inp.system:
        feats[f"sys:{zlib.crc32(inp.system.encode()):08x}"] = 1.0
        feats[f"sys_b:{_bucket(len(inp.system))}"] = 1.0
    for key in feats:
        feats[key] *= spec.dense_scale

    # Bag of words and bigrams, scaled so the whole bag has unit norm: a long prompt
    # must not outvote the cues just by having more words.
    feats["bias"] = 1.0
    bag: set[str] = set(words)
    bag.update(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))
    if bag:
        scale = 1.0 / math.sqrt(len(bag))
        for term in bag:
            feats["w:" + term] = scale
    return feats


def extract(inp: PredictInput, spec: FeatureSpec) -> list[tuple[int, float]]:
    """Hashed sparse features: (slot, value) pairs, slots merged when names collide."""
    out: dict[int, float] = {}
    bits = spec.bits
    mask = (1 << bits) - 1
    crc32 = zlib.crc32
    # crc32(raw, crc32(prefix)) is crc32(prefix + raw): the tenant's slot without the copy
    tenant = crc32((inp.tenant + "|").encode()) if spec.cross_tenant else None
    for name, value in names(inp, spec).items():
        raw = name.encode()
        i = crc32(raw) & mask
        out[i] = out.get(i, 0.0) + value
        if tenant is not None:
            j = crc32(raw, tenant) & mask
            out[j] = out.get(j, 0.0) + value
    return list(out.items())
