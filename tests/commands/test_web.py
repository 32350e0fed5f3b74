"""``nvtopy web`` over real HTTP and websockets (aiohttp's client), against a real server on loopback.

Each safety behaviour is checked where a client meets it: the token on every route
and on the websocket, the same-origin websocket, the session cap, the idle close,
the read-only monitor behind every session, the token never in the log, the
sessions' processes ended with the server. The browser's side is
tests/end_to_end/test_web_browser.py.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import aiohttp
import pytest

from nvtopy.commands.web.command import build_parser, check_args
from nvtopy.commands.web.server import WebSettings, make_app

from ..builders import run_nvtopy
from ..waiting import until
from ..web_helpers import WebServer, web_server

pytestmark = [pytest.mark.real_server]

WS_DEADLINE = 30.0  # a session's monitor starting on a loaded 2-core machine


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET without following redirects: status, headers, body."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture(scope="module")
def server():
    with web_server("--demo", "--max-sessions", "2") as running:
        yield running


ROUTES = ["/", "/ws", "/static/js/textual.js", "/static/css/xterm.css", "/once.txt", "/once.json", "/nothing"]


@pytest.mark.parametrize("route", ROUTES)
def test_no_route_answers_without_the_token(server: WebServer, route):
    wrong = "x" * len(server.token)
    for headers in ({}, {"Authorization": f"Bearer {wrong}"}, {"Cookie": f"nvtopy_web_0={server.token}"}):
        status, _, body = _get(server.base + route, headers)
        assert status == 401, (route, headers)
        assert b"token" in body and server.token.encode() not in body
    status, _, _ = _get(f"{server.base}{route}?token={wrong}")
    assert status == 401


@pytest.mark.parametrize("route", ["/static/js/textual.js", "/once.txt", "/once.json"])
def test_the_token_opens_every_route(server: WebServer, route):
    status, headers, _ = _get(server.base + route, {"Authorization": f"Bearer {server.token}"})
    assert status == 200
    assert headers["Cache-Control"] == "no-store"
    assert "default-src 'self'" in headers["Content-Security-Policy"]


def test_the_first_page_sets_the_cookie_and_leaves_the_token_out_of_its_url(server: WebServer):
    status, headers, _ = _get(server.url + "&fontsize=20")
    assert status == 303
    assert headers["Location"] == "/?fontsize=20"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    name_value = cookie.split(";")[0]
    assert name_value.endswith("=" + server.token)
    status, _, page = _get(server.base + "/?fontsize=20", {"Cookie": name_value})
    assert status == 200
    host = server.base.split("//")[1]
    assert f'data-session-websocket-url="ws://{host}/ws"'.encode() in page
    assert b'data-font-size="20"' in page


def test_once_txt_is_the_cli_table_without_escapes(server: WebServer):
    status, headers, body = _get(server.base + "/once.txt", {"Authorization": f"Bearer {server.token}"})
    assert status == 200, body
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    text = body.decode()
    assert "\x1b" not in text
    cli = run_nvtopy("--demo", "--once", "--no-color").stdout

    # The same table as the CLI's (the values move: the simulation runs on): the same header line, GPU rows. Not
    # the ruler under the header: its width follows the widest cell (a "power cap" a moment later widens it).
    def rows(table: str) -> list[list[str]]:
        return [line.split()[:2] for line in table.splitlines()[1:4] if not line.startswith("─")]

    assert rows(text) == rows(cli) and len(rows(cli)) == 2, f"served:\n{text}\nthe CLI's:\n{cli}"


def test_once_json_is_the_cli_document(server: WebServer):
    _, headers, body = _get(server.base + "/once.json", {"Authorization": f"Bearer {server.token}"})
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    document = json.loads(body)
    cli = json.loads(run_nvtopy("--demo", "--once", "--json").stdout)
    assert document.keys() == cli.keys()
    assert len(document["gpus"]) == len(cli["gpus"]) == 4
    assert document["backend"] == "simulated"


def test_the_token_is_written_once_the_start_line(server: WebServer):
    _get(server.url)
    _get(f"{server.base}/once.txt?token={server.token}")
    _get(f"{server.base}/nothing?token=not-it")
    assert server.output().count(server.token) == 1


def _ws(server: WebServer) -> str:
    return server.base.replace("http", "ws", 1) + "/ws"


async def _first_screen(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    """The monitor's first drawing in the session (raw terminal output)."""
    drawn = b""
    while b"GPU" not in drawn:
        message = await ws.receive(timeout=WS_DEADLINE)
        assert message.type == aiohttp.WSMsgType.BINARY, message
        drawn += message.data
    return drawn


