# syntax=docker/dockerfile:1
# The Triage images. Stages:
#   deps         the gateway's dependencies only (a layer of their own: code edits reuse it)
#   tools-deps   deps + the load tools' extras (rich, matplotlib)
#   tools        `triage loadtest` / `triage bench` / `triage sim`: docker build --target tools
#   serve        the default: `triage serve` (and `triage sim`), without the load tools' extras
# Both final stages run as the unprivileged user `triage` (uid 10001).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
WORKDIR /app

FROM base AS deps
COPY pyproject.toml ./
COPY deploy/docker/requirements.py /tmp/requirements.py
RUN python -m venv /opt/venv \
 && python /tmp/requirements.py > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

FROM deps AS tools-deps
RUN python /tmp/requirements.py bench > /tmp/requirements-bench.txt \
 && pip install -r /tmp/requirements-bench.txt

FROM base AS tools
COPY --from=tools-deps /opt/venv /opt/venv
COPY pyproject.toml README.md ./
COPY triage ./triage
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY simulator ./simulator
COPY loadtests ./loadtests
RUN pip install --no-deps . && useradd --system --uid 10001 triage
USER triage
CMD ["triage", "loadtest", "--help"]

FROM base AS serve
COPY --from=deps /opt/venv /opt/venv
COPY pyproject.toml README.md ./
COPY triage ./triage
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY simulator ./simulator
COPY loadtests ./loadtests
RUN pip install --no-deps . && useradd --system --uid 10001 triage
USER triage
EXPOSE 8000
# HEALTHCHECK_URL: for the same image serving `triage sim` on another port
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HEALTHCHECK_URL', 'http://127.0.0.1:8000/health'), timeout=2)"]
CMD ["triage", "serve", "--host", "0.0.0.0"]
