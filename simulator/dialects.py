"""How each inference server writes the same answers: SSE framing, metrics, names, headers.

The engine underneath is the same; a dialect changes only what goes over the wire, so
a gateway can be tested against each server's habits:

| dialect | SSE event | usage chunk | ``/metrics`` gauges | ``server`` | model ids |
|---|---|---|---|---|---|
| vllm | ``data: {...}\\n\\n``, vLLM 0.32's chunk shapes and token ids (``vllm_chunks.py``) | its own, ``choices: []`` | ``vllm:num_requests_running`` ... | uvicorn | as given |
| sglang | ``data: {...}\\n\\n`` | its own | ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` | uvicorn | as given |
| tgi | ``data:{...}\\n\\n`` (no space: axum) | on the last content chunk | ``tgi_batch_current_size``, ``tgi_queue_size`` | none | as given |
| llamacpp | ``data: {...}\\n\\n``, llama-server's chunk shapes, ids in ``logprobs``, ``timings``, ``/apply-template`` (``llamacpp_chunks.py``) | chat: its own; completions: on the finish chunk, asked or not | ``llamacpp:requests_processing``, ``llamacpp:requests_deferred`` | llama.cpp | as given (``--alias``) |
| ollama | ``data: {...}\\n\\n`` | its own | none (404) | none | ``name:latest``, the bare name accepted |
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simulator.metrics import Gauges, Metrics


class Dialect(enum.StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    OLLAMA = "ollama"


@dataclass(frozen=True, slots=True)
class Wire:
    """The bytes around each SSE event, and where usage goes."""

    data: bytes = b"data: "  # the field name and what follows it
    end: bytes = b"\n\n"  # the blank line that ends an event
    usage_on_last_chunk: bool = False  # usage rides on the finish chunk, not a chunk of its own
    completions_usage_always: bool = False  # /v1/completions streams carry usage on the finish chunk unasked

    def usage(self, chat: bool, asked: bool) -> tuple[bool, bool]:
        """Whether a stream carries usage, and whether on its finish chunk."""
        unasked = self.completions_usage_always and not chat  # llama.cpp's habit
        return asked or unasked, self.usage_on_last_chunk or unasked

    @property
    def done(self) -> bytes:
        return self.data + b"[DONE]" + self.end


WIRES: dict[Dialect, Wire] = {
    Dialect.VLLM: Wire(),
    Dialect.SGLANG: Wire(),
    Dialect.TGI: Wire(data=b"data:", usage_on_last_chunk=True),
    Dialect.LLAMACPP: Wire(completions_usage_always=True),  # llama-server 0.6: LF framing
    Dialect.OLLAMA: Wire(),
}

# the `server` header; None: none is sent. vLLM and SGLang run on uvicorn, which names itself.
SERVER: dict[Dialect, str | None] = {
    Dialect.VLLM: "uvicorn", Dialect.SGLANG: "uvicorn", Dialect.TGI: None, Dialect.LLAMACPP: "llama.cpp",
    Dialect.OLLAMA: None,
}


def served_name(dialect: Dialect, model: str) -> str:
    """The id the server lists: Ollama tags an untagged name ``:latest``."""
    if dialect is Dialect.OLLAMA and ":" not in model.rsplit("/", 1)[-1]:
        return model + ":latest"
    return model


def model_card(dialect: Dialect, model: str, max_model_len: int) -> dict[str, object]:
    card: dict[str, object] = {"id": model, "object": "model", "created": 0}
    if dialect in (Dialect.VLLM, Dialect.SGLANG):
        card.update(owned_by=dialect.value, max_model_len=max_model_len)
    elif dialect is Dialect.LLAMACPP:
        card.update(owned_by="llamacpp", meta={"n_ctx_train": max_model_len})
    elif dialect is Dialect.OLLAMA:
        card.update(owned_by="library")
    else:
        card.update(owned_by=model)  # TGI names the model as its owner
    return card


def render_metrics(dialect: Dialect, metrics: Metrics, gauges: Gauges) -> str | None:
    """The ``/metrics`` text in this dialect; None where the server has none (Ollama)."""
    if dialect is Dialect.VLLM:
        return metrics.render(gauges)
    if dialect is Dialect.OLLAMA:
        return None
    names = {
        Dialect.SGLANG: ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                         "sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
        Dialect.TGI: ("tgi_batch_current_size", "tgi_queue_size", None,
                      "tgi_request_input_count", "tgi_request_generated_tokens_count"),
        Dialect.LLAMACPP: ("llamacpp:requests_processing", "llamacpp:requests_deferred",
                           "llamacpp:kv_cache_usage_ratio", "llamacpp:prompt_tokens_total",
                           "llamacpp:tokens_predicted_total"),
    }[dialect]
    labels = metrics.labels if dialect is Dialect.SGLANG else ""
    values = (gauges.running, gauges.waiting, gauges.kv_usage, metrics.prompt_tokens, metrics.generation_tokens)
    kinds = ("gauge", "gauge", "gauge", "counter", "counter")
    out: list[str] = []
    for name, value, kind in zip(names, values, kinds, strict=True):
        if name is None:
            continue
        out.append(f"# TYPE {name} {kind}")
        out.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
    out.append("")
    return "\n".join(out)


class ServerHeader:
    """Sends a ``server`` header of the dialect's own (uvicorn's is turned off)."""

    def __init__(self, app: ASGIApp, server: str) -> None:
        self.app = app
        self.header = (b"server", server.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_with_header)
