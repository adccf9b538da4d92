"""The simulator's ``vllm`` dialect is checked against what vLLM answered
(``tests/simulator/data/vllm-0.32-shapes.json``); here that record is checked against the
engine itself, so a vLLM that answers otherwise fails here before a simulated benchmark
reads the wrong fields. The bodies and the shapes: ``tests/simulator/vllm_shapes.py``."""

from __future__ import annotations

from loadtests.engines.vllm import VllmServer
from tests.simulator.shapes import answered_shapes
from tests.simulator.vllm_shapes import CASES, recorded


async def test_vllm_answers_in_the_shapes_the_simulator_copies(vllm: VllmServer) -> None:
    assert await answered_shapes(vllm.url, vllm.model, CASES) == recorded()
