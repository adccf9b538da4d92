"""Typed configuration, parsed once at the edge and passed down.

Sources, later ones winning: defaults, the YAML file (``--config`` or ``TRIAGE_CONFIG``),
environment variables (``TRIAGE_<KEY>``; nested values as JSON, e.g.
``TRIAGE_BACKENDS='[{"name": "a", "url": "http://127.0.0.1:9001"}]'``), then the
command line flags. Unknown keys are errors. ``ConfigError`` carries one line that
names the offending key.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.server import redis_client
from scheduler.policy.order import PolicyName


class ConfigError(Exception):
    """A configuration problem, as one line for a person to read."""


class BackendSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]+$")
    url: str  # base URL of an OpenAI-compatible server, without /v1
    models: list[str] | None = None  # omitted: discovered from its /v1/models
    max_concurrency: int = Field(default=32, ge=1, le=100_000)  # the starting limit and its ceiling
    min_concurrency: int = Field(default=1, ge=1)  # the adaptive limit's floor
    adaptive: bool = True  # adapt the limit to what the backend shows
    api_key: str | None = None  # sent upstream instead of the client's key
    pool: str = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]+$")
    weight: float = Field(default=1.0, gt=0)  # routing weight
    engine_priority: bool = False  # the engine runs priority scheduling: send our order as `priority`
    # how a paused generation is continued: vllm and sglang continue a partial assistant
    # message (continue_final_message) or a completions prompt + text; none: never paused
    resume: Literal["vllm", "sglang", "llamacpp", "none"] = "none"
    # which server it is (metric names, priority direction, a starting limit:
    # scheduler/backends/engines.py); omitted: detected from its /metrics, /v1/models, server header
    engine: Literal["vllm", "sglang", "tgi", "llamacpp", "ollama", "openai"] | None = None
    # which way `priority` runs when engine_priority is on; auto: the engine's default
    # (sglang: higher first, unless run with --schedule-low-priority-values-first)
    engine_priority_order: Literal["auto", "lower_first", "higher_first"] = "auto"

    @model_validator(mode="after")
    def _floor(self) -> BackendSettings:
        if self.min_concurrency > self.max_concurrency:
            raise ValueError("min_concurrency must not exceed max_concurrency")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL such as http://127.0.0.1:9001")
        return value.rstrip("/").removesuffix("/v1")


class QuotaSettings(BaseModel):
    """Limits of a tenant or a key; omitted or 0: that limit is off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)  # input + output
    concurrent: int | None = Field(default=None, ge=0)  # requests admitted and not yet finished


