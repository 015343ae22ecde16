"""Headless Chromium driven over the DevTools protocol, for tests that look at a web UI as a user would.

Debian's ``chromium`` (``make chromium``, tools/chromium.sh) runs headless with a remote-debugging
port on loopback and a profile of its own; the tests talk to its page over the DevTools
protocol's WebSocket with the ``websockets`` client of the dev lock, so that they can wait for a
single-page app to render, click what a user clicks, read the text it shows and take a
screenshot. ``--dump-dom`` and ``--screenshot`` alone cannot click.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.ports import free_port
from tests.support.process import ServerProcess, launch
from tests.support.require import require_module, require_or_skip

_CLICK_TEXT = """
((text, nth) => {
  const leaves = [...document.querySelectorAll('body *')].filter(
    (e) => e.childElementCount === 0 && e.textContent.trim() === text && e.getClientRects().length > 0);
  if (leaves.length <= nth) return false;
  leaves[nth].scrollIntoView({block: 'center'});
  leaves[nth].click();
  return true;
})
"""


def chromium_binary() -> str:
    """Debian's chromium, or skip saying how to install it (a failure under VALGEN_REQUIRE_ALL=1)."""
    found = shutil.which("chromium")
    require_or_skip(found is not None, "chromium is not installed; run `make chromium` (tools/chromium.sh, as root)")
    assert found is not None
    return found


class Page:
    """One browser tab, driven over its DevTools WebSocket."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a DevTools command and wait for its result (events that arrive meanwhile are dropped)."""
        request_id = next(self._ids)
        self._connection.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._connection.recv(timeout=60))
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message["result"])

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate to ``url``."""
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        """What the page shows as text (``document.body.innerText``)."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def wait_for_text(self, *texts: str, timeout_s: float = 60.0) -> str:
        """Wait until the page shows every one of ``texts``; the page's text then."""
        deadline = time.monotonic() + timeout_s
        shown = ""
        while time.monotonic() < deadline:
            shown = self.text()
            if all(text in shown for text in texts):
                return shown
            time.sleep(0.25)
        missing = [text for text in texts if text not in shown]
        raise AssertionError(f"the page never showed {missing} within {timeout_s}s; it showed:\n{shown[:4000]}")

    def click_text(self, text: str, nth: int = 0) -> None:
        """Click the ``nth`` visible element whose whole text is ``text`` (as a user clicks a label)."""
        if not self.evaluate(f"{_CLICK_TEXT}({json.dumps(text)}, {nth})"):
            raise AssertionError(f"no visible element #{nth} with the text {text!r}:\n{self.text()[:4000]}")

    def click_label(self, label: str) -> bool:
        """Click the visible button whose accessible label (aria-label) is ``label``; whether there was one."""
        script = (
            f"(() => {{ const b = [...document.querySelectorAll('button[aria-label={json.dumps(label)}]')]"
            ".find((e) => e.getClientRects().length > 0); if (!b) return false; b.click(); return true; })()"
        )
        return bool(self.evaluate(script))

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the viewport to ``path``."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def headless_chromium(workdir: Path, width: int = 1600, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium on loopback with a fresh profile in ``workdir``; its one page. Stopped on exit."""
    binary = chromium_binary()
    sync_client = require_module("websockets.sync.client", "websockets is not installed; pip install -e '.[dev]'")
    port = free_port()
    args = [binary, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check"]
    args += ["--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={port}"]
    args += [f"--user-data-dir={workdir / 'profile'}", f"--window-size={width},{height}"]
    if os.geteuid() == 0:  # Chromium refuses to run as root inside its sandbox
        args.append("--no-sandbox")
    args.append("about:blank")
    browser = ServerProcess(
        "chromium", launch("chromium", args, os.environ, workdir, "chromium.log"), workdir / "chromium.log"
    )
    try:
        targets: list[dict[str, Any]] = []

        def page_listed() -> bool:
            nonlocal targets
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as response:
                    targets = [t for t in json.load(response) if t.get("type") == "page"]
            except OSError:
                return False
            return bool(targets)

        browser.wait_ready(page_listed, timeout_s=60)
        with sync_client.connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as connection:
            page = Page(connection)
            page.call("Page.enable")
            page.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
            yield page
    finally:
        browser.stop(timeout_s=10)
