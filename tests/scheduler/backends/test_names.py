"""Which served model a requested name means."""

from __future__ import annotations

import pytest

from scheduler.backends.names import resolve

SERVED = {"llama3.2:latest", "qwen2.5:7b", "mistral", "meta-llama/Llama-3.1-8B"}
ALIASES = {"small": "llama3.2", "gpt-4o-mini": "qwen2.5:7b", "broken": "nowhere"}


@pytest.mark.parametrize(("asked", "want"), [
    ("qwen2.5:7b", "qwen2.5:7b"),  # exact
    ("llama3.2", "llama3.2:latest"),  # Ollama's implicit tag
    ("mistral:latest", "mistral"),  # the other way round
    ("small", "llama3.2:latest"),  # alias, then the implicit tag
    ("gpt-4o-mini", "qwen2.5:7b"),
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
    ("qwen2.5", None),  # no :latest served
    ("llama3.2:1b", None),  # another tag is another model
    ("broken", None),  # an alias to nothing served
    (":latest", None),
])
def test_resolve(asked: str, want: str | None) -> None:
    assert resolve(asked, SERVED, ALIASES) == want


def test_a_served_name_wins_over_an_alias() -> None:
    assert resolve("mistral", SERVED, {"mistral": "qwen2.5:7b"}) == "mistral"