async def test_the_websocket_needs_the_token_and_the_same_origin(server: WebServer):
    async with aiohttp.ClientSession() as client:
        ws_url = server.base.replace("http", "ws") + "/ws?width=120&height=40"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(ws_url, timeout=aiohttp.ClientWSTimeout(ws_close=10))
        assert refused.value.status == 401
        token = {"Authorization": f"Bearer {server.token}"}
        with pytest.raises(aiohttp.WSServerHandshakeError) as foreign:
            await client.ws_connect(ws_url, headers={**token, "Origin": "http://evil.example"})
        assert foreign.value.status == 403
        assert server.sessions() == []  # neither started a monitor
        async with client.ws_connect(ws_url, headers={**token, "Origin": server.base}) as ws:
            await _first_screen(ws)
            (session,) = server.sessions()
            command = session.cmdline()
            assert command[-1] == "--readonly" and "--demo" in command  # the monitor's flags, read-only


async def _connect_when_free(client: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    """A session, once the server has a place for one (a closed session's place frees as its monitor ends)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + WS_DEADLINE
    while True:
        try:
            return await client.ws_connect(url)
        except aiohttp.WSServerHandshakeError as error:
            if error.status != 503 or loop.time() > end:
                raise
        await asyncio.sleep(0.1)


async def test_sessions_are_capped_and_a_closed_one_frees_its_place(server: WebServer):
    token = {"Authorization": f"Bearer {server.token}"}
    ws_url = server.base.replace("http", "ws") + "/ws"
    async with aiohttp.ClientSession(headers=token) as client:
        async with (
            await _connect_when_free(client, ws_url) as first,
            await _connect_when_free(client, ws_url) as second,
        ):
            await _first_screen(first)
            await _first_screen(second)
            with pytest.raises(aiohttp.WSServerHandshakeError) as full:
                await client.ws_connect(ws_url)
            assert full.value.status == 503
            status, _, body = _get(server.base + "/", token)
            assert status == 503 and b"--max-sessions" in body
        until(lambda: not server.sessions(), WS_DEADLINE, "the closed sessions' monitors end")
        async with await _connect_when_free(client, ws_url) as again:
            await _first_screen(again)


async def test_an_idle_session_is_closed_and_its_monitor_ends():
    with web_server("--demo", "--idle-timeout", "2") as idle:
        headers = {"Authorization": f"Bearer {idle.token}"}
        async with aiohttp.ClientSession(headers=headers) as client, client.ws_connect(_ws(idle)) as ws:
            await _first_screen(ws)
            end = asyncio.get_running_loop().time() + WS_DEADLINE  # the monitor draws on: bound the whole wait
            while (message := await ws.receive(timeout=WS_DEADLINE)).type == aiohttp.WSMsgType.BINARY:
                assert asyncio.get_running_loop().time() < end, "the idle session was never closed"
            assert message.type == aiohttp.WSMsgType.CLOSE
            assert message.extra == "idle: closed by nvtopy web"
        until(lambda: not idle.sessions(), WS_DEADLINE, "the idle session's monitor ends")


async def test_a_monitor_slower_to_draw_than_the_idle_timeout_is_shown_then_closed_as_idle():
    """Idle counts from the first screen: on a loaded server the monitor's start alone took longer than a short
    --idle-timeout, and the session was closed before the page showed anything (this test's neighbour failed so
    in whole-suite runs). Here the monitor starts 3 s late, with a 1 s idle timeout."""
    import shlex
    import sys

    from aiohttp import web

    late = f"sleep 3; exec {shlex.quote(sys.executable)} -m nvtopy --demo --readonly"
    settings = WebSettings(monitor=("sh", "-c", late), once=("true",), token="t", cookie="c", idle_timeout=1.0)
    runner = web.AppRunner(make_app(settings))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with (
            aiohttp.ClientSession(headers={"Authorization": "Bearer t"}) as client,
            client.ws_connect(f"ws://127.0.0.1:{port}/ws?width=100&height=30") as ws,
        ):
            started = asyncio.get_running_loop().time()
            await _first_screen(ws)
            assert asyncio.get_running_loop().time() - started >= 3, "the monitor started late"
            while (message := await ws.receive(timeout=WS_DEADLINE)).type == aiohttp.WSMsgType.BINARY:
                pass
            assert message.type == aiohttp.WSMsgType.CLOSE and message.extra == "idle: closed by nvtopy web"
        end = asyncio.get_running_loop().time() + WS_DEADLINE  # the server runs on this loop: waited for here
        while settings.sessions:
            assert asyncio.get_running_loop().time() < end, "the idle session's monitor never ended"
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()


async def test_stopping_the_server_ends_every_session():
    with web_server("--demo") as running:
        headers = {"Authorization": f"Bearer {running.token}"}
        async with aiohttp.ClientSession(headers=headers) as client, client.ws_connect(_ws(running)) as ws:
            await _first_screen(ws)
            (session,) = running.sessions()
            running.process.terminate()
            await asyncio.to_thread(running.process.wait, 30)
            assert running.process.returncode == 0
            assert not session.is_running() or session.status() == "zombie"


def test_every_route_is_a_get():
    """Nothing in the server takes a POST, PUT or DELETE: the only input is the read-only monitor's keys."""
    settings = WebSettings(monitor=("nvtopy",), once=("nvtopy",), token="t", cookie="c")
    app = make_app(settings)
    assert {route.method for route in app.router.routes()} <= {"GET", "HEAD"}


@pytest.mark.parametrize("flags", [["--demo"], ["--demo", "--readonly"], ["--remote", "node:9400"]])
def test_every_session_runs_the_monitor_read_only(flags, monkeypatch):
    from nvtopy.commands.web import command

    parser = build_parser("web")
    args = parser.parse_args([*flags, "--listen", "127.0.0.1:0", "--max-sessions", "3"])
    check_args(parser, args)
    assert args.monitor_argv == flags  # the server's own flags are not the monitor's
    captured = {}

    async def serve(settings, host, port, tls):
        captured["settings"] = settings
        return 0

    monkeypatch.setattr(command, "_check_monitor", lambda nvtopy: None)
    monkeypatch.setattr(command, "_serve", serve)
    command.run("web", args)
    assert captured["settings"].monitor[-1] == "--readonly"
    assert captured["settings"].monitor[-1 - len(flags) : -1] == tuple(flags)
    assert captured["settings"].max_sessions == 3


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--once"], "--once is not a web view"),
        (["--json"], "--json is not a web view"),
        (["--max-sessions", "0"], "not between 1 and 64"),
        (["--max-sessions", "x"], "not a whole number"),
        (["--idle-timeout", "nan"], "not between 1 and 604800"),
        (["--listen", "localhost:http"], "the port must be a number"),
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--tls-cert", "/nonexistent.pem"], "--tls-cert /nonexistent.pem"),
        (["--list", "127.0.0.1:1"], "unknown option '--list'"),
        (["--demo", "--remote", "x:1"], "cannot be combined"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args, said):
    result = run_nvtopy("web", *args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A throwaway self-signed certificate for 127.0.0.1 and its key, made by the openssl CLI."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("web-tls")
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        cwd=folder,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return folder / "cert.pem", folder / "key.pem"


def test_with_tls_everything_is_https_and_the_cookie_is_secure(certificate):
    import ssl

    cert, key = certificate
    context = ssl.create_default_context(cafile=str(cert))
    with web_server("--demo", "--tls-cert", str(cert), "--tls-key", str(key)) as secure:
        assert secure.base.startswith("https://127.0.0.1:")
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        request = urllib.request.Request(
            secure.base + "/once.json", headers={"Authorization": f"Bearer {secure.token}"}
        )
        with opener.open(request, timeout=60) as response:
            assert json.loads(response.read())["backend"] == "simulated"
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(secure.base + "/once.json", timeout=60)
        assert refused.value.code == 401

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        with pytest.raises(urllib.error.HTTPError) as first:
            urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect).open(secure.url)
        assert first.value.code == 303 and "Secure" in first.value.headers["Set-Cookie"]
        with opener.open(
            urllib.request.Request(secure.base + "/", headers={"Authorization": f"Bearer {secure.token}"})
        ) as page:
            assert b'data-session-websocket-url="wss://' in page.read()
