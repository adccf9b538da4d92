"""Every Redis key Triage uses, in one place.

All keys of one pool share the hash tag ``{pool}``, so every script touches a single
Redis Cluster slot. A *pool* is a set of models whose backends overlap: backends
are shared inside a pool and never across pools (pools are named in config: ``backends[].pool``).

=====================================  ======  ================================================  =========
key                                    type    meaning                                           owner
=====================================  ======  ================================================  =========
``P:queue``                            zset    ticket id -> score (virtual deadline, seconds)    scripts
``P:arrivals``                         zset    ticket id -> arrival + tier offset (kept only     scripts
                                               with ``fifo_backlog``: the queue in arrival order)
``P:tickets``                          hash    ticket id -> packed ticket (see records.py)       scripts
``P:backends``                         hash    backend -> packed state: limit, health, speed,    both
                                               long cap, models (replicas); leases held, work,
                                               grants (scripts) — see records.py
``P:reach``                            hash    replica id -> backends it can call (records.py)   both
``P:quiet``                            string  "1" while no short work is expected (PX TTL)      replicas
``P:lease``                            hash    lease id -> packed lease, its owner included      scripts
                                               (see records.py)
``P:owners``                           zset    replica id -> heartbeat expiry                    scripts
``P:progress``                         hash    lease id -> output and prompt tokens (may be      replicas
                                               paused; see records.py)
``P:costs``                            hash    backend -> what a resume costs it (records.py)    replicas
``P:budget``                           hash    backend -> re-read budget left, when (records.py) scripts
``P:inbox:<owner>``                    list    grants and evictions pushed to one replica        scripts
``P:tenant:vfinish``                   hash    tenant -> virtual finish time (fair queuing)      scripts
``P:tenant:queued``                    hash    tenant -> tickets queued now                      scripts
``P:stats``                            hash    counters: queued_open, paused                     scripts
``P:epoch``                            string  set once per Redis lifetime (detects data loss)   scripts
``triage:predictor:<name>``            hash    shared weights of the online length predictor     predictor
=====================================  ======  ================================================  =========

Keys outside any pool (``Q`` is ``<prefix>:{quota:<tenant>}``: a tenant's keys share one slot):

=====================================  ======  ================================================  =========
``Q:tenant:bucket``                    hash    r, t: requests, tokens held; ra, ta: when         quota.lua
``Q:tenant:running``                   zset    request id -> expiry (renewed while it runs)      quota.lua
``Q:key:<id>:bucket``                  hash    the same, for one key of the tenant               quota.lua
``Q:key:<id>:running``                 zset    the same, for one key of the tenant               quota.lua
``<prefix>:{keys}:hash``               hash    SHA-256 of a key -> packed key record (no key)    keys.lua
``<prefix>:{keys}:ids``                hash    key id -> SHA-256                                 keys.lua
``<prefix>:{keys}:version``            string  bumped on every change; replicas reload on it     keys.lua
``<prefix>:{stats}:replicas``          zset    replica id -> expiry of its published window      stats.lua
``<prefix>:{stats}:replica:<id>``      string  one replica's stats window (JSON, PX TTL)         stats.lua
=====================================  ======  ================================================  =========

``P`` stands for ``<prefix>:{<pool>}:q<LAYOUT>``: ``LAYOUT`` numbers this table's pool keys and
formats, and changes with them, so replicas of versions that would misread each other's
keys (during a rolling deploy across such a change) keep apart queues instead of one they
corrupt; each side then limits the backends on its own until the old replicas are gone.
Nothing here but ``P:quiet`` expires by TTL: owners
expire by score, and a lease lapses once its owner's last heartbeat is older than a lease
lives (a heartbeat renews every lease of its replica at once), swept by the heartbeat script,
so the sweep is atomic with the accounting it fixes. A replica whose heartbeat expired longer
ago than a lease lives is removed with its inbox and its ``reach`` entry; a backend no live
replica can call and no lease holds is removed from ``P:backends``. So the keys under a
prefix stay the size of the live state, however often replicas restart. (Outside
pools, quota buckets and running sets, and the published stats windows, expire by TTL
when idle.)
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "triage"
# The layout of a pool's keys and records (the table above): raised with any change a
# replica of the version before would misread. 2: leases without an expiry set or owned sets.
LAYOUT = 2


class _Key:
    """A key of a pool with a fixed name: ``P:<suffix>``."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    def __get__(self, keys: PoolKeys, owner: type | None = None) -> str:
        return f"{keys.base}:{self.suffix}"


