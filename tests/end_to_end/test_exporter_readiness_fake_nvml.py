"""``GET /health`` of the real exporter process on the fake driver, through its hang knob (``FAKE_NVML_HANG``).

The knob makes every call of the named functions, from a given second on, block for a
given time and then answer. Two scenarios:

- ``nvmlDeviceGetName`` blocks 6 s (a GPU's static read, done once) and, from 10 s on,
  ``nvmlDeviceGetTotalEnergyConsumption`` 12 s (read every 5 s, on every GPU): the exporter
  serves before any GPU answered (503, ``nvtopy_exporter_ready 0``), then every GPU answers
  (200), then the whole driver is stuck in the energy call past the 10 s window (503), then it
  answers again (200). The window is max(3 intervals, 10 s), so the hang is 12 s.
- every call on GPU 1 blocks for a minute: 200 all along, past the window too, the reason
  naming GPU 1 (the other GPUs' metrics are still good).

Skipped where ../shared/fake-nvml (or a C compiler) is absent.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.commands.exporter.readiness import stale_after

from ..builders import fake_nvml_env
from ..conftest import needs_fake_nvml

pytestmark = [needs_fake_nvml, pytest.mark.slow, pytest.mark.real_server, pytest.mark.timing]

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def _get(url: str) -> tuple[int, str] | None:
    """(status, body) of a GET, HTTP errors included; None while nothing listens yet."""
    try:
        with _OPENER.open(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


class Running:
    def __init__(self, port: int, process: subprocess.Popen[str]) -> None:
        self.port = port
        self.process = process

    def health(self) -> tuple[int, str] | None:
        return _get(f"http://127.0.0.1:{self.port}/health")

    def metrics(self) -> dict[str, float]:
        """The exporter's own series and ``nvtopy_gpu_responding`` per GPU (``name/gpu``)."""
        answer = _get(f"http://127.0.0.1:{self.port}/metrics")
        assert answer is not None and answer[0] == 200, answer
        return {
            s.name + (f"/{s.labels['gpu']}" if "gpu" in s.labels else ""): s.value
            for family in text_string_to_metric_families(answer[1])
            for s in family.samples
            if s.name.startswith(("nvtopy_exporter_", "nvtopy_gpu_responding"))
        }

    def until(self, what: str, seconds: float, wanted: int) -> str:
        """Poll /health every 0.1 s until it answers ``wanted``: that answer's reason (fails after ``seconds``)."""
        deadline = time.monotonic() + seconds
        last = None
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the exporter exited"
            last = self.health()
            if last is not None and last[0] == wanted:
                return last[1].strip()
            time.sleep(0.1)
        raise AssertionError(f"{what}: no {wanted} within {seconds} s; last answer {last}")


@contextlib.contextmanager
def exporter(fake_lib: str, gpus: int, hang: str, *args: str) -> Iterator[Running]:
    """``nvtopy exporter --interval 0.5 ARGS`` on the fake driver with ``gpus`` GPUs and ``FAKE_NVML_HANG=hang``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = fake_nvml_env(fake_lib, FAKE_NVML_GPUS=str(gpus), FAKE_NVML_HANG=hang)
    command = [sys.executable, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.5"]
    process = subprocess.Popen([*command, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield Running(port, process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""


def test_health_before_the_first_collection_then_a_hung_driver_and_its_recovery(fake_lib):
    hang = "nvmlDeviceGetName:6;nvmlDeviceGetTotalEnergyConsumption:12@10"
    with exporter(fake_lib, 2, hang, "--timeout", "1", "--self-metrics") as ex:
        deadline = time.monotonic() + 30
        first = None
        while first is None and time.monotonic() < deadline:
            first = ex.health()
            time.sleep(0.05)
        assert first is not None, "the exporter never listened"
        # Served 1 s (--timeout) after the driver loaded; the GPUs' names come at 6 s.
        assert first[0] == 503 and first[1].startswith("not ready: no collection completed yet"), first
        before = ex.metrics()
        assert before["nvtopy_exporter_ready"] == 0, "before the first collection /metrics says so"

        reason = ex.until("every GPU answering", 15, 200)
        assert reason.startswith("ok: 2 GPUs, last collection ") and "not responding" not in reason
        assert ex.metrics()["nvtopy_exporter_ready"] == 1

        reason = ex.until("the driver stuck in the energy call", 40, 503)
        assert reason.startswith("not ready: no collection completed in ")
        assert reason.endswith("(the driver does not answer: GPUs 0, 1 not responding)"), reason
        stuck = ex.metrics()
        assert stuck["nvtopy_exporter_ready"] == 0 and stuck["nvtopy_exporter_gpus_not_responding"] == 2
        assert stuck["nvtopy_exporter_last_collection_age_seconds"] > 10
        assert stuck["nvtopy_gpu_responding/0"] == stuck["nvtopy_gpu_responding/1"] == 0

        reason = ex.until("the driver answering again", 20, 200)
        assert reason.startswith("ok: 2 GPUs, last collection ")
        # The first collection after the driver answers may still name a GPU whose stuck call returned after it
        # began (health 200 then names it, as with one hung GPU): both answer within a few intervals. (CI on
        # c8f4ec5 read the metrics at that first 200: one GPU still not responding.)
        deadline = time.monotonic() + 10
        again = ex.metrics()
        while again["nvtopy_exporter_gpus_not_responding"] != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
            again = ex.metrics()
        assert again["nvtopy_exporter_gpus_not_responding"] == 0, "a GPU still not responding 10 s after recovery"
        assert again["nvtopy_gpu_responding/0"] == again["nvtopy_gpu_responding/1"] == 1
        assert again["nvtopy_exporter_collections_total"] > stuck["nvtopy_exporter_collections_total"]


def test_one_hung_gpu_keeps_health_200_and_is_named(fake_lib):
    with exporter(fake_lib, 4, "*@1:60@2", "--timeout", "1") as ex:
        reason = ex.until("GPU 1 named", 30, 200)
        started = time.monotonic()
        while "not responding: GPU 1 " not in reason:
            assert time.monotonic() - started < 20, reason
            time.sleep(0.1)
            answer = ex.health()
            assert answer is not None and answer[0] == 200, answer
            reason = answer[1]
        assert reason.startswith("ok: 4 GPUs, last collection ")
        # Past the window (10 s) without GPU 1: still 200, the others' metrics are good. GPU 1 is named once a
        # call of it has been stuck --timeout (1 s), so the hang began at least 1 s before `started` and its
        # last answer was published at most an interval (0.5 s) after that: silent for the whole window by
        # started + 9.5 s. Asked until started + 12 s (14 s before: 2 s more of the timing pass).
        window = stale_after(0.5)
        while time.monotonic() - started < window + 2:
            answer = ex.health()
            assert answer is not None and answer[0] == 200 and "not responding: GPU 1 " in answer[1], answer
            time.sleep(0.5)
        metrics = ex.metrics()
        assert metrics["nvtopy_exporter_ready"] == 1
        assert metrics["nvtopy_gpu_responding/1"] == 0
        assert [metrics[f"nvtopy_gpu_responding/{i}"] for i in (0, 2, 3)] == [1, 1, 1]
        assert "nvtopy_exporter_gpus_not_responding" not in metrics, "no --self-metrics: not there"
