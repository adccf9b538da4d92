"""The backend registry: what probe rounds and real requests make of each backend's
health, models, limit and engine, and what it publishes into the pool's Redis keys
(a real Redis-protocol server; the probe answers as each test says)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from scheduler.backends.backend import BackendState
from scheduler.backends.breaker import Health
from scheduler.policy.limits import LimitParams
from scheduler.queue import readback, records
from scheduler.types import CallResult, ResumeCost
from tests.scheduler.stack import (
    MODEL,
    POOL,
    ScriptedProbe,
    Stack,
    ask,
    backend,
    make_stack,  # noqa: F401 - the `make` fixture
    request,
)
from tests.support import eventually


async def published(s: Stack, name: str) -> records.BackendSlots:
    """The backend as the pool's Redis keys hold it (what the dispatch script reads)."""
    return (await readback.backend_states(s.redis, s.keys))[name]


def local(s: Stack, name: str) -> BackendState:
    return s.registry.backends[name]


async def test_a_probe_round_publishes_each_backend_with_its_limit_and_models(make) -> None:
    s = await make(backend("a", max_concurrency=4), backend("b", max_concurrency=2, weight=2.0))
    a, b = await published(s, "a"), await published(s, "b")
    assert (a.limit, a.down, a.models) == (4, False, (MODEL,))
    assert (b.limit, b.weight) == (2, 2.0)
    assert s.registry.models() == [MODEL] and s.registry.pool_of(MODEL) == POOL
    assert s.registry.serves(MODEL) and s.registry.any_healthy() and s.registry.down() == []
    assert s.registry.ready_in(MODEL) == 0.0 and s.registry.down_for(MODEL) is None


async def test_models_are_discovered_and_a_model_no_longer_listed_stops_being_served(make) -> None:
    probe = ScriptedProbe(listing={"a": (MODEL, "other")})
    s = await make(backend("a", models=None), probe=probe)
    assert s.registry.models() == [MODEL, "other"]
    assert [c["id"] for c in s.registry.cards()] == [MODEL, "other"]
    assert (await published(s, "a")).models == (MODEL, "other")
    probe.listing["a"] = (MODEL,)
    await s.registry.probe_all()
    assert s.registry.pool_of("other") is None
    assert (await published(s, "a")).models == (MODEL,)  # no grant for it any more


async def test_a_failing_backend_goes_down_then_comes_back_through_a_trickle(make) -> None:
    s = await make(backend("a", max_concurrency=4), fail_threshold=2, recover_successes=2)
    unserved = s.registry.unserved(MODEL)
    s.probe.down.add("a")
    await s.registry.probe_all()
    assert local(s, "a").health is Health.UP and not unserved.done()  # one failure is not enough
    await s.registry.probe_all()
    assert local(s, "a").health is Health.DOWN and s.registry.down() == ["a"]
    assert (await published(s, "a")).down
    assert unserved.done()  # waiters for the model are woken to give up
    assert s.registry.down_for(MODEL) is not None and s.registry.ready_in(MODEL) is None
    assert not s.registry.alternatives(MODEL, "x")
    s.probe.down.clear()
    await s.registry.probe_all()
    assert local(s, "a").health is Health.PROBING
    a = await published(s, "a")
    assert (a.down, a.limit) == (False, 1)  # a trickle of one slot
    await s.registry.probe_all()
    await s.registry.probe_all()
    assert local(s, "a").health is Health.UP
    assert (await published(s, "a")).limit == 4


async def test_failed_requests_open_the_breaker_and_overloads_do_not(make) -> None:
    s = await make(backend("a"), backend("b"), fail_threshold=1)
    assert s.registry.alternatives(MODEL, "a")
    for _ in range(3):
        s.registry.report("a", ok=False, overloaded=True)  # 429/503: busy, not broken
    assert local(s, "a").healthy and local(s, "a").errors_total == 0
    s.registry.report("a", ok=False)
    assert not local(s, "a").healthy and local(s, "a").errors_total == 1
    assert not s.registry.alternatives(MODEL, "b")

    async def down_in_redis() -> bool:
        return (await published(s, "a")).down

    await eventually(down_in_redis)  # a change of health is published at once
    s.registry.report("gone", ok=False)  # an unknown backend (removed by a reload): ignored


