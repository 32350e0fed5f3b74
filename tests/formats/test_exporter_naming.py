"""The exporter's two namings (``nvtopy exporter --names``): legacy byte for byte as before, 4.9 the same figures.

One snapshot with every exported field set (:func:`~tests.builders.every_field_snapshot`: GPM,
MIG instances, an Xid, a pod's process, a lost GPU) is rendered in both namings. The legacy text
must be today's, byte for byte (``golden/exposition-dcgm-legacy.prom``, made before namings
existed; the build's version line is left out). The 4.9 text must hold the same series, one for
one, each under its 4.9 name, with 4.9's label spellings, and its value the legacy one times the
rename's factor (:data:`~nvtopy.formats.dcgm_naming.RENAMES_4_9`).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvtopy.formats.dcgm import FIELDS, MIB
from nvtopy.formats.dcgm_naming import LEGACY, NAMING_4_9, RENAMES_4_9, Naming
from nvtopy.formats.prometheus.collect import SnapshotCollector
from nvtopy.formats.prometheus.expose import Exposition, TextRenderer
from nvtopy.formats.prometheus.series import NVTOPY_FIELDS

from ..builders import LatestSource, every_field_snapshot

GOLDEN = Path(__file__).parent / "golden" / "exposition-dcgm-legacy.prom"
SCALE = {r.legacy: r.scale for r in RENAMES_4_9}
LABEL_4_9 = {"Hostname": "hostname", "DCGM_FI_DRIVER_VERSION": "DCGM_FI_SYSTEM_DRIVER_VERSION"}


def _text(naming: Naming | None) -> str:
    """The snapshot's exposition in ``naming`` (None: the collector's default), without the version line."""
    snapshot = every_field_snapshot()
    source = LatestSource(snapshot)
    collector = SnapshotCollector(source) if naming is None else SnapshotCollector(source, naming)
    families = [f for f in collector.families(snapshot) if f.name != "nvtopy_exporter_info"]
    return TextRenderer().render(families).decode("utf-8")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, labels) -> value of every sample in ``text``; each (name, labels) once."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in found, f"a series twice: {key}"
            found[key] = sample.value
    return found


def _as_4_9(name: str, labels: tuple[tuple[str, str], ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A legacy series' key as the 4.9 naming writes it."""
    return NAMING_4_9.name(name), tuple(sorted((LABEL_4_9.get(k, k), v) for k, v in labels))


def test_the_legacy_exposition_is_todays_byte_for_byte():
    expected = GOLDEN.read_text(encoding="utf-8")
    assert _text(LEGACY) == expected
    assert _text(None) == expected, "the default naming is the legacy one"


def test_the_snapshot_sets_every_field():
    """Else the comparisons below would pass over a field nobody looked at."""
    names = {name for name, _ in _samples(_text(LEGACY))}
    assert {f.name for f in FIELDS} <= names
    assert {f.name for f in NVTOPY_FIELDS} - names == {"nvtopy_gpu_stalled_seconds"}  # only a hung GPU has it


def test_every_4_9_value_is_the_legacy_one_times_its_factor():
    legacy, new = _samples(_text(LEGACY)), _samples(_text(NAMING_4_9))
    assert len(legacy) == len(new), "one series for one"
    renamed = 0
    for (name, labels), value in legacy.items():
        key = _as_4_9(name, labels)
        assert key in new, f"{name}{dict(labels)} has no 4.9 counterpart {key}"
        expected = value * SCALE.get(name, 1.0)
        assert math.isclose(new[key], expected, rel_tol=1e-12), (name, new[key], expected)
        renamed += key[0] != name
    assert renamed >= len(RENAMES_4_9), "every rename was compared"


