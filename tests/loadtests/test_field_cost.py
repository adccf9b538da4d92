"""The field-cost probe asks llama.cpp for exactly what a pausable stream asks for."""

import orjson

from gateway.schemas import Endpoint, parse
from loadtests.engines import field_cost
from scheduler.backends import engines
from scheduler.types import ResumeMode


def test_the_pausable_variant_asks_what_the_gateway_adds_to_a_stream_it_may_pause() -> None:
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                        "stream_options": {"include_usage": True}})
    req = parse(raw, Endpoint.CHAT, 4096)
    sent = orjson.loads(req.upstream_body(None, counted=True, ids=engines.IDS_ASK[ResumeMode.LLAMACPP], timings=True))
    added = {k: v for k, v in sent.items() if k not in orjson.loads(raw)}
    assert added == field_cost.VARIANTS["pausable"]
    probe = field_cost.body("pausable", 3, 400)
    assert {k: probe[k] for k in added} == added
    assert field_cost.VARIANTS["plain"] == {} and set(field_cost.VARIANTS["ids"]) | set(field_cost.VARIANTS["timings"]) == set(added)


def test_every_request_is_greedy_and_exactly_as_long_as_asked() -> None:
    b = field_cost.body("plain", 0, 123)
    assert (b["max_tokens"], b["ignore_eos"], b["temperature"], b["stream"]) == (123, True, 0, True)
    assert field_cost.body("plain", 0, 1)["messages"] != field_cost.body("plain", 1, 1)["messages"]


def test_rounds_alternate_the_order_so_no_variant_always_runs_first() -> None:
    o = field_cost.orders(["a", "b", "c"], 3)
    assert o == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]


def test_each_variant_is_read_against_plain_of_the_same_round() -> None:
    rounds = [{"plain": {"wall_s": 2.0, "bytes_per_token": 10.0}, "ids": {"wall_s": 2.2, "bytes_per_token": 20.0}},
              {"plain": {"wall_s": 4.0, "bytes_per_token": 10.0}, "ids": {"wall_s": 3.6, "bytes_per_token": 20.0}},
              {"plain": {"wall_s": 1.0, "bytes_per_token": 10.0}, "ids": {"wall_s": 1.0, "bytes_per_token": 22.0}}]
    s = field_cost.summary(rounds)
    assert s["plain"]["median"] == s["plain"]["worst"] == 1.0
    assert (round(s["ids"]["median"], 6), round(s["ids"]["worst"], 6), round(s["ids"]["best"], 6)) == (1.0, 1.1, 0.9)
    assert s["ids"]["bytes_per_token"] == 20.0
