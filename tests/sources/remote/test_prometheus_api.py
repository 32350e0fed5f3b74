"""The Prometheus HTTP API client (``nvtopy.sources.remote.prometheus``) against small local servers.

Each promise of the client has a test that fails when the promise is dropped: the one
deadline per request (a server that hangs, one that trickles its body a byte at a
time), the body cap (also after gzip), TLS verification (a self-signed server), the
credentials never shown, the matchers escaped (a value that tries to close its string).
"""

from __future__ import annotations

import gzip
import http.server
import json
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvtopy.errors import UsageError
from nvtopy.sources.remote.prometheus import (
    Matcher,
    PrometheusClient,
    PrometheusError,
    parse_matchers,
    quote,
    selector,
)

Reply = Callable[[http.server.BaseHTTPRequestHandler], None]


class Server:
    """A local HTTP server whose every POST is answered by ``reply(handler)``; requests are kept."""

    def __init__(self, reply: Reply, tls: ssl.SSLContext | None = None) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()  # a hanging reply waits for it (set at close)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode()
                server.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                server.reply(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                """A client that refuses the certificate (the point of the TLS tests) is not news."""
                if not isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError)):
                    super().handle_error(request, client_address)

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def start(reply: Reply, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(reply, tls)
        made.append(server)
        return server

    yield start
    for server in made:
        server.close()


def send(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


def answer(data: dict[str, Any], **extra: Any) -> Reply:
    body = json.dumps({"status": "success", "data": data, **extra}).encode()
    return lambda handler: send(handler, 200, body, Content_Type="application/json")


def vector(*series: tuple[dict[str, str], str], at: float = 1_795_000_000.5) -> Reply:
    return answer({"resultType": "vector", "result": [{"metric": m, "value": [at, v]} for m, v in series]})


# ----------------------------------------------------------------- matchers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Hostname=~"node[1-4]"', [("Hostname", "=~", "node[1-4]")]),
        ('{Hostname="a", pod!=""}', [("Hostname", "=", "a"), ("pod", "!=", "")]),
        ("job!~'dcgm.*',", [("job", "!~", "dcgm.*")]),
        ("instance=`10.0.0.1:9400`", [("instance", "=", "10.0.0.1:9400")]),
        (r'Hostname=~"node\\d+"', [("Hostname", "=~", r"node\d+")]),
        (r'a="q\"x\n\x41\u00e9\101"', [("a", "=", 'q"x\nAéA')]),
        ("  ", []),
    ],
)
def test_matchers_parse_as_promql_writes_them(text, expected):
    assert [(m.name, m.op, m.value) for m in parse_matchers(text)] == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Hostname", "expected =, !=, =~ or !~"),
        ("Hostname=node1", "expected a quoted value"),
        ('Hostname="node1', "unterminated string"),
        (r'Hostname=~"node\d"', "unknown escape \\d"),
        ('1abc="x"', "expected a label name"),
        ('a="x" b="y"', "expected a comma"),
        ('__name__="up"', "__name__ cannot be matched"),
        ('a="x\ny"', "a newline inside a quoted string"),
        (r'a="\xZZ"', "bad \\x escape"),
        (r'a="\ud800"', "is no character"),
    ],
)
def test_a_bad_matcher_is_one_usage_error(text, why):
    with pytest.raises(UsageError) as error:
        parse_matchers(text)
    assert why in str(error.value) and "\n" not in str(error.value)
    assert error.value.exit_code == 2


@pytest.mark.parametrize(
    "value",
    ['node"1', "back\\slash", "new\nline", '"} or vector(1) or {a="', "tab\tand\x1b[31mred", "é—✓", "`raw`", "'"],
)
def test_quote_writes_a_literal_that_reads_back_as_the_same_text(value):
    written = str(Matcher("Hostname", "=", value))
    assert written.startswith('Hostname="') and written.endswith('"')
    (back,) = parse_matchers(written)
    assert back.value == value, "escaping: the value can neither close its string nor lose a character"


def test_quote_refuses_text_that_is_not_unicode():
    with pytest.raises(ValueError):
        quote("a\udcff")


def test_selector_joins_matchers():
    assert selector(Matcher("__name__", "=~", "a|b"), Matcher("pod", "!=", "")) == '{__name__=~"a|b", pod!=""}'


# ----------------------------------------------------------------- URLs and credentials


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("prom:9090", "http://prom:9090"),
        ("https://user:secret@prom.example.org/prometheus/", "https://prom.example.org/prometheus"),
        ("http://[::1]:9090", "http://[::1]:9090"),
    ],
)
def test_the_url_is_shown_without_credentials(url, shown):
    client = PrometheusClient(url)
    assert client.url == shown and "secret" not in repr(client)


