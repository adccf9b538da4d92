"""The OpenTelemetry names Triage emits, pinned to one version of the GenAI conventions.

The GenAI conventions are still marked *development*: names change between
releases. Every ``gen_ai.*`` name the gateway writes is spelled here, once, against
``GENAI_SEMCONV_VERSION``; moving to a newer release is a change to this file (and
to the dashboards under ``deploy/``), nothing else.

Provider: the backends are any OpenAI-compatible servers (vLLM, SGLang, TGI,
llama.cpp, Ollama, the simulator). The conventions key the telemetry *flavour* on
``gen_ai.provider.name`` and say it is set from the instrumentation's best knowledge;
the API the gateway speaks is OpenAI's, so it reports ``openai`` and leaves the
actual server to ``server.address`` / ``server.port`` and ``triage.backend``.
"""

from __future__ import annotations

from typing import Final

GENAI_SEMCONV_VERSION: Final = "1.37.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{GENAI_SEMCONV_VERSION}"
INSTRUMENTATION_NAME: Final = "triage.gateway"
PROVIDER: Final = "openai"

# -- attributes (GenAI) -------------------------------------------------------------
OPERATION: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_STREAM: Final = "gen_ai.request.stream"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
INPUT_MESSAGES: Final = "gen_ai.input.messages"  # opt-in content capture only
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"  # opt-in content capture only

# -- attributes (general) -------------------------------------------------------------
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
HTTP_METHOD: Final = "http.request.method"
HTTP_ROUTE: Final = "http.route"
HTTP_STATUS: Final = "http.response.status_code"
URL_PATH: Final = "url.path"

# -- attributes (Triage's own) --------------------------------------------------------
CLASS: Final = "triage.class"
PREDICTED: Final = "triage.predicted_tokens"
PREDICTION_SOURCE: Final = "triage.prediction_source"
POLICY: Final = "triage.policy"
TENANT: Final = "triage.tenant"
TIER: Final = "triage.tier"
BACKEND: Final = "triage.backend"
POOL: Final = "triage.pool"
QUEUE_MS: Final = "triage.queue_ms"
OUTCOME: Final = "triage.outcome"
STATE: Final = "triage.state"
REQUEST_ID: Final = "triage.request_id"
CLIENT_REQUEST_ID: Final = "triage.client_request_id"  # the client's own x-request-id

# -- span events ------------------------------------------------------------------------
EV_ENQUEUED: Final = "enqueued"
EV_DISPATCHED: Final = "dispatched"
EV_FIRST_TOKEN: Final = "first_token"
EV_PAUSED: Final = "paused"
EV_RESUMED: Final = "resumed"
EV_OVERLOADED: Final = "overloaded"  # a backend refused it as overloaded (429/503): queued again
COOLDOWN_S: Final = "triage.cooldown_s"
PAUSES: Final = "triage.pauses"
RESUME_FROM: Final = "triage.resume.from"  # on a resumed event and the resumes counter: token_ids or text
PAUSE_REASON: Final = "triage.pause.reason"  # on a paused event: wait=<s>,cost=<s> the scheduler expected

# -- GenAI metrics, with the conventions' bucket advice ---------------------------------
TTFT: Final = "gen_ai.server.time_to_first_token"
TPOT: Final = "gen_ai.server.time_per_output_token"
REQUEST_DURATION: Final = "gen_ai.server.request.duration"
TOKEN_USAGE: Final = "gen_ai.client.token.usage"

TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)
