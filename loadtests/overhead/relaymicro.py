"""CPU per relayed event of the gateway's SSE relay, two versions side by side.

``python -m loadtests.overhead.relaymicro --before DIR`` loads ``gateway/request/relay.py`` from
this tree and the relay from ``DIR`` (another checkout, e.g. ``git archive <commit> | tar -x -C
DIR``), and relays the same in-memory streams through each, in alternating rounds in
one process: a chat stream of ``--events`` content chunks, one event per upstream read
(as an engine writes them), in each framing — ``lf`` (vLLM), ``lf-nospace`` (TGI's
``data:``), ``crlf`` (sse-starlette). It reports the median CPU nanoseconds per event
of each version and their ratio. The end-to-end figure is ``bench overhead``'s relay
experiment (``gateway CPU µs/chunk``); this one isolates the relay loop from the noise
of a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

ROLE = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'  # noqa: E501
TOKEN = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}\n\n'  # noqa: E501
USAGE = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":2009,"completion_tokens":2000}}\n\n'  # noqa: E501
DONE = b"data: [DONE]\n\n"
FRAMINGS = {
    "lf": lambda e: e,
    "lf-nospace": lambda e: e.replace(b"data: ", b"data:", 1),
    "crlf": lambda e: e.replace(b"\n", b"\r\n"),
}


class _Reads(httpx.AsyncByteStream):
    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self._reads:
            yield read


# Where the relay lives: ``gateway/request/`` now, ``gateway/`` in older checkouts, which
# ``--before`` is usually given.
RELAY_PATHS = (Path("gateway/request/relay.py"), Path("gateway/relay.py"))


def relay_file(root: Path) -> Path:
    """The relay module of the checkout at ``root``, in either layout."""
    for rel in RELAY_PATHS:
        if (root / rel).is_file():
            return root / rel
    raise SystemExit(f"no relay module under {root} (looked for {', '.join(map(str, RELAY_PATHS))})")


def _load(root: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, relay_file(root))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


async def _once(relay: ModuleType, reads: list[bytes]) -> tuple[int, int]:
    """CPU ns for one stream, and the bytes it relayed."""
    response = httpx.Response(200, stream=_Reads(reads))
    stats = relay.StreamStats()
    out = 0
    start = time.process_time_ns()
    async for block in relay.relay_events(response, False, stats):
        out += len(block)
    return time.process_time_ns() - start, out


async def run(before: Path, after: Path, events: int, rounds: int) -> dict[str, Any]:
    versions = {"before": _load(before, "relay_before"), "after": _load(after, "relay_after")}
    results: dict[str, Any] = {}
    for framing, frame in FRAMINGS.items():
        reads = [frame(ROLE), *([frame(TOKEN)] * events), frame(USAGE), frame(DONE)]
        samples: dict[str, list[float]] = {v: [] for v in versions}
        relayed: dict[str, int] = {}
        for _ in range(rounds):  # alternating, so both see the same machine
            for name, module in versions.items():
                ns, out = await _once(module, reads)
                samples[name].append(ns / len(reads))
                relayed[name] = out
        row = {name: round(statistics.median(s), 1) for name, s in samples.items()}
        row["ratio_after_over_before"] = round(row["after"] / row["before"], 3)
        row["relayed_bytes"] = relayed  # before holds a crlf stream to its end (one block)
        results[framing] = row
    return {"events_per_stream": events + 3, "rounds": rounds, "ns_per_event_median": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.overhead.relaymicro", description=__doc__)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[2], help="default: this tree")
    parser.add_argument("--events", type=int, default=2000, help="content chunks per stream (default 2000)")
    parser.add_argument("--rounds", type=int, default=30, help="alternating rounds (default 30)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.before, args.after, args.events, args.rounds))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
