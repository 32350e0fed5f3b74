"""``nvtopy rules``' output checked by the real tools: ``promtool check rules`` and ``promtool test rules``.

Every rule for a fleet has a case that must fire and one that must not (:data:`CASES`, one
table; a test fails for a rule without both), under both namings: the series are written in
the legacy names here and renamed as the exporter would (``Naming.name``), with the naming's
host and driver labels. A firing case names the alert's labels and every annotation, filled
from the catalog's templates in Python (:meth:`AlertRule.render`, :func:`format_value`): so
Prometheus's Go templates must say, word for word, what an engine on one machine would.

Times are the rules' own defaults (``for: 5m`` is tested at 7m); promtool runs
Prometheus's rule engine on a simulated clock, so a case takes milliseconds.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvtopy.alerts.catalog import CATALOG, RULES_BY_ID, AlertRule, format_value
from nvtopy.formats.dcgm_naming import LEGACY, NAMING_4_9, NAMINGS, Naming
from nvtopy.formats.prometheus.rules import (
    RUNBOOK,
    format_duration,
    parse_duration,
    rule_file_text,
    yaml_text,
)
from nvtopy.health.xid import describe_xid

PROMTOOL = shutil.which("promtool")
requires_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not on PATH (Debian: apt-get install prometheus; .ci/run installs it as root)",
)
MODEL = "NVIDIA H100 80GB HBM3"


def gpu(naming: Naming, index: int = 0, host: str = "n1", uuid: str | None = None) -> dict[str, str]:
    """A GPU series' labels as nvtopy's exporter writes them under ``naming``, and as Prometheus adds them."""
    return {
        "gpu": str(index),
        "UUID": uuid or f"GPU-{host}-{index}",
        "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": MODEL,
        naming.host_label: host,
        naming.driver_label: "550.54.15",
        "instance": f"{host}:9400",
        "job": "nvtopy",
    }


def process(naming: Naming, pid: str, user: str, command: str) -> dict[str, str]:
    identity = gpu(naming)
    owner = {"owner_kind": "user-session", "container": "", "pod": "", "namespace": "", "slurm_job": ""}
    return {
        "gpu": "0",
        "UUID": identity["UUID"],
        "pid": pid,
        "type": "C",
        "user": user,
        "command": command,
        naming.host_label: "n1",
        **owner,
        "instance": "n1:9400",
        "job": "nvtopy",
    }


@dataclass(frozen=True)
class Series:
    name: str  # the legacy name: renamed per naming
    labels: dict[str, str]
    values: str  # promtool's expanding notation: "1x10", "_ _ 1 1"


@dataclass(frozen=True)
class Alert:
    """One alert a firing case expects: its labels (from the series), severity and the value its words show."""

    labels: dict[str, str]
    severity: str
    value: float = 0.0


@dataclass(frozen=True)
class Case:
    rule: str
    fires: bool
    at: str  # eval_time
    series: tuple[Series, ...]
    alerts: tuple[Alert, ...] = field(default=())


def cases(n: Naming) -> list[Case]:
    """The table: for each rule, what must fire (with which labels) and what must not."""
    g0, g1 = gpu(n, 0), gpu(n, 1)
    dcgm_only = gpu(n, 0, host="d1", uuid="GPU-dcgm-only")  # a GPU only dcgm-exporter serves
    xid48 = {**g0, "xid": "48"}
    xid13 = {**g0, "xid": "13"}
    xid_dcgm = {**dcgm_only, "err_code": "79", "err_msg": "GPU has fallen off the bus"}
    idle = process(n, "4242", "bob", "python -m ipykernel_launcher")
    busy = process(n, "4343", "ann", "python train.py")
    up = {"instance": "n1:9400", "job": "nvtopy"}
    return [
        # Xid: a new Xid series counts (the first of its kind), a count that grows counts; critical or warning
        # by the catalogue; dcgm-exporter's last-Xid gauge for a GPU no nvtopy serves, never twice for one it does
        Case(
            "gpu-xid",
            True,
            "3m",
            (
                Series("nvtopy_xid_events_total", xid48, "_ _ 1 1 1"),
                Series("nvtopy_xid_events_total", xid13, "1 1 2 2 2"),
                Series("nvtopy_gpu_health", g0, "0x5"),
                Series("DCGM_FI_DEV_XID_ERRORS", {**g0, "err_code": "48", "err_msg": "x"}, "_ _ 48 48 48"),
                Series("DCGM_FI_DEV_XID_ERRORS", xid_dcgm, "_ _ 79 79 79"),
            ),
            (
                Alert(xid48, "critical"),
                Alert(xid13, "warning"),
                Alert({**xid_dcgm, "xid": "79"}, "critical"),
            ),
        ),
        Case(
            "gpu-xid",
            False,
            "15m",
            (  # seen long ago, not since: past the 10 minutes' window
                Series("nvtopy_xid_events_total", xid48, "1x20"),
                Series("nvtopy_gpu_health", g0, "0x20"),
                Series("DCGM_FI_DEV_XID_ERRORS", {**g0, "err_code": "48", "err_msg": "x"}, "48x20"),
                Series("DCGM_FI_DEV_XID_ERRORS", xid_dcgm, "79x20"),
                Series("DCGM_FI_DEV_XID_ERRORS", gpu(n, 1, host="d1", uuid="GPU-none"), "0x20"),  # no Xid: 0
            ),
        ),
        Case(
            "gpu-remap-pending",
            True,
            "1m",
            (Series("DCGM_FI_DEV_ROW_REMAP_PENDING", g0, "1x5"), Series("DCGM_FI_DEV_ROW_REMAP_PENDING", g1, "0x5")),
            (Alert(g0, "warning"),),
        ),
        Case("gpu-remap-pending", False, "3m", (Series("DCGM_FI_DEV_ROW_REMAP_PENDING", g0, "0x5"),)),
        Case(
            "gpu-remap-failed",
            True,
            "1m",
            (Series("DCGM_FI_DEV_ROW_REMAP_FAILURE", g0, "1x5"), Series("DCGM_FI_DEV_ROW_REMAP_FAILURE", g1, "0x5")),
            (Alert(g0, "critical"),),
        ),
        Case("gpu-remap-failed", False, "3m", (Series("DCGM_FI_DEV_ROW_REMAP_FAILURE", g0, "0x5"),)),
        Case(
            "gpu-not-responding",
            True,
            "3m",
            (
                Series("nvtopy_gpu_responding", g0, "0x5"),
                Series("nvtopy_gpu_stalled_seconds", g0, "90x5"),
                Series("nvtopy_gpu_responding", g1, "1x5"),
            ),
            (Alert(g0, "critical", 90.0),),
        ),
        Case(
            "gpu-not-responding",
            False,
            "3m",  # a GPU that missed one call for under a minute (for: 1m) is not reported yet
            (Series("nvtopy_gpu_responding", g0, "1 1 1 0"), Series("nvtopy_gpu_responding", g1, "1x5")),
        ),
        Case(
            "gpu-lost",
            True,
            "1m",
            (Series("nvtopy_gpu_lost", g0, "1x5"), Series("nvtopy_gpu_lost", g1, "0x5")),
            (Alert(g0, "critical"),),
        ),
        Case("gpu-lost", False, "3m", (Series("nvtopy_gpu_lost", g0, "0x5"),)),
        Case(
            "gpu-idle-held",
            True,
            "1m",
            (
                Series("nvtopy_process_idle_held_seconds", idle, "2400x5"),
                Series("nvtopy_process_idle_held_seconds", busy, "600x5"),
            ),
            (Alert(idle, "warning", 2400.0),),
        ),
        Case("gpu-idle-held", False, "3m", (Series("nvtopy_process_idle_held_seconds", busy, "600x5"),)),
        Case(
            "gpu-suspected-hang",
            True,
            "1m",
            (Series("nvtopy_gpu_suspected_hang_seconds", g0, "30x5"), Series("nvtopy_gpu_health", g1, "0x5")),
            (Alert(g0, "warning", 30.0),),
        ),
        Case("gpu-suspected-hang", False, "3m", (Series("nvtopy_gpu_health", g0, "1x5"),)),
        # each GPU against its own slowdown threshold: 84 °C is near 87, not near 95
        Case(
            "gpu-temperature-near-slowdown",
            True,
            "7m",
            (
                Series("DCGM_FI_DEV_GPU_TEMP", g0, "84x10"),
                Series("DCGM_FI_DEV_SLOWDOWN_TEMP", g0, "87x10"),
                Series("DCGM_FI_DEV_GPU_TEMP", g1, "84x10"),
                Series("DCGM_FI_DEV_SLOWDOWN_TEMP", g1, "95x10"),
            ),
            (Alert(g0, "warning", 84.0),),
        ),
        Case(
            "gpu-temperature-near-slowdown",
            False,
            "7m",
            (
                Series("DCGM_FI_DEV_GPU_TEMP", g0, "81x10"),
                Series("DCGM_FI_DEV_SLOWDOWN_TEMP", g0, "87x10"),
                Series("DCGM_FI_DEV_GPU_TEMP", g1, "70 70 86 70 70 70 70 70 70 70"),  # a peak, not 5 minutes
                Series("DCGM_FI_DEV_SLOWDOWN_TEMP", g1, "87x10"),
            ),
        ),
        Case(
            "gpu-power-capped",
            True,
            "17m",
            (
                Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", g0, "4x20"),  # software power cap
                Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", g1, "133x20"),  # power brake + cap + idle bits
            ),
            (Alert(g0, "warning"), Alert(g1, "warning")),
        ),
        Case(
            "gpu-power-capped",
            False,
            "17m",
            (
                Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", g0, "4x9 0x10"),  # capped for 10 of 15 minutes
                Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", g1, "99x20"),  # 0x63: idle, clocks, thermal; no cap
            ),
        ),
        Case(
            "gpu-health-worse",
            True,
            "3m",
            (Series("nvtopy_gpu_health", g0, "2x5"), Series("nvtopy_gpu_health", g1, "1x5")),
            (Alert(g0, "critical", 2.0),),
        ),
        Case("gpu-health-worse", False, "3m", (Series("nvtopy_gpu_health", g0, "1x5"),)),
        Case(
            "exporter-down",
            True,
            "4m",
            (Series("up", up, "0x5"), Series("up", {"instance": "n2:9400", "job": "nvtopy"}, "1x5")),
            (Alert(up, "critical"),),
        ),
        Case(
            "exporter-down",
            False,
            "4m",
            (Series("up", up, "1x5"), Series("up", {"instance": "n1:9100", "job": "node"}, "0x5")),  # not ours
        ),
        Case(
            "exporter-stale",
            True,
            "3m",
            (Series("nvtopy_exporter_ready", up, "0x5"),),
            (Alert(up, "warning"),),
        ),
        Case("exporter-stale", False, "3m", (Series("nvtopy_exporter_ready", up, "1 1 0 1 1 1"),)),
    ]


def fills(rule: AlertRule, naming: Naming, labels: dict[str, str], value: float) -> dict[str, str]:
    """What an engine on one machine would fill a template with, for the alert with these labels."""
    out = {
        "host": labels.get(naming.host_label) or labels.get("instance", ""),
        "gpu": labels.get("gpu", ""),
        "model": labels.get("modelName", ""),
        "uuid": labels.get("UUID", ""),
        "pid": labels.get("pid", ""),
        "user": labels.get("user", ""),
        "command": labels.get("command", ""),
        "job": labels.get("job", ""),
        "value": format_value(rule.value_unit, value),
    }
    if "xid" in labels:
        info = describe_xid(int(labels["xid"]))
        out |= {"xid": labels["xid"], "xid_meaning": info.meaning, "xid_action": info.action}
    return out


def expected_alert(rule: AlertRule, naming: Naming, alert: Alert) -> dict[str, object]:
    words = fills(rule, naming, alert.labels, alert.value)
    return {
        # an empty label is no label to Prometheus
        "exp_labels": {
            **{k: v for k, v in alert.labels.items() if v},
            "severity": alert.severity,
            "nvtopy_rule": rule.id,
        },
        "exp_annotations": {
            "summary": rule.render(rule.summary, words),
            "description": rule.render(f"{rule.description} What to do: {rule.action}", words),
            "action": rule.render(rule.action, words),
            "runbook": f"{RUNBOOK}: {rule.alert} ({rule.id})",
        },
    }


def series_text(naming: Naming, series: Series) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in series.labels.items())
    return f"{naming.name(series.name)}{{{labels}}}"


def unit_tests(naming: Naming, rules_file: str) -> dict[str, object]:
    """promtool's test file: one test group per case."""
    groups = []
    for case in cases(naming):
        rule = RULES_BY_ID[case.rule]
        groups.append(
            {
                "name": f"{case.rule} {'fires' if case.fires else 'stays quiet'}",
                "interval": "1m",
                "input_series": [{"series": series_text(naming, s), "values": s.values} for s in case.series],
                "alert_rule_test": [
                    {
                        "eval_time": case.at,
                        "alertname": rule.alert,
                        "exp_alerts": [expected_alert(rule, naming, a) for a in case.alerts],
                    }
                ],
            }
        )
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": groups}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


