"""The OpenAI-compatible surface, through the official SDK and raw HTTP."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from simulator.lengths import natural_length, prompt_hash
from simulator.profiles import FAST
from tests.simulator.conftest import MODEL

CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me about queues."}]


def chat_prompt_longer_than(n: int) -> str:
    """A user message whose natural output length (fast profile) is above ``n``."""
    for i in range(10_000):
        content = f"question {i}"
        if (
            natural_length(
                prompt_hash(f"user\n{content}", FAST.seed),
                FAST.median_output_tokens,
                FAST.output_sigma,
                10**6,
            )
            > n
        ):
            return content
    raise AssertionError("no such prompt")


async def test_models_and_health(http: httpx.AsyncClient) -> None:
    assert (await http.get("/health")).status_code == 200
    models = (await http.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [MODEL]


async def test_models_through_the_sdk(openai_client: AsyncOpenAI) -> None:
    page = await openai_client.models.list()
    assert [m.id for m in page.data] == [MODEL]


async def test_chat_non_stream_shape_and_usage(openai_client: AsyncOpenAI) -> None:
    r = await openai_client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=7)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.usage is not None
    assert r.usage.prompt_tokens == len("Tell me about queues.") // 4 + 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert 1 <= r.usage.completion_tokens <= 7
    assert r.choices[0].finish_reason in ("stop", "length")
    assert len(r.choices[0].message.content or "") > 0


async def test_chat_stream_chunks_one_token_each_then_finish_and_usage(openai_client: AsyncOpenAI) -> None:
    stream = await openai_client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    contents = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert len(contents) == 5 and all(contents)
    finish = chunks[-2]  # vLLM's: the finish rides on the last token's chunk
    assert finish.choices[0].finish_reason == "length"
    assert [c.choices[0].finish_reason for c in chunks[1:-2]] == [None] * 4
    usage = chunks[-1]
    assert usage.choices == []
    assert usage.usage is not None and usage.usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


async def test_chat_stream_without_include_usage_has_no_usage_frame(openai_client: AsyncOpenAI) -> None:
    stream = await openai_client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=3,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert len(chunks) == 1 + 3  # the role, then the tokens: the finish on the last
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage is None


async def test_completions_non_stream_and_stream(openai_client: AsyncOpenAI) -> None:
    r = await openai_client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, extra_body={"ignore_eos": True}
    )
    assert r.object == "text_completion"
    assert r.usage is not None and r.usage.completion_tokens == 4 and r.usage.prompt_tokens == 4
    assert r.choices[0].finish_reason == "length"

    stream = await openai_client.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    assert all(c.object == "text_completion" for c in chunks)
    texts = [c.choices[0].text for c in chunks[:4]]
    assert all(texts)
    assert "".join(texts) == r.choices[0].text  # same prompt, same text, streamed or not
    assert [c.choices[0].finish_reason for c in chunks[:4]] == [None, None, None, "length"]
    assert chunks[4].choices == [] and chunks[4].usage is not None and chunks[4].usage.total_tokens == 8


async def test_raw_stream_ends_with_done(http: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 2, "stream": True, "ignore_eos": True}
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([part async for part in r.aiter_bytes()])
    frames = raw.split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    assert all(f.startswith(b"data: ") for f in frames[:-1])
    orjson.loads(frames[0][6:])


async def test_same_prompt_same_length_and_text(openai_client: AsyncOpenAI) -> None:
    a = await openai_client.chat.completions.create(model=MODEL, messages=CHAT)
    b = await openai_client.chat.completions.create(model=MODEL, messages=CHAT)
    assert a.usage is not None and b.usage is not None
    assert a.usage.completion_tokens == b.usage.completion_tokens
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason == "stop"


async def test_max_tokens_caps_a_longer_natural_output(openai_client: AsyncOpenAI) -> None:
    content = chat_prompt_longer_than(10)
    r = await openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], max_completion_tokens=10
    )
    assert r.usage is not None and r.usage.completion_tokens == 10
    assert r.choices[0].finish_reason == "length"


async def test_min_tokens_lifts_a_shorter_natural_output(openai_client: AsyncOpenAI) -> None:
    r = await openai_client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=400,
        extra_body={"min_tokens": 300},
    )
    assert r.usage is not None and r.usage.completion_tokens == 300
    assert r.choices[0].finish_reason == "stop"


async def test_unknown_model_is_404_in_openai_shape(openai_client: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await openai_client.chat.completions.create(model="nope", messages=CHAT)
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (orjson.dumps({"messages": CHAT}), "model"),
        (orjson.dumps({"model": MODEL}), "messages"),
        (orjson.dumps({"model": MODEL, "messages": CHAT, "max_tokens": 0}), "max_tokens"),
        (orjson.dumps({"model": MODEL, "messages": CHAT, "max_tokens": 10**9}), "max_tokens"),
        (orjson.dumps({"model": MODEL, "messages": CHAT, "stream": "yes"}), "stream"),
    ],
)
async def test_bad_requests_are_400_in_openai_shape(
    http: httpx.AsyncClient, body: bytes, param: str | None
) -> None:
    r = await http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param


async def test_completions_need_a_prompt(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json={"model": MODEL})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = await http.post("/v1/completions", json={"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 3
