"""dcgm-exporter's naming generations (nvtopy.formats.dcgm_naming): the renames, their units, both ways.

The expected names and factors are written out here from ``docs/dcgm-names.md`` (DCGM's
field-naming standard, dcgm-exporter 4.9.0's release text), not read from the module's
table, so a wrong name or scale there fails here.
"""

from __future__ import annotations

import math

import pytest

from nvtopy.formats.dcgm import BY_NAME
from nvtopy.formats.dcgm_naming import (
    DEFAULT_NAMING,
    DRIVER_LABELS,
    HOST_LABELS,
    LEGACY,
    NAMING_4_9,
    NAMINGS,
    READ_ALIASES,
    first_label,
    legacy_reading,
)

from ..builders import gpu_sample, gpu_state, gpu_static, host_info

MIB = 1048576
# 4.9 name -> (legacy name, new value per legacy value)
EXPECTED = {
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": ("DCGM_FI_DEV_SM_CLOCK", 1e6),
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": ("DCGM_FI_DEV_MEM_CLOCK", 1e6),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("DCGM_FI_DEV_GPU_TEMP", 1),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("DCGM_FI_DEV_POWER_USAGE", 1),
    "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),
    "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1),
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("DCGM_FI_DEV_GPU_UTIL", 0.01),
    "DCGM_FI_DEV_MEMORY_UTIL_RATIO": ("DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
    "DCGM_FI_DEV_ENC_UTIL_RATIO": ("DCGM_FI_DEV_ENC_UTIL", 0.01),
    "DCGM_FI_DEV_DEC_UTIL_RATIO": ("DCGM_FI_DEV_DEC_UTIL", 0.01),
    "DCGM_FI_DEV_XID_ERROR": ("DCGM_FI_DEV_XID_ERRORS", 1),
    "DCGM_FI_DEV_FB_FREE_BYTES": ("DCGM_FI_DEV_FB_FREE", MIB),
    "DCGM_FI_DEV_FB_USED_BYTES": ("DCGM_FI_DEV_FB_USED", MIB),
    "DCGM_FI_DEV_FB_RESERVED_BYTES": ("DCGM_FI_DEV_FB_RESERVED", MIB),
    "DCGM_FI_DEV_FB_CAPACITY_BYTES": ("DCGM_FI_DEV_FB_TOTAL", MIB),
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1),
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 1),
    "DCGM_FI_DEV_ROW_REMAP_FAILED": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1),
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1),
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("DCGM_FI_PROF_SM_ACTIVE", 1),
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": ("DCGM_FI_PROF_SM_OCCUPANCY", 1),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("DCGM_FI_PROF_DRAM_ACTIVE", 1),
    "DCGM_FI_PROF_FP64_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1),
    "DCGM_FI_PROF_FP32_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1),
    "DCGM_FI_PROF_FP16_UTIL_RATIO": ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1),
}


def _state():
    """A GPU with every renamed figure set to a value that tells a wrong scale apart."""
    sample = gpu_sample(
        utilization_gpu_percent=73,
        utilization_memory_percent=41,
        encoder_percent=5,
        decoder_percent=9,
        memory_used_bytes=30_000 * MIB + 4096,
        memory_free_bytes=50_000 * MIB,
        memory_reserved_bytes=512 * MIB,
        temperature_c=64,
        power_draw_w=412.5,
        energy_mj=123_456_789,
        clock_sm_mhz=1980,
        clock_mem_mhz=2619,
        pcie_replay_counter=3,
        remapped_rows_corrected=2,
        remapped_rows_uncorrected=1,
        remapped_rows_failure=False,
        graphics_active_percent=71.5,
        sm_active_percent=62.25,
        sm_occupancy_percent=33.0,
        tensor_active_percent=48.5,
        dram_active_percent=27.0,
        fp64_active_percent=1.5,
        fp32_active_percent=12.0,
        fp16_active_percent=8.75,
    )
    return gpu_state(static=gpu_static(memory_total_bytes=81_559 * MIB), sample=sample)


def test_the_4_9_names_and_factors_are_the_documented_ones():
    assert {new: (legacy, 1 / factor) for new, (legacy, factor) in READ_ALIASES.items()} == pytest.approx(EXPECTED)
    assert set(READ_ALIASES) == set(EXPECTED)


