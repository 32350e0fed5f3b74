"""``nvtopy exporter`` over TLS and mutual TLS, with throwaway certificates made here by the ``openssl`` CLI.

A CA signs the server's certificate (for 127.0.0.1) and a client's; a second CA
signs another client's. Each check is made where a scraper meets it (a real
HTTPS client, a raw socket), and each fails when its switch is off: with TLS
off the plain client gets metrics; without client verification the client with
no certificate gets them; a handshake without a deadline keeps the silent
client's socket open, and one done by the accepting thread stops the scrape.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvtopy.commands.exporter import server as httpserver
from nvtopy.commands.exporter.command import EXPORTER_GROUPS
from nvtopy.commands.exporter.server import serve, tls_context
from nvtopy.errors import UsageError
from nvtopy.sources.collector import Collector
from nvtopy.sources.poller import Poller

from ..builders import run_nvtopy
from ..prometheus_fixtures import DATA_S, prometheus, requires_prometheus, shutdown_server, wait

ROOT = Path(__file__).resolve().parents[2]
OPENSSL = shutil.which("openssl")
pytestmark = [
    pytest.mark.skipif(OPENSSL is None, reason="the openssl CLI is needed to make test certificates"),
    pytest.mark.real_server,
]


# ---------------------------------------------------------------- throwaway certificates


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)  # type: ignore[list-item]


def _key_and_csr(name: str, subject: str, cwd: Path) -> None:
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        subject,
        cwd=cwd,
    )


def _ca(name: str, cwd: Path) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN=nvtopy test {name}",
        cwd=cwd,
    )


def _sign(name: str, ca: str, cwd: Path, extensions: str) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        cwd=cwd,
    )


@dataclass(frozen=True)
class Certs:
    dir: Path

    def __getitem__(self, name: str) -> str:
        return str(self.dir / name)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    """ca signs server and client; other-ca signs stranger. ``other.key``: a key of no certificate here."""
    cwd = tmp_path_factory.mktemp("tls")
    _ca("ca", cwd)
    _ca("other-ca", cwd)
    _key_and_csr("server", "/CN=127.0.0.1", cwd)
    _sign("server", "ca", cwd, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _key_and_csr("client", "/CN=prometheus", cwd)
    _sign("client", "ca", cwd, "extendedKeyUsage=clientAuth\n")
    _key_and_csr("stranger", "/CN=prometheus", cwd)
    _sign("stranger", "other-ca", cwd, "extendedKeyUsage=clientAuth\n")
    _key_and_csr("other", "/CN=other", cwd)
    _openssl("pkey", "-in", "server.key", "-out", "encrypted.key", "-aes256", "-passout", "pass:secret", cwd=cwd)
    return Certs(cwd)


def _client(certs: Certs, who: str | None = None) -> ssl.SSLContext:
    """A scraper's context: trusts ``ca`` (verifies the server), presents ``who``'s certificate if given."""
    context = ssl.create_default_context(cafile=certs["ca.pem"])
    if who is not None:
        context.load_cert_chain(certs[f"{who}.pem"], certs[f"{who}.key"])
    return context


# ---------------------------------------------------------------- the server


@dataclass
class Exporter:
    server: Any

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/metrics"


@pytest.fixture
def exporter(sim, certs) -> Iterator[Callable[..., Exporter]]:
    """A factory: an exporter over a simulated backend on 127.0.0.1, HTTPS with ``certs``' server certificate."""
    servers = []

    def make(*, mutual: bool = False, tls: bool = True) -> Exporter:
        backend = sim(gpus=2)
        poller = Poller(backend, interval=1.0, groups=EXPORTER_GROUPS, collector=Collector(backend, history=1))
        poller.poll_once()
        context = tls_context(certs["server.pem"], certs["server.key"], certs["ca.pem"] if mutual else None)
        server, _ = serve(poller, "127.0.0.1", 0, tls=context if tls else None)
        servers.append(server)
        return Exporter(server)

    yield make
    for server in servers:
        shutdown_server(server)