class ApiKeySettings(BaseModel):
    """One client key. Only its SHA-256 is configured, never the key itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tenant: str = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]+$")
    tier: str = "interactive"
    admin: bool = False
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:-]+$")  # omitted: cfg-<first 12 of sha256>
    quotas: QuotaSettings | None = None  # this key's own limits, besides its tenant's

    @property
    def key_id(self) -> str:
        return self.id or f"cfg-{self.sha256[:12]}"
    trust_hints: bool = False  # may send x-triage-expected-tokens (else the header is ignored)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRIAGE_", extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    redis_url: str | None = None  # omitted: an embedded Valkey server is started
    workers: int = Field(default=1, ge=1, le=64)  # processes on one port, each a full replica
    key_prefix: str = Field(default="triage", pattern=r"^[A-Za-z0-9_.:-]+$")
    policy: PolicyName = PolicyName.SHORT_FIRST
    allow_oracle: bool = False  # the oracle policy trusts a header: benchmarks only
    backends: list[BackendSettings] = Field(default_factory=list)
    api_keys: list[ApiKeySettings] = Field(default_factory=list)
    tiers: list[str] = Field(default_factory=lambda: ["interactive", "batch"])  # most urgent first
    tenant_weights: dict[str, float] = Field(default_factory=dict)  # fair share; default 1
    # model names clients may use for a served one: {llama3.2: "llama3.2:latest", gpt-4o-mini: "qwen2.5:7b"}
    aliases: dict[str, str] = Field(default_factory=dict)

    # queueing
    max_queue: int = Field(default=10_000, ge=0)  # per pool; 0: unbounded
    max_tenant_queue: int = Field(default=0, ge=0)  # per tenant and pool; 0: unbounded
    queue_timeout_s: float = Field(default=300.0, ge=0)  # 0: wait forever
    max_slack_s: float = Field(default=30.0, ge=0)  # the starvation bound
    slack_per_token_s: float = Field(default=0.02, ge=0)
    # short_first/oracle: work predicted above short_max_tokens queues in arrival order behind
    # short work, instead of being ordered by its length too (docs/scheduling.md, the short lane)
    short_lane: bool = False
    # while the pool's queue holds more than this many tickets per slot, it goes in arrival
    # order (tiers kept): past capacity, overtaking only moves who waits (docs/scheduling.md,
    # "Arrival order under a backlog"); 0: off. Set it alike on every replica.
    fifo_backlog: float = Field(default=0.0, ge=0)
    batch_tier_offset_s: float = Field(default=60.0, ge=0)
    short_max_tokens: int = Field(default=256, ge=1)
    medium_max_tokens: int = Field(default=1024, ge=1)

    # backpressure: targets of the adaptive limits
    ttft_target_s: float | None = Field(default=1.0, gt=0)  # p90 TTFT; null: not a signal
    tpot_target_s: float | None = Field(default=0.1, gt=0)  # median time per output token
    # the targets cut the limit of a backend whose own queue is seen (its metrics) too; by
    # default only of one whose queue is unseen (docs/backpressure.md)
    latency_always: bool = False

    # a backend's 429/503 before the first byte: it cools down for its Retry-After (this
    # default when it sends none, never more than the max) and the request queues again
    overload_cooldown_s: float = Field(default=1.0, ge=0)
    overload_cooldown_max_s: float = Field(default=30.0, ge=0)
    overload_max_attempts: int = Field(default=20, ge=0)  # refusals one request may meet
    # every backend of a model down this long (circuit open): new requests get 503 at once;
    # before that they wait at most what is left of it (a probing breaker may close)
    no_backend_grace_s: float = Field(default=0.0, ge=0)

    # slot reservation: long and batch work may hold only a share of each backend
    reserve_slots: bool = False
    long_share_min: float = Field(default=0.5, gt=0, le=1)
    long_share_max: float = Field(default=0.75, gt=0, le=1)
    long_target_utilization: float = Field(default=0.9, gt=0, le=1)  # the cap covers long load / this
    reserve_headroom_slots: float = Field(default=1.0, ge=0)
    borrow_share: float = Field(default=0.5, ge=0, le=1)
    quiet_after_s: float = Field(default=10.0, ge=0)

    # pause and resume: a short request that finds every slot taken pauses the running
    # generation that has run longest past quantum_tokens (on a backend with `resume`),
    # only where the pause pays (scheduler/policy/preemption.py says the rule)
    preempt: bool = True  # only backends with `resume` set are ever paused
    quantum_tokens: int = Field(default=64, ge=1)
    max_pauses: int = Field(default=2, ge=1)  # per request
    preempt_after_ms: float = Field(default=0.0, ge=0)  # how long the short request waits first
    pause_ratio: float = Field(default=2.0, ge=0)  # victim's expected remaining output / the urgent one's; 0: off
    pause_backlog: float = Field(default=1.0, ge=0)  # queued per slot past which nothing is paused; 0: off
    pause_budget: float = Field(default=0.1, ge=0, le=1)  # share of a backend's time re-reads may take
    pause_window_s: float = Field(default=30.0, gt=0)  # the budget holds at most pause_budget * this

    # output-length prediction
    # learned: the online lexical model; prior: hints and caps only; finetuned: the learned
    # model blended with a fine-tuned encoder loaded from predictor_weights (embed extra)
    predictor: Literal["learned", "prior", "finetuned"] = "learned"
    # `triage predictor finetune --save`; several files (a YAML list, or comma-separated
    # in TRIAGE_PREDICTOR_WEIGHTS) make one ensemble
    predictor_weights: Annotated[list[Path] | None, NoDecode] = None
    predictor_name: str = Field(default="default", pattern=r"^[A-Za-z0-9_.:-]+$")
    predictor_sync_s: float = Field(default=5.0, gt=0)  # share what was learned this often
    prior_tokens: float = Field(default=250.0, gt=0)  # cold-start guess
    # what the learned model knows before its first reply: `builtin` (trained offline on
    # public prompt -> length data, shipped in the package), `none`, or a warm-start file
    predictor_warm_start: str = "builtin"

    # leases and liveness
    lease_ttl_s: float = Field(default=30.0, gt=0)
    heartbeat_s: float = Field(default=2.0, gt=0)
    probe_interval_s: float = Field(default=2.0, gt=0)

    # requests
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_tokens_limit: int = Field(default=1_000_000, ge=1)
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    access_log: bool = False

    # shutdown and readiness (docs/operations.md): on SIGTERM running requests get this long
    drain_timeout_s: float = Field(default=60.0, ge=0)
    # /ready answers 503 while no backend is up (off: the replica stays ready and answers
    # requests 503 itself, so a load balancer does not drop every replica at once)
    ready_requires_backend: bool = False
    # quotas (docs/operations.md, "Quotas"): per tenant, and per key (api_keys[].quotas)
    default_quota: QuotaSettings = Field(default_factory=QuotaSettings)  # a tenant without its own entry
    tenant_quotas: dict[str, QuotaSettings] = Field(default_factory=dict)

    # keys created through /admin/keys: how often a replica checks for changes (revocations)
    key_sync_s: float = Field(default=1.0, gt=0)
    # reload backends and keys when the config file changes (and on SIGHUP); 0: only on SIGHUP
    reload_check_s: float = Field(default=2.0, ge=0)

    # one JSON line per request on the "triage.requests" logger (stdout under triage serve)
    request_log: bool = False
    # the cluster-wide view: each replica publishes its stats window this often
    stats_publish_s: float = Field(default=2.0, gt=0)
    # slow, idle and too many clients (gateway/server/connections.py; docs/configuration.md)
    header_timeout_s: float = Field(default=10.0, gt=0)  # a request's head, from its first byte
    body_timeout_s: float = Field(default=30.0, gt=0)  # the whole body, once the head is in
    keep_alive_timeout_s: float = Field(default=5.0, gt=0)  # idle between requests on one connection
    max_connections: int = Field(default=1000, ge=0)  # per replica; past it 503 (not /health); 0: no cap
    max_header_bytes: int = Field(default=32 * 1024, ge=1024)  # request line and headers

    # telemetry (exporters follow the standard OTEL_* environment; see gateway/telemetry/hub.py)
    trace_content: bool = False  # record prompts and completions on spans: they may hold personal data

    # embedded defaults (no backends configured)
    simulator_profile: str = "llama-8b-h100"
    simulator_model: str = "sim-model"

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value:
            redis_client.parse(value)  # one server, redis+cluster:// or redis+sentinel:// (ValueError)
        return value

    @field_validator("predictor_weights", mode="before")
    @classmethod
    def _weights_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return [value] if isinstance(value, Path) else value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        names = [b.name for b in self.backends]
        if len(names) != len(set(names)):
            raise ValueError("backend names must be unique")
        for key in self.api_keys:
            if key.tier not in self.tiers:
                raise ValueError(f"api key tier '{key.tier}' is not one of tiers {self.tiers}")
        for alias, target in self.aliases.items():
            if not alias or not target:
                raise ValueError("aliases: names and targets must not be empty")
            if alias == target:
                raise ValueError(f"aliases.{alias}: an alias must name another model")
        for tenant, weight in self.tenant_weights.items():
            if weight <= 0:
                raise ValueError(f"tenant_weights.{tenant} must be above 0")
        if self.predictor == "finetuned":
            if self.predictor_weights is None:
                raise ValueError("predictor 'finetuned' needs predictor_weights (a file saved by --finetune-save)")
            if not self.predictor_weights:
                raise ValueError("predictor_weights: the list is empty")
            for path in self.predictor_weights:
                if not path.is_file():
                    raise ValueError(f"predictor_weights: no such file: {path}")
        warm = self.predictor_warm_start
        if warm not in ("builtin", "none") and not Path(warm).is_file():
            raise ValueError(f"predictor_warm_start: expected builtin, none or a file; no such file: {warm}")
        if self.long_share_min > self.long_share_max:
            raise ValueError("long_share_min must not exceed long_share_max")
        if self.short_max_tokens > self.medium_max_tokens:
            raise ValueError("short_max_tokens must not exceed medium_max_tokens")
        if self.policy is PolicyName.ORACLE and not self.allow_oracle:
            raise ValueError("policy 'oracle' trusts a client header; set allow_oracle: true to use it")
        return self

    @property
    def keys_required(self) -> bool:
        return bool(self.api_keys)


def hash_key(key: str) -> str:
    """The SHA-256 of a client key, as written in ``api_keys``."""
    return hashlib.sha256(key.encode()).hexdigest()


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "config"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{loc}: {msg}"


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Defaults < YAML file < environment < ``overrides`` (flags). Raises ConfigError."""
    data: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: not valid YAML ({exc.__class__.__name__})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: must be a mapping of keys to values")
        data.update(loaded or {})
    try:
        env = Settings()  # defaults + environment; fields_set holds what the environment set
        data.update(env.model_dump(include=env.model_fields_set))
        data.update({k: v for k, v in overrides.items() if v is not None})
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
