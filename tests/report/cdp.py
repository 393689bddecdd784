"""A small Chrome DevTools Protocol driver for headless Debian Chromium (no browser download, no Node)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1280,1800"]


class Browser:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        """``env``: extra environment for the browser process (e.g. ``FONTCONFIG_FILE`` to hide fonts)."""
        self.profile = Path(tempfile.mkdtemp(prefix="pypto-tune-chromium-"))
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})})
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start")
            time.sleep(0.1)
        port = port_file.read_text().splitlines()[0]
        import urllib.request

        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json").read())
        page = next(t for t in targets if t["type"] == "page")
        # websockets ≥ 17 wants connect() used as a context manager; the stack keeps it open until close()
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.events.append(json.loads(self.ws.recv(timeout=max(0.05, end - time.monotonic()))))
            except TimeoutError:
                break

    def open(self, url: str) -> None:
        for domain in ("Network.enable", "Runtime.enable", "Log.enable", "Page.enable"):
            self.send(domain)
        loads = lambda: sum(1 for e in self.events if e.get("method") == "Page.loadEventFired")  # noqa: E731
        before = loads()  # a second page in the same browser waits for its own load event
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + 20
        while loads() <= before:
            if time.monotonic() > deadline:
                raise RuntimeError("page did not load")
            self.drain(0.2)
        self.drain(0.5)
        # an embedded font is decoded after the load event: measure and draw only once every face is ready
        self.send("Runtime.evaluate", expression="document.fonts.ready.then(() => true)", awaitPromise=True)

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
        path.write_bytes(data)
        return data

    def set_layout(self, width: int, media: str = "screen", height: int = 1800) -> None:
        """Lay the page out at ``width`` CSS pixels for ``media`` (``screen``: a window; ``print``: a printed page
        whose printable width is ``width``)."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.send("Emulation.setEmulatedMedia", media=media)
        self.width, self.media = width, media
        bar = self.eval("innerWidth - document.documentElement.clientWidth") if media == "print" else 0
        if bar:  # paper has no scroll bar: the page's own width must be the printable width
            self.send("Emulation.setDeviceMetricsOverride", width=width + bar, height=height, deviceScaleFactor=1,
                      mobile=False)
        self.drain(0.1)

    def platform_fonts(self, selector: str, limit: int = 50) -> list[tuple[str, list[dict[str, Any]]]]:
        """(text, fonts) of the first ``limit`` elements matching ``selector``: the fonts Chromium actually drew
        each element's text with (DevTools' "Rendered fonts"), with the number of glyphs each drew."""
        self.send("DOM.enable")
        self.send("CSS.enable")
        root = self.send("DOM.getDocument", depth=-1)["root"]["nodeId"]
        out = []
        for node in self.send("DOM.querySelectorAll", nodeId=root, selector=selector)["nodeIds"][:limit]:
            fonts = self.send("CSS.getPlatformFontsForNode", nodeId=node)["fonts"]
            text = self.send("DOM.resolveNode", nodeId=node)["object"]["objectId"]
            value = self.send("Runtime.callFunctionOn", objectId=text, returnByValue=True,
                              functionDeclaration="function () { return this.textContent; }")["result"]["value"]
            out.append((value, fonts))
        return out

    def screenshot_sections(self, selector: str, folder: Path) -> list[Path]:
        """A PNG of every element matching ``selector`` (each whole), named ``NN-<id>.png``. The viewport is made as
        tall as the page for the captures (much faster than capturing beyond it), then restored."""
        folder.mkdir(parents=True, exist_ok=True)
        boxes = self.eval(f"[...document.querySelectorAll({json.dumps(selector)})].map((e, i) => {{"
                          " const r = e.getBoundingClientRect();"
                          " return [e.id || String(i), r.left + scrollX, r.top + scrollY, r.width, r.height]; })")
        height = self.eval("document.documentElement.scrollHeight")
        width, media = getattr(self, "width", 1280), getattr(self, "media", "screen")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        out = []
        try:
            for i, (name, x, y, w, h) in enumerate(boxes):
                clip = {"x": x, "y": y, "width": max(w, 1), "height": max(h, 1), "scale": 1}
                data = self.send("Page.captureScreenshot", format="png", clip=clip, optimizeForSpeed=True)["data"]
                path = folder / f"{i:02d}-{name}.png"
                path.write_bytes(base64.b64decode(data))
                out.append(path)
        finally:
            self.set_layout(width, media)
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(e["params"]["exceptionDetails"].get("text")))
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append(str(e["params"].get("args")))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error":
                out.append(e["params"]["entry"].get("text", ""))
        return out

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)
