# The Triage gateway (also runs the simulator and the load generator: `triage sim`, `triage loadtest`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY triage ./triage
COPY gateway ./gateway
COPY scheduler ./scheduler
COPY simulator ./simulator
COPY loadtests ./loadtests
RUN pip install ".[bench]" && useradd --system --uid 10001 triage

USER triage
EXPOSE 8000
CMD ["triage", "serve", "--host", "0.0.0.0"]
