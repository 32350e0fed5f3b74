"""The exporter's ``/once.txt`` and ``/once.json``: the latest snapshot as ``nvtopy --once`` prints it.

Served by the real server on loopback; a hostile command line (escape sequences,
a newline, a bidi override) comes out escaped exactly as the CLI's renderers do it.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest

from nvtopy.commands.exporter.server import serve
from nvtopy.formats.contract import dumps
from nvtopy.render.text import render_snapshot

from ..builders import LatestSource, gpu_process, gpu_state, snapshot_of
from ..prometheus_fixtures import shutdown_server

pytestmark = [pytest.mark.real_server]

HOSTILE = "python \x1b]0;owned\x07job.py\n--fake-row \u202eevil"


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


@pytest.fixture
def exporter():
    source = LatestSource(None)
    server, _ = serve(source, "127.0.0.1", 0)
    try:
        yield source, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        shutdown_server(server)


def test_once_is_the_clis_text_and_json_escaped_alike(exporter):
    source, base = exporter
    snapshot = snapshot_of(gpu_state(0, gpu_process(0, 4242, command=HOSTILE)))
    source.latest = snapshot
    status, kind, body = _get(base + "/once.txt")
    expected = io.StringIO()
    render_snapshot(snapshot, expected, color=False)
    assert (status, kind) == (200, "text/plain; charset=utf-8")
    assert body.decode() == expected.getvalue()
    assert "\x1b" not in body.decode() and "\u202e" not in body.decode() and "4242" in body.decode()
    status, kind, body = _get(base + "/once.json")
    assert (status, kind) == (200, "application/json; charset=utf-8")
    assert body.decode() == dumps(snapshot) + "\n"
    assert (
        json.loads(body)["gpus"][0]["processes"][0]["command"]
        == json.loads(dumps(snapshot))["gpus"][0]["processes"][0]["command"]
    )


def test_before_the_first_collection_once_is_503(exporter):
    _, base = exporter
    for path in ("/once.txt", "/once.json"):
        status, _, body = _get(base + path)
        assert status == 503 and b"no snapshot yet" in body


def test_the_metrics_are_still_served(exporter):
    source, base = exporter
    source.latest = snapshot_of(gpu_state(0))
    status, _, body = _get(base + "/metrics")
    assert status == 200 and b"DCGM_FI_DEV_" in body
