"""What an operator looks at: ``/metrics``, ``/admin/stats``, ``/admin/backends``, ``/dashboard``.

``/admin/stats`` shows this replica's window; ``?scope=cluster`` sums every replica's
(``telemetry/cluster.py``) and names them in ``replicas``.

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
from redis.exceptions import RedisError
from starlette.responses import Response

from gateway.api.state import Gateway
from gateway.errors import GatewayError
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
    scope = request.query_params.get("scope", "replica")
    if scope not in ("replica", "cluster"):
        return GatewayError(400, "scope must be 'replica' (this replica) or 'cluster' (all replicas summed)",
                            param="scope").response()
    t = gw.telemetry
    await t.depth.refresh()
    depth = t.depth.by_class()  # the shared queue: the same seen from every replica
    if scope == "cluster":
        try:
            view = await t.cluster.view()
        except RedisError as exc:
            return GatewayError(503, f"Redis cannot be reached: {exc}", "service_unavailable",
                                "scheduler_unavailable", retry_after_s=2).response()
        classes, timeline, replicas = view["classes"], view["timeline"], view["replicas"]
    else:
        classes, timeline, replicas = t.stats.snapshot(), t.stats.timeline(), [gw.dispatcher.owner]
    for cls, entry in classes.items():
        entry["queue_depth"] = depth.get(cls, 0)
    return _json({
        "replica": gw.dispatcher.owner,
        "scope": scope,
        "replicas": replicas,  # whose windows the classes and timeline sum
        "policy": t.policy,
        "time": time.time(),
        "window_s": t.stats.window_s,
        "classes": classes,
        "queue": {"by_class": depth, "by_pool": t.depth.totals, "queued_here": gw.dispatcher.queued_here},
        "predictor": {"kendall_tau": t.accuracy.tau(), "pairs": len(t.accuracy)},
        "timeline": timeline,
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
