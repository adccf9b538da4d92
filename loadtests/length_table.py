"""The length table a comparison hands its simulators when the workload hides lengths.

A workload with ``lengths: hidden`` sends prompts only, so the backend must stop each
reply at its true length by a means the gateway cannot read. The simulator does it
from a JSON-lines table of ``{"prompt": <text>, "output_tokens": <int>}`` rows
(``simulator/length_table.py``; flag ``--length-table PATH``): it matches a chat
request's last user message, a completions request's prompt. The table lists every
prompt the workload can send, in every part (the capacity and training runs send
prompts too), each with the one true length its requests are planned with.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

FILE_NAME = "length_table.jsonl"


def write_length_table(path: Path, lengths: Mapping[str, int]) -> Path:
    """Write ``prompt -> output tokens`` as the simulator's JSON-lines table; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for prompt, tokens in lengths.items():
            fh.write(orjson.dumps({"prompt": prompt, "output_tokens": tokens}) + b"\n")
    return path


def read_length_table(path: Path) -> dict[str, int]:
    """The table as written: ``prompt -> output tokens`` (later rows win, as in the simulator)."""
    out: dict[str, int] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            row = orjson.loads(line)
            out[row["prompt"]] = row["output_tokens"]
    return out