@dataclass(frozen=True, slots=True)
class PoolKeys:
    """The keys of one pool, each named here once. ``base`` is passed to Lua, whose
    ``pool_keys`` (``lua/_common.lua``) builds the same names (a test holds them equal)."""

    prefix: str
    pool: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.pool}}}:q{LAYOUT}"

    queue = _Key("queue")
    arrivals = _Key("arrivals")
    tickets = _Key("tickets")
    backends = _Key("backends")
    reach = _Key("reach")
    quiet = _Key("quiet")
    lease = _Key("lease")
    owners = _Key("owners")
    progress = _Key("progress")
    costs = _Key("costs")
    budget = _Key("budget")
    tenant_vfinish = _Key("tenant:vfinish")
    tenant_queued = _Key("tenant:queued")
    stats = _Key("stats")
    epoch = _Key("epoch")

    def inbox(self, owner: str) -> str:
        return f"{self.base}:inbox:{owner}"

    def names(self, key: str) -> bool:
        """Is ``key`` one of this pool's keys?"""
        if not key.startswith(self.base + ":"):
            return False
        rest = key[len(self.base) + 1 :]
        head, _, name = rest.partition(":")
        return rest in FIXED.values() or (head in NAMED and bool(name))


# attribute -> suffix of every fixed-name key; and the keys named by one more name
FIXED = {name: key.suffix for name, key in vars(PoolKeys).items() if isinstance(key, _Key)}
NAMED = ("inbox",)


def predictor_key(name: str = "default", prefix: str = DEFAULT_PREFIX) -> str:
    """Hash of the online length predictor's shared state (weights and counts)."""
    return f"{prefix}:predictor:{name}"


@dataclass(frozen=True, slots=True)
class QuotaKeys:
    """The keys of one tenant's quotas, and of one key of that tenant (same slot)."""

    prefix: str
    tenant: str
    key_id: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{quota:{self.tenant}}}"

    @property
    def tenant_bucket(self) -> str:
        return f"{self.base}:tenant:bucket"

    @property
    def tenant_running(self) -> str:
        return f"{self.base}:tenant:running"

    @property
    def key_bucket(self) -> str:
        return f"{self.base}:key:{self.key_id}:bucket"

    @property
    def key_running(self) -> str:
        return f"{self.base}:key:{self.key_id}:running"

    def all(self) -> list[str]:
        """In the order ``quota.lua`` takes them: per scope (tenant, key), bucket then running."""
        return [self.tenant_bucket, self.tenant_running, self.key_bucket, self.key_running]


@dataclass(frozen=True, slots=True)
class ApiKeyKeys:
    """Keys created through the admin API (only their SHA-256 is stored)."""

    prefix: str = DEFAULT_PREFIX

    @property
    def by_hash(self) -> str:
        return f"{self.prefix}:{{keys}}:hash"

    @property
    def ids(self) -> str:
        return f"{self.prefix}:{{keys}}:ids"

    @property
    def version(self) -> str:
        return f"{self.prefix}:{{keys}}:version"


@dataclass(frozen=True, slots=True)
class StatsKeys:
    """Each replica's published stats window, for the cluster-wide view."""

    prefix: str = DEFAULT_PREFIX

    @property
    def replicas(self) -> str:
        return f"{self.prefix}:{{stats}}:replicas"

    def replica(self, owner: str) -> str:
        return f"{self.prefix}:{{stats}}:replica:{owner}"
