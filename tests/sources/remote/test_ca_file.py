"""``--ca-file``: ``--remote`` and ``--prometheus`` (and ``report --prometheus``) verify https:// servers whose
certificates a private CA signed, with throwaway certificates made by the ``openssl`` CLI (test_exporter_tls)."""

# ruff: noqa: F811 -- the fixtures certs and serve are imported from the modules that define them

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nvtopy.commands.exporter.server import serve as serve_exporter
from nvtopy.errors import UsageError
from nvtopy.sources.remote.exporters import RemoteHosts
from nvtopy.sources.remote.prometheus import PrometheusClient, PrometheusError
from nvtopy.sources.remote.tls import client_context

from ...commands.test_exporter_tls import OPENSSL, Certs, _key_and_csr, _sign, certs  # noqa: F401
from .test_fleet import run_cli
from .test_prometheus_api import serve, vector  # noqa: F401
from .test_remote import exporter_poller

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="the openssl CLI is needed to make test certificates")


def _server_context(certs: Certs, name: str = "server") -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs[f"{name}.pem"], certs[f"{name}.key"])
    return context


@pytest.fixture(scope="module")
def impostor(certs: Certs) -> Certs:
    """``impostor.pem``: a certificate of the same private CA as the exporters', for another name
    (impostor.example), as any host of the fleet could get one for itself."""
    _key_and_csr("impostor", "/CN=impostor.example", certs.dir)
    _sign("impostor", "ca", certs.dir, "subjectAltName=DNS:impostor.example\nextendedKeyUsage=serverAuth\n")
    return certs


class _Recorder:
    """An HTTPS server on 127.0.0.1 that keeps the headers of every request it gets (GET or POST) and
    answers 404: what a host that impersonates an exporter or a Prometheus would learn."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self.headers: list[dict[str, str]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _keep(self) -> None:
                recorder.headers.append(dict(self.headers.items()))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _keep

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                """The client refusing the certificate is the point, not news."""

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://alice:s3cret@127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recorder() -> Iterator[Callable[[ssl.SSLContext], _Recorder]]:
    made: list[_Recorder] = []

    def start(tls: ssl.SSLContext) -> _Recorder:
        made.append(_Recorder(tls))
        return made[-1]

    yield start
    for server in made:
        server.close()


def _remote_note(url: str, ca_file: str) -> str:
    snapshot = RemoteHosts([url], interval=1.0, timeout=3.0, ca_file=ca_file).poll_once()
    assert [g.lost for g in snapshot.gpus] == [True]
    return snapshot.gpus[0].note or ""


def _prometheus_error(url: str, ca_file: str) -> PrometheusError:
    with pytest.raises(PrometheusError) as error:
        PrometheusClient(url, timeout=3, ca_file=ca_file).query("up")
    return error.value


def test_a_private_ca_is_trusted_only_when_given(serve, certs):
    server = serve(vector(({"Hostname": "node-a"}, "1")), tls=_server_context(certs))
    url = f"https://127.0.0.1:{server.port}"
    with pytest.raises(PrometheusError) as refused:
        PrometheusClient(url, timeout=3).query("up")
    assert refused.value.kind == "unreachable" and "TLS certificate not trusted" in str(refused.value)
    assert PrometheusClient(url, timeout=3, ca_file=certs["ca.pem"]).query("up") == [({"Hostname": "node-a"}, 1.0)]
    with pytest.raises(PrometheusError, match="TLS certificate not trusted"):  # another CA: still verified
        PrometheusClient(url, timeout=3, ca_file=certs["other-ca.pem"]).query("up")


def test_the_recorder_sees_the_credentials_of_a_client_that_trusts_it(recorder, certs):
    """The control of the two tests below: with the genuine certificate the request, credentials and all, arrives."""
    genuine = recorder(_server_context(certs))
    assert _remote_note(genuine.url, certs["ca.pem"]).endswith("answered HTTP 404")
    assert _prometheus_error(genuine.url, certs["ca.pem"]).kind == "http"
    assert [h.get("Authorization") for h in genuine.headers] == ["Basic YWxpY2U6czNjcmV0"] * 2  # alice:s3cret


def test_remote_checks_the_host_name_of_a_certificate_of_the_same_ca(recorder, impostor):
    """A fleet host with a certificate of the fleet's CA for its own name cannot pass for the exporter at
    127.0.0.1 (and so never learns the URL's credentials): --remote checks the name (here the address), not
    only the CA."""
    server = recorder(_server_context(impostor, "impostor"))
    note = _remote_note(server.url, impostor["ca.pem"])
    assert "unreachable" in note and "certificate verify failed: ip address mismatch" in note.lower()
    assert server.headers == [], "nothing was sent to the impostor, credentials least of all"


def test_prometheus_checks_the_host_name_of_a_certificate_of_the_same_ca(recorder, impostor):
    """The same for --prometheus. (The test this replaces asked 127.0.0.2, where nothing listened: refused,
    name check or not.)"""
    server = recorder(_server_context(impostor, "impostor"))
    error = _prometheus_error(server.url, impostor["ca.pem"])
    assert error.kind == "unreachable" and "TLS certificate not trusted" in str(error)
    assert "IP address mismatch, certificate is not valid for '127.0.0.1'" in str(error) and "s3cret" not in str(error)
    assert server.headers == [], "nothing was sent to the impostor, credentials least of all"


def test_remote_hosts_read_an_exporter_behind_a_private_ca(sim, certs):
    poller = exporter_poller(sim, gpus=2, seed=1, hostname="node-a")
    server, _ = serve_exporter(poller, "127.0.0.1", 0, tls=_server_context(certs))
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        refused = RemoteHosts([url], interval=1.0, timeout=2.0).poll_once()
        assert [g.lost for g in refused.gpus] == [True] and "certificate verify failed" in refused.gpus[0].note
        trusted = RemoteHosts([url], interval=1.0, timeout=2.0, ca_file=certs["ca.pem"]).poll_once()
        assert [(g.static.host, g.lost) for g in trusted.gpus] == [("node-a", False), ("node-a", False)]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("missing.pem", "--ca-file '{path}': no such file"),
        ("notes.txt", "--ca-file '{path}': holds no PEM certificate"),
        ("", "--ca-file '{path}': is a directory"),
    ],
)
def test_a_bad_ca_file_is_one_usage_error(tmp_path, name, said):
    (tmp_path / "notes.txt").write_text("not a certificate\n")
    path = str(tmp_path / name) if name else str(tmp_path)
    for make in (
        lambda: client_context(path),
        lambda: PrometheusClient("https://prom:9090", ca_file=path),
        lambda: RemoteHosts(["https://node2:9400"], ca_file=path),
    ):
        with pytest.raises(UsageError) as error:
            make()
        assert str(error.value) == said.format(path=path)


def test_a_hostile_file_name_is_shown_escaped(tmp_path):
    path = str(tmp_path / "\x1b]0;pwned\x07.pem")
    with pytest.raises(UsageError) as error:
        client_context(path)
    assert "\x1b" not in str(error.value) and "\x07" not in str(error.value)


def test_no_ca_file_leaves_the_system_cas():
    assert client_context(None) is None


def test_cli_reads_a_fleet_behind_a_private_ca(sim, certs):
    poller = exporter_poller(sim, gpus=1, seed=3, hostname="node-z")
    server, _ = serve_exporter(poller, "127.0.0.1", 0, tls=_server_context(certs))
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        result = run_cli("--remote", url, "--ca-file", certs["ca.pem"], "--once", "--json")
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert '"node-z"' in result.stdout and '"lost": true' not in result.stdout
