"""The predictor's shared sums: learned locally, pushed as deltas, pulled merged —
between replicas through a real Redis-protocol server."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler.predictor.store import SharedState, field_of, key_of

BINS = 4
W1 = key_of("w:1")  # the weight of slot 1, as the state keeps it; "w:1" in Redis


@pytest.fixture
def key(prefix: str) -> str:
    return f"{prefix}:predictor"


async def test_push_sends_the_deltas_and_pull_merges_every_replicas(redis: Redis, key: str) -> None:
    a, b = SharedState(BINS), SharedState(BINS)
    a.add(W1, 1.0)
    a.add(W1, 0.5)
    b.add(W1, 2.0)
    b.add("n", 1.0)
    assert a.pending == {W1: 1.5} and a.get(W1) == 1.5
    await a.push(redis, key)
    assert a.pending == {}
    await b.push(redis, key)
    assert float(await redis.hget(key, "w:1")) == 3.5
    assert int(await redis.hget(key, "rev")) == 2
    await a.pull(redis, key)
    await b.pull(redis, key)
    assert a.get(W1) == b.get(W1) == 3.5 and a.get("n") == b.get("n") == 1.0
    assert a.get("rev") == 0.0  # the revision is not a learned value


async def test_pull_keeps_what_is_not_pushed_yet(redis: Redis, key: str) -> None:
    a, b = SharedState(BINS), SharedState(BINS)
    a.add(W1, 1.0)
    await a.push(redis, key)
    b.add(W1, 10.0)  # learned, not pushed
    await b.pull(redis, key)
    assert b.get(W1) == 11.0 and b.pending == {W1: 10.0}


async def test_bins_mirror_their_fields(redis: Redis, key: str) -> None:
    a, b = SharedState(BINS), SharedState(BINS)
    a.add_bin(2, 1.0)
    assert a.hist == [0.0, 0.0, 1.0, 0.0] and a.get("h:2") == 1.0
    await a.push(redis, key)
    await b.pull(redis, key)
    assert b.hist == [0.0, 0.0, 1.0, 0.0]


async def test_a_pull_fetches_only_when_another_replica_pushed(redis: Redis, key: str) -> None:
    a, b = SharedState(BINS), SharedState(BINS)
    await a.pull(redis, key)  # as a replica starts
    a.add(W1, 1.0)
    await a.push(redis, key)  # nobody else pushed since: the hash is what a holds
    await redis.hset(key, "w:2", 5.0)  # a write outside the protocol, without a new revision
    await a.pull(redis, key)
    assert a.get(key_of("w:2")) == 0.0  # the revision is unchanged: nothing fetched
    b.add(key_of("w:3"), 1.0)
    await b.push(redis, key)  # a new revision
    await a.pull(redis, key)
    assert (a.get(key_of("w:2")), a.get(key_of("w:3"))) == (5.0, 1.0)


async def test_the_warm_start_is_local_and_never_pushed(redis: Redis, key: str) -> None:
    a, b = SharedState(BINS), SharedState(BINS)
    a.load_base({"w:1": 2.0, "h:1": 3.0, "h:99": 1.0})  # a bin beyond the histogram is kept as a field only
    assert a.get(W1) == 2.0 and a.hist[1] == 3.0 and a.pending == {}
    a.add(W1, 1.0)
    await a.push(redis, key)
    assert float(await redis.hget(key, "w:1")) == 1.0
    b.add(W1, 4.0)
    await b.push(redis, key)
    await a.pull(redis, key)
    assert a.get(W1) == 2.0 + 1.0 + 4.0  # base + the fleet's sums
    assert a.snapshot()["w:1"] == 7.0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_failed_push_keeps_its_deltas_pending(redis: Redis, key: str) -> None:
    dead = Redis.from_url(f"redis://127.0.0.1:{closed_port()}", socket_connect_timeout=1)
    a = SharedState(BINS)
    a.add(W1, 1.0)
    try:
        with pytest.raises(RedisError):
            await a.push(dead, key)
    finally:
        await dead.aclose()
    assert a.pending == {W1: 1.0}
    await a.push(redis, key)  # sent once Redis answers
    assert float(await redis.hget(key, "w:1")) == 1.0 and a.pending == {}


class _Watched(SharedState):
    """Records the thread its merge ran in, and lets the test learn while it runs."""

    def __init__(self, during: object) -> None:
        super().__init__(BINS)
        self.threads: list[int] = []
        self.during = during

    def merged(self, raw: dict[object, object]) -> dict[str, float]:
        self.threads.append(threading.get_ident())
        assert callable(self.during)
        self.during()
        return super().merged(raw)


async def test_the_merge_of_a_pull_runs_off_the_loop_and_keeps_what_is_learned_meanwhile(
    redis: Redis, key: str
) -> None:
    """A pull's merge of the whole hash runs in a thread (the event loop serves requests
    meanwhile); learning that lands while it runs is pending, and is in the values after."""
    a = SharedState(BINS)
    a.add(W1, 1.0)
    await a.push(redis, key)
    loop = asyncio.get_running_loop()
    learned = threading.Event()

    def learn_on_the_loop() -> None:  # as a request finishing on the loop would, mid-merge
        loop.call_soon_threadsafe(lambda: (b.add(W1, 10.0), learned.set()))
        assert learned.wait(10), "the loop did not run while the merge ran"

    b = _Watched(learn_on_the_loop)
    await b.pull(redis, key)
    assert b.threads and b.threads[0] != threading.get_ident()
    assert b.get(W1) == 11.0 and b.pending == {W1: 10.0}


@pytest.mark.parametrize("field", ["w:0", "w:262143", "g:0", "g:17", "h:3", "n", "rev", "s:m|t|0a1", "w:x", "g:", "w:-1"])
def test_a_field_is_kept_under_a_key_and_travels_back_as_itself(field: str) -> None:
    """Feature sums are kept under ints (weights under the slot, AdaGrad sums under ~slot);
    every field, those included, travels back to Redis under its own name."""
    local = key_of(field)
    assert field_of(local) == field
    assert isinstance(local, int) == (field[:2] in ("w:", "g:") and field[2:].isdigit())
    assert key_of("w:5") != key_of("g:5")  # a weight and its sum never share a key
