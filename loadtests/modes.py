"""The modes ``bench compare`` runs: straight to the backends, or through a gateway configured so.

A gateway mode is the gateway's policy, the gateway settings it adds, and settings for
every backend entry: ``limit_factor`` multiplies the engine's slots into the backend's
``max_concurrency``; any other key (``adaptive``, ``resume``) is copied into each backend
as it is. Nothing else differs between modes: every mode sees the same seeded trace.

The ``*_preempt`` modes turn on pause and resume (``preempt``) and tell the gateway that
the simulators continue a paused generation as vLLM does (``resume: vllm``).

An arm may be a mode with gateway settings of its own, ``MODE@KEY=VALUE[@KEY=VALUE...]``
(values read as YAML; they win over the mode's own and over ``--gateway-set``), so two
settings of one policy run side by side in one run, e.g.
``short_first_preempt,short_first_preempt@slack_per_token_s=0.005``.
"""

from __future__ import annotations

from typing import Any

import yaml

from loadtests.options import UsageError
from loadtests.stack import gateway_config

DEFAULT_MODES = ("direct", "fifo", "short_first", "oracle")
TOO_HIGH = 16  # the *_high modes configure a limit this many times the engine's max_num_seqs
# mode -> the gateway's policy, other settings, and backend settings it runs with
GATEWAY_MODES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "fifo": ("fifo", {}, {}),
    # FIFO again, as a second arm of the same run: the spread between two identical arms is
    # the noise any per-repeat bound between arms is read against (an A/A control)
    "fifo_twin": ("fifo", {}, {}),
    # FIFO whose streams may be paused but never are (a pause budget of 0): every stream asks
    # its engine for what a pause would need and the gateway reads every chunk, so this arm
    # against fifo is what being pausable costs, apart from pausing itself
    "fifo_pausable": ("fifo", {"preempt": True, "pause_budget": 0.0}, {"resume": "vllm"}),
    "short_first": ("short_first", {}, {}),
    "oracle": ("oracle", {}, {}),
    "short_first_reserved": ("short_first", {"reserve_slots": True}, {}),
    "oracle_reserved": ("oracle", {"reserve_slots": True}, {}),
    # backpressure: a limit far above what the engine runs, held static or left to adapt
    "static_high": ("short_first", {}, {"limit_factor": TOO_HIGH, "adaptive": False}),
    "adaptive_high": ("short_first", {}, {"limit_factor": TOO_HIGH, "adaptive": True}),
    # the same pair ordered by true lengths: what the limit alone buys, prediction aside
    "static_high_oracle": ("oracle", {}, {"limit_factor": TOO_HIGH, "adaptive": False}),
    "adaptive_high_oracle": ("oracle", {}, {"limit_factor": TOO_HIGH, "adaptive": True}),
    # a long request running when short ones wait is preempted and resumed later
    "short_first_preempt": ("short_first", {"preempt": True}, {"resume": "vllm"}),
    "oracle_preempt": ("oracle", {"preempt": True}, {"resume": "vllm"}),
    # the short lane: short work first, everything longer in arrival order behind it
    "short_lane": ("short_first", {"short_lane": True}, {}),
    "short_lane_preempt": ("short_first", {"short_lane": True, "preempt": True}, {"resume": "vllm"}),
}
MODES = ("direct", *GATEWAY_MODES)


VARIANT = "@"  # MODE@KEY=VALUE: an arm of MODE with a gateway setting of its own
# Settings the comparison itself decides for each gateway it starts.
_OWN_SETTINGS = frozenset({"host", "port", "redis_url", "key_prefix", "policy", "allow_oracle", "backends"})


def gateway_settings(pairs: list[str], flag: str = "--gateway-set") -> dict[str, Any]:
    """``["long_share_max=0.75", ...]`` -> ``{"long_share_max": 0.75}`` (values read as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. long_share_max=0.75")
        if key in _OWN_SETTINGS:
            raise UsageError(f"{flag} {key}: set by the comparison itself for each mode")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise UsageError(f"{flag} {key}: the value is not valid YAML") from None
    return out


def split_arm(arm: str) -> tuple[str, dict[str, Any]]:
    """``"short_first_preempt@slack_per_token_s=0.005"`` -> the mode and the arm's own
    gateway settings (``{"slack_per_token_s": 0.005}``); a plain mode has none."""
    mode, *pairs = arm.split(VARIANT)
    if pairs and mode not in GATEWAY_MODES:
        raise UsageError(f"--modes {arm!r}: only a gateway mode takes settings of its own")
    return mode, gateway_settings(pairs, f"--modes {mode}{VARIANT}")


def is_mode(arm: str) -> bool:
    """Is ``arm`` a mode, or a gateway mode with settings of its own? (Malformed settings
    raise ``UsageError`` saying what is wrong.)"""
    return split_arm(arm)[0] in MODES


def uses_oracle(mode: str) -> bool:
    """Does this arm's gateway order by the true length (so the client must send it)?"""
    mode = split_arm(mode)[0]
    return mode in GATEWAY_MODES and GATEWAY_MODES[mode][0] == "oracle"


def mode_gateway_config(mode: str, redis_url: str, key_prefix: str, backends: list[str], model: str,
                        max_num_seqs: int, port: int, settings: dict[str, Any] | None = None,
                        resume: str = "vllm") -> dict[str, Any]:
    """The configuration of the gateway of ``mode`` (an arm: a mode, perhaps with settings of its
    own); ``settings`` (``--gateway-set``) lose to the mode's own, and those to the arm's own;
    ``resume``: how the backends of a mode that pauses continue a generation (their engine)."""
    mode, own = split_arm(mode)
    policy, extra, backend = GATEWAY_MODES[mode]
    extra = {**extra, **own}
    limit = max_num_seqs * backend.get("limit_factor", 1)
    conf = gateway_config(redis_url, key_prefix, policy, backends, model, limit, port, {**(settings or {}), **extra})
    per_backend = {k: (resume if k == "resume" else v) for k, v in backend.items() if k != "limit_factor"}
    for b in conf["backends"]:
        b.update(per_backend)
    return conf