# ---- the table covers every rule ---------------------------------------------------------------------


def test_every_fleet_rule_has_a_case_that_fires_and_one_that_does_not():
    table = cases(LEGACY)
    for rule in CATALOG:
        kinds = {case.fires for case in table if case.rule == rule.id}
        if rule.fleet:
            assert kinds == {True, False}, f"{rule.id}: {kinds}"
        else:
            assert not kinds, f"{rule.id} is no fleet rule"
    assert all(case.alerts for case in table if case.fires)
    assert not any(case.alerts for case in table if not case.fires)


# ---- the real tools ---------------------------------------------------------------------------------


@requires_promtool
@pytest.mark.parametrize("naming", list(NAMINGS))
def test_promtool_checks_the_rule_file(tmp_path: Path, naming: str):
    path = tmp_path / "rules.yml"
    path.write_text(rule_file_text(NAMINGS[naming], header="test"), encoding="utf-8")
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(2 if r.id == 'gpu-xid' else 1 for r in CATALOG if r.fleet)} rules found" in done.stdout


@requires_promtool
@pytest.mark.parametrize("naming", list(NAMINGS))
def test_each_rule_fires_and_stays_quiet_as_its_cases_say(tmp_path: Path, naming: str):
    (tmp_path / "rules.yml").write_text(rule_file_text(NAMINGS[naming]), encoding="utf-8")
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml_text(unit_tests(NAMINGS[naming], "rules.yml")), encoding="utf-8")
    done = promtool("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "SUCCESS" in done.stdout


@requires_promtool
def test_a_wrong_expectation_fails_promtool(tmp_path: Path):
    """The cases can fail: the same table with one firing alert's severity swapped is a failure."""
    (tmp_path / "rules.yml").write_text(rule_file_text(LEGACY), encoding="utf-8")
    content = unit_tests(LEGACY, "rules.yml")
    first = content["tests"][0]["alert_rule_test"][0]["exp_alerts"][0]  # type: ignore[index]
    first["exp_labels"]["severity"] = "warning"
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml_text(content), encoding="utf-8")
    done = promtool("test", "rules", str(tests))
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


