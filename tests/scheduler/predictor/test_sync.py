"""Keeping replicas' length predictors in step: pull at start, push at stop, both on a
timer — two predictors sharing one hash in a real Redis-protocol server."""

from __future__ import annotations

import socket
import uuid

from redis.asyncio import Redis

from scheduler.predictor.lexical import LengthPredictor, PredictorConfig
from scheduler.predictor.sync import PredictorSync
from scheduler.queue.keys import predictor_key
from scheduler.types import PredictInput
from tests.support import eventually

HOUR = 3600.0


def replica(prefix: str, name: str) -> LengthPredictor:
    return LengthPredictor(PredictorConfig(name=name, prefix=prefix))


def ask(prompt: str = "Write a poem about the sea.") -> PredictInput:
    return PredictInput(model="m", tenant="t", prompt=prompt, prompt_chars=len(prompt))


async def test_stop_pushes_and_start_pulls(redis: Redis, prefix: str) -> None:
    name = uuid.uuid4().hex[:8]
    first = replica(prefix, name)
    sync = PredictorSync(first, redis, HOUR)
    await sync.start()
    for n in range(5):
        first.observe(ask(), 100 + n)
    await sync.stop()  # what is left goes out
    restarted = replica(prefix, name)
    assert restarted.observations == 0
    again = PredictorSync(restarted, redis, HOUR)
    await again.start()  # a restarted gateway resumes where the fleet was
    try:
        assert restarted.observations == 5
        assert restarted.predict(ask()) == first.predict(ask())
    finally:
        await again.stop()


async def test_the_timer_shares_learning_between_running_replicas(redis: Redis, prefix: str) -> None:
    name = uuid.uuid4().hex[:8]
    a, b = replica(prefix, name), replica(prefix, name)
    syncs = [PredictorSync(a, redis, 0.05), PredictorSync(b, redis, 0.05)]
    for s in syncs:
        await s.start()
    try:
        a.observe(ask(), 300)
        b.observe(ask("Hi"), 5)
        await eventually(lambda: a.observations == b.observations == 2)
    finally:
        for s in syncs:
            await s.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unreachable_redis_keeps_learning_local(redis: Redis, prefix: str) -> None:
    dead = Redis.from_url(f"redis://127.0.0.1:{closed_port()}", socket_connect_timeout=1)
    name = uuid.uuid4().hex[:8]
    p = replica(prefix, name)
    sync = PredictorSync(p, dead, HOUR)
    try:
        await sync.start()  # logs, does not raise
        p.observe(ask(), 42)
        await sync.stop()
    finally:
        await dead.aclose()
    assert p.observations == 1
    await p.push(redis)  # nothing was lost: it goes out with the next push that succeeds
    assert float(await redis.hget(predictor_key(name, prefix), "n")) == 1.0
