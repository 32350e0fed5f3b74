"""``--ca-file``: ``--remote`` and ``--prometheus`` (and ``report --prometheus``) verify https:// servers whose
certificates a private CA signed, with throwaway certificates made by the ``openssl`` CLI (test_exporter_tls)."""

# ruff: noqa: F811 -- the fixtures certs and serve are imported from the modules that define them

from __future__ import annotations

import ssl

import pytest

from nvtopy.commands.httpserver import serve as serve_exporter
from nvtopy.errors import UsageError
from nvtopy.sources.https import client_context
from nvtopy.sources.prometheus_api import PrometheusClient, PrometheusError
from nvtopy.sources.remote import RemoteHosts

from .test_exporter_tls import OPENSSL, Certs, certs  # noqa: F401
from .test_fleet import run_cli
from .test_prometheus_api import serve, vector  # noqa: F401
from .test_remote import exporter_poller

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="the openssl CLI is needed to make test certificates")


def _server_context(certs: Certs) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["server.pem"], certs["server.key"])
    return context


def test_a_private_ca_is_trusted_only_when_given(serve, certs):
    server = serve(vector(({"Hostname": "node-a"}, "1")), tls=_server_context(certs))
    url = f"https://127.0.0.1:{server.port}"
    with pytest.raises(PrometheusError) as refused:
        PrometheusClient(url, timeout=3).query("up")
    assert refused.value.kind == "unreachable" and "TLS certificate not trusted" in str(refused.value)
    assert PrometheusClient(url, timeout=3, ca_file=certs["ca.pem"]).query("up") == [({"Hostname": "node-a"}, 1.0)]
    with pytest.raises(PrometheusError, match="TLS certificate not trusted"):  # another CA: still verified
        PrometheusClient(url, timeout=3, ca_file=certs["other-ca.pem"]).query("up")


def test_the_host_name_is_still_checked(serve, certs):
    server = serve(vector(({"a": "1"}, "1")), tls=_server_context(certs))
    client = PrometheusClient(f"https://127.0.0.2:{server.port}", timeout=3, ca_file=certs["ca.pem"])
    with pytest.raises(PrometheusError, match="unreachable"):  # the certificate names 127.0.0.1, not 127.0.0.2
        client.query("up")


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
