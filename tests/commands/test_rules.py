"""``nvtopy rules``: the rule file on stdout, its options, and one clear line for each bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvtopy.alerts.catalog import CATALOG, critical_xids
from nvtopy.commands.dispatch import main

from ..builders import run_nvtopy


def rules(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["rules", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_default_file_holds_every_fleet_rule_under_legacy_names(capsys):
    code, out, err = rules(capsys)
    assert (code, err) == (0, "")
    assert out.startswith("# Prometheus alerting rules for nvtopy's exporter (names: dcgm-legacy)")
    for r in CATALOG:
        assert (f'- alert: "{r.alert}"' in out) == r.fleet, r.id
    assert 'expr: "DCGM_FI_DEV_ROW_REMAP_FAILURE == 1"' in out
    assert 'expr: "up{job=~\\"nvtopy\\"} == 0"' in out


def test_options_reach_the_file(capsys):
    code, out, _ = rules(
        capsys,
        "--names", "dcgm-4.9", "--job", "gpu|dcgm", "--for", "0s", "--for", "gpu-lost=2m",
        "--threshold", "gpu-temperature-near-slowdown.margin_c=3", "--evaluation-interval", "15s",
        "--runbook-url", "https://wiki.example/gpu",
    )  # fmt: skip
    assert code == 0
    assert 'expr: "up{job=~\\"gpu|dcgm\\"} == 0"' in out
    assert "DCGM_FI_DEV_GPU_TEMP_CELSIUS >= DCGM_FI_DEV_SLOWDOWN_TEMP - 3" in out
    assert out.count('for: "0s"') == sum(2 if r.id == "gpu-xid" else 1 for r in CATALOG if r.fleet) - 1
    assert out.count('for: "2m"') == 1 and 'interval: "15s"' in out
    assert '"https://wiki.example/gpu#gpu-lost"' in out


def test_list_names_rules_and_thresholds(capsys):
    code, out, _ = rules(capsys, "--list")
    assert code == 0
    assert "gpu-idle-held.idle_minutes=30 (min)" in out
    assert len([line for line in out.splitlines() if not line.startswith(" ")]) == len(CATALOG)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--for", "gpu-lots=1m"], "--for: unknown rule 'gpu-lots'"),
        (["--for", "5x"], "--for: not a duration"),
        (["--for", "-1"], "--for: a duration must be"),
        (["--threshold", "gpu-lost.margin_c=1"], "--threshold: gpu-lost has no thresholds"),
        (["--threshold", "gpu-idle-held.idle_minute=1"], "unknown threshold of gpu-idle-held 'idle_minute'"),
        (["--threshold", "gpu-idle-held.idle_minutes=ten"], "must be a number"),
        (["--threshold", "gpu-idle-held.idle_minutes=nan"], "must be a finite number"),
        (["--threshold", "margin_c=1"], "give RULE.NAME=VALUE"),
        (["--job", "("], "--job: not a regular expression"),
        (["--evaluation-interval", "0s"], "--evaluation-interval must be more than 0"),
        (["--names", "dcgm-5"], "--names"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(argv, message):
    done = run_nvtopy("rules", *argv)
    assert done.returncode == 2, done
    assert message in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_rules_is_listed_in_help():
    done = run_nvtopy("--help")
    assert "rules" in done.stdout and "alerting rules" in done.stdout


def test_the_readme_explains_every_fleet_alert_and_the_critical_xids():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Alerts for a fleet: `nvtopy rules`", 1)[1].split("\n### ", 1)[0]
    for r in CATALOG:
        assert (f"| `{r.alert}` |" in section) == r.fleet, r.alert
    assert f"({', '.join(str(x) for x in critical_xids())})" in section
