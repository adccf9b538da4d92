"""What an operator looks at: ``/metrics``, ``/admin/stats``, ``/admin/backends``, ``/dashboard``.

``/metrics`` is Prometheus text and open, like ``/health`` (keep the port on a
trusted network or behind the proxy's rules). The ``/admin`` endpoints answer with
an admin key when keys are configured. ``/dashboard`` is one static page with no
data in it: it reads the admin endpoints from the browser, with the key the person
types in.
"""

from __future__ import annotations

import time
from importlib import resources

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.state import Gateway
from gateway.telemetry.prometheus import CONTENT_TYPE

router = APIRouter()


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json", headers={"cache-control": "no-store"})


def _admin(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    gw.auth.admin(request.headers.get("authorization"))
    return gw


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    return Response(await gw.telemetry.metrics_text(), media_type=CONTENT_TYPE)


@router.get("/admin/stats")
async def stats(request: Request) -> Response:
    try:
        gw = _admin(request)
    except GatewayError as exc:
        return exc.response()
    t = gw.telemetry
    await t.depth.refresh()
    depth = t.depth.by_class()
    classes = t.stats.snapshot()
    for cls, entry in classes.items():
        entry["queue_depth"] = depth.get(cls, 0)
    return _json({
        "replica": gw.dispatcher.owner,
        "policy": t.policy,
        "time": time.time(),
        "window_s": t.stats.window_s,
        "classes": classes,
        "queue": {"by_class": depth, "by_pool": t.depth.totals, "queued_here": gw.dispatcher.queued_here},
        "predictor": {"kendall_tau": t.accuracy.tau(), "pairs": len(t.accuracy)},
        "timeline": t.stats.timeline(),
    })


@router.get("/admin/backends")
async def backends(request: Request) -> Response:
    try:
        gw = _admin(request)
    except GatewayError as exc:
        return exc.response()
    return _json({"backends": gw.registry.admin_view()})


@router.get("/dashboard")
async def dashboard() -> Response:
    page = (resources.files("gateway") / "static" / "dashboard.html").read_bytes()
    return Response(page, media_type="text/html; charset=utf-8", headers={"cache-control": "no-cache"})
