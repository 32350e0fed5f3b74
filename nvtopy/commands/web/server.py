"""The web server of ``nvtopy web``: pages, one monitor process per browser session, ``/once.txt``, ``/once.json``.

Why a process per session: the monitor is a Textual app, and Textual's web driver
runs one app per process, talking on its stdin and stdout; ``textual-serve``'s
:class:`~textual_serve.app_service.AppService` speaks that protocol and its
``textual.js`` draws the app in the page (xterm.js). Its ``Server`` is not used:
it serves anyone who reaches the port, logs the requests, waits without deadlines,
and lets a browser ask for any terminal size. Here:

- every request, pages, static files and the websocket, needs the token printed at
  start (``?token=``, an ``Authorization: Bearer`` header, or the cookie the first
  page sets), compared in constant time; the websocket also needs a same-origin
  ``Origin``; no request is logged (a URL can hold the token);
- each session runs the monitor with ``--readonly`` (:mod:`.command` adds it,
  whatever the flags), so no key in the page can reach the signal path;
- at most ``max_sessions`` sessions at once; a session with no input from its
  browser (key, mouse, resize, focus) for ``idle_timeout`` seconds is closed; its
  process is stopped within :data:`STOP_DEADLINE`, then killed;
- ``/once.txt`` and ``/once.json`` run ``nvtopy --once [--json]`` with the same
  monitor flags: the CLI's own output, escaping and errors, under a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import textual_serve
from aiohttp import WSCloseCode, WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

__all__ = ["FIRST_SCREEN_DEADLINE", "MAX_COLUMNS", "MAX_ROWS", "STOP_DEADLINE", "WebSettings", "make_app"]

STOP_DEADLINE = 5.0
"""Seconds a session's monitor has to quit once asked, before it is killed."""

FIRST_SCREEN_DEADLINE = 60.0
"""Seconds a session's monitor may take to send its first screen before the session is closed (when longer than
``idle_timeout``): idleness counts from that first screen, since nobody can type into a page that shows nothing."""

MAX_COLUMNS, MAX_ROWS = 500, 200
"""The largest terminal a browser may ask for: a bigger one costs the session's process memory, not the page."""

_MAX_MESSAGE = 64 * 1024  # a browser's message is a key, a paste, a resize: 64 KiB is plenty
_ONCE_AT_ONCE = 2  # /once.* requests that may run at the same time; more wait (within their deadline)
_FILES = Path(textual_serve.__file__).resolve().parent
_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@dataclass
class WebSettings:
    """What the server serves, and its limits."""

    monitor: tuple[str, ...]  # argv of one session's monitor (read-only)
    once: tuple[str, ...]  # argv of ``nvtopy --once`` with the same flags (``--json`` is added for /once.json)
    token: str
    cookie: str  # the name of the cookie that holds the token: one per server, as cookies ignore the port
    tls: bool = False
    max_sessions: int = 4
    idle_timeout: float = 1800.0
    once_timeout: float = 30.0
    sessions: set[_Session] = field(default_factory=set)
    reserved: int = 0  # sessions counted from the websocket's arrival, before their process starts


def _presented(request: web.Request, cookie: str) -> str | None:
    """The token a request brings: the query's, the Authorization header's, or the cookie's."""
    query = request.query.get("token")
    if query is not None:
        return query
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    return request.cookies.get(cookie)


def _token_matches(presented: str | None, token: str) -> bool:
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8", "replace"), token.encode("utf-8"))