@pytest.mark.parametrize(
    ("legacy", "new", "written"),
    [
        ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", "1.98e+09"),
        ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "2.619e+09"),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "123456.789"),
        ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "0.83"),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "0.41"),
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", "4.294967296e+10"),
        ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES", "8.589934592e+10"),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "0.455"),
    ],
)
def test_the_4_9_units_as_written(legacy, new, written):
    """GPU 0's figure in 4.9's unit, written as dcgm-exporter would (0.41, not 0.41000000000000003)."""
    lines = _text(NAMING_4_9).splitlines()
    found = [line.rsplit(" ", 1)[1] for line in lines if line.startswith(new + "{") and 'gpu="0"' in line]
    assert found == [written]
    assert not any(line.startswith(legacy + "{") for line in lines), "the legacy name is gone"


def test_the_4_9_labels():
    text = _text(NAMING_4_9)
    samples = _samples(text)
    assert "Hostname=" not in text and "DCGM_FI_DRIVER_VERSION=" not in text
    gpu_labels = set(NAMING_4_9.gpu_labels)
    assert gpu_labels == {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "hostname",
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
    }
    extras = {"GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container", "err_code", "err_msg"}
    for name, labels in samples:
        keys = {k for k, _ in labels}
        if name.startswith("DCGM_FI_") or name in ("nvtopy_gpu_health", "nvtopy_gpu_lost"):
            assert gpu_labels <= keys <= gpu_labels | extras, (name, keys)
            assert dict(labels)["hostname"] == "node-7" and dict(labels)["DCGM_FI_SYSTEM_DRIVER_VERSION"] == "550.54.15"
        elif name.startswith(("nvtopy_nvlink_link_", "nvtopy_mig_device_", "nvtopy_process_")):
            assert dict(labels)["hostname"] == "node-7", (name, keys)
    for family in ("nvtopy_nvlink_link_active", "nvtopy_mig_device_info", "nvtopy_process_gpu_memory_bytes"):
        assert any(name == family for name, _ in samples), f"{family}: checked above"


def test_the_4_9_gpu_instance_series():
    """A GPU instance's framebuffer in bytes (its own, exactly), its activity as ratios, under 4.9's names."""
    snapshot = every_field_snapshot()
    samples = _samples(_text(NAMING_4_9))

    def instance(name: str, gi: str) -> float:
        found = [v for (n, labels), v in samples.items() if n == name and dict(labels).get("GPU_I_ID") == gi]
        assert len(found) == 1, (name, gi, found)
        return found[0]

    for mig in snapshot.gpus[1].mig:
        gi = str(mig.instance.gpu_instance_id)
        assert mig.usage is not None
        assert instance("DCGM_FI_DEV_FB_USED_BYTES", gi) == mig.memory_used_bytes
        assert instance("DCGM_FI_DEV_FB_FREE_BYTES", gi) == mig.usage.memory_free_bytes
        assert instance("DCGM_FI_DEV_FB_CAPACITY_BYTES", gi) == mig.memory_total_bytes
        assert instance("DCGM_FI_PROF_TENSOR_UTIL_RATIO", gi) == mig.usage.tensor_active_percent / 100
        assert instance("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", gi) == mig.usage.graphics_active_percent / 100
    used = instance("DCGM_FI_DEV_FB_USED_BYTES", "2")
    assert used == 3 * 2**30 + 7 * MIB and used % MIB == 0, "bytes, not MiB"


def test_a_lost_gpu_keeps_only_its_health_series_in_4_9_too():
    """GPU 2 fell off the bus: its health, responding, lost and Xid series stay, under 4.9's labels too."""
    for naming in (LEGACY, NAMING_4_9):
        lost = {
            name: (value, dict(labels)[naming.host_label])
            for (name, labels), value in _samples(_text(naming)).items()
            if dict(labels).get("UUID") == "GPU-2"
        }
        assert lost == {
            "nvtopy_gpu_health": (2.0, "node-7"),
            "nvtopy_gpu_responding": (1.0, "node-7"),
            "nvtopy_gpu_lost": (1.0, "node-7"),
            "nvtopy_xid_events_total": (1.0, "node-7"),
        }, naming.key


