"""``HttpProbe``: a backend's ``/v1/models`` and ``/metrics``, asked over HTTP, against the
session's simulator and small backend doubles on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.server.embedded import free_port
from gateway.upstream.probe import HttpProbe
from scheduler.backends.backend import BackendConfig, MetricsNotServed
from tests.support import MODEL, running_app


@pytest.fixture
async def probe() -> AsyncIterator[HttpProbe]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield HttpProbe(client)


def at(url: str, api_key: str | None = None) -> BackendConfig:
    return BackendConfig("b", url, "p", 4, None, api_key=api_key)


async def test_the_simulator_lists_its_model_and_serves_metrics(probe: HttpProbe, sim_url: str) -> None:
    models = await probe.models(at(sim_url))
    assert models is not None and models.ids == [MODEL]
    text = await probe.metrics(at(sim_url))
    assert text is not None and "# TYPE" in text


@pytest.fixture
def odd() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A backend double: ``/{kind}/v1/models`` answers per kind; no ``/metrics``."""
    seen: list[dict[str, str]] = []

    async def models(request: Request) -> Response:
        seen.append(dict(request.headers))
        kind = request.path_params["kind"]
        if kind == "good":
            return JSONResponse({"data": [{"id": "a", "max_model_len": 8}, {"id": ""}, {"name": "x"}, "junk"]},
                                headers={"server": "engine/1"})
        if kind == "list":
            return JSONResponse([1, 2])
        if kind == "html":
            return Response(b"<html>hi</html>", media_type="text/html")
        return Response(b"no", 500)

    routes = [Route("/{kind}/v1/models", models), Route("/{kind}/metrics", lambda r: Response(b"", 404))]
    with running_app(Starlette(routes=routes)) as url:
        yield url, seen


async def test_only_well_formed_model_cards_count(probe: HttpProbe, odd: tuple[str, list]) -> None:
    url, seen = odd
    models = await probe.models(at(f"{url}/good", api_key="sk-1"))
    assert models is not None and models.cards == ({"id": "a", "max_model_len": 8},) and "engine/1" in (models.server or "")
    assert seen[0]["authorization"] == "Bearer sk-1"  # the backend's own key


@pytest.mark.parametrize("kind", ["list", "html", "fail"])
async def test_an_answer_that_is_not_a_model_list_is_no_answer(probe: HttpProbe, odd: tuple[str, list], kind: str) -> None:
    url, _ = odd
    assert await probe.models(at(f"{url}/{kind}")) is None


async def test_a_backend_without_metrics_says_so_and_an_unreachable_one_says_nothing(
    probe: HttpProbe, odd: tuple[str, list]
) -> None:
    url, _ = odd
    with pytest.raises(MetricsNotServed):
        await probe.metrics(at(f"{url}/good"))
    gone = at(f"http://127.0.0.1:{free_port()}")
    assert await probe.metrics(gone) is None
    assert await probe.models(gone) is None
