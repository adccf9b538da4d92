"""The length predictor's learned state, and how replicas share it through Redis.

Every number of the state is a *sum*: weights, AdaGrad's squared-gradient sums,
per-template residual sums and counts, residual histogram bins, the number of
observations. Sums merge by adding, so replicas never overwrite each other:

* ``observe`` changes the local value and records the same change as a pending
  delta;
* ``push`` sends every pending delta with ``HINCRBYFLOAT`` in one pipeline (at least
  once: a push whose reply is lost is sent again, so a connection dying at that
  moment counts one batch twice, a bounded and rare bias);
* ``pull`` reads the merged hash with ``HGETALL`` and sets local = remote + pending.

Two replicas that learn at once therefore both see the sum of their updates, the
same thing one replica would have learned from both streams (up to the order of
the steps, which AdaGrad tolerates). The hash outlives every replica, so a
restarted gateway resumes where the fleet was.

Fields of the hash ``predictor_key(name, prefix)``:

=================  ====================================================
``w:<slot>``       weight of a hashed feature
``g:<slot>``       AdaGrad sum of squared gradients of that feature
``s:<template>``   sum of log-space residuals of a template
``c:<template>``   number of those residuals
``h:<bin>``        residual histogram bin (for the upper quantile)
``n``              observations learned, all replicas together
``rev``            incremented by every push; lets ``pull`` skip an unchanged hash
=================  ====================================================

Locally a feature's sums are kept under its slot, an int (its weight under ``slot``,
its AdaGrad sum under ``~slot``), every other sum under its field name: the learning
loop then never formats a field name nor hashes a new string, and names are written
only where they travel (``push``, ``snapshot``) and read where they arrive (``pull``,
``load_base``). ``key_of`` and ``field_of`` are the two directions.
"""

from __future__ import annotations

import asyncio
from typing import Any

Key = str | int  # how a field is kept locally (key_of)


def key_of(field: str) -> Key:
    """The local key of a field of the hash: ``w:<slot>`` -> slot, ``g:<slot>`` -> ~slot."""
    family, number = field[:2], field[2:]
    if family == "w:" and number.isdigit():
        return int(number)
    if family == "g:" and number.isdigit():
        return ~int(number)
    return field


def field_of(key: Key) -> str:
    """The field of the hash a local key travels as (``key_of``'s inverse)."""
    if isinstance(key, int):
        return f"w:{key}" if key >= 0 else f"g:{~key}"
    return key


class SharedState:
    """Sums learned locally and from the other replicas, plus what is not yet pushed."""

    def __init__(self, histogram_bins: int) -> None:
        self.base: dict[Key, float] = {}  # shipped warm start: local only, never pushed
        self.values: dict[Key, float] = {}  # key -> base + remote + pending
        self.pending: dict[Key, float] = {}  # key -> delta not yet pushed
        self.hist = [0.0] * histogram_bins  # mirror of the h:<bin> fields, kept as a list for speed
        self._rev_seen = -1  # rev of the hash our local values reflect
        self._lock = asyncio.Lock()

    # Hot path: plain dict arithmetic, no I/O.

    def get(self, field: Key) -> float:
        """A sum by its key (``key_of``: a name that is not a feature's is its own key)."""
        return self.values.get(field, 0.0)

    def add(self, field: Key, delta: float) -> None:
        """Add to a sum, by its key."""
        values = self.values
        values[field] = values.get(field, 0.0) + delta
        pending = self.pending
        pending[field] = pending.get(field, 0.0) + delta

    def add_bin(self, index: int, delta: float) -> None:
        self.hist[index] += delta
        self.add(f"h:{index}", delta)

    # Sharing.

    async def push(self, redis: Any, key: str) -> None:
        """Flush pending deltas with HINCRBYFLOAT; on failure they stay pending."""
        async with self._lock:
            if not self.pending:
                return
            batch, self.pending = self.pending, {}
            try:
                async with redis.pipeline(transaction=False) as pipe:
                    for local, delta in batch.items():
                        pipe.hincrbyfloat(key, field_of(local), delta)
                    pipe.hincrby(key, "rev", 1)
                    results = await pipe.execute()
            except BaseException:
                # Nothing is lost: put the batch back under whatever was learned since.
                for field, delta in batch.items():
                    self.pending[field] = self.pending.get(field, 0.0) + delta
                raise
            rev = int(results[-1])
            # If nobody else pushed since our last pull, the hash now equals our local
            # values (minus what was learned during the await, which is still pending),
            # so the next pull has nothing to fetch.
            if rev == self._rev_seen + 1:
                self._rev_seen = rev

    async def pull(self, redis: Any, key: str) -> None:
        """Replace local values by base + the merged hash + what is still pending. The merge
        of the whole hash (a hundred thousand fields take tens of milliseconds) runs in a
        thread, so requests on the event loop are not held up by it; what was learned
        meanwhile is pending, and is added on the loop after it."""
        async with self._lock:
            rev_raw = await redis.hget(key, "rev")
            rev = int(rev_raw) if rev_raw is not None else 0
            if rev == self._rev_seen:
                return
            raw = await redis.hgetall(key)
            values = await asyncio.to_thread(self.merged, raw)
            for field, delta in self.pending.items():
                values[field] = values.get(field, 0.0) + delta
            self.values = values
            self.hist = [values.get(f"h:{index}", 0.0) for index in range(len(self.hist))]
            self._rev_seen = int(raw.get(b"rev", raw.get("rev", rev)))

    def merged(self, raw: dict[Any, Any]) -> dict[Key, float]:
        """The shipped base plus the shared hash (``HGETALL``'s reply), as new values."""
        values = dict(self.base)
        for field_raw, value_raw in raw.items():
            field = field_raw.decode() if isinstance(field_raw, bytes) else field_raw
            if field != "rev":
                local = key_of(field)
                values[local] = values.get(local, 0.0) + float(value_raw)
        return values

    # Offline snapshots (the shipped warm start, benchmarks).

    def snapshot(self) -> dict[str, float]:
        """Every sum by its field name."""
        return {field_of(local): value for local, value in self.values.items()}

    def load_base(self, values: dict[str, float]) -> None:
        """Seed a warm start. Each replica adds it locally and none pushes it, so the
        shared hash holds only what was learned online and nothing is counted twice."""
        for field, value in values.items():
            local = key_of(field)
            self.base[local] = self.base.get(local, 0.0) + value
            self.values[local] = self.values.get(local, 0.0) + value
            if field.startswith("h:"):
                index = int(field[2:])
                if index < len(self.hist):
                    self.hist[index] += value