@pytest.mark.parametrize("bad", ["", "ftp://prom:21", "http://", "prom:99999", "http://prom:9090/?q=1"])
def test_a_bad_url_is_a_usage_error(bad):
    with pytest.raises(UsageError):
        PrometheusClient(bad)


def test_queries_are_posted_form_encoded_with_basic_auth(serve):
    server = serve(vector(({"__name__": "up", "instance": "a:1"}, "1")))
    client = PrometheusClient(f"http://alice:s%3Acret@127.0.0.1:{server.port}/prefix")
    long_matcher = "x" * 20_000  # far past any URL length limit: it fits in a POST body
    result = client.query(f'up{{job="{long_matcher}"}}')
    assert result == [({"__name__": "up", "instance": "a:1"}, 1.0)]
    request = server.requests[0]
    assert request["path"] == "/prefix/api/v1/query"
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert request["headers"]["Authorization"] == "Basic YWxpY2U6czpjcmV0"  # alice:s:cret
    assert long_matcher in request["body"] and "timeout=5s" in request["body"]
    assert client.queries == 1 and client.evaluated_at == 1_795_000_000.5


def test_credentials_never_appear_in_an_error(serve):
    server = serve(lambda handler: send(handler, 503, b"down"))
    with pytest.raises(PrometheusError) as error:
        PrometheusClient(f"http://alice:hunter2@127.0.0.1:{server.port}").query("up")
    assert "hunter2" not in str(error.value) and "alice" not in str(error.value)


# ----------------------------------------------------------------- answers


def test_nan_and_infinities_parse(serve):
    server = serve(vector(({"a": "1"}, "NaN"), ({"a": "2"}, "+Inf"), ({"a": "3"}, "-Inf")))
    values = [value for _, value in PrometheusClient(server.url).query("x")]
    assert values[0] != values[0] and values[1:] == [float("inf"), float("-inf")]


def test_warnings_of_a_partial_answer_are_kept(serve):
    data = {"resultType": "vector", "result": []}
    server = serve(answer(data, warnings=["remote store eu-1 did not answer", "line\nbreak"]))
    client = PrometheusClient(server.url)
    assert client.query("up") == []
    assert client.warnings == ["remote store eu-1 did not answer", "line break"]


def test_a_range_query_reads_a_matrix(serve):
    series = {"metric": {"gpu": "0"}, "values": [[100, "1"], [160, "NaN"], [220, "3.5"]]}
    server = serve(answer({"resultType": "matrix", "result": [series]}))
    client = PrometheusClient(server.url)
    ((labels, points),) = client.query_range("DCGM_FI_DEV_GPU_UTIL", 100, 220, 60)
    assert labels == {"gpu": "0"} and points[0] == (100.0, 1.0) and points[2] == (220.0, 3.5)
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/api/v1/query_range" and "step=60.0" in body


def _error(client: PrometheusClient, query: str = "up") -> PrometheusError:
    with pytest.raises(PrometheusError) as error:
        client.query(query)
    message = str(error.value)
    assert "\n" not in message and message.startswith("prometheus 127.0.0.1:"), message
    return error.value


def test_prometheus_errors_are_one_line_with_its_type(serve):
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": 'parse error:\nunexpected "}"'})
    server = serve(lambda handler: send(handler, 400, body.encode(), Content_Type="application/json"))
    error = _error(PrometheusClient(server.url))
    assert error.kind == "query" and error.error_type == "bad_data"
    assert 'query error (bad_data): parse error: unexpected "}"' in str(error)


@pytest.mark.parametrize(
    ("reply", "said", "kind"),
    [
        (lambda h: send(h, 502, b"<html>bad gateway</html>"), "answered HTTP 502", "http"),
        (lambda h: send(h, 200, b"<html>a login page</html>"), "not Prometheus's JSON", "json"),
        (answer({"resultType": "matrix", "result": []}), "answered a matrix where a vector was asked for", "result"),
        (answer({"resultType": "vector", "result": [{"metric": {"a": 1}, "value": [1, "2"]}]}), "malformed", "result"),
        (answer({"resultType": "vector", "result": [{"metric": {}, "value": [1, "two"]}]}), "malformed", "result"),
        (answer({"resultType": "vector", "result": {"not": "a list"}}), "malformed result", "result"),
    ],
)
def test_every_bad_answer_is_one_line(serve, reply, said, kind):
    error = _error(PrometheusClient(serve(reply).url))
    assert said in str(error) and error.kind == kind


def test_an_unreachable_server_is_one_line():
    port = Server(lambda h: None)
    address = port.port
    port.close()  # nothing listens there any more
    client = PrometheusClient(f"http://127.0.0.1:{address}")
    error = _error(client)
    assert error.kind == "unreachable" and "connection refused" in str(error)
    assert client.queries == 1, "a failed request is counted too"


