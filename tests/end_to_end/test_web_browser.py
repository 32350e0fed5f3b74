"""``nvtopy web --demo`` in a real browser: the system's headless Chromium, driven by Playwright.

The page draws the terminal on a canvas (xterm.js), so what it shows is read where
the browser reads it: the websocket frames the page receives from the server
(the monitor's terminal output, escapes stripped). A screenshot of the page goes
to screenshots/web-demo.png with NVTOPY_WEB_SCREENSHOT=1 (``make screenshots``), else
to the test's folder. Skipped, with the reason, where Chromium or Playwright is
missing (.ci/run installs both where it can).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from ..waiting import until
from ..web_helpers import WebServer, web_server

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DEADLINE_MS = 30_000  # a page's load, a session's first screen, on a loaded 2-core machine
_ESCAPE = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78DEHM])")

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium ('apt-get install chromium'; .ci/run does)"),
    pytest.mark.real_server,
    pytest.mark.slow,
]


class Screen:
    """What the page received from the server, as text: the monitor's terminal output without its escapes."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    def received(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8", "replace")
        self.chunks.append(_ESCAPE.sub("", payload))

    def text(self, since: int = 0) -> str:
        return "".join(self.chunks[since:])


def _wait_for(page, screen: Screen, words: list[str], since: int = 0, deadline_s: float = DEADLINE_MS / 1000) -> None:
    """Poll until the page received every word; Playwright's own wait, so its events (the frames) are delivered."""
    end = time.monotonic() + deadline_s
    while not all(word in screen.text(since) for word in words):
        if time.monotonic() > end:
            missing = [word for word in words if word not in screen.text(since)]
            raise AssertionError(f"the page never received {missing}: {screen.text(since)[-3000:]!r}")
        page.wait_for_timeout(100)


@pytest.fixture(scope="module")
def server():
    with web_server("--demo") as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, timeout=DEADLINE_MS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open(browser, url: str) -> tuple[object, Screen]:
    """A page on ``url``, its terminal output collected, once the monitor's first screen is drawn."""
    page = browser.new_page(viewport={"width": 1500, "height": 900})
    page.set_default_timeout(DEADLINE_MS)
    screen = Screen()
    page.on("websocket", lambda ws: ws.on("framereceived", screen.received))
    page.goto(url, wait_until="domcontentloaded")
    return page, screen


def _screenshot_path(tmp_path: Path) -> Path:
    """screenshots/web-demo.png with NVTOPY_WEB_SCREENSHOT=1 (``make screenshots``); else the test's own folder,
    so that a test run leaves the checkout as it was."""
    if os.environ.get("NVTOPY_WEB_SCREENSHOT") == "1":
        return ROOT / "screenshots" / "web-demo.png"
    return tmp_path / "web-demo.png"


def test_the_page_shows_the_monitor_and_a_key_changes_it(server: WebServer, browser, tmp_path):
    page, screen = _open(browser, server.url)
    try:
        assert page.url == server.base + "/"  # the token left the address bar (the cookie holds it)
        panels = ["demo-node", "H100 80GB HBM3", "read-only"]  # the header and the GPU panels
        table = ["GPU▲", "PID", "GPU-MEM", "COMMAND", "python train.py"]  # the process table, sorted by GPU
        _wait_for(page, screen, panels + table)
        page.wait_for_function("document.body.classList.contains('-first-byte')")
        page.locator(".xterm-helper-textarea").focus()
        before = page.screenshot()
        since = len(screen.chunks)
        page.keyboard.press("s")  # sort by the next column: the table's arrow moves from GPU to PID
        _wait_for(page, screen, ["PID▲"], since)
        page.wait_for_timeout(500)  # let the canvas paint the frames received
        after = page.screenshot(path=str(_screenshot_path(tmp_path)))
        assert after.startswith(b"\x89PNG") and after != before
    finally:
        page.close()


@pytest.mark.parametrize("where", ["table", "process screen"])
def test_the_kill_keys_reach_no_signal(server: WebServer, browser, where):
    """K, T and I, in the process table or a process's own screen: the monitor says it is read-only, asks nothing."""
    page, screen = _open(browser, server.url)
    try:
        _wait_for(page, screen, ["PID", "COMMAND", "python"])
        page.locator(".xterm-helper-textarea").focus()
        if where == "process screen":
            since = len(screen.chunks)
            page.keyboard.press("Enter")  # the selected process's screen: its footer says read-only
            _wait_for(page, screen, ["read-only ·"], since)
        since = len(screen.chunks)
        page.keyboard.press("Shift+K")
        _wait_for(page, screen, ["read-only (--readonly)", "sending signals is disabled"], since)
        for key in ("Shift+T", "Shift+I", "Enter"):
            page.keyboard.press(key)
        page.wait_for_timeout(1000)
        assert "Send SIG" not in screen.text(since)  # no confirmation asked: nothing could be confirmed
    finally:
        page.close()


def test_without_the_token_the_browser_gets_nothing(server: WebServer, browser):
    until(lambda: not server.sessions(), DEADLINE_MS / 1000, "the other tests' sessions end")
    page = browser.new_page()
    page.set_default_timeout(DEADLINE_MS)
    try:
        response = page.goto(server.base + "/", wait_until="domcontentloaded")
        assert response is not None and response.status == 401
        assert "textual" not in page.content().lower()
        # A page of another origin cannot open a session either: no cookie, and not its origin.
        opened = page.evaluate(
            """url => new Promise(done => {
                const socket = new WebSocket(url);
                socket.onopen = () => done("open");
                socket.onerror = () => done("refused");
            })""",
            server.base.replace("http", "ws", 1) + "/ws",
        )
        assert opened == "refused"
        assert server.sessions() == []
    finally:
        page.close()
