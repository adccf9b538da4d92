"""Locust users for teams that run Locust: ``locust -f loadtests/locustfile.py --host URL``.

Each user streams chat completions planned from a workload (``TRIAGE_WORKLOAD``, default
``mixed``; model ``TRIAGE_MODEL``, default ``sim-model``) and reports, besides the whole
request, its time to first token as a request of type ``TTFT`` via ``events.request.fire``.
Locust is not a dependency of this project: without it, importing this module defines
nothing, so tools that import every module keep working.
"""

from __future__ import annotations

import itertools
import os
import time

import orjson

from loadtests.client import Target, request_body, request_headers
from loadtests.datasets import PromptCatalog
from loadtests.requests import RequestFactory
from loadtests.workload import Api, load_workload

try:
    from locust import HttpUser, between, events, task
except ImportError:  # locust not installed
    HttpUser = None


def _planner() -> tuple[RequestFactory, Target]:
    from loadtests.options import resolve_data_dir

    workload = load_workload(os.environ.get("TRIAGE_WORKLOAD", "mixed"))
    catalog = PromptCatalog(resolve_data_dir(None))
    target = Target(("",), os.environ.get("TRIAGE_MODEL", "sim-model"), Api.CHAT, stream=True)
    return RequestFactory(workload, catalog, int(os.environ.get("TRIAGE_SEED", "0"))), target


if HttpUser is not None:
    _FACTORY, _TARGET = _planner()
    _COUNTER = itertools.count()

    class ChatUser(HttpUser):  # type: ignore[misc, valid-type]
        wait_time = between(0.0, 1.0)

        @task
        def chat(self) -> None:
            req = _FACTORY.next(next(_COUNTER))
            body = orjson.dumps(request_body(req, _TARGET))
            start = time.perf_counter()
            ttft = None
            with self.client.post("/v1/chat/completions", data=body, headers=request_headers(req), stream=True,
                                  name=f"chat {req.cls}", catch_response=True) as resp:
                if resp.status_code != 200:
                    resp.failure(f"HTTP {resp.status_code}")
                    return
                for line in resp.iter_lines():
                    if ttft is None and line.startswith(b"data: {") and b'"content":"' in line \
                            and b'"content":""' not in line:
                        ttft = time.perf_counter() - start
                resp.success()
            if ttft is not None:
                events.request.fire(request_type="TTFT", name=f"chat {req.cls}", response_time=ttft * 1000,
                                    response_length=0, exception=None, context={})