def _scrape(url: str, context: ssl.SSLContext | None, timeout: float = 5.0) -> str:
    """The body of a GET (no proxy from the environment: the server is on loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(url, timeout=timeout) as response:
        assert response.status == 200
        return response.read().decode("utf-8")


def _refused(url: str, context: ssl.SSLContext) -> BaseException:
    """The error a scrape with ``context`` ends in; fails if it gets metrics, or if it only ran out of time."""
    started = time.monotonic()
    with pytest.raises((OSError, http.client.HTTPException)) as failed:
        _scrape(url, context, timeout=5.0)
    assert time.monotonic() - started < 4.0, "refused at once, not left waiting"
    assert not isinstance(failed.value, TimeoutError)
    return failed.value


# ---------------------------------------------------------------- HTTPS


def test_an_https_scrape_gets_the_metrics(exporter, certs):
    ex = exporter()
    body = _scrape(ex.url, _client(certs))
    assert body.count("\nDCGM_FI_DEV_GPU_UTIL{") == 2
    assert "nvtopy_exporter_info{" in body
    # The certificate served is the one given, verified against its CA for 127.0.0.1.
    with (
        socket.create_connection(("127.0.0.1", ex.port), timeout=5) as raw,
        _client(certs).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert dict(x[0] for x in tls.getpeercert()["subject"])["commonName"] == "127.0.0.1"


def test_gzip_over_https(exporter, certs):
    import gzip

    ex = exporter()
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=_client(certs))
    )
    request = urllib.request.Request(ex.url, headers={"Accept-Encoding": "gzip"})
    with opener.open(request, timeout=5) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert b"\nDCGM_FI_DEV_GPU_UTIL{" in gzip.decompress(response.read())


def test_a_plain_http_client_is_refused(exporter):
    ex = exporter()
    with socket.create_connection(("127.0.0.1", ex.port), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                answer += chunk
    assert b"DCGM_FI_" not in answer and b"nvtopy_" not in answer, "no metrics in the clear"
    # What it gets instead, as Go's servers answer it: a 400 that says why (best effort: or a bare close).
    assert answer == b"" or (answer.startswith(b"HTTP/1.0 400 ") and b"HTTPS server" in answer)


def test_a_client_that_does_not_trust_the_server_certificate_gives_up(exporter):
    """The other side of TLS: the scraper verifies us. A client trusting only the system CAs refuses."""
    ex = exporter()
    error = _refused(ex.url, ssl.create_default_context())
    assert "CERTIFICATE_VERIFY_FAILED" in str(error)


# ---------------------------------------------------------------- mutual TLS


def test_mtls_a_client_without_a_certificate_is_refused(exporter, certs):
    ex = exporter(mutual=True)
    _refused(ex.url, _client(certs))


def test_mtls_a_client_certificate_signed_by_the_ca_is_accepted(exporter, certs):
    ex = exporter(mutual=True)
    assert "\nDCGM_FI_DEV_GPU_UTIL{" in _scrape(ex.url, _client(certs, "client"))


def test_mtls_a_client_certificate_signed_by_another_ca_is_refused(exporter, certs):
    ex = exporter(mutual=True)
    _refused(ex.url, _client(certs, "stranger"))
    assert "\nDCGM_FI_DEV_GPU_UTIL{" in _scrape(ex.url, _client(certs, "client")), "and the server goes on"


def test_without_mtls_any_client_may_scrape(exporter, certs):
    """The control of the three above: the same clients, against a server that asks for no certificate."""
    ex = exporter(mutual=False)
    for who in (None, "client", "stranger"):
        assert "\nDCGM_FI_DEV_GPU_UTIL{" in _scrape(ex.url, _client(certs, who))


# ---------------------------------------------------------------- deadlines


def test_a_silent_tls_client_neither_blocks_scrapes_nor_stays(exporter, certs, monkeypatch):
    """Connect and send nothing (or half a ClientHello): scrapes go on, and the server closes it at the deadline."""
    monkeypatch.setattr(httpserver, "REQUEST_DEADLINE", 1.0)
    ex = exporter(mutual=True)
    threads = threading.active_count()
    silent = [socket.create_connection(("127.0.0.1", ex.port), timeout=5) for _ in range(20)]
    hello = socket.create_connection(("127.0.0.1", ex.port), timeout=5)
    hello.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello, then nothing
    silent.append(hello)
    started = time.monotonic()
    try:
        for _ in range(3):
            t0 = time.monotonic()
            assert "\nDCGM_FI_DEV_GPU_UTIL{" in _scrape(ex.url, _client(certs, "client"))
            assert time.monotonic() - t0 < 0.5, "a scrape does not wait behind the silent clients"
        assert threading.active_count() <= threads + 2, "no thread per silent client"
        for conn in silent:  # each is closed by the server once the deadline passed
            conn.settimeout(max(0.1, started + 3.0 - time.monotonic()))
            with contextlib.suppress(ConnectionResetError):
                assert conn.recv(100) == b""
        assert time.monotonic() - started < 3.0
    finally:
        for conn in silent:
            conn.close()


class _TrickleSocket:
    """A socket whose reader takes 1 byte every 20 ms: each send is quick, the whole write is not."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def settimeout(self, seconds: float) -> None:
        self.timeouts.append(seconds)

    def send(self, data: Any) -> int:
        time.sleep(0.02)
        return 1


