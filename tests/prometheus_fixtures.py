"""A real Prometheus server for the tests, scraping real ``nvtopy exporter --demo`` processes (or metrics served here).

Shared by the tests that need a real server: the Grafana dashboard
(``test_prometheus_dashboard.py``), the fleet view (``test_fleet_real_prometheus.py``)
and whatever else reads a Prometheus (``nvtopy report --prometheus``): reuse
:func:`three_exporter_fleet` (a pytest fixture: import it into the test module) or
:func:`exporter_fleet` rather than starting servers of your own.

Every wait has a deadline and says what it waited for, with the tail of each
process's log, when it gives up; every process started here runs in a session of
its own and is stopped (SIGTERM, then SIGKILL) whatever happens. Without a
``prometheus`` binary on PATH (Debian: ``apt-get install prometheus``; ``.ci/run``
installs it where it can) the tests marked :data:`requires_prometheus` skip, saying so.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .builders import NVTOPY

PROMETHEUS = shutil.which("prometheus")
requires_prometheus = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus is not on PATH (Debian: apt-get install prometheus; .ci/run installs it as root): "
    "this test needs a real server",
)

STARTUP_S = 60.0  # an exporter answering, Prometheus ready (a cold start on a busy CI runner)
DATA_S = 60.0  # until the data is there: a few scrapes at 1 s

# Any free port (the exporter says which), a poll every half second: a scrape each second sees fresh values.
EXPORTER = (*NVTOPY, "exporter", "--demo", "--listen", "127.0.0.1:0", "--interval", "0.5")

# Never through a proxy from the environment: every server here is on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url``: (HTTP status, body), an HTTP error's too."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(what: str, deadline_s: float, check: Callable[[], Any], logs: Sequence[Path]) -> Any:
    """Call ``check`` until it returns something true, at most ``deadline_s`` seconds; fail saying what and why."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = check()
        except (OSError, ValueError, KeyError) as exc:  # not listening yet, an answer cut short, no data yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in logs if log.exists())
    pytest.fail(f"{what}: nothing within {deadline_s:.0f} s (last: {last!r})\n{tails}")


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: the process (started in a session of its own) never outlives the test."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class Server:
    """A running Prometheus server: its URL, the targets it scrapes, the logs to show when a wait fails."""

    url: str
    targets: list[str]  # host:port of each target: Prometheus's ``instance`` label
    logs: list[Path]
    seconds_to_data: float = 0.0  # from starting the first process until the data was there

    @property
    def target(self) -> str:
        return self.targets[0]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query through the HTTP API, as Grafana sends it: the vector's elements."""
        status, body = get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", f"{promql}: {status} {answer}"
        assert answer["data"]["resultType"] == "vector", promql
        return answer["data"]["result"]

    def values(self, promql: str) -> list[float]:
        return [float(series["value"][1]) for series in self.query(promql)]

    def label_values(self, label: str, match: str) -> list[str]:
        """Grafana's ``label_values(match, label)``, through the API it uses."""
        url = f"{self.url}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
        status, body = get(url)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", answer
        return answer["data"]


