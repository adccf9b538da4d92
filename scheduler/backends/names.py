"""Which served model does a requested name mean?

Answered in this order, the first that a backend serves wins:

1. the name itself;
2. an alias from the configuration (``aliases: {llama3.2: "llama3.2:latest"}``),
   whose target is then read by rules 1 and 3;
3. Ollama's implicit tag: ``llama3.2`` means ``llama3.2:latest``, and ``x:latest``
   means ``x`` on a server that lists it untagged.

No match: ``None``, and the request gets the usual 404 for an unknown model.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

LATEST = ":latest"


def _tagged(name: str, served: Container[str]) -> str | None:
    if name in served:
        return name
    if name.endswith(LATEST):
        bare = name.removesuffix(LATEST)
        return bare if bare and bare in served else None
    if ":" not in name.rsplit("/", 1)[-1] and name + LATEST in served:  # a tag follows the last '/'
        return name + LATEST
    return None


def resolve(name: str, served: Container[str], aliases: Mapping[str, str]) -> str | None:
    """The served model ``name`` stands for, or None when no backend serves it."""
    found = _tagged(name, served)
    if found is not None:
        return found
    target = aliases.get(name)
    return _tagged(target, served) if target is not None else None