def test_writing_a_response_has_one_deadline_not_one_per_send():
    """On a TLS socket ``sendall`` gives each send the timeout: a trickling reader would hold a worker for ever."""
    sock = _TrickleSocket()
    writer = httpserver._SocketWriter(sock, time.monotonic() + 0.3)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        writer.write(b"x" * 1000)  # 20 s at the reader's pace
    assert time.monotonic() - started < 1.0
    assert all(t <= 0.3 for t in sock.timeouts) and sock.timeouts[-1] < sock.timeouts[0], "what is left, each time"


# ---------------------------------------------------------------- bad files: one line, exit 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NVTOPY_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return run_nvtopy("exporter", "--demo", "--listen", "127.0.0.1:0", *args, cwd=ROOT, env=env, timeout=30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "{missing}", "--tls-key", "{server.key}"], "--tls-cert {missing}: no such file"),
        (["--tls-cert", "{dir}", "--tls-key", "{server.key}"], "--tls-cert {dir}: is a directory"),
        (["--tls-cert", "{server.pem}", "--tls-key", "{missing}"], "--tls-key {missing}: no such file"),
        (["--tls-cert", "{server.key}", "--tls-key", "{server.key}"], "no PEM certificate in it"),
        (["--tls-cert", "{server.pem}", "--tls-key", "{server.pem}"], "--tls-key {server.pem}: no PEM private key"),
        (["--tls-cert", "{server.pem}"], "no private key in it; give the key with --tls-key"),
        (["--tls-cert", "{server.pem}", "--tls-key", "{other.key}"], "is not the private key of --tls-cert"),
        (["--tls-cert", "{server.pem}", "--tls-key", "{encrypted.key}"], "the key is encrypted"),
        (
            ["--tls-cert", "{server.pem}", "--tls-key", "{server.key}", "--tls-client-ca", "{server.key}"],
            "--tls-client-ca {server.key}: holds no PEM certificate",
        ),
        (
            ["--tls-cert", "{server.pem}", "--tls-key", "{server.key}", "--tls-client-ca", "{missing}"],
            "--tls-client-ca {missing}: no such file",
        ),
        (["--tls-key", "{server.key}"], "--tls-key needs --tls-cert"),
        (["--tls-client-ca", "{ca.pem}"], "--tls-client-ca needs --tls-cert"),
    ],
    ids=[
        "missing-cert",
        "cert-is-a-directory",
        "missing-key",
        "cert-is-a-key",
        "key-is-a-cert",
        "no-key",
        "key-of-another-cert",
        "encrypted-key",
        "ca-is-a-key",
        "missing-ca",
        "key-alone",
        "ca-alone",
    ],
)
def test_a_bad_tls_file_is_one_line_and_exit_2(certs, tmp_path, args, message):
    names = {"missing": str(tmp_path / "nope.pem"), "dir": str(tmp_path)}

    def fill(text: str) -> str:
        for name in ("server.key", "server.pem", "other.key", "encrypted.key", "ca.pem"):
            text = text.replace("{" + name + "}", certs[name])
        return text.format(**names)

    result = _cli(*[fill(a) for a in args])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvtopy: error: ") and fill(message) in lines[0]
    assert result.stdout == ""


