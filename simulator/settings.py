"""Typed settings of one simulator server, parsed once at the edge (CLI or caller).

``SimSettings`` names a built-in profile and optionally overrides parts of it;
``resolve_profile()`` turns that into the one ``Profile`` the engine runs with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from simulator.dialects import Dialect
from simulator.faults import FaultSettings
from simulator.profiles import BatchingMode, Profile, get_profile


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Everything a simulator server needs. Fields left ``None`` keep the profile's value."""

    host: str = "127.0.0.1"
    port: int = 9001
    profile: str = "llama-8b-h100"
    model: str = "sim-model"  # the only model name served; others get 404
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    max_model_len: int | None = None
    mode: BatchingMode | None = None
    median_output_tokens: int | None = None
    seed: int | None = None
    prefix_caching: bool | None = None
    block_size: int | None = None
    length_table: str | None = None  # JSONL of known output lengths (simulator/length_table.py)
    time_scale: float = 1.0  # multiplies every step duration: 0.1 runs the profile ten times faster
    dialect: Dialect = Dialect.VLLM  # whose SSE framing, metric names and model ids (simulator/dialects.py)
    faults: FaultSettings = field(default_factory=FaultSettings)

    def __post_init__(self) -> None:
        if self.time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "kv_capacity_tokens",
            "max_model_len",
            "block_size",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if not isinstance(self.dialect, Dialect):
            object.__setattr__(self, "dialect", Dialect(self.dialect))
        if self.mode is not None and not isinstance(self.mode, BatchingMode):
            # Accept the plain string from callers that build settings by hand.
            object.__setattr__(self, "mode", BatchingMode(self.mode))

    def resolve_profile(self) -> Profile:
        """The named built-in profile with this object's overrides applied."""
        base = get_profile(self.profile)
        overrides: dict[str, Any] = {
            name: value
            for name, value in (
                ("max_num_seqs", self.max_num_seqs),
                ("max_num_batched_tokens", self.max_num_batched_tokens),
                ("kv_capacity_tokens", self.kv_capacity_tokens),
                ("max_model_len", self.max_model_len),
                ("mode", self.mode),
                ("median_output_tokens", self.median_output_tokens),
                ("seed", self.seed),
                ("prefix_caching", self.prefix_caching),
                ("block_size", self.block_size),
            )
            if value is not None
        }
        profile = replace(base, **overrides)
        return profile.scaled(self.time_scale) if self.time_scale != 1.0 else profile
