"""Workload files: what a load test sends, parsed once into frozen values.

A workload is a YAML file in ``loadtests/workloads/`` (or any path). Either it names
request classes with their share of the traffic, each with a prompt source and an
output-length rule, or it replays a trace (``trace:``), whose rows carry their own
input and output lengths; trace rows are put in the first class whose
``max_output_tokens`` bound holds. Every class may carry SLOs, which goodput uses.

``lengths`` says whether the server is told each request's true output length:
``max_tokens`` (sent as ``max_tokens`` with ``ignore_eos``: the client tells the
length) or ``hidden`` (nothing but the prompt; the backend must stop at the true
length by itself, as a simulator does from a length table). Hidden lengths must be
real reply lengths tied to their prompts, so every class of such a workload takes
them from a dataset.

``WorkloadError`` carries one line naming the offending key.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


class WorkloadError(Exception):
    """A workload file problem, as one line for a person to read."""


class Api(enum.StrEnum):
    CHAT = "chat"
    COMPLETIONS = "completions"


class Lengths(enum.StrEnum):
    """Whether the true output length goes out with the request."""

    MAX_TOKENS = "max_tokens"  # max_tokens + ignore_eos: the client tells the length
    HIDDEN = "hidden"  # prompts only: the backend stops at the true length by a means of its own


PROMPT_SOURCES = ("sharegpt", "gsm8k", "alpaca", "humaneval", "synthetic")
TRACE_FORMATS = ("azure", "mooncake")


@dataclass(frozen=True, slots=True)
class OutputRule:
    """How long a request's reply is (sent as ``max_tokens`` with ``ignore_eos`` unless lengths are hidden)."""

    kind: str  # "dataset": the prompt's real reply length; "uniform" | "lognormal" | "fixed"
    min: int = 1  # dataset: rows outside [min, max] are not used; others: clamp
    max: int = 4096
    median: int = 200  # lognormal
    sigma: float = 0.8  # lognormal
    value: int = 0  # fixed


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, ttft: float | None, tpot: float | None, e2e: float | None) -> bool:
        """Does one successful request meet every SLO set here? (An undefined TPOT passes.)"""
        if self.ttft_s is not None and (ttft is None or ttft > self.ttft_s):
            return False
        if self.tpot_s is not None and tpot is not None and tpot > self.tpot_s:
            return False
        return not (self.e2e_s is not None and (e2e is None or e2e > self.e2e_s))


@dataclass(frozen=True, slots=True)
class RequestClass:
    name: str
    share: float = 1.0
    prompts: tuple[str, ...] = ("synthetic",)  # prompt sources, drawn from evenly
    output: OutputRule = OutputRule(kind="lognormal")
    synthetic_prompt_tokens: tuple[int, int] = (32, 512)  # range of synthetic prompts
    max_output_tokens: int | None = None  # trace workloads: upper bound of this class
    tier: str | None = None  # sent as x-triage-priority
    slo: Slo = Slo()
    generator: str | None = None  # alpaca: whose reply lengths (a key of response_tokens_cl100k_by_model)


@dataclass(frozen=True, slots=True)
class TraceSpec:
    format: str  # azure | mooncake
    file: str  # relative to the data folder, or absolute
    max_prompt_tokens: int = 32_000  # longer trace prompts are cut to this


@dataclass(frozen=True, slots=True)
class Tenant:
    key: str  # sent as the bearer API key
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class Unstreamed:
    """``share`` of the requests whose reply runs past ``over_tokens`` go without streaming
    (picked by a hash of their place in the plan and their prompt: the same in every arm)."""

    share: float
    over_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    classes: tuple[RequestClass, ...]
    description: str = ""
    api: Api = Api.CHAT
    trace: TraceSpec | None = None
    tenants: tuple[Tenant, ...] = ()
    rate: float | None = None  # default Poisson rate (req/s), if the command line gives none
    lengths: Lengths = Lengths.MAX_TOKENS
    unstreamed: Unstreamed | None = None  # some long replies asked for whole, as batch clients do

    def cls(self, name: str) -> RequestClass:
        return next(c for c in self.classes if c.name == name)


