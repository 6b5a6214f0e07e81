"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
open a page at a given width, run JavaScript in it, take a screenshot, and list every request
the page made. Standard library only (no Selenium, no websocket client); the browser is the
system's (Debian's ``chromium`` package). A request to anything but ``file:``, ``data:``,
``blob:`` or ``about:`` is blocked, and still listed, so a test can assert there was none."""

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

#: where the system's Chromium may be, first found wins (CHROMIUM names another)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:", "devtools:", "chrome-extension:")


def find_chromium() -> str | None:
    named = os.environ.get("CHROMIUM")
    if named:
        return named if shutil.which(named) or Path(named).exists() else None
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser with one page; ``with Chromium(path) as browser: ...``."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = tempfile.TemporaryDirectory(prefix="selfrag-chromium-")
        commands_read, self._commands = os.pipe()  # the browser reads fd 3, writes fd 4
        self._replies, replies_write = os.pipe()
        args = [
            executable,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={width},{height}",
            "about:blank",
        ]

        def wire() -> None:  # in the child: the pipes on fd 3 and 4 (kept open: pass_fds)
            commands, replies = os.dup(commands_read), os.dup(replies_write)  # off 3 and 4 first
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self._process = subprocess.Popen(  # a fixed argument list
            args,
            preexec_fn=wire,  # only dup2 in the child
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._buffer, self._next_id, self.events = b"", 0, []
        self.requests: list[str] = []
        targets = self._send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self._send("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        for method in ("Page.enable", "Network.enable", "Runtime.enable"):
            self.call(method)
        blocked = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]
        self.call("Network.setBlockedURLs", urls=blocked)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # ------------------------------------------------------------------ the protocol
    def _send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self._event(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError(f"no reply from Chromium in {self.timeout} s")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise BrowserError("Chromium closed the pipe (did it start? try it by hand with --headless)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def _event(self, message: dict[str, Any]) -> None:
        self.events.append(message)
        if message.get("method") == "Network.requestWillBeSent":
            self.requests.append(str(message["params"]["request"]["url"]))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self._send(method, self._session, **params)

    # ------------------------------------------------------------------ the page
    def open(self, url: str, settle: float = 0.5) -> None:
        """Load ``url`` and wait for its load event (then ``settle`` seconds for scripts)."""
        self.events.clear()
        self.requests.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self._event(self._read(deadline))
        self.evaluate(f"new Promise(done => setTimeout(done, {int(settle * 1000)}))")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, max_height: int = 6000) -> Path:
        """A PNG of the page from the top, the viewport's width, at most ``max_height`` pixels."""
        height = min(int(self.evaluate("document.documentElement.scrollHeight")), max_height)
        clip = {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def outside(self) -> list[str]:
        """The requests the pages made to anything but the machine's own files."""
        return [url for url in self.requests if not url.startswith(LOCAL_SCHEMES)]

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self._send("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._commands, self._replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