def start_exporter(tmp: Path, name: str, *args: str, logs: list[Path]) -> tuple[subprocess.Popen[bytes], str]:
    """``nvtopy exporter --demo ARGS`` on a free port; returns the process and its host:port once it serves."""
    log = tmp / f"{name}.log"
    logs.append(log)
    with log.open("wb") as out:
        process = subprocess.Popen([*EXPORTER, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:

        def port() -> str | None:
            assert process.poll() is None, f"exporter {name} exited"
            found = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", log.read_text(errors="replace"))
            return found.group(1) if found else None

        target = f"127.0.0.1:{wait(f'exporter {name}', STARTUP_S, port, logs)}"
        wait(f"exporter {name}'s /metrics", STARTUP_S, lambda: get(f"http://{target}/metrics")[0] == 200, logs)
    except BaseException:
        stop(process)
        raise
    return process, target


def scrape_config(targets: Sequence[str], *, job: str = "nvtopy", interval: str = "1s") -> str:
    """A prometheus.yml scraping ``targets`` every ``interval``."""
    listed = ", ".join(f"'{target}'" for target in targets)
    return (
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        f"    scrape_timeout: {interval}\n"
        "    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )


@contextlib.contextmanager
def prometheus(tmp: Path, config: str, targets: Sequence[str], logs: list[Path]) -> Iterator[Server]:
    """A ``prometheus`` on a free loopback port with ``config`` (prometheus.yml text), ready; stopped afterwards."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not on PATH")
    path = tmp / "prometheus.yml"
    path.write_text(config, encoding="utf-8")
    log = tmp / "prometheus.log"
    logs.append(log)
    web = f"127.0.0.1:{free_port()}"
    process: subprocess.Popen[bytes] | None = None
    try:
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address={web}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=tmp,
            )
        server = Server(f"http://{web}", list(targets), logs)

        def ready() -> bool:
            assert process is not None and process.poll() is None, "prometheus exited"
            return get(f"{server.url}/-/ready")[0] == 200

        wait("prometheus ready", STARTUP_S, ready, logs)
        yield server
    finally:
        stop(process)


def targets_up(server: Server, job: str = "nvtopy") -> bool:
    """Every target of ``job`` scraped successfully (``up`` is 1 for each)."""
    found = server.values(f'up{{job="{job}"}}')
    return len(found) == len(server.targets) and all(value == 1.0 for value in found)


# ----------------------------------------------------------------- Alertmanager and a webhook receiver

# Debian's package (prometheus-alertmanager) installs the binary under its package's name.
ALERTMANAGER = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
requires_alertmanager = pytest.mark.skipif(
    ALERTMANAGER is None,
    reason="alertmanager is not on PATH (Debian: apt-get install prometheus-alertmanager; .ci/run installs it as "
    "root): this test needs a real Alertmanager",
)


class _Webhook(http.server.BaseHTTPRequestHandler):
    """Alertmanager's webhook: each POSTed notification's alerts appended to ``server.received`` (bounded)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        body = self.rfile.read(length)
        with self.server.lock:  # type: ignore[attr-defined]
            received: list[dict[str, Any]] = self.server.received  # type: ignore[attr-defined]
            if len(received) < 10_000:
                received.extend(json.loads(body).get("alerts", []))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Receiver:
    """A webhook receiver on loopback: its URL and every alert Alertmanager sent it, in order."""

    url: str
    server: Any

    def alerts(self) -> list[dict[str, Any]]:
        with self.server.lock:
            return list(self.server.received)


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    """A tiny HTTP server, in a thread of this process, that keeps what Alertmanager posts; shut down afterwards."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    server.daemon_threads = True
    server.received = []  # type: ignore[attr-defined]
    server.lock = threading.Lock()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}/alerts", server)
    finally:
        server.shutdown()
        server.server_close()


def alertmanager_config(webhook_url: str) -> str:
    """Every alert on its own (no grouping), sent at once, to ``webhook_url``; resolved ones not sent."""
    return (
        "route:\n"
        "  receiver: test\n"
        "  group_by: ['...']\n"
        "  group_wait: 0s\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: test\n"
        "    webhook_configs:\n"
        f"      - url: '{webhook_url}'\n"
        "        send_resolved: false\n"
    )


@contextlib.contextmanager
def alertmanager(tmp: Path, config: str, logs: list[Path]) -> Iterator[str]:
    """An Alertmanager on a free loopback port with ``config``, clustering off, ready; yields its host:port."""
    if ALERTMANAGER is None:
        pytest.skip("alertmanager is not on PATH")
    path = tmp / "alertmanager.yml"
    path.write_text(config, encoding="utf-8")
    log = tmp / "alertmanager.log"
    logs.append(log)
    web = f"127.0.0.1:{free_port()}"
    process: subprocess.Popen[bytes] | None = None
    try:
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    ALERTMANAGER,
                    f"--config.file={path}",
                    f"--storage.path={tmp / 'alertmanager-data'}",
                    f"--web.listen-address={web}",
                    "--cluster.listen-address=",  # no gossip port: a single instance
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=tmp,
            )

        def ready() -> bool:
            assert process is not None and process.poll() is None, "alertmanager exited"
            return get(f"http://{web}/-/ready")[0] == 200

        wait("alertmanager ready", STARTUP_S, ready, logs)
        yield web
    finally:
        stop(process)


# ----------------------------------------------------------------- a fleet of real exporters


@dataclass
class Exporter:
    """One ``nvtopy exporter --demo`` of a fleet."""

    hostname: str
    seed: int
    gpus: int
    target: str  # host:port: Prometheus's ``instance``
    process: subprocess.Popen[bytes]

    def metrics(self) -> str:
        """What it serves now."""
        status, body = get(f"http://{self.target}/metrics")
        assert status == 200, status
        return body.decode("utf-8")


@dataclass
class Fleet:
    """Exporters with distinct hostnames and seeds, and a Prometheus that has scraped each of them."""

    server: Server
    exporters: list[Exporter] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def hostnames(self) -> list[str]:
        return [exporter.hostname for exporter in self.exporters]


# The fleet of test_fleet_real_prometheus.py (and of a report test): (hostname, seed, GPUs).
FLEET_HOSTS: tuple[tuple[str, int, int], ...] = (("node-a", 1, 2), ("node-b", 2, 4), ("node-c", 3, 1))


@contextlib.contextmanager
def exporter_fleet(
    tmp: Path, hosts: Sequence[tuple[str, int, int]] = FLEET_HOSTS, *exporter_args: str
) -> Iterator[Fleet]:
    """One ``nvtopy exporter --demo`` per (hostname, seed, GPUs) and a Prometheus scraping them every second.

    Yields once every exporter has been scraped and each host's GPUs and processes are in
    Prometheus. Every process is stopped afterwards, whatever happened.
    """
    logs: list[Path] = []
    started = time.monotonic()
    exporters: list[Exporter] = []
    try:
        for hostname, seed, gpus in hosts:
            args = ("--demo-hostname", hostname, "--demo-seed", str(seed), "--demo-gpus", str(gpus), *exporter_args)
            process, target = start_exporter(tmp, hostname, *args, logs=logs)
            exporters.append(Exporter(hostname, seed, gpus, target, process))
        targets = [exporter.target for exporter in exporters]
        with prometheus(tmp, scrape_config(targets), targets, logs) as server:
            wait("a successful scrape of every exporter", DATA_S, lambda: targets_up(server), logs)

            def every_gpu_there() -> bool:
                counts = {
                    s["metric"]["Hostname"]: float(s["value"][1])
                    for s in server.query("count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)")
                }
                with_processes = server.query("count by (Hostname) (nvtopy_process_gpu_memory_bytes)")
                return counts == {h: float(g) for h, _, g in hosts} and len(with_processes) == len(hosts)

            wait("every host's GPUs and processes in Prometheus", DATA_S, every_gpu_there, logs)
            server.seconds_to_data = time.monotonic() - started
            yield Fleet(server, exporters)
    finally:
        for exporter in exporters:
            stop(exporter.process)


@pytest.fixture(scope="module")
def three_exporter_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three ``nvtopy exporter --demo`` (node-a, node-b, node-c; seeds 1-3; 2, 4 and 1 GPUs), scraped by Prometheus.

    Import it into a test module (``from .prometheus_fixtures import three_exporter_fleet``)
    and mark the module :data:`requires_prometheus`.
    """
    with exporter_fleet(tmp_path_factory.mktemp("fleet")) as fleet:
        yield fleet


# ----------------------------------------------------------------- many exporters, served from this process


class _Expositions(http.server.BaseHTTPRequestHandler):
    """``GET /metrics``: the text this port's server was given, or each of its texts in turn
    (``server.bodies``, one a scrape, round and round)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        bodies: Sequence[bytes] = self.server.bodies  # type: ignore[attr-defined]
        body = bodies[next(self.server.turns) % len(bodies)]  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def served_expositions(bodies: Sequence[bytes | Sequence[bytes]]) -> Iterator[list[str]]:
    """Each body on a port of its own (``/metrics``), from threads of this process: one exporter per port. A
    sequence of bodies is served one a request, in turn (an exporter whose values move between scrapes).

    Yields each server's host:port; shut down afterwards.
    """
    servers: list[http.server.ThreadingHTTPServer] = []
    try:
        for body in bodies:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Expositions)
            server.daemon_threads = True
            server.bodies = [body] if isinstance(body, bytes) else list(body)  # type: ignore[attr-defined]
            server.turns = itertools.count()  # type: ignore[attr-defined]
            servers.append(server)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        yield [f"127.0.0.1:{server.server_address[1]}" for server in servers]
    finally:
        # All at once, woken: one after the other, each waits out its serving loop's 0.2 s poll (64 ports: 7.5 s).
        stoppers = [threading.Thread(target=shutdown_server, args=(server,)) for server in servers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(timeout=30)


# ----------------------------------------------------------------- a fake Prometheus, for unit tests


@dataclass
class Series:
    """One stored series: its labels (``__name__`` included), its newest value and that value's time."""

    labels: dict[str, str]
    value: float
    timestamp: float


def exposition_series(text: str, instance: str, timestamp: float, job: str = "nvtopy") -> list[Series]:
    """What Prometheus stores from one scrape of ``text``: each sample, with ``instance`` and ``job`` added."""
    found = []
    for name, sample_labels, value in exposition_samples(text):
        labels = {"__name__": name, **sample_labels, "instance": instance, "job": job}
        found.append(Series(labels, value, timestamp))
    return found


def exposition_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Each sample of ``text`` (name, labels, value), as prometheus-client's text parser reads it.

    Plain text -- ``# HELP``/``# TYPE`` lines, samples without timestamps, label values without
    escapes: what the simulated exporter and most tests write -- is read here with one regular
    expression a line (64 simulated 8-GPU hosts: 0.6 s of CPU instead of 7.5 s); any other text,
    by prometheus-client's parser. tests/test_prometheus_fixtures.py holds the two to the same answers.
    """
    plain = _plain_samples(text)
    if plain is not None:
        return plain
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


_PLAIN_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"\\]*\",?)*)\})? ([^ ]+)")
_PLAIN_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _plain_samples(text: str) -> list[tuple[str, dict[str, str], float]] | None:
    """:func:`exposition_samples` of plain text; None for any other (a line this might read otherwise).

    As the parser: a ``# HELP``/``# TYPE`` line of a new name starts a family; a sample whose
    name is not its family's (a counter's or gauge's own name; a summary's or histogram's
    suffixed ones) stands alone and ends the family; the one renaming: a counter family whose
    name lacks ``_total`` has it added to its samples' names.
    """
    found = []
    family, kind, allowed = "", "untyped", ()
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 2 or parts[1] not in ("HELP", "TYPE"):
                continue
            if len(parts) < 3 or not _PLAIN_NAME.fullmatch(parts[2]) or (parts[1] == "TYPE" and len(parts) < 4):
                return None
            if parts[2] != family:
                family, kind, allowed = parts[2], "untyped", (parts[2],)
            if parts[1] == "TYPE":
                kind = parts[3]
                allowed = tuple(family + suffix for suffix in _ALLOWED.get(kind, ("",)))
            continue
        match = _PLAIN_SAMPLE.fullmatch(line)
        if match is None:
            return None
        name, labels_text, value_text = match.groups()
        pairs = _PLAIN_LABEL.findall(labels_text or "")  # the pairs the line's expression matched, in order
        labels = dict(pairs)
        if len(labels) != len(pairs):
            return None  # a label named twice: the parser refuses the text
        if any(label.startswith("__") for label in labels) or "_" in value_text:
            return None  # reserved label names, digit separators: the parser refuses them
        try:
            value = float(value_text)
        except ValueError:
            return None
        if name not in allowed:
            family, kind, allowed = "", "untyped", ()
        elif kind == "counter" and not family.endswith("_total"):
            name += "_total"
        found.append((name, labels, value))
    return found


_ALLOWED = {"summary": ("_count", "_sum", ""), "histogram": ("_count", "_sum", "_bucket")}


_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<op>=~|!~|!=|=)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(){},]))'
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|.)")
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unquote(quoted: str) -> str:
    """A double-quoted PromQL string's value (Go's escapes)."""

    def one(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape[0] in "xuU":
            return chr(int(escape[1:], 16))
        if escape[0] in "01234567" and len(escape) == 3:
            return chr(int(escape, 8))
        return _SIMPLE.get(escape, escape)

    return _ESCAPE.sub(one, quoted[1:-1])


class _Query:
    """The PromQL nvtopy's fleet sends, and no more: ``or``, ``max by``/``count by``, ``timestamp()``,
    ``label_replace()``, selectors."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None:
                if text[position:].strip():
                    raise ValueError(f"cannot parse at {text[position : position + 20]!r}")
                break
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.position = 0

    def next(self) -> tuple[str, str]:
        token = self.tokens[self.position]
        self.position += 1
        return token

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def expect(self, value: str) -> None:
        _, got = self.next()
        if got != value:
            raise ValueError(f"expected {value!r}, got {got!r}")

    def parse(self) -> Any:
        """An expression: a tree of tuples."""
        left = self.term()
        while self.peek() == ("word", "or"):
            self.next()
            on = None  # or on(labels): rows told apart by those (__name__ too, where named)
            if self.peek() == ("word", "on"):
                self.next()
                self.expect("(")
                on = []
                while True:
                    _, label = self.next()
                    if label == ")":
                        break
                    if label != ",":
                        on.append(label)
            left = ("or", left, self.term(), None if on is None else tuple(on))
        return left

    def term(self) -> Any:
        _, value = self.next()
        if value in ("max", "count"):
            self.expect("by")
            self.expect("(")
            labels = []
            while True:
                _, label = self.next()
                if label == ")":
                    break
                if label != ",":
                    labels.append(label)
            self.expect("(")
            inner = self.parse()
            self.expect(")")
            return (value, tuple(labels), inner)
        if value == "label_replace":
            self.expect("(")
            inner = self.parse()
            texts = []
            for _ in range(4):
                self.expect(",")
                kind, quoted = self.next()
                if kind != "string":
                    raise ValueError(f"label_replace: expected a string, got {quoted!r}")
                texts.append(_unquote(quoted))
            self.expect(")")
            destination, replacement, source, regex = texts
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", destination):
                raise ValueError(f"invalid destination label name in label_replace(): {destination}")
            return ("label_replace", inner, destination, replacement, source, re.compile(regex))
        if value == "timestamp":
            self.expect("(")
            inner = self.term()
            self.expect(")")
            return ("timestamp", inner)
        if value == "{":
            matchers = []
            while True:
                _, name = self.next()
                if name == "}":
                    break
                if name == ",":
                    continue
                _, op = self.next()
                _, quoted = self.next()
                value = _unquote(quoted)
                if op in ("=~", "!~"):
                    re.compile(value)  # Prometheus refuses a bad regex when it parses the query
                matchers.append((name, op, value))
            return ("selector", tuple(matchers))
        if value == "(":
            inner = self.parse()
            self.expect(")")
            return inner
        raise ValueError(f"unexpected {value!r}")


def _matches(labels: dict[str, str], matchers: Sequence[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value:
            return False
        if op == "!=" and have == value:
            return False
        if op in ("=~", "!~"):
            pattern = _PATTERNS.get(value)
            if pattern is None:
                pattern = _PATTERNS[value] = re.compile(value)
            if (pattern.fullmatch(have) is None) == (op == "=~"):
                return False
    return True


_PATTERNS: dict[str, re.Pattern[str]] = {}  # the regular expressions of matchers, compiled once
_NAMES = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*(?:\|[A-Za-z_:][A-Za-z0-9_:]*)*")  # a=~"x|y|z" of metric names


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


class FakePrometheus:
    """A tiny server answering ``POST /api/v1/query`` as Prometheus does, for the queries nvtopy's fleet sends.

    It stores :class:`Series` (newest value of each) and evaluates ``or``, ``max by``,
    ``count by``, ``timestamp()``, ``label_replace()`` and selectors (``=``, ``!=``, ``=~``, ``!~``) over
    them, at :attr:`now`. ``reply``: a function ``(handler, query) -> bool`` that may
    answer instead (an error, a hang, garbage) by returning True. Each query's text is
    kept in :attr:`queries`. Answers are cached per query text until the series change.
    Change them through :meth:`set_series` or :meth:`add_exposition` (or append to
    :attr:`series`): the series are indexed by metric name, and each one's sorted labels
    kept, until then (64 hosts x 8 GPUs: 70,000 series, each selector read them all).
    """

    def __init__(self) -> None:
        self.series: list[Series] = []
        self.now: float | None = None  # None: the wall clock
        self.reply: Callable[[http.server.BaseHTTPRequestHandler, str], bool] | None = None
        self.warnings: list[str] = []
        self.queries: list[str] = []
        self.headers: list[dict[str, str]] = []
        self._cache: dict[str, bytes] = {}
        self._index: _SeriesIndex | None = None
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8"))
                fake.headers.append(dict(self.headers.items()))
                query = form.get("query", [""])[0]
                fake.queries.append(query)
                if fake.reply is not None and fake.reply(self, query):
                    return
                body = fake.answer(query)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.reply = None
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_series(self, series: Sequence[Series]) -> None:
        self.series = list(series)
        self._cache.clear()
        self._index = None

    def add_exposition(self, text: str, instance: str, timestamp: float | None = None) -> None:
        """Store one scrape of ``text`` from ``instance`` (at ``timestamp``, default :attr:`now`)."""
        when = timestamp if timestamp is not None else (self.now or time.time())
        self.series.extend(exposition_series(text, instance, when))
        self._cache.clear()
        self._index = None

    def _candidates(self, matchers: Sequence[tuple[str, str, str]]) -> list[_Indexed]:
        """The series a selector may match: those of its metric name where it names one (``__name__="x"``)."""
        index = self._index
        if index is None or index.stamp != (id(self.series), len(self.series)):
            index = self._index = _SeriesIndex(self.series)
        for name, op, value in matchers:
            if name == "__name__" and op == "=":
                return index.by_name.get(value, [])
            if name == "__name__" and op == "=~" and _NAMES.fullmatch(value):  # a list of names: theirs, in order
                found = [c for one in set(value.split("|")) for c in index.by_name.get(one, [])]
                return sorted(found, key=lambda c: c.position)
        return index.every

    def answer(self, query: str) -> bytes:
        """Prometheus's JSON for ``query`` (cached until the series or :attr:`now` change)."""
        now = self.now if self.now is not None else time.time()
        cache_key = f"{now if self.now is not None else ''}|{self.warnings}|{query}"
        body = self._cache.get(cache_key)
        if body is not None and self.now is not None:
            return body
        try:
            tree = _Query(query).parse()
            found = self.evaluate(tree)
        except (ValueError, IndexError, re.error) as exc:
            return json.dumps({"status": "error", "errorType": "bad_data", "error": str(exc)}).encode()
        result = [{"metric": labels, "value": [now, _value_text(value)]} for labels, value in found.values()]
        answer: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": result}}
        if self.warnings:
            answer["warnings"] = list(self.warnings)
        body = json.dumps(answer).encode()
        if self.now is not None:
            self._cache[cache_key] = body
        return body

    def evaluate(self, tree: Any) -> dict[tuple[tuple[str, str], ...], tuple[dict[str, str], float]]:
        kind = tree[0]
        if kind == "selector":
            return {
                c.key: (dict(c.series.labels), c.series.value)
                for c in self._candidates(tree[1])
                if _matches(c.series.labels, tree[1])
            }
        if kind == "timestamp":
            inner = tree[1]
            assert inner[0] == "selector", "timestamp() of a selector only (as Prometheus keeps the sample times)"
            found = {}
            for c in self._candidates(inner[1]):
                if _matches(c.series.labels, inner[1]):
                    labels = {k: v for k, v in c.series.labels.items() if k != "__name__"}
                    found[c.key_without_name] = (labels, c.series.timestamp)
            return found
        if kind == "label_replace":
            _, inner, destination, replacement, source, pattern = tree
            replaced = {}
            for labels, value in self.evaluate(inner).values():
                match = pattern.fullmatch(labels.get(source, ""))
                if match is not None:  # Prometheus's $1 and ${1}: the groups; an empty result drops the label
                    text = match.expand(re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", replacement.replace("\\", "\\\\")))
                    labels = {k: v for k, v in labels.items() if k != destination}
                    if text:
                        labels[destination] = text
                replaced[_key(labels)] = (labels, value)
            return replaced
        if kind == "or":  # as Prometheus: the right's rows whose labels (but __name__; or the on() ones) are not left's
            left = self.evaluate(tree[1])
            on = tree[3]

            def signature(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
                if on is None:
                    return _key({k: v for k, v in labels.items() if k != "__name__"})
                return _key({k: v for k, v in labels.items() if k in on})

            taken = {signature(labels) for labels, _ in left.values()}
            for key, item in self.evaluate(tree[2]).items():
                if signature(item[0]) not in taken:
                    left.setdefault(key, item)
            return left
        if kind in ("max", "count"):
            groups: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], float]] = {}
            for labels, value in self.evaluate(tree[2]).values():
                kept = {k: labels[k] for k in tree[1] if labels.get(k)}
                key = _key(kept)
                old = groups.get(key)
                if kind == "count":
                    groups[key] = (kept, 1.0 if old is None else old[1] + 1)
                elif old is None or value > old[1] or math.isnan(old[1]):
                    groups[key] = (kept, value)
            return groups
        raise ValueError(kind)


@dataclass
class _Indexed:
    series: Series
    position: int  # in the list of series
    key: tuple[tuple[str, str], ...]  # _key(labels)
    key_without_name: tuple[tuple[str, str], ...]  # the same without __name__


class _SeriesIndex:
    """:class:`FakePrometheus`'s series by metric name, each with its sorted labels, for one list of series."""

    def __init__(self, series: list[Series]) -> None:
        self.stamp = (id(series), len(series))
        self.every: list[_Indexed] = []
        self.by_name: dict[str, list[_Indexed]] = {}
        for position, s in enumerate(series):
            key = _key(s.labels)
            indexed = _Indexed(s, position, key, tuple(item for item in key if item[0] != "__name__"))
            self.every.append(indexed)
            self.by_name.setdefault(s.labels.get("__name__", ""), []).append(indexed)


def _value_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def simulated_exposition(hostname: str, seed: int, gpus: int = 8, *, faults: Sequence[str] = (), **options: Any) -> str:
    """What ``nvtopy exporter --demo`` serves for simulated GPUs at a fixed time (the same text every call)."""
    return simulated_expositions(hostname, seed, gpus, faults=faults, **options)[0]


def simulated_expositions(
    hostname: str, seed: int, gpus: int = 8, ticks: int = 1, *, faults: Sequence[str] = (), **options: Any
) -> list[str]:
    """What ``nvtopy exporter --demo`` serves at ``ticks`` successive seconds from a fixed time: the same GPUs and
    processes, their utilisation, power, memory, clocks and counters moving as a busy GPU's do (a benchmark whose
    values never change would find every value's text read before)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from nvtopy.backends.open import open_backend, simulated_spec
    from nvtopy.formats.prometheus.collect import SnapshotCollector
    from nvtopy.sources.collector import Collector
    from nvtopy.sources.poller import Poller

    now = [1_795_000_000.0]
    spec = simulated_spec(
        gpus,
        seed=seed,
        faults=list(faults),
        hostname=hostname,
        clock=lambda: now[0],
        viewer="alice",
        **options,
    )
    backend = open_backend(spec)
    poller = Poller(backend, collector=Collector(backend, history=1))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(poller))
    bodies = []
    for _ in range(ticks):
        poller.poll_once()
        bodies.append(generate_latest(registry).decode("utf-8"))
        now[0] += 1.0
    return bodies


def shutdown_server(server: Any) -> None:
    """``server.shutdown(); server.server_close()``, without waiting out serve_forever's 0.5 s poll.

    The serving loop checks for shutdown only when its select returns: a connection wakes it.
    """
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    address = server.server_address[:2]
    while stopper.is_alive():
        with contextlib.suppress(OSError), socket.create_connection(address, timeout=1):
            pass
        stopper.join(0.01)
    server.server_close()
