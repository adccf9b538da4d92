"""Sending one request to an OpenAI-compatible server and timing every content chunk.

The one place httpx errors become failure labels. Times are ``perf_counter`` seconds
relative to the run's start, so records of one run compare directly. Definitions
follow docs/loadtests.md#metrics: TTFT is send -> first chunk with non-empty content, E2E is
send -> last byte, ITL the gaps between content chunks.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from loadtests.requests import PlannedRequest
from loadtests.workload import Api


@dataclass(frozen=True, slots=True)
class RequestRecord:
    index: int
    cls: str
    start_s: float  # send time, seconds after the run's start
    ok: bool
    planned_tokens: int  # the true output length (sent as max_tokens with ignore_eos unless hidden)
    input_tokens: int = 0  # server usage, else the planner's estimate
    output_tokens: int = 0  # server usage, else the number of content chunks
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: tuple[float, ...] = field(default=(), repr=False)  # gaps between content chunks
    error: str | None = None  # failure label: "http_503", "timeout", "cancelled", ...
    status: int | None = None
    served_class: str | None = None  # x-triage-class, when the target is a Triage gateway
    queue_ms: float | None = None  # x-triage-queue-ms (a stream queued past its start: the trailer comment)
    tenant: str | None = None

    @property
    def end_s(self) -> float | None:
        return None if self.e2e_s is None else self.start_s + self.e2e_s

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1); undefined for one token or fewer."""
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Target:
    urls: tuple[str, ...]  # base URLs (without /v1); several are used round-robin
    model: str
    api: Api = Api.CHAT
    stream: bool = True
    timeout_s: float = 600.0
    oracle_header: bool = True  # send x-triage-oracle-tokens (read only by an oracle-policy gateway)


def streams(req: PlannedRequest, target: Target) -> bool:
    return target.stream if req.stream is None else req.stream


def request_body(req: PlannedRequest, target: Target) -> dict[str, Any]:
    """The JSON body; ``max_tokens`` and ``ignore_eos`` only when the workload tells the length."""
    stream = streams(req, target)
    body: dict[str, Any] = {"model": target.model, "temperature": 0.0, "stream": stream}
    if req.send_max_tokens:
        body["max_tokens"] = req.max_tokens
        body["ignore_eos"] = True
    if target.api is Api.CHAT:
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def request_headers(req: PlannedRequest, oracle: bool = True) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if oracle:
        headers["x-triage-oracle-tokens"] = str(req.max_tokens)
    if req.api_key:
        headers["authorization"] = f"Bearer {req.api_key}"
    if req.tier:
        headers["x-triage-priority"] = req.tier
    return headers


def _content(obj: dict[str, Any]) -> str:
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


def _failure(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect_error"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "connection_lost"
    return type(exc).__name__


# A gateway stream queued past its start sends its 200 before any grant, so its queue wait,
# which no header could carry, comes as a comment before ``[DONE]``
QUEUE_TRAILER = b": x-triage-queue-ms="


class Sender:
    """Sends planned requests through one pooled ``httpx.AsyncClient``."""

    def __init__(self, client: httpx.AsyncClient, target: Target, t0: float) -> None:
        self._client = client
        self._target = target
        self._t0 = t0

    async def send(self, req: PlannedRequest) -> RequestRecord:
        """Never raises except on cancellation, which the caller records as ``cancelled``."""
        target = self._target
        path = "/v1/chat/completions" if target.api is Api.CHAT else "/v1/completions"
        url = target.urls[req.index % len(target.urls)] + path
        base: dict[str, Any] = {"index": req.index, "cls": req.cls, "planned_tokens": req.max_tokens, "tenant": req.api_key}
        start = time.perf_counter()
        start_s = start - self._t0
        try:
            async with self._client.stream("POST", url, content=orjson.dumps(request_body(req, target)),
                                           headers=request_headers(req, target.oracle_header)) as resp:
                meta: dict[str, Any] = {"status": resp.status_code, "served_class": resp.headers.get("x-triage-class"),
                        "queue_ms": _float(resp.headers.get("x-triage-queue-ms"))}
                if resp.status_code != 200:
                    await resp.aread()
                    return RequestRecord(start_s=start_s, ok=False, error=f"http_{resp.status_code}",
                                         e2e_s=time.perf_counter() - start, **base, **meta)
                if streams(req, target):
                    return await self._read_stream(resp, req, start, start_s, base, meta)
                data = orjson.loads(await resp.aread())
                e2e = time.perf_counter() - start
                usage = data.get("usage") or {}
                out = int(usage.get("completion_tokens") or 0) or req.max_tokens
                return RequestRecord(start_s=start_s, ok=True, ttft_s=e2e, e2e_s=e2e, output_tokens=out,
                                     input_tokens=int(usage.get("prompt_tokens") or req.prompt_tokens),
                                     **base, **meta)
        except asyncio.CancelledError:
            raise
        except (httpx.HTTPError, orjson.JSONDecodeError, OSError) as exc:
            return RequestRecord(start_s=start_s, ok=False, error=_failure(exc),
                                 e2e_s=time.perf_counter() - start, **base)

    async def _read_stream(self, resp: httpx.Response, req: PlannedRequest, start: float, start_s: float,
                           base: dict[str, Any], meta: dict[str, Any]) -> RequestRecord:
        chunks: list[float] = []
        usage: dict[str, Any] = {}
        error: str | None = None
        done = False
        buffer = b""
        async for data in resp.aiter_bytes():
            now = time.perf_counter()
            buffer += data.replace(b"\r\n", b"\n")
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                payload = event.strip()
                if payload.startswith(QUEUE_TRAILER):  # a stream that started while queued tells its wait last
                    meta["queue_ms"] = _float(payload[len(QUEUE_TRAILER):].decode(errors="replace"))
                    continue
                if not payload.startswith(b"data:"):
                    continue
                payload = payload[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                obj = orjson.loads(payload)
                if "error" in obj:
                    error = "stream_error"
                if isinstance(obj.get("usage"), dict):
                    usage = obj["usage"]
                if _content(obj):
                    chunks.append(now)
        end = time.perf_counter()
        if error is None and not done:
            error = "incomplete_stream"
        if error is None and not chunks:
            error = "no_content"
        out = int(usage.get("completion_tokens") or 0) or len(chunks)
        return RequestRecord(
            start_s=start_s, ok=error is None, error=error, e2e_s=end - start,
            ttft_s=chunks[0] - start if chunks else None,
            itl_s=tuple(b - a for a, b in zip(chunks, chunks[1:], strict=False)),
            output_tokens=out, input_tokens=int(usage.get("prompt_tokens") or req.prompt_tokens),
            **base, **meta,
        )


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def cancelled(req: PlannedRequest, start_s: float, t0: float) -> RequestRecord:
    """The record of a request still in flight when the run's time ran out."""
    return RequestRecord(index=req.index, cls=req.cls, start_s=start_s, ok=False, planned_tokens=req.max_tokens,
                         error="cancelled", e2e_s=time.perf_counter() - t0 - start_s, tenant=req.api_key)