async def test_a_limit_that_moves_is_published_and_logged_with_its_reason(make, caplog) -> None:
    s = await make(backend("a", max_concurrency=10, limit=LimitParams(initial=10, ceiling=10)))
    s.registry.report("a", ok=False, overloaded=True)  # a 429: the next round cuts by 0.7
    with caplog.at_level(logging.INFO, logger="triage.backends"):
        await s.registry.probe_all()
        assert (await published(s, "a")).limit == 7
        assert "backend a limit 10 -> 7: backend answered 429/503" in caplog.text
        caplog.clear()
        await s.registry.probe_all()  # nothing new: the limit stays, and nothing is logged
    assert (await published(s, "a")).limit == 7 and "limit" not in caplog.text


async def test_measured_speed_is_published_per_slot(make) -> None:
    s = await make(backend("a", max_concurrency=3))
    s.registry.report("a", ok=True, ttft_s=0.2, tpot_s=0.05)  # 20 tokens/s per sequence
    assert local(s, "a").speed == pytest.approx(20.0)
    s.registry.report("a", ok=True, tpot_s=0.1)  # an EWMA: 0.9 x 20 + 0.1 x 10
    assert local(s, "a").speed == pytest.approx(19.0)
    await s.registry.probe_all()
    assert (await published(s, "a")).speed == pytest.approx(19.0 * 3)
    view = s.registry.admin_view()[0]
    assert view["ttft_p50_s"] == 0.2 and view["tpot_p50_s"] == 0.1


async def test_a_cool_down_is_published_as_down_until_it_ends(make) -> None:
    s = await make(backend("a"))
    await s.registry.cool_down("a", 60.0)
    assert local(s, "a").cooling and (await published(s, "a")).down
    ready = s.registry.ready_in(MODEL)
    assert ready is not None and 30 < ready <= 60
    await s.registry.cool_down("a", 0.1)  # a shorter one does not cut it short
    ready = s.registry.ready_in(MODEL)
    assert ready is not None and ready > 30
    assert local(s, "a").healthy and s.registry.down_for(MODEL) is None  # cooling, not broken


async def test_the_end_of_a_cool_down_is_published(make) -> None:
    s = await make(backend("a"))
    await s.registry.cool_down("a", 0.1)
    assert (await published(s, "a")).down

    async def up_again() -> bool:
        return not (await published(s, "a")).down

    await eventually(up_again)
    assert not local(s, "a").cooling and s.registry.ready_in(MODEL) == 0.0


async def test_held_leases_are_read_back_each_round(make) -> None:
    s = await make(backend("a", max_concurrency=2))
    job = await s.scheduler.admit(ask(), request())
    await (await job.start())
    await s.registry.probe_all()
    assert local(s, "a").in_flight == 1 and s.registry.admin_view()[0]["in_flight"] == 1
    job.finish(CallResult(True, tokens=3), None)
    await eventually(lambda: s.busy_is("a", 0))
    await s.registry.probe_all()
    assert local(s, "a").in_flight == 0


@pytest.mark.parametrize(
    ("answers", "engine", "source"),
    [
        ({"metrics_text": {"a": "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"}},
         "vllm", "metrics"),
        ({"owned_by": {"a": "sglang"}}, "sglang", "owned_by"),
        ({"server": "llama.cpp"}, "llamacpp", "server header"),
        ({}, "unknown", "default"),
    ],
)
async def test_the_engine_is_detected_from_what_it_answers(make, answers: dict, engine: str, source: str) -> None:
    s = await make(backend("a"), probe=ScriptedProbe(**answers))
    view = s.registry.admin_view()[0]
    assert (view["engine_profile"], view["engine_source"]) == (engine, source)
    if engine == "vllm":
        assert view["engine"]["running"] == 3.0  # type: ignore[index]


VLLM_COUNTERS = """vllm:cache_config_info{{block_size="128",enable_prefix_caching="True"}} 1.0
vllm:num_requests_running{{model_name="tiny"}} 1.0
vllm:prompt_tokens_total{{model_name="tiny"}} {prompt}
vllm:prompt_tokens_cached_total{{model_name="tiny"}} {cached}
vllm:prefix_cache_queries_total{{model_name="tiny"}} {prompt}
vllm:prefix_cache_hits_total{{model_name="tiny"}} {cached}
vllm:request_prefill_time_seconds_sum{{model_name="tiny"}} {prefill}
vllm:inter_token_latency_seconds_sum{{model_name="tiny"}} {itl}
vllm:inter_token_latency_seconds_count{{model_name="tiny"}} {tokens}
"""


