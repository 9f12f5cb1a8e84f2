"""Headless Chromium (Debian's `chromium`) driven through the Chrome DevTools
Protocol over `--remote-debugging-pipe` (JSON messages ending in NUL on file
descriptors 3 and 4): no websocket library and no port to open.

`open_page(path, width)` loads a local page at a window width and returns
what the report's tests assert on: the document's and the window's widths,
every console error and uncaught exception, every network request other than
the page itself and data: URIs, values the page's scripts left on `window`,
and a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARY = shutil.which("chromium") or shutil.which("chromium-browser")
TIMEOUT = 60.0  # seconds for one command's answer: a load of a large report on a busy machine


@dataclass
class PageReport:
    url: str
    width: int
    scroll_width: int  # document.scrollingElement.scrollWidth
    inner_width: int  # window.innerWidth
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # URLs other than the page's and data: ones
    globals: dict = field(default_factory=dict)
    screenshot: bytes = b""


class Browser:
    """One headless Chromium; `close()` (or the with block) ends it."""

    def __init__(self) -> None:
        if BINARY is None:
            raise RuntimeError("no chromium on PATH (scripts/setup-system.sh installs Debian's chromium)")
        self.profile = tempfile.mkdtemp(prefix="harness-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():  # the protocol's pipes are fds 3 (commands in) and 4 (answers out) in the child
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [BINARY, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._answers: dict[int, dict] = {}
        self._events: list[dict] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._answers[-1] = {"error": "chromium closed the pipe"}
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                data = json.loads(msg)
                with self._cond:
                    if "id" in data:
                        self._answers[data["id"]] = data
                    else:
                        self._events.append(data)
                    self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One protocol command; its result (a RuntimeError on a protocol error)."""
        self._next_id += 1
        i = self._next_id
        msg = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        with self._cond:
            while i not in self._answers:
                if -1 in self._answers or time.monotonic() > deadline:
                    raise RuntimeError(f"no answer to {method}: {self._answers.get(-1, 'timed out')}")
                self._cond.wait(0.5)
            answer = self._answers.pop(i)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def wait_event(self, method: str, session: str, after: int = 0) -> dict:
        """The first `method` event of the session among the events after the `after`-th."""
        deadline = time.monotonic() + TIMEOUT
        with self._cond:
            while True:
                for e in self._events[after:]:
                    if e.get("method") == method and e.get("sessionId") == session:
                        return e
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no {method} event")
                self._cond.wait(0.5)

    def events(self, session: str) -> list[dict]:
        with self._cond:
            return [e for e in self._events if e.get("sessionId") == session]

    def open_page(self, path: Path, width: int, height: int = 900, probe: str = "({})",
                  scroll_to: str | None = None) -> PageReport:
        """Load `path` in a new tab `width` px wide; what it showed (see PageReport)."""
        url = Path(path).resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", session=session)
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
            with self._cond:
                start = len(self._events)  # about:blank's own load is not the page's
            self.send("Page.navigate", {"url": url}, session)
            self.wait_event("Page.loadEventFired", session, after=start)
            sizes = json.loads(self._eval(session, "JSON.stringify({sw: document.scrollingElement.scrollWidth, "
                                                   "iw: window.innerWidth})"))
            found = json.loads(self._eval(session, f"JSON.stringify({probe})"))
            if scroll_to:
                self._eval(session, f"document.querySelector({json.dumps(scroll_to)}).scrollIntoView(); 0")
            shot = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, session)["data"])
            report = PageReport(url, width, sizes["sw"], sizes["iw"], globals=found, screenshot=shot)
            for e in self.events(session):
                m, p = e["method"], e.get("params", {})
                if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                    report.console_errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                                          for a in p.get("args", [])))
                elif m == "Runtime.exceptionThrown":
                    report.console_errors.append(str(p.get("exceptionDetails", {}).get("text")))
                elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                    report.console_errors.append(p["entry"].get("text", ""))
                elif m == "Network.requestWillBeSent":
                    req = p.get("request", {}).get("url", "")
                    if req != url and not req.startswith("data:"):
                        report.requests.append(req)
            return report
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def _eval(self, session: str, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except RuntimeError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