def _take(data: dict[str, Any], where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: must be a mapping")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise WorkloadError(f"{where}.{unknown[0]}: unknown key")
    return data


def _num(data: dict[str, Any], key: str, where: str, kind: type = float, default: Any = None,
         minimum: float | None = None) -> Any:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise WorkloadError(f"{where}.{key}: must be {'an integer' if kind is int else 'a number'}")
    if minimum is not None and value < minimum:
        raise WorkloadError(f"{where}.{key}: must be >= {minimum}")
    return kind(value)


def _output(data: Any, where: str) -> OutputRule:
    d = _take(data, where, {"from", "min", "max", "median", "sigma", "value"})
    kind = d.get("from", "lognormal")
    if kind not in ("dataset", "uniform", "lognormal", "fixed"):
        raise WorkloadError(f"{where}.from: must be one of dataset, uniform, lognormal, fixed")
    rule = OutputRule(
        kind=kind,
        min=_num(d, "min", where, int, 1, 1),
        max=_num(d, "max", where, int, 4096, 1),
        median=_num(d, "median", where, int, 200, 1),
        sigma=_num(d, "sigma", where, float, 0.8, 0),
        value=_num(d, "value", where, int, 0, 0),
    )
    if rule.min > rule.max:
        raise WorkloadError(f"{where}.min: must not exceed max")
    if kind == "fixed" and rule.value < 1:
        raise WorkloadError(f"{where}.value: a fixed output needs value >= 1")
    return rule


def _slo(data: Any, where: str) -> Slo:
    d = _take(data or {}, where, {"ttft_s", "tpot_s", "e2e_s"})
    return Slo(**{k: _num(d, k, where, float, None, 0) for k in ("ttft_s", "tpot_s", "e2e_s")})


def _class(data: Any, where: str) -> RequestClass:
    d = _take(data, where, {"name", "share", "prompts", "output", "synthetic_prompt_tokens",
                            "max_output_tokens", "tier", "slo", "generator"})
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{where}.name: required, a string")
    prompts = d.get("prompts", ["synthetic"])
    prompts = [prompts] if isinstance(prompts, str) else prompts
    if not isinstance(prompts, list) or not prompts:
        raise WorkloadError(f"{where}.prompts: must be a source name or a list of them")
    for p in prompts:
        if p not in PROMPT_SOURCES:
            raise WorkloadError(f"{where}.prompts: unknown source {p!r} (known: {', '.join(PROMPT_SOURCES)})")
    span = d.get("synthetic_prompt_tokens", [32, 512])
    if not (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) and v >= 1 for v in span)
            and span[0] <= span[1]):
        raise WorkloadError(f"{where}.synthetic_prompt_tokens: must be [low, high] integers >= 1")
    tier = d.get("tier")
    if tier is not None and not isinstance(tier, str):
        raise WorkloadError(f"{where}.tier: must be a string")
    generator = d.get("generator")
    if generator is not None and (not isinstance(generator, str) or prompts != ["alpaca"]):
        raise WorkloadError(f"{where}.generator: a model name, and only with prompts: alpaca")
    return RequestClass(
        name=name,
        share=_num(d, "share", where, float, 1.0, 0),
        prompts=tuple(prompts),
        output=_output(d.get("output", {}), f"{where}.output"),
        synthetic_prompt_tokens=(span[0], span[1]),
        max_output_tokens=_num(d, "max_output_tokens", where, int, None, 1),
        tier=tier,
        slo=_slo(d.get("slo"), f"{where}.slo"),
        generator=generator,
    )