def test_the_4_9_exporter_writes_each_renamed_figure_in_its_new_unit():
    state = _state()
    legacy = {f.name: f.value(state) for f in LEGACY.fields}
    new = {f.name: f.value(state) for f in NAMING_4_9.fields}
    checked = 0
    for name, (old, factor) in EXPECTED.items():
        if legacy.get(old) is None:
            assert new[name] is None, name
            continue
        assert new[name] == pytest.approx(legacy[old] * factor, rel=1e-12), name
        checked += 1
    assert checked >= 15
    assert new["DCGM_FI_DEV_SM_CLOCK_HERTZ"] == 1.98e9
    assert new["DCGM_FI_DEV_GPU_UTIL_RATIO"] == pytest.approx(0.73)
    assert new["DCGM_FI_DEV_FB_USED_BYTES"] == 30_000 * MIB + 4096  # exact in bytes
    assert new["DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"] == pytest.approx(123_456.789)


def test_fields_without_a_documented_4_9_name_keep_theirs():
    renamed = {legacy for legacy, _ in EXPECTED.values()}
    kept = [f.name for f in LEGACY.fields if f.name not in renamed]
    assert set(kept) <= {f.name for f in NAMING_4_9.fields}
    assert "DCGM_FI_DEV_PSTATE" in kept and "DCGM_FI_PROF_PCIE_TX_BYTES" in kept
    assert not set(renamed) & {f.name for f in NAMING_4_9.fields}, "no legacy name of a renamed field is written"
    assert len(NAMING_4_9.fields) == len(LEGACY.fields)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_4_9_series_reads_back_to_the_model_as_its_legacy_one_does(name):
    state = _state()
    field = {f.name: f for f in NAMING_4_9.fields}[name]
    legacy = BY_NAME[EXPECTED[name][0]]
    written = field.value(state)
    assert written is not None, f"{name}: the scene must set it"
    assert field.from_metric(written) == legacy.from_metric(legacy.value(state))
    old, value = legacy_reading(name, written)
    assert old == legacy.name and legacy.from_metric(value) == legacy.from_metric(legacy.value(state))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0, 1e300])
def test_a_4_9_value_out_of_range_reads_as_unavailable(bad):
    for name, (old, _) in EXPECTED.items():
        legacy, value = legacy_reading(name, bad)
        assert legacy == old
        if bad == -1.0 and name == "DCGM_FI_DEV_GPU_TEMP_CELSIUS":
            continue  # -1 C is a temperature (nvtopy.ranges.TEMPERATURE_C)
        assert BY_NAME[legacy].from_metric(value) is None, (name, bad)


def test_a_ratio_is_never_read_as_a_percentage_nor_hertz_as_megahertz():
    assert BY_NAME["DCGM_FI_DEV_GPU_UTIL"].from_metric(legacy_reading("DCGM_FI_DEV_GPU_UTIL_RATIO", 0.7)[1]) == 70
    assert BY_NAME["DCGM_FI_DEV_SM_CLOCK"].from_metric(legacy_reading("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1.98e9)[1]) == 1980
    assert legacy_reading("DCGM_FI_DEV_GPU_UTIL", 70.0) == ("DCGM_FI_DEV_GPU_UTIL", 70.0), "a legacy series as it is"
    assert legacy_reading("nvtopy_gpu_health", 1.0) == ("nvtopy_gpu_health", 1.0)


def test_labels_per_naming_and_either_spelling_when_reading():
    state, host = _state(), host_info(hostname="node7", driver_version="580.65.06")
    assert LEGACY.labels_of(state, host)["Hostname"] == "node7"
    assert LEGACY.labels_of(state, host)["DCGM_FI_DRIVER_VERSION"] == "580.65.06"
    new = NAMING_4_9.labels_of(state, host)
    assert new["hostname"] == "node7" and new["DCGM_FI_SYSTEM_DRIVER_VERSION"] == "580.65.06"
    assert "Hostname" not in new and "DCGM_FI_DRIVER_VERSION" not in new
    assert tuple(new) == NAMING_4_9.gpu_labels
    assert first_label({"Hostname": "a"}, HOST_LABELS) == "a"
    assert first_label({"hostname": "b", "Hostname": ""}, HOST_LABELS) == "b"
    assert first_label({"DCGM_FI_DRIVER_VERSION": "535"}, DRIVER_LABELS) == "535"
    assert first_label({}, DRIVER_LABELS) is None


def test_the_default_is_the_naming_dashboards_read_today():
    assert DEFAULT_NAMING == "dcgm-legacy" and NAMINGS[DEFAULT_NAMING] is LEGACY
    assert {f.name for f in LEGACY.fields} >= {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    }, "the six metrics Grafana dashboard 12239 queries"
