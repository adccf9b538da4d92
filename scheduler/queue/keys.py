"""Every Redis key Triage uses, in one place.

All keys of one pool share the hash tag ``{pool}``, so every script touches a single
Redis Cluster slot. A *pool* is a set of models whose backends overlap: backends
are shared inside a pool and never across pools (see ``backends.pools_of``).

=====================================  ======  ================================================  =========
key                                    type    meaning                                           owner
=====================================  ======  ================================================  =========
``P:queue``                            zset    ticket id -> score (virtual deadline, seconds)    scripts
``P:tickets``                          hash    ticket id -> packed ticket (see scripts.py)       scripts
``P:cap``                              hash    backend -> current concurrency limit              replicas
``P:busy``                             hash    backend -> leases held now                        scripts
``P:work``                             hash    backend -> predicted tokens of its leases         scripts
``P:weight``                           hash    backend -> routing weight                         replicas
``P:speed``                            hash    backend -> measured decode tokens/s               replicas
``P:lcap``                             hash    backend -> slots long/batch work may hold         replicas
``P:lbusy``                            hash    backend -> slots long/batch work holds now        scripts
``P:borrow``                           hash    backend -> reserved slots long work may borrow    replicas
``P:borrowed``                         hash    backend -> reserved slots borrowed now            scripts
``P:quiet``                            string  "1" while no short work is expected (PX TTL)      replicas
``P:down``                             set     backends taken out by health checks               replicas
``P:serves:<model>``                   set     backends that serve this model                    replicas
``P:leases``                           zset    lease id -> expiry (server time, seconds)         scripts
``P:lease``                            hash    lease id -> "backend|owner|..." (see scripts.py)  scripts
``P:owners``                           zset    replica id -> heartbeat expiry                    scripts
``P:owned:<owner>``                    set     lease ids granted to one replica                  scripts
``P:inbox:<owner>``                    list    grants and evictions pushed to one replica        scripts
``P:tenant:vfinish``                   hash    tenant -> virtual finish time (fair queuing)      scripts
``P:tenant:queued``                    hash    tenant -> tickets queued now                      scripts
``P:stats``                            hash    counters: granted, ...                            scripts
``P:epoch``                            string  set once per Redis lifetime (detects data loss)   scripts
``triage:predictor:<name>``            hash    shared weights of the online length predictor     predictor
=====================================  ======  ================================================  =========

``P`` stands for ``<prefix>:{<pool>}``. Nothing here but ``P:quiet`` expires by TTL: leases and
owners expire by score, swept inside the dispatch script, so the sweep is atomic
with the accounting it fixes.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "triage"


@dataclass(frozen=True, slots=True)
class PoolKeys:
    """The keys of one pool. ``base`` is passed to Lua, which builds the rest the same way."""

    prefix: str
    pool: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.pool}}}"

    @property
    def queue(self) -> str:
        return f"{self.base}:queue"

    @property
    def tickets(self) -> str:
        return f"{self.base}:tickets"

    @property
    def cap(self) -> str:
        return f"{self.base}:cap"

    @property
    def busy(self) -> str:
        return f"{self.base}:busy"

    @property
    def borrowed(self) -> str:
        return f"{self.base}:borrowed"

    @property
    def lbusy(self) -> str:
        return f"{self.base}:lbusy"

    @property
    def down(self) -> str:
        return f"{self.base}:down"

    def serves(self, model: str) -> str:
        return f"{self.base}:serves:{model}"

    @property
    def leases(self) -> str:
        return f"{self.base}:leases"

    @property
    def lease(self) -> str:
        return f"{self.base}:lease"

    @property
    def owners(self) -> str:
        return f"{self.base}:owners"

    def inbox(self, owner: str) -> str:
        return f"{self.base}:inbox:{owner}"

    def owned(self, owner: str) -> str:
        return f"{self.base}:owned:{owner}"

    @property
    def tenant_vfinish(self) -> str:
        return f"{self.base}:tenant:vfinish"

    @property
    def tenant_queued(self) -> str:
        return f"{self.base}:tenant:queued"

    @property
    def stats(self) -> str:
        return f"{self.base}:stats"

    @property
    def epoch(self) -> str:
        return f"{self.base}:epoch"


def predictor_key(name: str = "default", prefix: str = DEFAULT_PREFIX) -> str:
    """Hash of the online length predictor's shared state (weights and counts)."""
    return f"{prefix}:predictor:{name}"