async def test_what_a_resume_costs_is_read_from_the_engines_counters_and_published(make) -> None:
    probe = ScriptedProbe(metrics_text={"a": VLLM_COUNTERS.format(prompt=0, cached=0, prefill=0, itl=0, tokens=0)})
    s = await make(backend("a", resume=True), probe=probe)
    assert records.parse_cost(await s.redis.hget(s.keys.costs, "a")) == ResumeCost(block=128)  # no interval yet
    # 1,000 prompt tokens, 250 of them cached, computed in 0.375 s; 500 output tokens in 5 s
    probe.metrics_text["a"] = VLLM_COUNTERS.format(prompt=1000, cached=250, prefill=0.375, itl=5.0, tokens=500)
    await s.registry.probe_all()
    cost = records.parse_cost(await s.redis.hget(s.keys.costs, "a"))
    assert cost == ResumeCost(tpot_s=pytest.approx(0.01), prefill_s=pytest.approx(0.0005), hit=0.25, block=128)
    assert s.registry.admin_view()[0]["resume_cost"] == dataclasses.asdict(cost)  # shown in /admin/backends


async def test_an_engine_without_metrics_is_not_asked_again(make) -> None:
    s = await make(backend("a"))
    assert s.probe.scraped == ["a"]
    await s.registry.probe_all()
    assert s.probe.scraped == ["a"] and s.probe.asked == ["a", "a"]


async def test_an_engine_profile_sets_the_starting_limit_only_when_none_was_configured(make) -> None:
    s = await make(
        backend("a", max_concurrency=16, concurrency_set=False), backend("b", max_concurrency=16),
        probe=ScriptedProbe(owned_by={"a": "ollama", "b": "ollama"}),
    )
    assert local(s, "a").limit == 4  # Ollama runs 4 at once unless told otherwise
    assert local(s, "b").limit == 16  # configured: kept
    assert (await published(s, "a")).limit == 4


@pytest.mark.parametrize(
    ("engine", "order", "expected"),
    [("vllm", "auto", 250), ("sglang", "auto", -250), ("sglang", "lower_first", 250), ("tgi", "auto", None)],
)
async def test_the_priority_sent_follows_the_engines_direction(make, engine: str, order: str, expected: int | None) -> None:
    s = await make(backend("a", engine=engine, priority_order=order))
    assert s.registry.priority_for("a", 250) == expected


async def test_a_reload_removes_adds_and_changes_backends(make) -> None:
    s = await make(backend("a"), backend("b"))
    s.registry.report("a", ok=False)
    changes = await s.registry.reconcile([backend("a", max_concurrency=3), backend("c")])
    assert sorted(changes) == ["added backend c", "changed backend a", "removed backend b"]
    gone = await published(s, "b")
    assert gone.down and gone.limit == 0  # running requests finish; no new grants
    assert s.registry.config_of("b").name == "b"  # still known to requests running on it
    assert "c" in s.probe.asked and not (await published(s, "c")).down  # probed at once
    assert local(s, "a").errors_total == 1 and (await published(s, "a")).limit == 3  # kept its history
    assert await s.registry.reconcile([backend("a", max_concurrency=3), backend("c")]) == []


async def test_a_reload_that_names_a_new_pool_serves_it(make) -> None:
    s = await make(backend("a"))
    await s.registry.reconcile([backend("a"), backend("z", pool="other", models=("big",))])
    assert s.registry.pool_of("big") == "other" and "other" in s.registry.reservations
    job = await s.scheduler.admit(ask(model="big"), request())
    grant = await asyncio.wait_for(await job.start(), 10)
    assert (grant.pool, grant.backend) == ("other", "z")


async def test_names_resolve_through_aliases_and_ollamas_latest(make) -> None:
    s = await make(backend("a", models=(MODEL, "llama3.2:latest")), aliases={"fast": MODEL})
    assert s.registry.resolve(MODEL) == MODEL
    assert s.registry.resolve("fast") == MODEL
    assert s.registry.resolve("llama3.2") == "llama3.2:latest"
    assert s.registry.resolve("nope") is None
