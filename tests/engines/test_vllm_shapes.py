"""The simulator's ``vllm`` dialect is checked against what vLLM answered
(``tests/simulator/data/vllm-0.32-shapes.json``); here that record is checked against the
engine itself, so a vLLM that answers otherwise fails here before a simulated benchmark
reads the wrong fields. The bodies and the shapes: ``tests/simulator/vllm_shapes.py``."""

from __future__ import annotations

import httpx

from loadtests.engines.vllm import VllmServer
from tests.simulator.vllm_shapes import CASES, recorded, response_shape


async def test_vllm_answers_in_the_shapes_the_simulator_copies(vllm: VllmServer) -> None:
    want = recorded()
    got = {}
    async with httpx.AsyncClient(base_url=vllm.url, timeout=120) as http:
        for name, (path, body) in CASES.items():
            r = await http.post(path, json={**body, "model": vllm.model})
            assert r.status_code == 200, r.text
            got[name] = response_shape(r.content)
    assert got == want
