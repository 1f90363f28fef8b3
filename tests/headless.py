"""Headless Chromium driven over the DevTools protocol with aiohttp's websocket client (no
selenium or playwright): open a page, collect its console errors and uncaught exceptions,
evaluate script, move the pointer. For tests of `benchc report --html`.

    with Chromium.start(tmp_path) as browser:        # None-safe: chromium() finds the binary
        page = browser.open("file:///.../r.html")
        page.evaluate("1 + 1")  -> 2
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
from typing import Any

import aiohttp

from tests.conftest import wait_for

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
HEADLESS_TIMEOUT_S = 60.0


def chromium() -> str | None:
    """The Chromium (or Chrome) on PATH, or None (BENCHC_CHROMIUM names one elsewhere)."""
    named = os.environ.get("BENCHC_CHROMIUM")
    if named:
        return named
    return next((p for p in map(shutil.which, NAMES) if p), None)


def _written(port_file: str) -> bool:
    """Chromium's DevToolsActivePort holds both its lines (the port, the browser's path)."""
    try:
        with open(port_file) as f:
            return len(f.read().split("\n")) >= 2
    except FileNotFoundError:
        return False


class Page:
    """One tab, attached in flat mode: commands carry its session id."""

    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session
        self.errors: list[str] = []  # console errors, uncaught exceptions, failed loads
        self.loaded = asyncio.Event()

    def _event(self, method: str, params: dict) -> None:
        if method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            what = d.get("exception", {}).get("description") or d.get("text", "")
            self.errors.append(f"exception: {what}")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.errors.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append("log: " + params["entry"]["text"])
        elif method == "Page.loadEventFired":
            self.loaded.set()

    def send(self, method: str, **params: Any) -> dict:
        return self.browser.call(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """The expression's value (a promise awaited), or AssertionError with its exception."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def move_pointer(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def click(self, x: float, y: float) -> None:
        """A left click at (x, y), as a user's: move, press, release."""
        self.move_pointer(x, y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


class Chromium:
    """A headless Chromium process and its DevTools connection (browser endpoint)."""

    def __init__(self, exe: str, profile: str):
        self.profile = profile
        port_file = os.path.join(profile, "DevToolsActivePort")
        if os.path.exists(port_file):
            os.remove(port_file)  # an earlier browser's, in a profile used again
        self.log = open(os.path.join(profile, "chromium.log"), "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1200,900",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=self.log)
        try:
            self._connect(port_file)
        except BaseException:
            self._stop()  # nothing of it outlives a failed start
            raise

    def _connect(self, port_file: str) -> None:
        # Chromium writes its port and browser path there once it listens
        wait_for(lambda: _written(port_file) or self.proc.poll() is not None,
                 "Chromium's DevToolsActivePort", HEADLESS_TIMEOUT_S)
        assert self.proc.poll() is None, f"Chromium exited: {self._log_tail()}"
        with open(port_file) as f:
            port, path = f.read().split("\n")[:2]
        self.loop = asyncio.new_event_loop()
        self.ids = itertools.count(1)
        self.pages: dict[str, Page] = {}
        self.pending: dict[int, asyncio.Future] = {}
        self.http = self.loop.run_until_complete(self._session())
        self.ws = self.loop.run_until_complete(self.http.ws_connect(f"ws://127.0.0.1:{port}{path}",
                                                                    max_msg_size=0))
        self.reader = self.loop.create_task(self._read())

    @staticmethod
    async def _session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    def _log_tail(self) -> str:
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read()[-2000:].decode("utf-8", "replace")

    @classmethod
    def start(cls, folder: str) -> Chromium:
        exe = chromium()
        assert exe is not None  # the caller skips without one
        profile = os.path.join(folder, "chromium-profile")
        os.makedirs(profile, exist_ok=True)
        return cls(exe, profile)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            m = json.loads(msg.data)
            if "id" in m:
                fut = self.pending.pop(m["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(m)
            elif m.get("sessionId") in self.pages:
                self.pages[m["sessionId"]]._event(m["method"], m.get("params", {}))

    def call(self, method: str, params: dict, session: str | None = None) -> dict:
        async def go() -> dict:
            i = next(self.ids)
            fut = self.loop.create_future()
            self.pending[i] = fut
            msg: dict = {"id": i, "method": method, "params": params}
            if session:
                msg["sessionId"] = session
            await self.ws.send_str(json.dumps(msg))
            return await asyncio.wait_for(fut, HEADLESS_TIMEOUT_S)

        reply = self.loop.run_until_complete(go())
        assert "error" not in reply, (method, reply["error"])
        return reply["result"]

    def open(self, url: str) -> Page:
        """A new tab showing `url`, loaded (its load event fired)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = self.pages[session] = Page(self, session)
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", url=url)
        self.loop.run_until_complete(asyncio.wait_for(page.loaded.wait(), HEADLESS_TIMEOUT_S))
        return page

    def close(self) -> None:
        try:
            if not self.ws.closed:
                self.loop.run_until_complete(self.ws.close())
            self.loop.run_until_complete(self.http.close())
            self.reader.cancel()
            self.loop.run_until_complete(asyncio.gather(self.reader, return_exceptions=True))
        finally:
            self.loop.close()
            self._stop()

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