# ----------------------------------------------------------------- deadlines and caps


def test_a_server_that_never_answers_costs_the_timeout_and_no_more(serve):
    server = serve(lambda handler: server.release.wait(30))
    client = PrometheusClient(server.url, timeout=0.5)
    started = time.monotonic()
    error = _error(client)
    assert time.monotonic() - started < 1.5, "the deadline holds"
    assert error.kind == "timeout" and "no answer within 0.5 s" in str(error)


def test_a_body_trickled_byte_by_byte_cannot_stretch_the_deadline(serve):
    def trickle(handler: http.server.BaseHTTPRequestHandler) -> None:
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for byte in body:  # each byte well within a per-read timeout; the whole far past the deadline
            if server.release.wait(0.1):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    server = serve(trickle)
    started = time.monotonic()
    error = _error(PrometheusClient(server.url, timeout=0.6))
    assert time.monotonic() - started < 1.5, "one deadline for the whole body, not one per read"
    assert error.kind == "timeout"


def test_abort_from_another_thread_ends_a_request_at_once(serve):
    server = serve(lambda handler: server.release.wait(30))
    client = PrometheusClient(server.url, timeout=20)
    threading.Timer(0.3, client.abort).start()
    started = time.monotonic()
    error = _error(client)
    assert time.monotonic() - started < 2, "stop() never waits for the server"
    assert error.kind == "timeout"


def test_an_answer_larger_than_the_cap_is_refused(serve):
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [], "pad": "x" * 5000}})
    server = serve(lambda handler: send(handler, 200, body.encode()))
    error = _error(PrometheusClient(server.url, max_bytes=4096))
    assert "answer larger than" in str(error)


def test_the_cap_counts_the_bytes_gzip_unfolds_to(serve):
    payload = b'{"status": "success", "data": {"resultType": "vector", "result": [], "pad": "' + b" " * 50_000_000
    bomb = gzip.compress(payload, compresslevel=9)  # 50 MB in about 50 kB
    assert len(bomb) < 100_000
    server = serve(lambda handler: send(handler, 200, bomb, Content_Encoding="gzip"))
    error = _error(PrometheusClient(server.url, max_bytes=1 << 20))
    assert "answer larger than 1 MiB" in str(error)


def test_a_gzipped_answer_is_read(serve):
    body = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "7"]}]}}
    )
    server = serve(lambda handler: send(handler, 200, gzip.compress(body.encode()), Content_Encoding="gzip"))
    assert PrometheusClient(server.url).query("x") == [({}, 7.0)]
    assert server.requests[0]["headers"]["Accept-Encoding"] == "gzip"


# ----------------------------------------------------------------- TLS

OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory) -> tuple[Path, Path]:
    if OPENSSL is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    cwd = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            OPENSSL,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    return cwd / "cert.pem", cwd / "key.pem"


def test_tls_verifies_the_server_certificate(serve, self_signed):
    cert, key = self_signed
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = serve(vector(({"a": "1"}, "1")), tls=context)
    client = PrometheusClient(f"https://127.0.0.1:{server.port}", timeout=3)
    error = _error(client)
    assert error.kind == "unreachable" and "TLS certificate not trusted" in str(error)
    # The same server, its certificate trusted: the refusal above was the verification, nothing else.
    trusting = PrometheusClient(f"https://127.0.0.1:{server.port}", timeout=3)
    trusting._ssl = ssl.create_default_context(cafile=str(cert))
    assert trusting.query("up") == [({"a": "1"}, 1.0)]


def test_the_bytes_of_each_answer_are_counted_as_received_and_as_json(serve):
    """What a benchmark reports of a refresh: the answer as sent (gzip-compressed) and the JSON it unfolds to."""
    body = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "7"]}] * 500}}
    ).encode()
    packed = gzip.compress(body)
    server = serve(lambda handler: send(handler, 200, packed, Content_Encoding="gzip"))
    client = PrometheusClient(server.url)
    client.query("x")
    client.query("x")
    assert (client.bytes_received, client.json_bytes) == (2 * len(packed), 2 * len(body))


def test_query_items_are_the_answers_items_as_decoded_with_the_time_it_was_evaluated_at(serve):
    items = [{"metric": {"a": "b"}, "value": [1795000000.5, "7"]}, {"metric": {}, "value": [1795000000.5, "NaN"]}]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": items}}).encode()
    client = PrometheusClient(serve(lambda handler: send(handler, 200, body)).url)
    assert client.query_items("x") == items
    assert client.evaluated_at == 1795000000.5
    assert client.rows_received == 2
    client.query("x")
    assert client.rows_received == 4, "every instant query's rows counted (bench_fleet's rows a refresh)"
