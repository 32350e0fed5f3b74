"""The whole alerting chain on loopback, every part real: exporters -> Prometheus -> Alertmanager -> a webhook.

``nvtopy exporter --demo`` processes with injected faults are scraped by a real
``prometheus`` loaded with what ``nvtopy rules`` prints, which sends to a real
Alertmanager routing every alert on its own to a webhook receiver in this test. The
receiver must get each expected alert -- the rule, the host, the GPU, the severity and an
annotation in plain words -- and none of the others: the healthy host gets nothing.

Short times so it runs in well under a minute: scrapes and evaluations each second,
``nvtopy rules --for 0s`` (a condition fires on its first evaluation), an idle-held
threshold of 6 s, a suspected hang after 3 s. Two rules depend on the simulated load rather
than on a fault (a busy simulated GPU meets its power cap; temperatures wander) and are held
back here with ``--for 1h``/a zero margin; their must-fire and must-not-fire cases are
``promtool test rules``'s (tests/formats/test_prometheus_rules.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..builders import NVTOPY
from ..prometheus_fixtures import (
    DATA_S,
    alertmanager,
    alertmanager_config,
    free_port,
    prometheus,
    requires_alertmanager,
    requires_prometheus,
    scrape_config,
    start_exporter,
    stop,
    wait,
    webhook_receiver,
)

pytestmark = [requires_prometheus, requires_alertmanager, pytest.mark.slow, pytest.mark.real_server]

SETTLE_S = 5.0
"""After the last expected alert: five more evaluations and notifications, in which an unexpected one would come."""

# The simulation's own jobs come and go, and a notebook between two cells idles for a few seconds: with the
# test's 6 s idle-held threshold that would be an alert the test cannot name in advance. So the sick host runs
# only its faults' jobs (--demo-procs 0), and the healthy one keeps every slot busy (--demo-steady).
SICK = (
    "--demo-gpus", "7", "--demo-procs", "0",
    "--demo-fault", "xid=48:2@0",
    "--demo-fault", "lost@1",
    "--demo-fault", "remapped=0/8/0/1@2",
    "--demo-fault", "remapped=4/1/1/0@3",
    "--demo-fault", "idle-held@4",
    "--demo-fault", "stuck@5",
    "--demo-fault", "hot@6",
    "--hang-after", "0.05",
)  # fmt: skip
STALE = ("--demo-gpus", "1", "--demo-fault", "hang=120:3@0", "--timeout", "2")
HEALTHY = ("--demo-gpus", "2", "--demo-steady")

# (alertname, host, gpu, severity): host is the Hostname label, or the target for an exporter alert ("dead").
EXPECTED = {
    ("NvtopyGpuXid", "sick", "0", "critical"),
    ("NvtopyGpuHealthWorse", "sick", "0", "critical"),
    ("NvtopyGpuLost", "sick", "1", "critical"),
    ("NvtopyGpuHealthWorse", "sick", "1", "critical"),
    ("NvtopyGpuRemapFailed", "sick", "2", "critical"),
    ("NvtopyGpuHealthWorse", "sick", "2", "critical"),
    ("NvtopyGpuRemapPending", "sick", "3", "warning"),
    ("NvtopyGpuIdleHeld", "sick", "4", "warning"),
    ("NvtopyGpuSuspectedHang", "sick", "5", "warning"),
    ("NvtopyGpuTemperatureNearSlowdown", "sick", "6", "warning"),
    ("NvtopyGpuNotResponding", "stale", "0", "critical"),
    ("NvtopyExporterStale", "stale", "", "warning"),
    ("NvtopyExporterDown", "dead", "", "critical"),
}
# A GPU that does not respond is judged on what nvtopy last knew of it: a FAIL verdict may follow, or not.
MAY_ALSO = {("NvtopyGpuHealthWorse", "stale", "0", "critical")}


def _rules(tmp: Path) -> Path:
    """What a user would load: ``nvtopy rules``, with the test's short times."""
    args = [
        *NVTOPY, "rules", "--for", "0s",
        "--for", "gpu-power-capped=1h",
        "--threshold", "gpu-temperature-near-slowdown.margin_c=0",
        "--threshold", "gpu-idle-held.idle_minutes=0.1",
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    path = tmp / "rules.yml"
    path.write_bytes(done.stdout)
    return path


@pytest.fixture
def exporters(tmp_path: Path) -> Iterator[dict[str, str]]:
    """host -> target of each exporter; a dead target (a free port nothing listens on) as "dead"."""
    logs: list[Path] = []
    processes = []
    try:
        targets = {}
        for name, args in (("sick", SICK), ("stale", STALE), ("healthy", HEALTHY)):
            process, target = start_exporter(tmp_path, name, "--demo-hostname", name, *args, logs=logs)
            processes.append(process)
            targets[name] = target
        targets["dead"] = f"127.0.0.1:{free_port()}"
        yield targets
    finally:
        for process in processes:
            stop(process)


def _key(alert: dict[str, object]) -> tuple[str, str, str, str]:
    labels = alert["labels"]
    assert isinstance(labels, dict)
    host = labels.get("Hostname") or labels.get("instance", "")  # up and the exporter's own series: the target
    return (labels["alertname"], host, labels.get("gpu", ""), labels["severity"])


def test_faults_reach_the_webhook_as_readable_alerts_and_nothing_else(tmp_path: Path, exporters: dict[str, str]):
    started = time.monotonic()
    rules = _rules(tmp_path)
    by_target = {target: host for host, target in exporters.items()}
    logs = [tmp_path / f"{name}.log" for name in ("sick", "stale", "healthy")]
    with webhook_receiver() as receiver, alertmanager(tmp_path, alertmanager_config(receiver.url), logs) as am:
        config = (
            scrape_config(list(exporters.values()))
            + f"rule_files:\n  - '{rules}'\n"
            + f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am}']\n"
        )
        with prometheus(tmp_path, config, list(exporters.values()), logs):

            def received() -> set[tuple[str, str, str, str]]:
                keys = set()
                for alert in receiver.alerts():
                    alertname, host, gpu, severity = _key(alert)
                    keys.add((alertname, by_target.get(host, host), gpu, severity))
                return keys

            deadline = time.monotonic() + 2 * DATA_S
            while not received() >= EXPECTED:
                if time.monotonic() > deadline:
                    wait(f"the alerts still missing: {sorted(EXPECTED - received())}", 0, lambda: False, logs)
                time.sleep(0.2)
            first_all = time.monotonic() - started
            end = time.monotonic() + SETTLE_S
            while time.monotonic() < end:  # an unexpected alert would come within these evaluations
                assert received() <= EXPECTED | MAY_ALSO, sorted(received() - EXPECTED - MAY_ALSO)
                time.sleep(0.5)
            assert received() <= EXPECTED | MAY_ALSO, sorted(received() - EXPECTED - MAY_ALSO)

            # readable: the words of the catalog, filled for this alert
            alerts = {_key(a)[:3]: a for a in receiver.alerts()}
            xid = alerts["NvtopyGpuXid", "sick", "0"]["annotations"]
            assert xid["summary"] == "Xid 48 on GPU 0 of sick: double-bit ECC error", xid
            assert "reset the GPU; drain the node if it repeats" in xid["description"]
            lost = alerts["NvtopyGpuLost", "sick", "1"]["annotations"]
            assert lost["summary"] == "GPU 1 of sick fell off the bus"
            assert lost["action"].startswith("Drain the node and reboot it")
            print(f"chain: every expected alert at the webhook {first_all:.1f} s after the start")
