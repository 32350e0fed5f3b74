"""The ``[alerts]`` table: its shape read by the config, its rules checked against the catalog, one line per error."""

from __future__ import annotations

import pytest

from nvtopy.alerts.catalog import RULES_BY_ID
from nvtopy.alerts.settings import LOCAL_RULES, AlertConfigError, AlertSettings, alert_settings
from nvtopy.config import Config, parse_config, to_toml
from nvtopy.errors import UsageError

pytestmark = pytest.mark.timeout(60)


def test_no_configuration_is_every_local_rule_with_the_catalogs_numbers():
    settings = alert_settings()
    assert settings == AlertSettings()
    assert [s.id for s in settings.rules] == [r.id for r in LOCAL_RULES]
    assert all(s.enabled and s.rule == RULES_BY_ID[s.id] for s in settings.rules)
    assert "exporter-down" not in [s.id for s in settings.rules], "fleet-only rules are not evaluated here"


def test_a_config_file_sets_times_thresholds_scope_and_channels():
    text = (
        '[alerts]\nchannels = ["desktop", "ntfys://tok3n@ntfy.sh/gpus"]\n'
        '[alerts.gpu-free]\nfor = "2m"\nclear = 5\ncooldown = 0.5\nmemory_mib = 1024\ngpus = [0, "GPU-ab"]\n'
        '[alerts.process-ended]\nusers = ["*"]\n'
        "[alerts.gpu-power-capped]\nenabled = false\n"
    )
    config, warnings = parse_config(text)
    assert warnings == []
    settings = alert_settings(config.alerts_rules, config.alerts_channels)
    free = settings.get("gpu-free")
    assert (free.rule.for_s, free.rule.clear_s, free.rule.cooldown_s) == (120.0, 5.0, 0.5)
    assert free.rule.threshold("memory_mib") == 1024 and free.gpus == ("0", "GPU-ab")
    assert settings.get("process-ended").users == ("*",)
    assert not settings.get("gpu-power-capped").enabled
    assert settings.channels == ("desktop", "ntfys://tok3n@ntfy.sh/gpus")
    printed = to_toml(config)
    assert "tok3n" not in printed and "# channels: 2 set in the file" in printed, "channels may hold secrets"
    assert parse_config(printed)[0].alerts_rules == config.alerts_rules, "the rule tables read back"


@pytest.mark.parametrize(
    ("tables", "said"),
    [
        ({"gpu-fre": {}}, "alerts.gpu-fre: unknown rule 'gpu-fre'; did you mean 'gpu-free'?"),
        ({"exporter-down": {}}, "alerts.exporter-down: a fleet-only rule"),
        ({"gpu-free": {"memory": 3}}, "alerts.gpu-free.memory: unknown key 'memory'; did you mean 'memory_mib'?"),
        (
            {"gpu-free": {"memory_mib": "lots"}},
            "alerts.gpu-free.memory_mib: must be a number from 0 to 1e9 (not 'lots",
        ),
        ({"gpu-free": {"memory_mib": -1}}, "alerts.gpu-free.memory_mib: must be a number from 0 to 1e9 (not -1)"),
        ({"gpu-lost": {"for": "soon"}}, "alerts.gpu-lost.for: must be seconds from 0 to 604800"),
        ({"gpu-lost": {"clear": float("nan")}}, "alerts.gpu-lost.clear: must be seconds"),
        ({"gpu-lost": {"enabled": "no"}}, "alerts.gpu-lost.enabled: must be true or false (not 'no')"),
        ({"gpu-free": {"users": ["alice"]}}, "alerts.gpu-free.users: gpu-free is about GPUs with no processes"),
        ({"gpu-idle-held": {"users": [3]}}, "alerts.gpu-idle-held.users: each entry must be a name (not 3)"),
        ({"gpu-lost": {"gpus": [True]}}, "alerts.gpu-lost.gpus: each entry must be a GPU index or UUID (not true)"),
    ],
)
def test_a_bad_entry_is_one_line_naming_its_key(tables, said):
    with pytest.raises(AlertConfigError) as raised:
        alert_settings(tables)
    message = str(raised.value)
    assert message.startswith(said) and "\n" not in message, message
    assert isinstance(raised.value, UsageError), "nvtopy watch: exit code 2"


def test_the_config_keeps_the_alerts_table_shape_only():
    config, warnings = parse_config("[alerts.no-such-rule]\nfor = 3\n")
    assert warnings == [] and config.alerts_rules == (("no-such-rule", (("for", 3),)),), "the catalog's job"
    for bad, said in [
        ("alerts = 1\n", "'alerts': must be a table"),
        ('[alerts]\nchannels = "desktop"\n', "'alerts.channels': must be an array"),
        ("[alerts]\nchannels = [1]\n", "'alerts.channels': each must be a non-empty string"),
        ("[alerts]\ngpu-free = 1\n", "'alerts.gpu-free': must be a table of a rule's settings"),
        ("[alerts.gpu-free]\nx = {a = 1}\n", "'alerts.gpu-free.x': must be a number, a string"),
        ("[alerts.gpu-free]\nx = [[1]]\n", "'alerts.gpu-free.x': must be an array of at most"),
    ]:
        config, warnings = parse_config(bad)
        assert config == Config() and len(warnings) == 1 and said in warnings[0], (bad, warnings)


def test_only_keeps_one_rule_with_its_scope_and_new_times():
    settings = alert_settings({"gpu-free": {"gpus": [1], "memory_mib": 64}})
    once = settings.only("gpu-free", for_s=0.0, clear_s=0.0)
    assert [s.id for s in once.rules if s.enabled] == ["gpu-free"]
    free = once.get("gpu-free")
    assert (free.rule.for_s, free.rule.clear_s, free.gpus, free.rule.threshold("memory_mib")) == (0, 0, ("1",), 64)
