"""A headless Chromium driven over the DevTools protocol (a websocket), for page tests.

``find_chromium`` returns the binary, or None when there is none: tests never install
anything (``.ci/run`` installs Debian's ``chromium`` package for CI).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from tests.support import eventually

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,1150", "--hide-scrollbars",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class Page:
    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.errors: list[str] = []  # console errors, uncaught exceptions, failed loads

    async def _read(self) -> None:
        async for raw in self._ws:
            msg = orjson.loads(raw)
            if "id" in msg and msg["id"] in self._pending:
                future = self._pending.pop(msg["id"])
                if "error" in msg:
                    future.set_exception(RuntimeError(str(msg["error"])))
                else:
                    future.set_result(msg.get("result"))
                continue
            method, params = msg.get("method"), msg.get("params", {})
            if method == "Runtime.exceptionThrown":
                self.errors.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                self.errors.append(params["entry"]["text"] + " " + params["entry"].get("url", ""))

    async def send(self, method: str, **params: Any) -> Any:
        msg_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        await self._ws.send(orjson.dumps({"id": msg_id, "method": method, "params": params}).decode())
        return await asyncio.wait_for(future, 30)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(str(result["exceptionDetails"]))
        return result["result"].get("value")

    async def screenshot(self) -> bytes:
        """The viewport as PNG bytes."""
        data = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(data["data"])


@asynccontextmanager
async def open_page(binary: str, url: str) -> AsyncIterator[Page]:
    """Chromium on ``url``; the page reports console errors from its first script on."""
    # Chromium's helper processes can still be writing the profile when the main one has
    # exited; a file they add mid-cleanup must not fail the test.
    with tempfile.TemporaryDirectory(prefix="triage-chromium-", ignore_cleanup_errors=True) as profile:
        proc = await asyncio.create_subprocess_exec(
            binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        reader: asyncio.Task[None] | None = None
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            await eventually(lambda: port_file.exists() and len(port_file.read_text().split()) >= 2, 30)
            port = port_file.read_text().split()[0]
            async with httpx.AsyncClient() as client:
                targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with websockets.connect(ws_url, max_size=None) as ws:
                page = Page(ws)
                reader = asyncio.create_task(page._read())
                for domain in ("Runtime", "Log", "Page"):
                    await page.send(f"{domain}.enable")
                await page.send("Page.navigate", url=url)
                yield page
        finally:
            if reader is not None:
                reader.cancel()
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