def _lengths(d: dict[str, Any], classes: tuple[RequestClass, ...]) -> Lengths:
    try:
        lengths = Lengths(d.get("lengths", "max_tokens"))
    except ValueError:
        raise WorkloadError("lengths: must be max_tokens or hidden") from None
    if lengths is Lengths.HIDDEN:
        if d.get("trace") is not None:
            raise WorkloadError("lengths: hidden needs prompts with real reply lengths, not a trace")
        for i, c in enumerate(classes):
            if c.output.kind != "dataset" or "synthetic" in c.prompts:
                raise WorkloadError(f"classes[{i}].output.from: lengths: hidden needs dataset prompts "
                                    "and their real reply lengths")
    return lengths


def parse_workload(data: Any, default_name: str = "workload") -> Workload:
    """A ``Workload`` from the loaded YAML mapping. Raises ``WorkloadError``."""
    d = _take(data, "workload", {"name", "description", "api", "classes", "trace", "tenants", "rate",
                                 "lengths", "unstreamed"})
    raw_classes = d.get("classes")
    if not isinstance(raw_classes, list) or not raw_classes:
        raise WorkloadError("classes: required, a non-empty list")
    classes = tuple(_class(c, f"classes[{i}]") for i, c in enumerate(raw_classes))
    if len({c.name for c in classes}) != len(classes):
        raise WorkloadError("classes: names must be unique")
    try:
        api = Api(d.get("api", "chat"))
    except ValueError:
        raise WorkloadError("api: must be chat or completions") from None
    trace = None
    if d.get("trace") is not None:
        t = _take(d["trace"], "trace", {"format", "file", "max_prompt_tokens"})
        if t.get("format") not in TRACE_FORMATS:
            raise WorkloadError(f"trace.format: must be one of {', '.join(TRACE_FORMATS)}")
        if not isinstance(t.get("file"), str):
            raise WorkloadError("trace.file: required, a path")
        trace = TraceSpec(t["format"], t["file"], _num(t, "max_prompt_tokens", "trace", int, 32_000, 1))
    elif sum(c.share for c in classes) <= 0:
        raise WorkloadError("classes: shares must add up to more than 0")
    tenants = []
    for i, raw in enumerate(d.get("tenants") or []):
        t = _take(raw, f"tenants[{i}]", {"key", "share"})
        if not isinstance(t.get("key"), str) or not t["key"]:
            raise WorkloadError(f"tenants[{i}].key: required, a string")
        tenants.append(Tenant(t["key"], _num(t, "share", f"tenants[{i}]", float, 1.0, 0)))
    return Workload(
        name=str(d.get("name", default_name)),
        description=str(d.get("description", "")),
        classes=classes,
        api=api,
        trace=trace,
        tenants=tuple(tenants),
        rate=_num(d, "rate", "workload", float, None, 0),
        lengths=_lengths(d, classes),
        unstreamed=_unstreamed(d.get("unstreamed")),
    )


def _unstreamed(data: Any) -> Unstreamed | None:
    if data is None:
        return None
    u = _take(data, "unstreamed", {"share", "over_tokens"})
    share = _num(u, "share", "unstreamed", float, None, 0)
    if share is None or share > 1:
        raise WorkloadError("unstreamed.share: required, a number from 0 to 1")
    return Unstreamed(share, _num(u, "over_tokens", "unstreamed", int, 1024, 0))


def builtin_workloads() -> list[str]:
    folder = resources.files("loadtests") / "workloads"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_workload(name_or_path: str) -> Workload:
    """A built-in workload by name (``mixed``) or a YAML file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        candidate = resources.files("loadtests") / "workloads" / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise WorkloadError(f"unknown workload {name_or_path!r} (built in: {', '.join(builtin_workloads())})")
        text = candidate.read_text(encoding="utf-8")
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise WorkloadError(f"workload file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"workload {name_or_path}: not valid YAML ({exc.__class__.__name__})") from None
    return parse_workload(data, default_name=path.stem)