def test_tls_context_raises_usage_errors_only(certs):
    """The library function the CLI uses: the same errors, as UsageError (exit 2), never ssl's own."""
    with pytest.raises(UsageError, match="not the private key"):
        tls_context(certs["server.pem"], certs["other.key"])
    context = tls_context(certs["server.pem"], certs["server.key"], certs["ca.pem"])
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert tls_context(certs["server.pem"], certs["server.key"]).verify_mode == ssl.CERT_NONE


def test_cli_serves_https_with_mutual_tls(certs):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "NVTOPY_DEBUG"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    args = ["--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--tls-client-ca", certs["ca.pem"]]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvtopy", "exporter", "--demo", "--listen", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                body = _scrape(url, _client(certs, "client"), timeout=2)
                if "\nDCGM_FI_DEV_GPU_UTIL{" in body:
                    break
            except (OSError, http.client.HTTPException):
                pass
            assert time.monotonic() < deadline, "no metrics over HTTPS in 20 s"
            time.sleep(0.1)
        with pytest.raises((OSError, http.client.HTTPException)):
            _scrape(url, _client(certs), timeout=5)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert f"serving https://127.0.0.1:{port}/metrics" in stderr
    assert "Traceback" not in stderr


# ---------------------------------------------------------------- a real Prometheus, with the README's configuration


def _readme_scrape_config(certs: Certs, target: str) -> str:
    """The README's ``scheme: https`` scrape configuration, its paths and target replaced by this test's."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in readme.split("```yaml\n")[1:]]
    (config,) = [b for b in blocks if "scheme: https" in b and "tls_config:" in b]
    for documented, here in (
        ("/etc/prometheus/tls/ca.pem", certs["ca.pem"]),
        ("/etc/prometheus/tls/prometheus.pem", certs["client.pem"]),
        ("/etc/prometheus/tls/prometheus.key", certs["client.key"]),
        ("['node1:9400', 'node2:9400']", f"['{target}']"),
    ):
        assert documented in config, f"the README's configuration no longer has {documented}"
        config = config.replace(documented, here)
    return "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n" + config


@pytest.mark.slow
@requires_prometheus
def test_prometheus_scrapes_it_with_the_readmes_configuration(exporter, certs, tmp_path):
    ex = exporter(mutual=True)
    target = f"127.0.0.1:{ex.port}"
    config = _readme_scrape_config(certs, target)
    # The same job without Prometheus's certificate: the control, which the exporter refuses.
    job = config.split("scrape_configs:\n", 1)[1]
    config += "\n".join(line for line in job.splitlines() if "cert_file" not in line and "key_file" not in line)
    config = config.replace("job_name: gpus", "job_name: nocert", 2).replace("job_name: nocert", "job_name: gpus", 1)
    assert config.count("cert_file") == 1 and "job_name: nocert" in config
    logs: list[Path] = []
    with prometheus(tmp_path, config, [target], logs) as server:
        wait("a scrape over mutual TLS", DATA_S, lambda: server.values('up{job="gpus"}') == [1.0], logs)
        assert len(server.query('DCGM_FI_DEV_GPU_UTIL{job="gpus"}')) == 2
        wait(
            "the scrape without a certificate to fail", DATA_S, lambda: server.values('up{job="nocert"}') == [0.0], logs
        )
        assert server.query('DCGM_FI_DEV_GPU_UTIL{job="nocert"}') == []
