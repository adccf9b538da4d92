"""Seeded malformed requests, as raw bytes, in named categories.

``cases(seed, n, ...)`` yields ``n`` cases round-robin over ``CATEGORIES``; the same
seed gives the same bytes. A case is one request on its own connection
(``Connection: close``), so one bad request cannot spoil the next. ``run`` sends them
with bounded concurrency and tallies what came back (``FuzzResult``).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadtests.chaos.rawhttp import Reply, exchange, request

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@dataclass(frozen=True, slots=True)
class Case:
    category: str
    payload: bytes
    method: str = "POST"


@dataclass(slots=True)
class FuzzResult:
    """What came back, by category; the failures are listed with their case."""

    cases: int = 0
    statuses: Counter[int | str] = field(default_factory=Counter)
    by_category: dict[str, Counter[int | str]] = field(default_factory=dict)
    server_errors: list[tuple[Case, Reply]] = field(default_factory=list)  # 5xx
    not_openai: list[tuple[Case, Reply]] = field(default_factory=list)  # an error body of another shape
    no_answer: list[tuple[Case, Reply]] = field(default_factory=list)  # closed, reset or hung
    slowest_s: float = 0.0

    def add(self, case: Case, reply: Reply) -> None:
        self.cases += 1
        key: int | str = reply.status if reply.status is not None else reply.ending
        self.statuses[key] += 1
        self.by_category.setdefault(case.category, Counter())[key] += 1
        self.slowest_s = max(self.slowest_s, reply.elapsed_s)
        if len(case.payload) > 4096:  # only failures are kept: keep them small
            case = Case(case.category, case.payload[:4096], case.method)
        if reply.status is None or reply.ending != "reply":
            self.no_answer.append((case, reply))
        elif reply.status >= 500 and not _own_deadline(case, reply):
            self.server_errors.append((case, reply))
        elif reply.status >= 400 and case.method != "HEAD" and reply.error() is None:
            self.not_openai.append((case, reply))

    @property
    def own_deadline(self) -> int:
        """504s for a deadline the client set itself (x-triage-timeout-ms): not a failure."""
        return sum(n for k, n in self.by_category.get("triage_headers", {}).items() if k == 504)

    def failures(self) -> list[str]:
        out = []
        for label, items in (("5xx", self.server_errors), ("not OpenAI-shaped", self.not_openai),
                             ("no answer", self.no_answer)):
            for case, reply in items[:5]:
                out.append(f"{label}: {case.category} {case.payload[:160]!r} -> {reply.status} "
                           f"{reply.ending} {reply.body[:160]!r}")
        return out


def _own_deadline(case: Case, reply: Reply) -> bool:
    """A 504 queue_timeout for a request that set its own deadline (x-triage-timeout-ms:
    a few ms is a valid deadline, and a busy queue does not meet it)."""
    err = reply.error()
    return (reply.status == 504 and err is not None and err.get("code") == "queue_timeout"
            and b"\r\nx-triage-timeout-ms:" in case.payload.split(b"\r\n\r\n", 1)[0])


def _deep(depth: int, rng: random.Random) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


WRONG_VALUES: list[Any] = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"a": 1}, 2**63 - 1, -(2**63), "\x00"]
FIELDS = ["model", "messages", "stream", "max_tokens", "max_completion_tokens", "stream_options", "prompt",
          "temperature", "n", "stop", "user", "tools"]


class Fuzzer:
    def __init__(self, seed: int, model: str, key: str, max_body_bytes: int) -> None:
        self.rng = random.Random(seed)
        self.model = model
        self.key = key
        self.max_body_bytes = max_body_bytes

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    def valid_body(self, endpoint: str = CHAT) -> dict[str, Any]:
        rng = self.rng
        body: dict[str, Any] = {"model": self.model, "max_tokens": rng.randint(1, 4)}
        if endpoint == CHAT:
            body["messages"] = [{"role": "user", "content": f"fuzz {rng.randint(0, 10**6)}"}]
        else:
            body["prompt"] = f"fuzz {rng.randint(0, 10**6)}"
        if rng.random() < 0.5:
            body["stream"] = True
        return body

    def _post(self, body: bytes, endpoint: str = CHAT, headers: dict[str, str] | None = None) -> bytes:
        return request("POST", endpoint, body, {**self._auth(), **(headers or {})})

    # the categories: each returns the bytes of one request

    def invalid_json(self) -> bytes:
        good = orjson.dumps(self.valid_body())
        choice = self.rng.randrange(5)
        if choice == 4:  # truncated, its declared length honest about the whole: the body deadline answers
            cut = good[: self.rng.randrange(1, len(good))]
            return request("POST", CHAT, b"", {**self._auth(), "content-length": str(len(good))}) + cut
        if choice == 0:
            body = good[: self.rng.randrange(1, len(good))]  # truncated
        elif choice == 1:
            body = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200)))
        elif choice == 2:
            body = self.rng.choice([b"", b"null", b"[]", b"1", b'"x"', b"{", b"{}", b"{'a':1}", b"NaN"])
        else:
            body = good.replace(b":", b"", 1)
        return self._post(body, self.rng.choice([CHAT, COMPLETIONS]))

    def wrong_types(self) -> bytes:
        endpoint = self.rng.choice([CHAT, COMPLETIONS])
        body = self.valid_body(endpoint)
        name = self.rng.choice(FIELDS)
        body[name] = self.rng.choice(WRONG_VALUES)
        if endpoint == CHAT and self.rng.random() < 0.3:
            msg = {"role": self.rng.choice(WRONG_VALUES), "content": self.rng.choice(WRONG_VALUES)}
            body["messages"] = [msg, self.rng.choice(WRONG_VALUES)]
        return self._post(orjson.dumps(body), endpoint)

    def deep_nesting(self) -> bytes:
        depth = self.rng.choice([100, 127, 128, 200, 254, 255, 256, 600, 1023, 1024, 5000])
        opening, closing = self.rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        deep = opening * depth + b"1" + closing * depth
        body = orjson.dumps({**self.valid_body(), "stream": True, "x": 0})
        body = body.replace(b'"x":0', b'"x":' + deep)
        return self._post(body)

    def huge_numbers(self) -> bytes:
        body = self.valid_body()
        number = self.rng.choice([b"1" + b"0" * 400, b"1e400", b"-1e400", b"1e308", b"-1", b"0", b"1.5",
                                  b"9" * 30, b"18446744073709551616", b"-0", b"NaN", b"Infinity"])
        name = self.rng.choice(["max_tokens", "max_completion_tokens", "temperature", "n", "top_p"])
        raw = orjson.dumps({**body, name: 0}).replace(f'"{name}":0'.encode(), f'"{name}":'.encode() + number)
        return self._post(raw)

    def invalid_utf8(self) -> bytes:
        body = orjson.dumps(self.valid_body())
        junk = self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
        return self._post(body.replace(b"fuzz", b"fu" + junk, 1))

    def nul_bytes(self) -> bytes:
        body = orjson.dumps(self.valid_body())
        where = self.rng.randrange(3)
        if where == 0:
            body = body.replace(b"fuzz", b"fu\\u0000zz", 1)
        elif where == 1:
            body = body.replace(b"fuzz", b"fu\x00zz", 1)
        else:
            body = body.replace(self.model.encode(), self.model.encode() + b"\\u0000", 1)
        return self._post(body)

    def oversized(self) -> bytes:
        size = self.max_body_bytes + self.rng.choice([1, 1000, self.max_body_bytes // 2])
        body = b'{"model": "' + b"x" * size + b'"}'
        choice = self.rng.randrange(3)
        if choice == 0:
            return self._post(body)
        if choice == 1:
            chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
            chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
            head = request("POST", CHAT, b"", {**self._auth(), "transfer-encoding": "chunked",
                                               "content-length": "x"})
            return head.replace(b"content-length: x\r\n", b"") + chunked
        # a declared length far above what is sent: the body deadline answers
        head = request("POST", CHAT, b"", {**self._auth(), "content-length": str(size * 10)})
        return head + body[:1000]

    def methods_paths(self) -> bytes:
        method = self.rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO", "POST"])
        path = self.rng.choice([
            "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/../admin/stats", "/%00", "//v1",
            "/v1/chat/completions?x=%ff", "/" + "a" * 4000, "/admin/stats", "/metrics", "/v2/models",
            "/v1/chat/completions/", "/health", "/ready", "/v1/embeddings", "*", "/dashboard",
        ])
        body = orjson.dumps(self.valid_body()) if method == "POST" else b""
        return request(method, path, body, self._auth())

    def broken_headers(self) -> bytes:
        body = orjson.dumps(self.valid_body())
        good = self._post(body)
        head, _, rest = good.partition(b"\r\n\r\n")
        choice = self.rng.randrange(9)
        if choice == 0:
            head += b"\r\nno-colon-here"
        elif choice == 1:
            head += b"\r\ncontent-length: %d" % (len(body) + 5)  # two lengths
        elif choice == 2:
            head = head.replace(b"content-length: %d" % len(body), b"content-length: abc")
        elif choice == 3:
            head += b"\r\nx-nul: a\x00b"
        elif choice == 4:
            head += b"\r\n folded: continuation"
        elif choice == 5:
            head += b"\r\nx-big: " + b"h" * 40_000
        elif choice == 6:
            head += b"\r\ntransfer-encoding: gzip, chunked, zz"
        elif choice == 7:
            head = head.replace(b"HTTP/1.1", self.rng.choice([b"HTTP/9.9", b"HTTP/1", b"HTTX/1.1", b""]), 1)
        else:
            head = head.replace(b"content-length: %d" % len(body), b"content-length: -1")
        return head + b"\r\n\r\n" + rest

    def triage_headers(self) -> bytes:
        name = self.rng.choice(["x-triage-timeout-ms", "x-triage-expected-tokens", "x-triage-priority",
                                "x-triage-oracle-tokens"])
        value = self.rng.choice(["", " 5", "+5", "1_000", "-1", "0", "1e3", "9" * 400, "NaN", "abc", "batch",
                                 "interactive", "vip", "\u00e9", "0x10", "1" * 12, "1" * 13])
        return self._post(orjson.dumps(self.valid_body()), headers={name: value})

    def bad_keys(self) -> bytes:
        value = self.rng.choice([None, "", "Bearer", "Bearer ", "Bearer wrong", "Basic abc", "bearer " + self.key,
                                 "Bearer " + "k" * 5000, "Bearer \u00e9\u00e9", "Token " + self.key])
        headers = {} if value is None else {"authorization": value}
        path = self.rng.choice([CHAT, COMPLETIONS, "/v1/models", "/admin/stats", "/metrics"])
        method = "GET" if path in ("/v1/models", "/admin/stats", "/metrics") else "POST"
        body = orjson.dumps(self.valid_body()) if method == "POST" else b""
        raw = request(method, path, body, headers)
        return raw

    def valid(self) -> bytes:
        endpoint = self.rng.choice([CHAT, COMPLETIONS])
        return self._post(orjson.dumps(self.valid_body(endpoint)), endpoint)


CATEGORIES = ["invalid_json", "wrong_types", "deep_nesting", "huge_numbers", "invalid_utf8", "nul_bytes",
              "oversized", "methods_paths", "broken_headers", "triage_headers", "bad_keys", "valid"]


def cases(seed: int, n: int, model: str, key: str, max_body_bytes: int) -> Iterator[Case]:
    fuzzer = Fuzzer(seed, model, key, max_body_bytes)
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        payload = getattr(fuzzer, category)()
        yield Case(category, payload, payload.split(b" ", 1)[0].decode("latin-1"))


async def run(host: str, port: int, items: Iterable[Case], concurrency: int = 16,
              timeout_s: float = 30.0) -> FuzzResult:
    """Send every case (``concurrency`` at a time, each on its own connection), tally."""
    result = FuzzResult()
    pending = iter(items)

    async def worker() -> None:
        for case in pending:  # the workers share one iterator: cases are made as they are sent
            result.add(case, await exchange(host, port, case.payload, timeout_s))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return result
