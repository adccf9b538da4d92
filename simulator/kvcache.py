"""The KV-cache ledger of one engine: slots held by sequences, and blocks kept for reuse.

Without prefix caching this is a token count: a sequence holds one slot per computed
token, and gives them all back when it ends or is preempted.

With prefix caching (vLLM's automatic prefix caching, on by default there too), every
full block a sequence has computed is registered under its chained hash
(``simulator/blocks.py``), and:

- a sequence being admitted looks up its leading blocks (prompt, plus what it had
  generated if it was preempted); the blocks found are shared instead of computed, up
  to all but the last token, which must be computed to sample the next one;
- a block used by several sequences is held once;
- when the last holder of a block ends, is aborted or is preempted, the block stays
  cached: it counts against nothing but can be found again, until the space is needed,
  then cached blocks are evicted least recently freed first (a sequence's blocks are
  freed tail first, so its prefix outlives its tail, as in vLLM);
- a block computed again while the same block is cached (the last block of a fully
  cached prompt, or two identical prompts prefilled at once) stays the computing
  sequence's own copy, freed with it, as vLLM keeps such duplicates; the cached block
  counts as used just now.

Only full blocks are shared; the tail of a sequence is private.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from simulator.sequence import Sequence


@dataclass(frozen=True, slots=True)
class CacheHit:
    """What a lookup found for a sequence about to be admitted."""

    tokens: int  # leading tokens whose KV is cached (whole blocks)
    reclaimed: int  # of those, tokens in blocks no running sequence holds (they start counting)


NO_HIT = CacheHit(tokens=0, reclaimed=0)


class KvCache:
    """Slots of ``capacity`` tokens; with ``caching``, full blocks are shared and kept."""

    def __init__(self, capacity: int, block_size: int, caching: bool) -> None:
        self.capacity = capacity
        self.block_size = block_size
        self.caching = caching
        self.used = 0  # slots held by live sequences, a shared block once
        self._held: dict[int, int] = {}  # block hash -> sequences holding it
        self._free: OrderedDict[int, None] = OrderedDict()  # cached, held by none; least recent first

    @property
    def room(self) -> int:
        """Slots a sequence can still take (cached blocks are evicted to make them)."""
        return self.capacity - self.used

    @property
    def cached_tokens(self) -> int:
        """Slots of cached blocks no sequence holds."""
        return len(self._free) * self.block_size

    def lookup(self, seq: Sequence) -> CacheHit:
        """The leading cached blocks of ``seq``'s tokens so far, without taking them."""
        if not self.caching or seq.blocks is None:
            return NO_HIT
        size = self.block_size
        found = reclaimed = 0
        for index in range((seq.prompt_tokens + seq.generated - 1) // size):
            h = seq.blocks[index]
            if h in self._free:
                reclaimed += 1
            elif h not in self._held:
                break
            found += 1
        return CacheHit(tokens=found * size, reclaimed=reclaimed * size)

    def take(self, seq: Sequence, hit: CacheHit) -> None:
        """Hold the blocks ``lookup`` found: they count as computed for ``seq``."""
        if not hit.tokens:
            return
        assert seq.blocks is not None
        for index in range(hit.tokens // self.block_size):
            self._hold(seq, seq.blocks[index])
        seq.computed = hit.tokens
        seq.blocks_seen = hit.tokens // self.block_size

    def allocate(self, seq: Sequence, n: int) -> None:
        """Give ``seq`` ``n`` more slots (the caller checked ``room``), evicting cached blocks as needed."""
        seq.kv_held += n
        self.used += n
        excess = self.used + self.cached_tokens - self.capacity
        while excess > 0 and self._free:
            self._free.popitem(last=False)
            excess -= self.block_size

    def register(self, seq: Sequence) -> None:
        """Register the blocks ``seq`` has newly completed, so later lookups find them."""
        if not self.caching or seq.blocks is None:
            return
        size = self.block_size
        while seq.blocks_seen < seq.computed // size:
            h = seq.blocks[seq.blocks_seen]
            seq.blocks_seen += 1
            if h in self._free:
                self._free.move_to_end(h)  # computed again: the cached copy was just as good
                continue
            if h in self._held:
                continue  # computed twice at once: this copy stays the sequence's own
            self._held[h] = 1
            seq.block_refs.append(h)
            seq.kv_held -= size  # the slots now belong to the shared block (still counted in used)

    def release(self, seq: Sequence) -> None:
        """Give back everything ``seq`` holds; its shared blocks stay cached once nobody holds them."""
        self.used -= seq.kv_held
        seq.kv_held = 0
        for h in reversed(seq.block_refs):  # tail first, so the tail is evicted first
            holders = self._held[h] - 1
            if holders:
                self._held[h] = holders
            else:
                del self._held[h]
                self._free[h] = None
                self.used -= self.block_size
        seq.block_refs.clear()
        seq.blocks_seen = 0

    def _hold(self, seq: Sequence, h: int) -> None:
        if h in self._free:
            del self._free[h]
            self._held[h] = 1
            self.used += self.block_size
        else:
            self._held[h] += 1
        seq.block_refs.append(h)
