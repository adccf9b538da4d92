"""The ``vllm`` dialect answers in vLLM 0.32's own shapes: every chunk's fields in vLLM's order,
token ids where asked and ``null`` where not, the finish on the last token's chunk, running
usage where asked — compared with what vLLM itself answered (``vllm_shapes.py``)."""

from __future__ import annotations

import httpx
import pytest

from simulator.dialects import WIRES, Dialect
from simulator.encoding import StreamSpec
from simulator.protocol import Endpoint, FinishReason
from simulator.textgen import Vocabulary
from simulator.vllm_chunks import VllmFrameWriter
from tests.simulator.conftest import MODEL
from tests.simulator.shapes import response_shape
from tests.simulator.vllm_shapes import CASES, recorded


@pytest.mark.parametrize("name", sorted(CASES))
async def test_each_answer_has_the_shape_vllm_gave(http: httpx.AsyncClient, name: str) -> None:
    path, body = CASES[name]
    r = await http.post(path, json={**body, "model": MODEL})
    assert r.status_code == 200
    assert response_shape(r.content) == recorded()[name]


def test_a_finish_with_no_token_of_its_own_is_an_empty_chunk_with_the_finish() -> None:
    spec = StreamSpec(Endpoint.CHAT, "c", 1, "m", False, Vocabulary(), 0, WIRES[Dialect.VLLM])
    w = VllmFrameWriter(spec, 5, True, [1, 2])
    frame = w.end(3, 3, FinishReason.STOP)
    assert b'"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":[]}]' in frame
    assert b'"completion_tokens":3' in frame and frame.count(b"data: ") == 1