def make_app(settings: WebSettings) -> web.Application:
    """The aiohttp application: GET routes only, every one behind the token."""

    @web.middleware
    async def token_required(request: web.Request, handler: Any) -> web.StreamResponse:
        if not _token_matches(_presented(request, settings.cookie), settings.token):
            raise web.HTTPUnauthorized(
                text="nvtopy web: this needs the token: open the URL 'nvtopy web' printed when it started\n",
                headers={"WWW-Authenticate": 'Bearer realm="nvtopy web"'},
            )
        response: web.StreamResponse = await handler(request)
        return response

    async def secure_headers(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers.setdefault("Content-Security-Policy", _CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("Cache-Control", "no-store")

    app = web.Application(middlewares=[token_required], client_max_size=_MAX_MESSAGE)
    app.on_response_prepare.append(secure_headers)
    once_slots = asyncio.Semaphore(_ONCE_AT_ONCE)
    pages = jinja2.Environment(loader=jinja2.FileSystemLoader(_FILES / "templates"), autoescape=True)

    async def index(request: web.Request) -> web.StreamResponse:
        return await _index(request, settings, pages)

    async def websocket(request: web.Request) -> web.StreamResponse:
        return await _websocket(request, settings)

    async def once_txt(_request: web.Request) -> web.StreamResponse:
        return await _once(settings, once_slots, json_format=False)

    async def once_json(_request: web.Request) -> web.StreamResponse:
        return await _once(settings, once_slots, json_format=True)

    app.add_routes(
        [
            web.get("/", index),
            web.get("/ws", websocket),
            web.get("/once.txt", once_txt),
            web.get("/once.json", once_json),
            web.static("/static", _FILES / "static", show_index=False, follow_symlinks=False),
        ]
    )

    async def close_sessions(_app: web.Application) -> None:
        for session in list(settings.sessions):
            with contextlib.suppress(Exception):  # a browser gone already: nothing to tell it
                await session.websocket.close(code=WSCloseCode.GOING_AWAY, message=b"nvtopy web stopped")

    app.on_shutdown.append(close_sessions)
    return app


def _sessions_full(settings: WebSettings) -> web.HTTPServiceUnavailable:
    return web.HTTPServiceUnavailable(
        text=f"nvtopy web: all {settings.max_sessions} sessions are in use (--max-sessions); try again later\n"
    )


async def _index(request: web.Request, settings: WebSettings, pages: jinja2.Environment) -> web.StreamResponse:
    """The page; the first visit (``?token=``) sets the cookie and comes back without the token in its URL."""
    if "token" in request.query:
        rest = [(key, value) for key, value in request.query.items() if key != "token"]
        response = web.HTTPSeeOther(request.rel_url.with_query(rest))
        response.set_cookie(
            settings.cookie, settings.token, httponly=True, samesite="Strict", secure=settings.tls, path="/"
        )
        return response
    if len(settings.sessions) + settings.reserved >= settings.max_sessions:
        raise _sessions_full(settings)
    font_size = _bounded_int(request.query.get("fontsize"), 16, 6, 64)
    context = {
        "font_size": font_size,
        "app_websocket_url": f"{'wss' if settings.tls else 'ws'}://{request.host}/ws",
        "config": {"static": {"url": "/static/"}},
        "application": {"name": "nvtopy"},
        "ping_url": "",
    }
    text = pages.get_template("app_index.html").render(context)
    return web.Response(text=text, content_type="text/html")


def _bounded_int(text: str | None, default: int, low: int, high: int) -> int:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        return default
    return min(max(value, low), high)


async def _websocket(request: web.Request, settings: WebSettings) -> web.StreamResponse:
    """One browser session: a read-only monitor process, wired to the page until either side ends."""
    scheme = "https" if settings.tls else "http"
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{scheme}://{request.host}":
        raise web.HTTPForbidden(text="nvtopy web: a page of another site may not open a session\n")
    if len(settings.sessions) + settings.reserved >= settings.max_sessions:
        raise _sessions_full(settings)
    settings.reserved += 1
    session: _Session | None = None
    websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=_MAX_MESSAGE)
    try:
        await websocket.prepare(request)
        columns = _bounded_int(request.query.get("width"), 80, 1, MAX_COLUMNS)
        rows = _bounded_int(request.query.get("height"), 24, 1, MAX_ROWS)
        session = _Session(shlex.join(("exec", *settings.monitor)), websocket)
        settings.reserved -= 1
        settings.sessions.add(session)
        await session.start(columns, rows)
        await _relay(websocket, session, settings.idle_timeout)
    finally:
        if session is None:
            settings.reserved -= 1
        else:
            await session.close()
            settings.sessions.discard(session)
        if not websocket.closed:
            with contextlib.suppress(Exception):
                await websocket.close()
    return websocket


async def _relay(websocket: web.WebSocketResponse, session: _Session, idle_timeout: float) -> None:
    """The browser's keys, mouse and size to the monitor, until the page goes, the monitor quits, or idle.

    Idle counts from the later of the last input and the monitor's first screen: a monitor slow to start
    (a loaded server: its imports alone took more than 2 s) is not closed before anyone could see it; one
    that never draws is closed after :data:`FIRST_SCREEN_DEADLINE` (or ``idle_timeout``, if longer).
    """
    loop = asyncio.get_running_loop()
    last_input = loop.time()
    while not session.ended:
        shown = session.first_screen_at
        if shown is None:
            left = max(idle_timeout, FIRST_SCREEN_DEADLINE) - (loop.time() - last_input)
        else:
            left = idle_timeout - (loop.time() - max(last_input, shown))
        if left <= 0:
            await websocket.close(code=WSCloseCode.POLICY_VIOLATION, message=b"idle: closed by nvtopy web")
            return
        try:
            message = await websocket.receive(timeout=min(left, 1.0))  # 1 s: a monitor that died is noticed
        except asyncio.TimeoutError:
            continue
        if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            return
        if message.type != WSMsgType.TEXT:
            continue
        try:
            envelope = json.loads(message.data)
        except ValueError:
            continue
        if not isinstance(envelope, list) or len(envelope) < 1:
            continue
        kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
        if kind == "ping":
            await websocket.send_json(["pong", data])
            continue  # the page's own heartbeat: not the user's
        if kind == "stdin" and isinstance(data, str):
            await session.send_bytes(data.encode("utf-8", "replace"))
        elif kind == "resize" and isinstance(data, dict):
            columns = _bounded_int(str(data.get("width")), 80, 1, MAX_COLUMNS)
            rows = _bounded_int(str(data.get("height")), 24, 1, MAX_ROWS)
            await session.set_terminal_size(columns, rows)
        elif kind == "focus":
            await session.focus()
        elif kind == "blur":
            await session.blur()
        else:
            continue
        last_input = loop.time()


class _Session(AppService):
    """textual-serve's app process for one browser, with a deadline on its stop, and nothing but its screen.

    Of the app's meta messages only ``exit`` is acted on: file deliveries and URLs to open are dropped
    (the monitor has none; a session must not hand the browser files of the server).
    """

    def __init__(self, command: str, websocket: web.WebSocketResponse) -> None:
        super().__init__(
            command,
            write_bytes=self._write_screen,
            write_str=websocket.send_str,
            close=self._close_page,
            download_manager=DownloadManager(),
        )
        self.websocket = websocket
        self.first_screen_at: float | None = None  # the loop's time the monitor's first output went to the page

    async def _write_screen(self, data: bytes) -> None:
        if self.first_screen_at is None:
            self.first_screen_at = asyncio.get_running_loop().time()
        await self.websocket.send_bytes(data)

    async def _close_page(self) -> None:
        await self.websocket.close()

    @property
    def ended(self) -> bool:
        return self._task is not None and self._task.done()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def on_meta(self, data: bytes) -> None:
        with contextlib.suppress(ValueError):
            if json.loads(data).get("type") == "exit":
                await self.remote_close()

    async def on_packed(self, payload: bytes) -> None:
        return None

    async def close(self) -> None:
        """Ask the monitor to quit; past :data:`STOP_DEADLINE`, kill it. Never waits longer than twice that."""
        with contextlib.suppress(asyncio.TimeoutError, OSError, RuntimeError):  # a pipe gone: killed below
            await asyncio.wait_for(self.stop(), STOP_DEADLINE)
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), STOP_DEADLINE)


async def _once(settings: WebSettings, slots: asyncio.Semaphore, *, json_format: bool) -> web.Response:
    """``nvtopy --once`` (``--json``) with the monitor's flags: the CLI's text, its escaping, its errors.

    At most :data:`_ONCE_AT_ONCE` run at a time; the wait for a turn counts against the deadline.
    """
    argv = [*settings.once, "--once", *(("--json",) if json_format else ("--no-color",))]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.once_timeout
    late = web.HTTPGatewayTimeout(text=f"nvtopy web: no snapshot within {settings.once_timeout:g} s\n")
    try:
        await asyncio.wait_for(slots.acquire(), settings.once_timeout)
    except asyncio.TimeoutError:
        raise late from None
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), max(deadline - loop.time(), 0.1))
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), STOP_DEADLINE)
            raise late from None
    finally:
        slots.release()
    if process.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["nvtopy --once failed"]
        raise web.HTTPServiceUnavailable(text=lines[0] + "\n")  # the CLI's one line, already made safe there
    kind = "application/json" if json_format else "text/plain"
    return web.Response(body=out, content_type=kind, charset="utf-8")