@requires_promtool
def test_the_4_9_naming_queries_its_own_names(tmp_path: Path):
    """Under dcgm-4.9 a rule on a renamed field uses the new name, and the host is ``hostname``."""
    text = rule_file_text(NAMING_4_9)
    assert "DCGM_FI_DEV_ROW_REMAP_FAILED == 1" in text and "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in text
    assert "DCGM_FI_DEV_GPU_TEMP_CELSIUS >= DCGM_FI_DEV_SLOWDOWN_TEMP" in text
    assert "$labels.hostname" in text and "$labels.Hostname" not in text


# ---- durations and YAML ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("500ms", 0.5), ("90", 90.0), ("0.5", 0.5)],
)
def test_durations_parse(text: str, seconds: float):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-1", "nan", "inf", "1e308", "8d", "m", "5 m", "1h-5m"])
def test_bad_durations_are_refused(text: str):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (1, "1s"), (90, "90s"), (300, "5m"), (7200, "2h"), (1.5, "1500ms")]
)
def test_durations_are_written_as_prometheus_writes_them(seconds: float, text: str):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_yaml_quotes_every_string_and_nests_in_block_style():
    text = yaml_text({"groups": [{"name": "no", "rules": [{"expr": 'a{b="c"} > 1', "for": "0s"}]}], "yes": {}})
    assert text == (
        'groups:\n  - name: "no"\n    rules:\n      - expr: "a{b=\\"c\\"} > 1"\n        for: "0s"\n"yes": {}\n'
    )


def test_yaml_escapes_what_yaml_does_not_take_raw():
    assert yaml_text(["a\u2028b\x85c°"]) == '- "a\\u2028b\\u0085c\\u00b0"\n'
    assert yaml_text(["°C"]) == '- "°C"\n'
    with pytest.raises(ValueError):
        yaml_text([float("nan")])