def test_help_texts_say_the_unit():
    """A 4.9 series whose unit changed says its new unit; a legacy one says its old one."""
    units_4_9 = {1e6: "Hz", 1e-3: "J", 0.01: "ratio", float(MIB): "bytes"}
    units_legacy = {1e6: "MHz", 1e-3: "mJ", 0.01: "%", float(MIB): "MiB"}
    helps_4_9 = {f.name: f.help for f in NAMING_4_9.fields}
    helps_legacy = {f.name: f.help for f in LEGACY.fields}
    for rename in RENAMES_4_9:
        if rename.scale != 1.0:
            assert units_4_9[rename.scale] in helps_4_9[rename.new], rename
            assert units_legacy[rename.scale] in helps_legacy[rename.legacy], rename
    text = _text(NAMING_4_9)
    assert "# HELP DCGM_FI_DEV_SM_CLOCK_HERTZ SM clock frequency (in Hz).\n" in text
    assert "# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used (in bytes).\n" in text


def test_the_exposition_the_server_answers_speaks_its_naming():
    """``serve(naming=...)`` hands it to :class:`Exposition`: what a scrape gets, version and age lines and all."""
    snapshot = every_field_snapshot()
    legacy = b"".join(Exposition(LatestSource(snapshot)).chunks()).decode()
    new = b"".join(Exposition(LatestSource(snapshot), naming=NAMING_4_9).chunks()).decode()
    assert legacy.startswith("# HELP nvtopy_exporter_info ") and GOLDEN.read_text(encoding="utf-8") in legacy
    assert "\nDCGM_FI_DEV_SM_CLOCK_HERTZ{" in new and "\nDCGM_FI_DEV_SM_CLOCK{" not in new
    assert new.startswith("# HELP nvtopy_exporter_info ") and _text(NAMING_4_9) in new


def test_what_nvtopy_writes_in_either_naming_reads_back_the_same():
    """The round trip: ``nvtopy exporter --names X`` scraped by ``nvtopy --remote`` gives the same GPUs,
    processes, health and MIG instances for both namings -- the writer's factors and the reader's agree."""
    from nvtopy.formats.prometheus.parse import parse_exposition

    legacy = parse_exposition(_text(LEGACY), "http://node:9400/metrics")
    new = parse_exposition(_text(NAMING_4_9), "http://node:9400/metrics")
    assert legacy.error is None and new.error is None
    assert len(legacy.gpus) == 3 and any(static.mig_instances for static, _, _ in legacy.gpus)  # one lost
    assert (new.hostname, new.driver_version) == (legacy.hostname, legacy.driver_version) != ("node", None)
    assert new.gpus == legacy.gpus
    assert new.health == legacy.health and new.processes == legacy.processes
    values = legacy.gpus[0][1]
    assert values["clock_sm_mhz"] < 10_000 and 0 <= values["utilization_gpu_percent"] <= 100


def test_a_gpus_lost_flag_has_the_very_labels_of_its_value_series():
    """A reader that groups a GPU's series by their labels finds one GPU, also one a pod holds (its pod labels on
    every series of it): the fleet's read took such a GPU for two, its lost flag without the pod labels (a real
    Prometheus's test in CI, 2e5e441)."""
    text = b"".join(Exposition(LatestSource(every_field_snapshot())).chunks()).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    lost = {s.labels["gpu"]: s.labels for s in families["nvtopy_gpu_lost"].samples}
    used = {s.labels["gpu"]: s.labels for s in families["DCGM_FI_DEV_FB_USED"].samples if not s.labels.get("GPU_I_ID")}
    assert any("pod" in labels for labels in used.values()), "the snapshot has a GPU one pod holds"
    assert set(used) <= set(lost)
    assert {gpu: lost[gpu] for gpu in used} == used
