"""The alert catalog (nvtopy.alerts.catalog): well-formed rules, templates that fill, one home for the Xid words."""

from __future__ import annotations

import math
import re

import pytest

from nvtopy.alerts.catalog import (
    CATALOG,
    PLACEHOLDERS,
    RULES_BY_ID,
    SUBJECT_PLACEHOLDERS,
    AlertSeverity,
    Subject,
    ValueUnit,
    critical_xids,
    format_value,
    placeholders,
    rule,
    with_overrides,
    xid_severity,
)
from nvtopy.health.xid import XID_CATALOGUE
from nvtopy.model import Severity

TEMPLATES = ("summary", "description", "action")


def test_ids_and_alert_names_are_unique_and_spelled_alike():
    assert len(RULES_BY_ID) == len(CATALOG)
    assert len({r.alert for r in CATALOG}) == len(CATALOG)
    for r in CATALOG:
        assert re.fullmatch(r"[a-z]+(-[a-z0-9]+)+", r.id), r.id
        assert re.fullmatch(r"Nvtopy([A-Z][a-z0-9]*)+", r.alert), r.alert
        assert r.local or r.fleet, r.id
        assert r.for_s >= 0 and r.clear_s >= 0 and r.cooldown_s >= 0


def test_the_issue_s_rules_are_all_there():
    wanted = {
        "gpu-xid", "gpu-remap-pending", "gpu-remap-failed", "gpu-not-responding", "gpu-lost", "gpu-idle-held",
        "gpu-temperature-near-slowdown", "gpu-power-capped", "gpu-health-worse", "gpu-free", "process-ended",
        "exporter-down", "exporter-stale",
    }  # fmt: skip
    assert wanted <= set(RULES_BY_ID)
    assert {r.id for r in CATALOG if not r.fleet} == {"gpu-free", "process-ended", "host-unreachable"}
    assert {r.id for r in CATALOG if not r.local} == {"exporter-down", "exporter-stale"}


@pytest.mark.parametrize("r", CATALOG, ids=lambda r: r.id)
def test_templates_use_only_their_subject_s_placeholders(r):
    allowed = set(SUBJECT_PLACEHOLDERS[r.subject]) | {t.name for t in r.thresholds}
    if r.value_unit is not ValueUnit.NONE:
        allowed.add("value")
    assert set(SUBJECT_PLACEHOLDERS[r.subject]) <= set(PLACEHOLDERS)
    for name in TEMPLATES:
        template = getattr(r, name)
        assert placeholders(template) <= allowed, (r.id, name, placeholders(template) - allowed)
        assert "{{" not in template and template.strip() == template and template
    assert "{gpu}" in r.summary or r.subject in (Subject.EXPORTER, Subject.HOST)


@pytest.mark.parametrize("r", CATALOG, ids=lambda r: r.id)
def test_every_template_fills_with_its_subject_s_words(r):
    fills = {name: f"<{name}>" for name in SUBJECT_PLACEHOLDERS[r.subject]} | {"value": "<value>"}
    for name in TEMPLATES:
        text = r.render(getattr(r, name), fills)
        assert "{" not in text and "}" not in text
    for threshold in r.thresholds:
        assert f"{threshold.value:g}" == r.threshold_values[threshold.name]


def test_a_missing_fill_is_an_error_not_a_blank():
    with pytest.raises(KeyError):
        rule("gpu-lost").render(rule("gpu-lost").summary, {"gpu": "1"})


def test_xid_words_and_severity_come_from_the_health_catalogue():
    assert xid_severity(79) is AlertSeverity.CRITICAL  # fell off the bus
    assert xid_severity(13) is AlertSeverity.WARNING  # the application's fault
    assert xid_severity(99999) is AlertSeverity.WARNING  # unknown: look it up
    assert set(critical_xids()) == {x for x, info in XID_CATALOGUE.items() if info.severity is Severity.FAIL}
    assert list(critical_xids()) == sorted(critical_xids())
    assert rule("gpu-xid").subject is Subject.XID


def test_overrides_change_for_and_thresholds_and_refuse_nonsense():
    base = rule("gpu-temperature-near-slowdown")
    changed = with_overrides(base, for_s=0, thresholds={"margin_c": 3})
    assert (changed.for_s, changed.threshold("margin_c")) == (0.0, 3.0)
    assert (base.for_s, base.threshold("margin_c")) == (300.0, 5.0)  # frozen: the catalog is untouched
    assert with_overrides(base) == base
    with pytest.raises(KeyError):
        with_overrides(base, thresholds={"margin": 3})
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError):
            with_overrides(base, for_s=bad)
        with pytest.raises(ValueError):
            with_overrides(base, thresholds={"margin_c": bad})


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [
        (ValueUnit.SECONDS, 2400, "40m 0s"),
        (ValueUnit.SECONDS, 3725, "1h 2m 5s"),
        (ValueUnit.SECONDS, 90061, "1d 1h 1m 1s"),
        (ValueUnit.SECONDS, 30, "30s"),
        (ValueUnit.SECONDS, 11.002, "11s"),
        (ValueUnit.SECONDS, 0.25, "250ms"),
        (ValueUnit.SECONDS, 0, "0s"),
        (ValueUnit.CELSIUS, 84.4, "84"),
        (ValueUnit.COUNT, 2, "2"),
        (ValueUnit.SECONDS, math.nan, "N/A"),
        (ValueUnit.CELSIUS, math.inf, "N/A"),
    ],
)
def test_values_are_written_as_prometheus_writes_them(unit, value, text):
    assert format_value(unit, value) == text
