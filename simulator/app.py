"""``create_app(settings)``: the one place the simulator is wired together.

Routes:

- ``POST /v1/chat/completions``, ``POST /v1/completions``: OpenAI-compatible generation.
- ``POST /v1/embeddings``: deterministic vectors, answered at once (``embeddings.py``).
- ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text in the dialect's
  names; vLLM's by default, none for Ollama). ``settings.dialect`` picks the server
  whose wire habits are copied (``dialects.py``).
- ``GET /sim/stats``, ``POST /sim/reset``, ``GET|POST /sim/faults``: hooks for tests.

The generation routes are plain Starlette routes (no FastAPI body models or dependency
resolution): they are the hot path of gateway benchmarks, and parse with orjson.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from simulator import llamacpp_chunks, vllm_chunks
from simulator.blocks import BlockHashes
from simulator.dialects import SERVER, WIRES, Dialect, ServerHeader, model_card, render_metrics, served_name
from simulator.embeddings import embed
from simulator.encoding import FrameWriter, StreamFrames, StreamSpec, full_response, new_request_id
from simulator.engine import Engine
from simulator.faults import FaultInjector, FaultSettings
from simulator.length_table import LengthTable, load_length_table
from simulator.lengths import OutputPlan, natural_length, plan_output, prompt_hash
from simulator.llamacpp_chunks import LlamacppFrameWriter
from simulator.metrics import Metrics
from simulator.parsing import parse_request
from simulator.profiles import Profile
from simulator.prompts import apply_template, chat_prompt
from simulator.protocol import ApiError, Endpoint, FinishReason, GenerationRequest
from simulator.responses import DroppedResponse, TokenStream, wait_finished
from simulator.sequence import Sequence
from simulator.settings import SimSettings
from simulator.textgen import Vocabulary
from simulator.token_ids import REGISTRY, output_ids, prompt_ids
from simulator.vllm_chunks import VllmFrameWriter


@dataclass(frozen=True, slots=True)
class SimState:
    """What the handlers share; one per app, kept on ``app.state.sim``."""

    model: str
    profile: Profile
    max_model_len: int
    engine: Engine
    metrics: Metrics
    faults: FaultInjector
    vocab: Vocabulary
    lengths: LengthTable | None  # known natural lengths, from settings.length_table
    dialect: Dialect = Dialect.VLLM


def create_app(settings: SimSettings) -> FastAPI:
    """The simulator app. Raises ``LengthTableError`` for a bad ``settings.length_table``."""
    profile = settings.resolve_profile()
    model = served_name(settings.dialect, settings.model)
    metrics = Metrics(model, profile.block_size)
    vocab = Vocabulary()
    state = SimState(
        model=model,
        profile=profile,
        # A request must fit the KV cache on its own, or it could never be scheduled.
        max_model_len=min(profile.max_model_len, profile.kv_capacity_tokens),
        engine=Engine(profile, metrics),
        metrics=metrics,
        faults=FaultInjector(settings.faults, seed=profile.seed),
        vocab=vocab,
        lengths=load_length_table(settings.length_table, vocab) if settings.length_table else None,
        dialect=settings.dialect,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.engine.start()
        try:
            yield
        finally:
            await state.engine.stop()

    app = FastAPI(title="Triage simulator", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.sim = state
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    server = SERVER[settings.dialect]
    if server is not None and server != "uvicorn":
        app.add_middleware(ServerHeader, server=server)

    async def chat(request: Request) -> object:
        return await _generate(state, request, Endpoint.CHAT)

    async def completions(request: Request) -> object:
        return await _generate(state, request, Endpoint.COMPLETIONS)

    app.add_route("/v1/chat/completions", chat, methods=["POST"])  # type: ignore[arg-type]
    app.add_route("/v1/completions", completions, methods=["POST"])  # type: ignore[arg-type]

    if state.dialect is Dialect.LLAMACPP:

        @app.post("/apply-template")
        async def template(request: Request) -> Response:
            """llama.cpp's: a chat request's prompt as the model reads it (``prompts.apply_template``)."""
            try:
                body = orjson.loads(await request.body())
            except orjson.JSONDecodeError:
                raise ApiError(400, "The request body is not valid JSON.") from None
            messages = body.get("messages") if isinstance(body, dict) else None
            rendered = apply_template(chat_prompt(messages, False, state.vocab))
            return Response(orjson.dumps({"prompt": rendered}), media_type="application/json")

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = embed(await request.body(), state.model, state.dialect is Dialect.OLLAMA)
        return Response(body, media_type="application/json")

    @app.get("/v1/models")
    async def models() -> Response:
        if state.faults.faults.down:
            return Response(status_code=503)
        card = model_card(state.dialect, state.model, state.max_model_len)
        return Response(orjson.dumps({"object": "list", "data": [card]}), media_type="application/json")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if state.faults.faults.down else 200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        text = render_metrics(state.dialect, state.metrics, state.engine.gauges())
        if text is None:
            return Response("404 page not found\n", status_code=404, media_type="text/plain")
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/sim/stats")
    async def stats() -> dict[str, object]:
        return state.metrics.stats(state.engine.gauges())

    @app.post("/sim/reset")
    async def reset() -> dict[str, object]:
        state.engine.reset_metrics()
        return state.metrics.stats(state.engine.gauges())

    @app.get("/sim/faults")
    async def get_faults() -> dict[str, object]:
        return state.faults.faults.to_json()

    @app.post("/sim/faults")
    async def set_faults(request: Request) -> dict[str, object]:
        try:
            faults = FaultSettings.from_json(orjson.loads(await request.body() or b"{}"))
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ApiError(400, f"Invalid faults: {exc}") from None
        state.faults.faults = faults
        return faults.to_json()

    return app


async def _generate(state: SimState, request: Request, endpoint: Endpoint) -> object:
    refusal = state.faults.refusal()
    if refusal is not None:
        raise ApiError(
            refusal.status_code,
            refusal.message,
            type="rate_limit_error" if refusal.status_code == 429 else "server_error",
            code=refusal.status_code,
            retry_after=refusal.retry_after,
        )
    req = parse_request(
        endpoint, await request.body(), state.model, state.max_model_len, state.vocab,
        implicit_latest=state.dialect is Dialect.OLLAMA, llamacpp=state.dialect is Dialect.LLAMACPP,
    )

    engine = state.engine
    if state.profile.request_overhead_s > 0:
        await asyncio.sleep(state.profile.request_overhead_s)  # the API side, before the engine
    start, plan = _reply(state, req)
    # n choices are n sequences of the same plan (the simulator samples nothing: they read alike)
    seqs = [
        Sequence(
            req.prompt_tokens,
            plan.tokens,
            plan.finish_reason,
            streamed=req.stream,
            arrival=engine.now(),
            drop_after=state.faults.faults.drop_after_tokens,
            blocks=_blocks(state, req, start),
        )
        for _ in range(req.n)
    ]
    for seq in seqs:
        engine.submit(seq)
    seq = seqs[0]

    vllm, llamacpp = state.dialect is Dialect.VLLM, state.dialect is Dialect.LLAMACPP
    request_id = new_request_id(Endpoint.CHAT if llamacpp else endpoint)  # (llama.cpp's ids are all chatcmpl-)
    created = int(time.time())
    ids = None
    if vllm and req.token_ids:  # the ids told are remembered, so a continuation from them reads as text would
        ids = prompt_ids(req.prompt, len(state.vocab))
        REGISTRY.remember(ids, req.prompt, endpoint)
    if req.stream:
        wire = WIRES[state.dialect]
        spec = StreamSpec(endpoint, request_id, created, req.model, req.include_usage, state.vocab, start, wire)
        writer: StreamFrames
        if llamacpp:
            writer = LlamacppFrameWriter(spec, seq, req.n_probs, req.post_sampling_probs, req.timings_per_token)
        elif vllm:
            writer = VllmFrameWriter(spec, req.prompt_tokens, req.running_usage, ids)
        else:
            writer = FrameWriter(spec)
        return TokenStream(engine, seq, writer, *wire.usage(endpoint is Endpoint.CHAT, req.include_usage))

    await wait_finished(request.receive, engine, *seqs)
    if any(s.dropped for s in seqs):
        return DroppedResponse()
    if any(s.finish_reason is FinishReason.ABORT for s in seqs):
        return Response(status_code=499)  # the client is gone; nothing will be delivered
    made = sum(s.generated for s in seqs)
    ended = [s for s in seqs if s.finish_reason is not None]
    choices = [(state.vocab.text(start, s.generated), s.finish_reason) for s in ended]
    if vllm:
        told = [output_ids(start, s.generated, len(state.vocab)) for s in ended]
        answers = [(text, reason, i) for (text, reason), i in zip(choices, told, strict=True)]
        body = vllm_chunks.full_response(endpoint, request_id, created, req.model, answers, seq.prompt_tokens, made, ids)
    elif llamacpp:
        body = llamacpp_chunks.full_response(endpoint, request_id, created, req.model, choices, seq, seq.prompt_tokens, made)
    else:
        body = full_response(endpoint, request_id, created, req.model, choices, seq.prompt_tokens, made)
    return Response(body, media_type="application/json")


def _reply(state: SimState, req: GenerationRequest) -> tuple[int, OutputPlan]:
    """Where this reply starts in the vocabulary cycle, and how long it is.

    Both are keyed on the original prompt: a continuation goes on from the words it
    carries, and gets what is left of the original reply's natural length, so a reply
    cut and continued ends where the uncut one would.
    """
    profile, prompt = state.profile, req.prompt
    key = prompt_hash(prompt.original, profile.seed)
    natural = state.lengths.natural(req.endpoint, prompt) if state.lengths else None
    if natural is None:
        limit = state.max_model_len - prompt.original_tokens
        natural = natural_length(key, profile.median_output_tokens, profile.output_sigma, limit)
    room = state.max_model_len - req.prompt_tokens
    plan = plan_output(max(0, natural - prompt.run), req.max_tokens, req.min_tokens, req.ignore_eos, room)
    if prompt.run:
        return (prompt.run_start + prompt.run) % len(state.vocab), plan
    return state.vocab.start_for(key), plan


def _blocks(state: SimState, req: GenerationRequest, start: int) -> BlockHashes | None:
    """The block hashes of the request's tokens, for the prefix cache (None when it is off)."""
    if not state.profile.prefix_caching:
        return None
    prompt = req.prompt
    # After the original prompt come the model's words: the run the prompt carries, then this reply.
    words_from = prompt.run_start if prompt.run else start
    return BlockHashes(
        prompt.text, req.prompt_tokens - prompt.run, state.vocab.words, words_from, state.profile.block_size
    )


async def _api_error(request: Request, exc: ApiError) -> Response:
    headers = {"retry-after": f"{exc.retry_after:g}"} if exc.retry_after is not None else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)
