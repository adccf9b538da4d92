"""How tickets, leases and messages are written in Redis: each format once, for Python.

The Lua side reads and writes the same formats in ``lua/_common.lua`` (``pack_ticket``,
``parse_ticket``, ``lease_of`` + ``pack_lease`` (the one lease builder), ``parse_lease``,
``pack_backend``, ``parse_backend``, ``grant_message``, ``evict_message``), and
``tests/scheduler/queue/test_records.py`` holds the two equal. Fields are joined by ``|``:
ticket ids and owners are the gateway's own, and model, tenant, tier and backend names
must not contain one.

======================  ==================================================================
format                  fields, in order
======================  ==================================================================
queued ticket           owner | model | tenant | class | predicted | deadline | arrival |
(``P:tickets``)         tier | avoid | restricted | pauses   (deadline 0: none; times:
                        Redis's clock, seconds; restricted 0/1)
lease (``P:lease``)     backend | owner | predicted | restricted | borrowed | class | score |
                        pauses | tier | arrival           (0/1 flags; score, arrival: the ticket's)
backend (``P:backends``) limit | down | weight | speed | lcap | borrow | resume | busy | work |
                        lbusy | borrowed | granted | model ...   (the registry's fields, then
                        the scripts' counts: leases held, their predicted tokens, restricted
                        and borrowed ones, grants so far; then every model it serves)
reach (``P:reach``)     backend | backend | ...          (the backends one replica can call)
grant message           G | ticket | lease record     (the lease as the script wrote it: the
                        owner keeps it whole, to write it back should Redis lose it)
eviction message        E | ticket | reason               (reason: deadline, shed)
lost message            L | ticket | lost                 (waited for, but no longer queued)
pause message           P | lease | backend | reason      (its slot went to a more urgent ticket;
                        reason: ``wait=<s>,cost=<s>``, what the pause gained and cost)
progress (``P:progress``) attained | prompt               (output tokens so far; the prompt's
                        tokens, as the owner estimated them)
resume cost (``P:costs``) tpot | prefill | hit | block | base  (types.ResumeCost: seconds per
                        output token, per prompt token computed; expected cache hit share; block
                        size; seconds one prefill costs besides its tokens)
budget (``P:budget``)   level | since                     (re-read seconds left; Redis time)
======================  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.types import Lease, Message, MessageKind, ResumeCost

SEP = "|"


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


@dataclass(frozen=True, slots=True)
class QueuedTicket:
    """A ticket as it waits in ``P:tickets`` (written by ``enqueue.lua``)."""

    owner: str
    model: str
    tenant: str
    cls: str
    predicted: int
    deadline: float  # Redis time, seconds; 0: none
    arrival: float  # Redis time, seconds
    tier: str
    avoid: str
    restricted: bool
    pauses: int = 0


def parse_ticket(raw: bytes | str) -> QueuedTicket:
    f = _text(raw).split(SEP)
    return QueuedTicket(
        owner=f[0], model=f[1], tenant=f[2], cls=f[3], predicted=int(float(f[4] or 0)),
        deadline=float(f[5] or 0), arrival=float(f[6] or 0), tier=f[7],
        avoid=f[8] if len(f) > 8 else "", restricted=len(f) > 9 and f[9] == "1",
        pauses=int(f[10] or 0) if len(f) > 10 else 0,
    )


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _num(value: float) -> str:
    """A number as Lua writes it (``%.14g``), so a record round-trips byte for byte."""
    return f"{value:.14g}"


def pack_lease(lease: Lease) -> str:
    return SEP.join((
        lease.backend, lease.owner, str(lease.predicted), _flag(lease.restricted), _flag(lease.borrowed),
        lease.cls, _num(lease.score), str(lease.pauses), lease.tier, _num(lease.arrival),
    ))


def parse_lease(raw: bytes | str) -> Lease:
    f = _text(raw).split(SEP) + [""] * 5
    return Lease(
        f[0], f[1], int(float(f[2] or 0)), f[3] == "1", f[4] == "1", f[5], float(f[6] or 0), int(f[7] or 0), f[8],
        float(f[9] or 0),
    )


@dataclass(frozen=True, slots=True)
class BackendSlots:
    """One backend as ``P:backends`` holds it: what the registry set, what the scripts count."""

    limit: int = 0
    down: bool = False
    weight: float = 1.0
    speed: float = 0.0  # 0: unknown
    lcap: int = 0
    borrow: int = 0
    resume: bool = False
    busy: int = 0  # leases held now
    work: float = 0.0  # predicted output tokens of those leases
    lbusy: int = 0  # of them, restricted (long/batch) work
    borrowed: int = 0  # of them, on slots borrowed from the reserve
    granted: int = 0  # grants on this backend so far
    models: tuple[str, ...] = ()


def pack_backend(b: BackendSlots) -> str:
    return SEP.join((
        _num(b.limit), _flag(b.down), _num(b.weight), _num(b.speed), _num(b.lcap), _num(b.borrow), _flag(b.resume),
        _num(b.busy), _num(b.work), _num(b.lbusy), _num(b.borrowed), _num(b.granted), *b.models,
    ))


def parse_backend(raw: bytes | str) -> BackendSlots:
    f = _text(raw).split(SEP)
    f += [""] * (12 - len(f))

    def n(i: int, default: float = 0) -> float:
        return float(f[i]) if f[i] else default

    limit = int(n(0))
    return BackendSlots(
        limit, f[1] == "1", n(2, 1.0), n(3), int(n(4, limit)), int(n(5)), f[6] == "1", int(n(7)), n(8), int(n(9)),
        int(n(10)), int(n(11)), tuple(f[12:]),
    )


def parse_reach(raw: bytes | str | None) -> set[str]:
    return {name for name in _text(raw or "").split(SEP) if name}


@dataclass(frozen=True, slots=True)
class GrantMessage(Message):
    """A grant with the lease the script recorded for it. The replica keeps that record
    as it is: its heartbeat writes it back when Redis lost its data, and a lease rebuilt
    from less (no score, tier or arrival) could never be paused."""

    lease: Lease = field(kw_only=True)


def grant_message(ticket: str, lease: Lease) -> GrantMessage:
    return GrantMessage(MessageKind.GRANT, ticket, lease.backend, lease.borrowed, lease=lease)


@dataclass(frozen=True, slots=True)
class PauseMessage(Message):
    """A pause, with why it was taken (``wait=<s>,cost=<s>``)."""

    reason: str = field(default="", kw_only=True)


def pack_message(msg: Message) -> str:
    if isinstance(msg, GrantMessage):
        return SEP.join((msg.kind.value, msg.ticket, pack_lease(msg.lease)))
    if isinstance(msg, PauseMessage):
        return SEP.join((msg.kind.value, msg.ticket, msg.detail, msg.reason))
    if msg.kind is MessageKind.GRANT:
        raise ValueError("a grant message carries its lease: build it with grant_message()")
    return SEP.join((msg.kind.value, msg.ticket, msg.detail))


def parse_message(raw: bytes | str) -> Message:
    kind, ticket, detail = _text(raw).split(SEP, 2)
    if kind == MessageKind.GRANT:
        return grant_message(ticket, parse_lease(detail))
    if kind == MessageKind.PAUSE:
        backend, _, reason = detail.partition(SEP)
        return PauseMessage(MessageKind.PAUSE, ticket, backend, reason=reason)
    return Message(MessageKind(kind), ticket, detail)


def pack_progress(attained: int, prompt: int) -> str:
    return f"{attained}{SEP}{prompt}"


def parse_progress(raw: bytes | str) -> tuple[int, int]:
    """attained, prompt (a bare count, as older replicas wrote it: prompt 0)."""
    f = _text(raw).split(SEP) + ["0"]
    return int(float(f[0] or 0)), int(float(f[1] or 0))


def pack_cost(c: ResumeCost) -> str:
    return SEP.join((_num(c.tpot_s), _num(c.prefill_s), _num(c.hit), str(c.block), _num(c.prefill_base_s)))


def parse_cost(raw: bytes | str | None) -> ResumeCost:
    if not raw:
        return ResumeCost()
    f = _text(raw).split(SEP) + ["0"]
    return ResumeCost(float(f[0]), float(f[1]), float(f[2]), int(float(f[3])), float(f[4] or 0))


def parse_budget(raw: bytes | str | None) -> tuple[float, float] | None:
    """Re-read seconds left and when (Redis time); None: never spent."""
    if not raw:
        return None
    level, since = _text(raw).split(SEP)
    return float(level), float(since)
