"""A small Chrome DevTools Protocol driver for headless Debian Chromium (no browser download, no Node)."""

from __future__ import annotations

import base64
import contextlib
import json
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
    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="pypto-tune-chromium-"))
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"])
        path.write_bytes(data)
        return data

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
