"""NvmlBackend against a fake pynvml module: values, units, and every way NVML fails."""

from __future__ import annotations

import os
import pwd
import subprocess

import pynvml
import pytest

from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.errors import BackendUnavailableError
from nvtopy.model import ALL_GROUPS, GPM_FIELDS, SAMPLE_FIELDS, SAMPLE_GROUPS, STATIC_FIELDS, ProcessType, Reason
from nvtopy.sources.collector import Collector

from ..fake_pynvml import FakeGpu, FakeNvml, FakeProcess, FakeSample, now_us
from ..waiting import exec_shown

GIB = 1 << 30
MIB = 1 << 20
# GPM (Hopper and newer) has tests of its own (test_nvml_gpm.py): the fake's GPUs here lack it.
NON_GPM_GROUPS = ALL_GROUPS - {"gpm"}
NON_GPM_FIELDS = tuple(name for name in SAMPLE_FIELDS if name not in GPM_FIELDS)

LINUX = {"driver_model": Reason.NOT_SUPPORTED}  # NVML answers the driver model (WDDM, TCC) on Windows only


def non_gpm(reasons) -> dict:
    """``reasons`` without the GPM fields (the fake's GPUs have no GPM: test_nvml_gpm.py covers it)."""
    return {name: reason for name, reason in reasons.items() if name not in GPM_FIELDS}


GROUP_ORDER = [g for g in SAMPLE_GROUPS if g != "gpm"]  # a fixed order: a failure must not depend on set order


def two_gpus() -> FakeNvml:
    """An A100 with ECC and an idle power cap, and a hot H100 in exclusive-process mode."""
    a100 = FakeGpu(
        0,
        name="NVIDIA A100-SXM4-80GB",
        memory_total=80 * GIB,
        memory_used=10 * GIB,
        memory_reserved=512 * MIB,
        util_gpu=50,
        util_memory=20,
        encoder=3,
        decoder=4,
        temperature=45,
        fan=30,
        power_usage_mw=123_456,
        power_limit_mw=400_000,
        energy_mj=9_876_543,
        pstate=0,
        clock_sm=1410,
        clock_mem=1593,
        clock_events=0x1 | 0x4,
        pcie_rx_kb=1000,
        pcie_tx_kb=2000,
        persistence=1,
        compute_mode=0,
    )
    h100 = FakeGpu(
        1,
        name="NVIDIA H100 80GB HBM3",
        memory_total=81_559 * MIB,
        memory_used=1 * GIB,
        memory_reserved=600 * MIB,
        util_gpu=97,
        util_memory=65,
        encoder=0,
        decoder=12,
        temperature=71,
        threshold_slowdown=90,
        threshold_shutdown=95,
        fan=80,
        power_usage_mw=350_250,
        power_limit_mw=700_000,
        power_default_limit_mw=700_000,
        power_min_limit_mw=200_000,
        power_max_limit_mw=700_000,
        energy_mj=42,
        pstate=2,
        clock_sm=1980,
        clock_mem=2619,
        max_clock_sm=1980,
        max_clock_mem=2619,
        compute_capability=(9, 0),
        clock_events=0x40 | 0x1000,
        pcie_rx_kb=2048,
        pcie_tx_kb=4096,
        persistence=0,
        compute_mode=3,
        num_fans=2,
    )
    return FakeNvml([a100, h100])


# The health readings of a fake GPU left at its defaults: a healthy board without NVLink, at Gen4 x16.
HEALTHY_READINGS = {
    "remapped_rows_corrected": 0,
    "remapped_rows_uncorrected": 0,
    "remapped_rows_pending": False,
    "remapped_rows_failure": False,
    "retired_pages_sbe": 0,
    "retired_pages_dbe": 0,
    "retired_pages_pending": False,
    "pcie_link_gen": 4,
    "pcie_link_width": 16,
    "pcie_replay_counter": 0,
    "nvlinks": (),
    "nvlink_rx_bytes_per_s": 0,
    "nvlink_tx_bytes_per_s": 0,
}


@pytest.fixture
def fake() -> FakeNvml:
    return two_gpus()


@pytest.fixture
def sleeper():
    """``sleep 30``, once the kernel shows its argv (a row read before has the name, not the command)."""
    proc = subprocess.Popen(["sleep", "30"])
    exec_shown(proc.pid)
    yield proc
    proc.kill()
    proc.wait()


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def nonexistent_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1000  # above pid_max: can never be a live process


def sample_dict(reading) -> dict:
    return {name: reading.values.get(name) for name in NON_GPM_FIELDS}


# --------------------------------------------------------------------- the fake itself


def test_fake_exposes_real_errors_and_constants_but_never_real_functions():
    fake = FakeNvml(1)
    assert fake.NVMLError is pynvml.NVMLError
    assert fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert fake.NVMLLibraryMismatchError is pynvml.NVMLLibraryMismatchError
    assert fake.nvmlMemory_v2 == pynvml.nvmlMemory_v2
    assert fake.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetSomethingNoDriverHas(object())
    with pytest.raises(AttributeError):
        _ = fake._LoadNvmlLibrary  # a real function: must not be reachable
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.remove("nvmlDeviceGetName")
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetName(handle)
    fake.fail("nvmlDeviceGetFanSpeed", pynvml.NVMLError_Unknown, gpu=0, times=1)
    with pytest.raises(pynvml.NVMLError_Unknown):
        fake.nvmlDeviceGetFanSpeed(handle)
    assert fake.nvmlDeviceGetFanSpeed(handle) == fake.gpus[0].fan
    assert fake.gpu_count("nvmlDeviceGetFanSpeed", 0) == 2
    fake.heal()
    assert fake.nvmlDeviceGetName(handle) == fake.gpus[0].name
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    v2 = fake.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert v1.used == v2.used + v2.reserved and v1.free == v2.free and not hasattr(v1, "reserved")
    fake.nvmlShutdown()
    assert fake.init_count == 0


# --------------------------------------------------------------------- normal reading


def test_host_info_and_static_fields_of_two_gpus(fake, make_backend):
    backend = make_backend(fake)
    host = backend.host_info()
    assert (host.driver_version, host.cuda_driver_version, host.nvml_version) == ("550.54.15", "12.4", "12.550.54.15")
    assert host.backend == "nvml" and not host.pid_namespace_foreign and not host.unavailable
    assert backend.device_count() == 2

    a100, h100 = backend.read_static(0), backend.read_static(1)
    assert a100.unavailable == LINUX and h100.unavailable == LINUX
    assert a100.virtualization_mode == "none" and a100.driver_model is None
    assert (a100.index, a100.uuid, a100.name) == (0, fake.gpus[0].uuid, "NVIDIA A100-SXM4-80GB")
    assert (a100.bus_id, a100.short_bus_id, a100.serial) == ("00000000:3B:00.0", "3B:00.0", "1324000000000")
    assert a100.memory_total_bytes == 80 * GIB
    assert (a100.power_default_limit_w, a100.power_min_limit_w, a100.power_max_limit_w) == (400.0, 100.0, 400.0)
    assert (a100.temperature_slowdown_c, a100.temperature_shutdown_c) == (87, 92)
    assert (a100.clock_sm_max_mhz, a100.clock_mem_max_mhz) == (1410, 1593)
    assert (a100.compute_capability, a100.mig_mode, a100.mig_devices, a100.fan_count) == ("8.0", False, (), 1)

    assert (h100.index, h100.uuid, h100.name, h100.bus_id) == (
        1,
        fake.gpus[1].uuid,
        "NVIDIA H100 80GB HBM3",
        "00000000:3C:00.0",
    )
    assert h100.memory_total_bytes == 81_559 * MIB
    assert (h100.power_default_limit_w, h100.power_min_limit_w, h100.power_max_limit_w) == (700.0, 200.0, 700.0)
    assert (h100.temperature_slowdown_c, h100.temperature_shutdown_c) == (90, 95)
    assert (h100.clock_sm_max_mhz, h100.clock_mem_max_mhz, h100.compute_capability) == (1980, 2619, "9.0")
    assert h100.fan_count == 2


def test_every_dynamic_field_of_two_gpus(fake, make_backend):
    backend = make_backend(fake)
    a100, h100 = backend.read_sample(0, NON_GPM_GROUPS), backend.read_sample(1, NON_GPM_GROUPS)
    assert not a100.lost and not h100.lost
    assert a100.unavailable == {} and h100.unavailable == {}
    assert sample_dict(a100) == {
        "memory_used_bytes": 10 * GIB,  # v2: excluding the reserved memory
        "memory_free_bytes": 80 * GIB - 10 * GIB - 512 * MIB,
        "memory_reserved_bytes": 512 * MIB,
        "utilization_gpu_percent": 50,
        "utilization_memory_percent": 20,
        "encoder_percent": 3,
        "decoder_percent": 4,
        "temperature_c": 45,
        "fan_percent": 30,
        "power_draw_w": 123.456,  # mW -> W
        "power_limit_w": 400.0,
        "energy_mj": 9_876_543,
        "pstate": 0,
        "clock_sm_mhz": 1410,
        "clock_mem_mhz": 1593,
        "ecc_mode": True,
        "ecc_corrected_volatile": 10,
        "ecc_uncorrected_volatile": 20,
        "ecc_corrected_aggregate": 30,
        "ecc_uncorrected_aggregate": 40,
        "throttle_reasons": ("gpu_idle", "sw_power_cap"),
        "pcie_rx_bytes_per_s": 1000 * 1024,  # KB/s -> bytes/s
        "pcie_tx_bytes_per_s": 2000 * 1024,
        "persistence_mode": True,
        "compute_mode": "Default",
        "mig_usage": (),  # MIG off: no instance to read
        **HEALTHY_READINGS,
    }
    assert sample_dict(h100) == {
        "memory_used_bytes": 1 * GIB,
        "memory_free_bytes": 81_559 * MIB - 1 * GIB - 600 * MIB,
        "memory_reserved_bytes": 600 * MIB,
        "utilization_gpu_percent": 97,
        "utilization_memory_percent": 65,
        "encoder_percent": 0,
        "decoder_percent": 12,
        "temperature_c": 71,
        "fan_percent": 80,
        "power_draw_w": 350.25,
        "power_limit_w": 700.0,
        "energy_mj": 42,
        "pstate": 2,
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 2619,
        "ecc_mode": True,
        "ecc_corrected_volatile": 11,
        "ecc_uncorrected_volatile": 21,
        "ecc_corrected_aggregate": 31,
        "ecc_uncorrected_aggregate": 41,
        "throttle_reasons": ("hw_thermal_slowdown", "0x1000"),  # unknown bits are kept, as hex
        "pcie_rx_bytes_per_s": 2048 * 1024,
        "pcie_tx_bytes_per_s": 4096 * 1024,
        "persistence_mode": False,
        "compute_mode": "Exclusive_Process",
        "mig_usage": (),  # MIG off: no instance to read
        **HEALTHY_READINGS,
    }
    assert isinstance(a100.values["pstate"], int) and isinstance(h100.values["power_draw_w"], float)


def test_collector_snapshot_carries_the_values(fake, make_backend):
    snapshot = Collector(make_backend(fake)).collect()
    assert [g.static.uuid for g in snapshot.gpus] == [g.uuid for g in fake.gpus]
    g0, g1 = snapshot.gpus
    assert (g0.sample.power_draw_w, g1.sample.power_draw_w) == (123.456, 350.25)
    assert g1.sample.compute_mode == "Exclusive_Process" and g0.sample.throttle_reasons == ("gpu_idle", "sw_power_cap")
    assert g0.memory_used_percent == pytest.approx(12.5)
    assert g0.processes == () and g0.processes_unavailable is None
    assert snapshot.host.cuda_driver_version == "12.4"


@pytest.mark.parametrize(("raw", "text"), [(12040, "12.4"), (11080, "11.8"), (13000, "13.0")])
def test_cuda_driver_version_string(make_backend, raw, text):
    fake = FakeNvml(1, cuda_version=raw)
    assert make_backend(fake).host_info().cuda_driver_version == text


def test_handles_are_acquired_once(fake, make_backend):
    backend = make_backend(fake)
    collector = Collector(backend)
    for _ in range(4):
        collector.collect()
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2
    assert fake.calls["nvmlDeviceGetHandleByUUID"] == 0
    assert fake.calls["nvmlInit"] == 1
    assert backend.call_counts()["nvmlDeviceGetPowerUsage"] == fake.calls["nvmlDeviceGetPowerUsage"] == 8


def test_close_shuts_nvml_down_once(fake, make_backend):
    backend = make_backend(fake)
    assert fake.init_count == 1
    backend.close()
    backend.close()
    assert fake.calls["nvmlShutdown"] == 1 and fake.init_count == 0


def test_close_closes_the_proc_files_the_inspector_keeps_open(fake, make_backend):
    from nvtopy.backends.host.processes import PsutilInspector

    inspector = PsutilInspector()
    backend = make_backend(fake, inspector=inspector)
    for _ in range(2):  # the second read of a pid keeps its stat and statm open
        assert inspector.inspect([os.getpid()])[os.getpid()] is not None
    assert len(inspector._stats) == 1
    backend.close()
    assert len(inspector._stats) == 0


# --------------------------------------------------------------------- fields not supported


def test_fan_not_supported_is_not_asked_again(fake, make_backend):
    fake.fail("nvmlDeviceGetFanSpeed", pynvml.NVMLError_NotSupported, gpu=0)
    backend = make_backend(fake)
    collector = Collector(backend)
    for _ in range(3):
        snapshot = collector.collect()
    g0, g1 = snapshot.gpus
    assert g0.sample.fan_percent is None and g0.sample.why("fan_percent") is Reason.NOT_SUPPORTED
    assert g0.sample.temperature_c == 45 and g0.sample.power_draw_w == 123.456
    assert g1.sample.fan_percent == 80 and g1.sample.why("fan_percent") is None
    assert fake.gpu_count("nvmlDeviceGetFanSpeed", 0) == 1, "a passive board is asked once"
    assert fake.gpu_count("nvmlDeviceGetFanSpeed", 1) == 3


def test_power_and_power_limit_not_supported_on_different_gpus(fake, make_backend):
    fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVMLError_NotSupported, gpu=0)
    fake.fail("nvmlDeviceGetEnforcedPowerLimit", pynvml.NVMLError_NotSupported, gpu=1)
    backend = make_backend(fake)
    a100, h100 = backend.read_sample(0, GROUP_ORDER), backend.read_sample(1, GROUP_ORDER)
    assert a100.unavailable == {"power_draw_w": Reason.NOT_SUPPORTED}
    assert h100.unavailable == {"power_limit_w": Reason.NOT_SUPPORTED}
    assert "power_draw_w" not in a100.values and a100.values["power_limit_w"] == 400.0
    assert "power_limit_w" not in h100.values and h100.values["power_draw_w"] == 350.25
    assert len(a100.values) == len(h100.values) == len(NON_GPM_FIELDS) - 1
    backend.read_sample(0, GROUP_ORDER)
    backend.read_sample(1, GROUP_ORDER)
    assert fake.gpu_count("nvmlDeviceGetPowerUsage", 0) == 1 and fake.gpu_count("nvmlDeviceGetPowerUsage", 1) == 2
    assert fake.gpu_count("nvmlDeviceGetEnforcedPowerLimit", 1) == 1


def test_utilization_not_supported(fake, make_backend):
    fake.fail("nvmlDeviceGetUtilizationRates", pynvml.NVMLError_NotSupported, gpu=1)
    snapshot = Collector(make_backend(fake)).collect()
    h100 = snapshot.gpus[1].sample
    assert h100.utilization_gpu_percent is None and h100.utilization_memory_percent is None
    assert h100.why("utilization_gpu_percent") is h100.why("utilization_memory_percent") is Reason.NOT_SUPPORTED
    assert set(non_gpm(h100.unavailable)) == {"utilization_gpu_percent", "utilization_memory_percent"}
    assert h100.temperature_c == 71 and h100.memory_used_bytes == 1 * GIB
    assert snapshot.gpus[0].sample.utilization_gpu_percent == 50
    assert snapshot.gpus[1].history.utilization_gpu_percent == (None,)


def test_process_queries_not_supported(fake, make_backend):
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"):
        fake.fail(name, pynvml.NVMLError_NotSupported, gpu=0)
    fake.gpus[1].compute_procs = [FakeProcess(os.getpid())]
    collector = Collector(make_backend(fake))
    collector.collect()
    snapshot = collector.collect()
    g0, g1 = snapshot.gpus
    assert g0.processes == () and g0.processes_unavailable is Reason.NOT_SUPPORTED
    assert not g0.lost and non_gpm(g0.sample.unavailable) == {} and g0.sample.power_draw_w == 123.456
    assert [p.pid for p in g1.processes] == [os.getpid()] and g1.processes_unavailable is None
    assert fake.gpu_count("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 1
    assert fake.gpu_count("nvmlDeviceGetComputeRunningProcesses_v2", 0) == 0, "NotSupported is no reason to downgrade"


def test_memory_v2_missing_falls_back_to_v1(fake, make_backend):
    fake.remove("nvmlDeviceGetMemoryInfo_v2")
    backend = make_backend(fake)
    for _ in range(3):
        reading = backend.read_sample(0, ["memory"])
    assert reading.values == {
        "memory_used_bytes": 10 * GIB + 512 * MIB,  # v1 counts reserved as used
        "memory_free_bytes": 80 * GIB - 10 * GIB - 512 * MIB,
    }
    assert reading.unavailable == {"memory_reserved_bytes": Reason.NOT_SUPPORTED}
    assert fake.gpu_count("nvmlDeviceGetMemoryInfo_v2", 0) == 1, "v2 is not retried"
    assert fake.gpu_count("nvmlDeviceGetMemoryInfo", 0) == 1 + 3  # static total, then v2 once + v1 each time


def test_memory_v2_not_supported_and_v1_not_supported(fake, make_backend):
    # a unified-memory board: neither version answers
    fake.fail("nvmlDeviceGetMemoryInfo", pynvml.NVMLError_NotSupported, gpu=0)
    backend = make_backend(fake)
    static = backend.read_static(0)
    assert static.memory_total_bytes is None
    assert static.unavailable == {**LINUX, "memory_total_bytes": Reason.NOT_SUPPORTED}
    reading = backend.read_sample(0, ["memory", "power"])
    assert reading.unavailable == dict.fromkeys(SAMPLE_GROUPS["memory"], Reason.NOT_SUPPORTED)
    assert reading.values == {"power_draw_w": 123.456}


def test_ecc_mode_off_leaves_counters_none(fake, make_backend):
    fake.gpus[1].ecc_mode = (0, 0)
    backend = make_backend(fake)
    h100 = backend.read_sample(1, ["ecc"])
    assert h100.values == {"ecc_mode": False}
    counters = [f for f in SAMPLE_GROUPS["ecc"] if f != "ecc_mode"]
    assert h100.unavailable == dict.fromkeys(counters, Reason.NOT_SUPPORTED)
    assert fake.gpu_count("nvmlDeviceGetTotalEccErrors", 1) == 0
    a100 = backend.read_sample(0, ["ecc"])
    assert a100.values["ecc_corrected_volatile"] == 10 and a100.unavailable == {}


@pytest.mark.parametrize("field_values", [True, False], ids=["field-values", "individual-calls"])
def test_ecc_not_supported_geforce(fake, make_backend, field_values):
    fake.gpus[0].ecc_supported = False
    if not field_values:
        fake.remove("nvmlDeviceGetFieldValues")  # older driver: falls back to EccMode/TotalEccErrors
    backend = make_backend(fake)
    reading = backend.read_sample(0, ["ecc"])
    assert reading.values == {}
    assert reading.unavailable == dict.fromkeys(SAMPLE_GROUPS["ecc"], Reason.NOT_SUPPORTED)
    assert backend.read_sample(1, ["ecc"]).values["ecc_mode"] is True, "the other GPU has ECC"


def test_ecc_counters_come_from_one_field_values_call(fake, make_backend):
    backend = make_backend(fake)
    reading = backend.read_sample(0, ["ecc"])
    gpu = fake.gpus[0]
    assert reading.values == {
        "ecc_mode": True,
        "ecc_corrected_volatile": gpu.ecc_errors[(0, 0)],
        "ecc_uncorrected_volatile": gpu.ecc_errors[(1, 0)],
        "ecc_corrected_aggregate": gpu.ecc_errors[(0, 1)],
        "ecc_uncorrected_aggregate": gpu.ecc_errors[(1, 1)],
    }
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 0 and fake.calls["nvmlDeviceGetEccMode"] == 0
    gpu.ecc_mode = (0, 0)
    off = backend.read_sample(0, ["ecc"])
    assert off.values == {"ecc_mode": False}, "ECC off: counters are unavailable, not zero"
    assert off.unavailable["ecc_uncorrected_volatile"] is Reason.NOT_SUPPORTED


def test_pstate_unknown_32_is_none(fake, make_backend):
    fake.gpus[0].pstate = 32  # NVML_PSTATE_UNKNOWN
    reading = make_backend(fake).read_sample(0, ["pstate"])
    assert reading.values == {} and reading.unavailable == {"pstate": Reason.UNKNOWN}


@pytest.mark.parametrize(
    ("new", "old", "group", "field", "expected"),
    [
        ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", "temperature", "temperature_c", 45),
        (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            "throttle",
            "throttle_reasons",
            ("gpu_idle", "sw_power_cap"),
        ),
    ],
)
def test_older_driver_calls_are_used_when_new_ones_are_missing(fake, make_backend, new, old, group, field, expected):
    fake.remove(new)
    backend = make_backend(fake)
    for _ in range(3):
        reading = backend.read_sample(0, [group])
    assert reading.values == {field: expected} and reading.unavailable == {}
    assert fake.gpu_count(new, 0) == 1 and fake.gpu_count(old, 0) == 3


def test_pci_info_v3_missing_falls_back(fake, make_backend):
    fake.remove("nvmlDeviceGetPciInfo_v3")
    static = make_backend(fake).read_static(1)
    assert static.bus_id == "00000000:3C:00.0" and static.unavailable == LINUX
    assert fake.calls["nvmlDeviceGetPciInfo"] == 1


def test_temperature_threshold_zero_is_not_a_crash(fake, make_backend):
    fake.gpus[0].threshold_slowdown = 0  # some boards answer 0 rather than NotSupported
    backend = make_backend(fake)
    static = backend.read_static(0)
    assert static.temperature_slowdown_c is None
    assert static.unavailable == {**LINUX, "temperature_slowdown_c": Reason.NOT_SUPPORTED}
    assert static.temperature_shutdown_c == 92 and static.uuid == fake.gpus[0].uuid
    collector = Collector(backend)
    for _ in range(3):
        snapshot = collector.collect()
    assert snapshot.gpus[0].static.temperature_slowdown_c is None and snapshot.gpus[0].sample.temperature_c == 45
    assert fake.gpu_count("nvmlDeviceGetUUID", 0) == 2, "static fields are not re-read every tick"


def test_mig_devices_listed_and_empty_slots_skipped(fake, make_backend):
    fake.gpus[1].mig_mode = (1, 1)
    fake.gpus[1].mig_slots = ["MIG-aaaa", None, "MIG-bbbb", None]
    backend = make_backend(fake)
    static = backend.read_static(1)
    assert static.mig_mode is True and static.mig_devices == ("MIG-aaaa", "MIG-bbbb")
    assert backend.read_static(0).mig_devices == ()
    assert fake.gpu_count("nvmlDeviceGetMaxMigDeviceCount", 0) == 0


# --------------------------------------------------------------------- errors: unknown, lost, permission


def test_unknown_error_on_one_field_leaves_the_others(fake, make_backend):
    fake.fail("nvmlDeviceGetTemperatureV", pynvml.NVMLError_Unknown, gpu=0, times=1)
    backend = make_backend(fake)
    backend.read_static(0)
    reading = backend.read_sample(0, GROUP_ORDER)
    assert not reading.lost
    assert reading.unavailable == {"temperature_c": Reason.UNKNOWN}
    assert len(reading.values) == len(NON_GPM_FIELDS) - 1
    assert reading.values["fan_percent"] == 30 and reading.values["compute_mode"] == "Default"
    again = backend.read_sample(0, GROUP_ORDER)
    assert again.unavailable == {} and again.values["temperature_c"] == 45, "Unknown is not remembered"
    assert fake.uuid_lookups == [fake.gpus[0].uuid], "the handle that said Unknown was re-acquired by UUID"
    assert backend.read_sample(1, GROUP_ORDER).unavailable == {}


def test_unknown_error_persisting_on_one_field(fake, make_backend, clock):
    fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVMLError_Unknown, gpu=1)
    collector = Collector(make_backend(fake))
    for _ in range(3):
        clock.advance(1)
        snapshot = collector.collect()
    h100 = snapshot.gpus[1]
    assert not h100.lost and non_gpm(h100.sample.unavailable) == {"power_draw_w": Reason.UNKNOWN}
    assert h100.sample.temperature_c == 71 and h100.static.unavailable == LINUX
    assert fake.gpu_count("nvmlDeviceGetPowerUsage", 1) == 3, "Unknown is transient: asked again"
    assert non_gpm(snapshot.gpus[0].sample.unavailable) == {}


def test_lost_gpu_others_keep_reporting_and_it_is_reacquired_by_uuid(fake, make_backend, clock):
    fake.gpus[1].compute_procs = [FakeProcess(os.getpid(), 64 * MIB)]
    backend = make_backend(fake)
    collector = Collector(backend)
    assert not collector.collect().gpus[1].lost
    uuid1 = fake.gpus[1].uuid

    fake.gpus[1].lost = True
    clock.advance(1)
    snapshot = collector.collect()
    a100, h100 = snapshot.gpus
    assert h100.lost and h100.sample.lost
    for name in NON_GPM_FIELDS:
        assert getattr(h100.sample, name) is None, name
        assert h100.sample.why(name) is Reason.LOST, name
    assert h100.processes == () and h100.processes_unavailable is Reason.LOST
    assert h100.static.uuid == uuid1 and h100.static.name == "NVIDIA H100 80GB HBM3", "static fields stay"
    assert not a100.lost and non_gpm(a100.sample.unavailable) == {} and a100.sample.power_draw_w == 123.456
    assert a100.processes_unavailable is None

    # Still lost at the first retry (1 s later): the backoff doubles.
    clock.advance(1.01)
    assert collector.collect().gpus[1].lost
    assert fake.uuid_lookups == [uuid1]
    clock.advance(1.0)
    assert collector.collect().gpus[1].lost
    assert fake.uuid_lookups == [uuid1], "not asked again within the 2 s backoff"

    fake.gpus[1].lost = False  # the GPU answers again
    clock.advance(0.5)
    assert collector.collect().gpus[1].lost, "still within the backoff: not asked yet"
    assert fake.uuid_lookups == [uuid1]
    clock.advance(0.6)
    snapshot = collector.collect()
    h100 = snapshot.gpus[1]
    assert fake.uuid_lookups == [uuid1, uuid1]
    assert not h100.lost and non_gpm(h100.sample.unavailable) == {}
    assert h100.sample.power_draw_w == 350.25 and h100.sample.temperature_c == 71
    assert [(p.pid, p.gpu_memory_bytes) for p in h100.processes] == [(os.getpid(), 64 * MIB)]
    assert fake.gpu_count("nvmlDeviceGetHandleByIndex", 1) == 1, "re-acquired by UUID, never by index"
    assert fake.gpu_count("nvmlDeviceGetHandleByUUID", 0) == 0
    assert fake.gpu_count("nvmlDeviceGetPowerUsage", 0) == 6, "GPU 0 was read on every collect"


def test_lost_before_static_fields_read_recovers_static(fake, make_backend, clock):
    fake.gpus[0].lost = True
    backend = make_backend(fake)
    collector = Collector(backend)
    snapshot = collector.collect()
    a100 = snapshot.gpus[0]
    assert a100.lost and a100.static.uuid is None
    assert set(a100.static.unavailable) == set(STATIC_FIELDS)
    assert set(a100.static.unavailable.values()) == {Reason.LOST}
    assert snapshot.gpus[1].static.uuid == fake.gpus[1].uuid and not snapshot.gpus[1].lost
    fake.gpus[0].lost = False
    clock.advance(1.5)
    snapshot = collector.collect()
    a100 = snapshot.gpus[0]
    assert not a100.lost and a100.static.uuid == fake.gpus[0].uuid and a100.static.unavailable == LINUX
    assert a100.sample.temperature_c == 45


def test_no_permission_on_handle(fake, make_backend):
    fake.fail("nvmlDeviceGetHandleByIndex", pynvml.NVMLError_NoPermission, gpu=1)
    fake.gpus[1].compute_procs = [FakeProcess(os.getpid())]
    collector = Collector(make_backend(fake))
    snapshot = collector.collect()
    a100, h100 = snapshot.gpus
    assert not h100.lost
    assert h100.static.unavailable == dict.fromkeys(STATIC_FIELDS, Reason.NO_PERMISSION)
    assert h100.static.uuid is None
    assert non_gpm(h100.sample.unavailable) == dict.fromkeys(NON_GPM_FIELDS, Reason.NO_PERMISSION)
    assert h100.processes == () and h100.processes_unavailable is Reason.NO_PERMISSION
    assert a100.static.unavailable == LINUX and non_gpm(a100.sample.unavailable) == {} and a100.sample.fan_percent == 30
    assert fake.gpu_count("nvmlDeviceGetHandleByIndex", 1) == 1


# --------------------------------------------------------------------- processes


def test_pid_in_both_lists_is_one_c_plus_g_row(fake, make_backend, sleeper):
    me_pid = os.getpid()
    fake.gpus[0].compute_procs = [FakeProcess(me_pid, 100 * MIB), FakeProcess(sleeper.pid, 30 * MIB)]
    fake.gpus[0].graphics_procs = [FakeProcess(me_pid, 20 * MIB)]
    fake.gpus[1].graphics_procs = [FakeProcess(sleeper.pid, 5 * MIB)]
    snapshot = Collector(make_backend(fake)).collect()
    rows0 = {p.pid: p for p in snapshot.gpus[0].processes}
    rows1 = {p.pid: p for p in snapshot.gpus[1].processes}
    assert len(snapshot.gpus[0].processes) == 2 and set(rows0) == {me_pid, sleeper.pid}
    assert rows0[me_pid].type is ProcessType.BOTH and str(rows0[me_pid].type) == "C+G"
    assert rows0[me_pid].gpu_memory_bytes == 100 * MIB
    assert rows0[sleeper.pid].type is ProcessType.COMPUTE
    assert list(rows1) == [sleeper.pid] and rows1[sleeper.pid].type is ProcessType.GRAPHICS
    assert rows1[sleeper.pid].gpu_index == 1 and rows1[sleeper.pid].gpu_uuid == fake.gpus[1].uuid
    sleep_row = rows0[sleeper.pid]
    assert sleep_row.user == me() and sleep_row.name == "sleep" and sleep_row.command == "sleep 30"
    assert rows0[me_pid].user == me() and rows0[me_pid].create_time is not None
    assert not sleep_row.foreign and sleep_row.status in ("running", "sleeping")


def test_process_memory_none_and_zero_are_distinct(fake, make_backend, sleeper):
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), None), FakeProcess(sleeper.pid, 0)]
    rows = {p.pid: p for p in Collector(make_backend(fake)).collect().gpus[0].processes}
    unavailable, zero = rows[os.getpid()], rows[sleeper.pid]
    assert unavailable.gpu_memory_bytes is None
    assert unavailable.unavailable.get("gpu_memory_bytes") is Reason.NOT_AVAILABLE
    assert zero.gpu_memory_bytes == 0 and "gpu_memory_bytes" not in zero.unavailable


def test_a_pid_this_namespace_lacks_is_listed_not_visible(fake, make_backend, sleeper):
    """NVML lists a pid with its memory that no process here has (a container, a captured machine): a row."""
    gone = nonexistent_pid()
    fake.gpus[0].compute_procs = [FakeProcess(gone, 3 * MIB), FakeProcess(sleeper.pid)]
    state = Collector(make_backend(fake)).collect().gpus[0]
    rows = {p.pid: p for p in state.processes}
    assert sorted(rows) == sorted([gone, sleeper.pid])
    hidden = rows[gone]
    assert hidden.foreign and not rows[sleeper.pid].foreign
    assert (hidden.type, hidden.gpu_memory_bytes, hidden.gpu_index) == (ProcessType.COMPUTE, 3 * MIB, 0)
    assert (hidden.user, hidden.command, hidden.cpu_percent, hidden.host_memory_bytes) == (None, None, None, None)
    assert hidden.create_time is None, "no start time: a signal could not be checked, so none is ever sent"
    for name in ("user", "command", "cpu_percent", "host_memory_bytes", "running_seconds"):
        assert hidden.unavailable[name] is Reason.NOT_VISIBLE
    assert state.processes_hint is not None and f"pid {gone}" in state.processes_hint
    assert "not visible from this PID namespace" in state.processes_hint
    assert "no process is visible" not in state.processes_hint


def test_a_process_seen_here_that_exits_is_dropped(fake, make_backend):
    """Only a pid the host had and no longer has is left out: it exited after NVML's list (NVML may list it a while)."""
    child = subprocess.Popen(["sleep", "30"])
    fake.gpus[0].compute_procs = [FakeProcess(child.pid, 5 * MIB)]
    collector = Collector(make_backend(fake))
    try:
        assert [p.pid for p in collector.collect().gpus[0].processes] == [child.pid]
    finally:
        child.kill()
        child.wait()
    for _ in range(2):  # and it stays out while NVML still lists it
        assert collector.collect().gpus[0].processes == ()
    fake.gpus[0].compute_procs = []
    assert collector.collect().gpus[0].processes == ()


def test_mig_instance_ids_are_kept(fake, make_backend):
    fake.gpus[0].compute_procs = [
        FakeProcess(os.getpid(), None, gpu_instance_id=1, compute_instance_id=0),
        FakeProcess(os.getppid(), 5 * MIB),  # MIG off: 0xFFFFFFFF
    ]
    reading = make_backend(fake).read_processes(0)
    assert reading.unavailable is None and not reading.lost
    ids = {p.pid: (p.gpu_instance_id, p.compute_instance_id, p.gpu_memory_bytes) for p in reading.processes}
    assert ids == {os.getpid(): (1, 0, None), os.getppid(): (None, None, 5 * MIB)}


def test_process_utilization_latest_sample_wins_and_garbage_ignored(fake, make_backend, sleeper):
    me_pid, idle = os.getpid(), sleeper.pid
    busy = subprocess.Popen(["sleep", "30"])
    try:
        fake.gpus[0].compute_procs = [FakeProcess(me_pid), FakeProcess(busy.pid), FakeProcess(idle)]
        fake.gpus[0].samples = [
            FakeSample(me_pid, sm=30, mem=7, enc=1, dec=2, timestamp_us=now_us(-0.1)),
            FakeSample(me_pid, sm=250, mem=5, timestamp_us=now_us(-0.05)),  # garbage: ignored
            FakeSample(me_pid, sm=10, mem=3, timestamp_us=now_us(-0.5)),  # older
            FakeSample(busy.pid, sm=40, mem=101, timestamp_us=now_us(-0.01)),  # garbage memUtil: ignored
            FakeSample(busy.pid, sm=60, mem=9, enc=3, dec=4, timestamp_us=now_us(-0.3)),
            FakeSample(idle, sm=99, mem=99, timestamp_us=now_us(-30)),  # outside the 1 s window
        ]
        before = now_us(-1)
        rows = {p.pid: p for p in Collector(make_backend(fake)).collect().gpus[0].processes}
        after = now_us(-1)
        assert before <= fake.last_process_utilization_since <= after, "asks for the last second, in us"
        assert (rows[me_pid].sm_percent, rows[me_pid].memory_percent) == (30, 7)
        assert (rows[me_pid].encoder_percent, rows[me_pid].decoder_percent) == (1, 2)
        assert (rows[busy.pid].sm_percent, rows[busy.pid].memory_percent, rows[busy.pid].encoder_percent) == (60, 9, 3)
        assert (rows[idle].sm_percent, rows[idle].memory_percent) == (0, 0), "no recent sample: idle"
        assert "sm_percent" not in rows[idle].unavailable
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.parametrize(
    "error",
    [pynvml.NVMLError_NotFound, pynvml.NVMLError(0)],
    ids=["not_found", "nvml_error_0"],
)
def test_process_utilization_no_samples_means_idle(fake, make_backend, error):
    fake.fail("nvmlDeviceGetProcessUtilization", error)
    fake.gpus[0].samples = [FakeSample(os.getpid(), sm=50)]  # hidden by the error
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid())]
    collector = Collector(make_backend(fake))
    for _ in range(2):
        (row,) = collector.collect().gpus[0].processes
        assert (row.sm_percent, row.memory_percent, row.encoder_percent, row.decoder_percent) == (0, 0, 0, 0)
        assert "sm_percent" not in row.unavailable
    assert fake.gpu_count("nvmlDeviceGetProcessUtilization", 0) == 2, "no samples is not 'not supported'"


def test_process_utilization_not_supported_is_none(fake, make_backend):
    fake.fail("nvmlDeviceGetProcessUtilization", pynvml.NVMLError_NotSupported, gpu=0)
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid())]
    fake.gpus[1].compute_procs = [FakeProcess(os.getpid())]
    fake.gpus[1].samples = [FakeSample(os.getpid(), sm=17, mem=3)]
    collector = Collector(make_backend(fake))
    for _ in range(3):
        snapshot = collector.collect()
    (row0,) = snapshot.gpus[0].processes
    (row1,) = snapshot.gpus[1].processes
    assert row0.sm_percent is None and row0.memory_percent is None
    assert row0.unavailable.get("sm_percent") is Reason.NOT_SUPPORTED
    assert row1.sm_percent == 17 and row1.memory_percent == 3
    assert fake.gpu_count("nvmlDeviceGetProcessUtilization", 0) == 1
    assert fake.gpu_count("nvmlDeviceGetProcessUtilization", 1) == 3


def test_no_processes_no_utilization_query(fake, make_backend):
    Collector(make_backend(fake)).collect()
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0


@pytest.mark.parametrize("kind", ["function_not_found", "library_mismatch"])
def test_v3_process_call_missing_falls_back_to_v2_and_stays(fake, make_backend, kind):
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"):
        if kind == "function_not_found":
            fake.remove(name)
        else:  # pynvml's @throwOnVersionMismatch wrapper
            fake.fail(name, pynvml.NVMLLibraryMismatchError("driver lacks " + name))
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 10 * MIB)]
    fake.gpus[1].graphics_procs = [FakeProcess(os.getpid(), 20 * MIB)]
    collector = Collector(make_backend(fake))
    for _ in range(3):
        snapshot = collector.collect()
    assert [(p.pid, p.type, p.gpu_memory_bytes) for p in snapshot.gpus[0].processes] == [
        (os.getpid(), ProcessType.COMPUTE, 10 * MIB)
    ]
    assert [(p.pid, p.type, p.gpu_memory_bytes) for p in snapshot.gpus[1].processes] == [
        (os.getpid(), ProcessType.GRAPHICS, 20 * MIB)
    ]
    assert snapshot.gpus[0].processes_unavailable is None and snapshot.gpus[1].processes_unavailable is None
    lookups = fake.calls["_nvmlGetFunctionPointer:nvmlDeviceGetComputeRunningProcesses_v3"]
    assert lookups == 1, "asked once, then v2 for every GPU"
    assert fake.calls["_nvmlGetFunctionPointer:nvmlDeviceGetGraphicsRunningProcesses_v3"] == 0
    # one C call per list and GPU per collect: the buffer is passed in, no size query first
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 6
    # GPU 1's graphics list at every collect; GPU 0's, empty, once (GRAPHICS_RECHECK_S)
    assert fake.calls["nvmlDeviceGetGraphicsRunningProcesses_v2"] == 4


def test_v3_and_v2_missing_fall_back_to_v1_through_ctypes(fake, make_backend, sleeper):
    for kind in ("Compute", "Graphics"):
        for version in ("_v3", "_v2"):
            fake.remove(f"nvmlDeviceGet{kind}RunningProcesses{version}")
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 10 * MIB), FakeProcess(sleeper.pid, None)]
    fake.gpus[0].graphics_procs = [FakeProcess(os.getpid(), 3 * MIB)]
    collector = Collector(make_backend(fake))
    for _ in range(2):
        snapshot = collector.collect()
    rows = {p.pid: p for p in snapshot.gpus[0].processes}
    assert rows[os.getpid()].type is ProcessType.BOTH and rows[os.getpid()].gpu_memory_bytes == 10 * MIB
    assert rows[sleeper.pid].gpu_memory_bytes is None, "NVML_VALUE_NOT_AVAILABLE -> None"
    assert snapshot.gpus[1].processes == () and snapshot.gpus[1].processes_unavailable is None
    # one C call per list, GPU and collect (the buffer is passed in), 16-byte v1 entries
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 * 2
    assert fake.entry_sizes["nvmlDeviceGetComputeRunningProcesses"] == 16
    assert fake.calls["_nvmlGetFunctionPointer:nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["_nvmlGetFunctionPointer:nvmlDeviceGetComputeRunningProcesses_v2"] == 1


def test_driver_535_early_uses_its_32_byte_v3_layout(make_backend):
    fake = FakeNvml(1, driver_version="535.54.03")
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 77 * MIB, gpu_instance_id=2, compute_instance_id=1)]
    backend = make_backend(fake)
    (raw,) = backend.read_processes(0).processes
    assert (raw.pid, raw.gpu_memory_bytes, raw.gpu_instance_id, raw.compute_instance_id) == (
        os.getpid(),
        77 * MIB,
        2,
        1,
    )
    (row,) = Collector(backend).collect().gpus[0].processes
    assert (row.pid, row.gpu_memory_bytes, row.user) == (os.getpid(), 77 * MIB, me())
    assert fake.entry_sizes["nvmlDeviceGetComputeRunningProcesses_v3"] == 32, "not pynvml's 24-byte struct"
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] >= 1


# --------------------------------------------------------------------- no GPUs, no driver


def test_zero_gpus(make_backend):
    fake = FakeNvml(0)
    backend = make_backend(fake)
    assert backend.device_count() == 0
    snapshot = Collector(backend).collect()
    assert snapshot.gpus == () and snapshot.processes == ()
    assert snapshot.host.driver_version == "550.54.15"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVMLError_LibraryNotFound, "libnvidia-ml.so.1 not found"),
        (pynvml.NVMLError_DriverNotLoaded, "driver is not loaded"),
        (pynvml.NVMLError_LibRmVersionMismatch, "version mismatch"),
        (pynvml.NVMLError_NoPermission, "no permission"),
        (pynvml.NVMLError_Unknown, "cannot initialise NVML"),
        (OSError("libnvidia-ml.so.1: invalid ELF header"), "cannot load the NVIDIA driver library"),
    ],
)
def test_init_failure_is_one_line_backend_unavailable(error, words):
    fake = FakeNvml(2)
    fake.fail("nvmlInit", error)
    with pytest.raises(BackendUnavailableError) as info:
        NvmlBackend(nvml=fake, foreign_pids=False)
    message = str(info.value)
    assert words in message
    assert "\n" not in message and message.strip() == message and message
    assert info.value.exit_code == 1
    assert fake.calls["nvmlDeviceGetCount"] == 0


def test_count_failure_is_backend_unavailable_and_shuts_down():
    fake = FakeNvml(2)
    fake.fail("nvmlDeviceGetCount", pynvml.NVMLError_Unknown)
    with pytest.raises(BackendUnavailableError, match="cannot count GPUs") as info:
        NvmlBackend(nvml=fake, foreign_pids=False)
    assert "\n" not in str(info.value)
    assert fake.calls["nvmlShutdown"] == 1 and fake.init_count == 0


def test_host_version_failures_are_reasons(make_backend):
    fake = FakeNvml(1)
    fake.remove("nvmlSystemGetNVMLVersion")
    fake.fail("nvmlSystemGetCudaDriverVersion", pynvml.NVMLError_Unknown)
    host = make_backend(fake).host_info()
    assert host.driver_version == "550.54.15"
    assert host.nvml_version is None and host.cuda_driver_version is None
    assert host.unavailable == {"nvml_version": Reason.NOT_SUPPORTED, "cuda_driver_version": Reason.UNKNOWN}


# --------------------------------------------------------------------- MPS clients


def test_mps_clients_are_listed_as_type_m(fake, make_backend, sleeper):
    """Under MPS the compute list shows the server only; its clients are in their own list."""
    server, client = os.getpid(), sleeper.pid
    fake.gpus[0].compute_procs = [FakeProcess(server, 300 * MIB)]
    fake.gpus[0].mps_procs = [FakeProcess(client, 41 * GIB)]
    fake.gpus[1].mps_procs = [FakeProcess(client, 7 * GIB), FakeProcess(server, 2 * GIB)]
    fake.gpus[1].compute_procs = [FakeProcess(server, 1 * GIB)]
    snapshot = Collector(make_backend(fake)).collect()
    rows0 = {p.pid: p for p in snapshot.gpus[0].processes}
    rows1 = {p.pid: p for p in snapshot.gpus[1].processes}
    assert rows0[server].type is ProcessType.COMPUTE and rows0[client].type is ProcessType.MPS
    assert str(rows0[client].type) == "M" and rows0[client].gpu_memory_bytes == 41 * GIB
    assert rows0[client].command == "sleep 30" and rows0[client].user == me(), "joined with the host like the rest"
    assert rows1[client].type is ProcessType.MPS and rows1[client].gpu_memory_bytes == 7 * GIB
    assert rows1[server].type is ProcessType.MPS, "in the MPS list and the compute list: one row, an MPS client"
    assert rows1[server].gpu_memory_bytes == 2 * GIB
    assert snapshot.gpus[0].processes_hint is None
    assert fake.calls["nvmlDeviceGetMPSComputeRunningProcesses_v3"] == 2, "one C call per GPU"


@pytest.mark.parametrize("missing", [("_v3",), ("_v3", "_v2"), ("_v3", "_v2", "")])
def test_mps_list_walks_down_its_own_versions(fake, make_backend, sleeper, missing):
    for version in missing:
        fake.remove(f"nvmlDeviceGetMPSComputeRunningProcesses{version}")
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 10 * MIB)]
    fake.gpus[0].mps_procs = [FakeProcess(sleeper.pid, 3 * GIB)]
    collector = Collector(make_backend(fake))
    for _ in range(3):
        snapshot = collector.collect()
    types = {p.pid: p.type for p in snapshot.gpus[0].processes}
    if len(missing) == 3:  # a driver without any MPS call: the other lists as before
        assert types == {os.getpid(): ProcessType.COMPUTE}
    else:
        assert types == {os.getpid(): ProcessType.COMPUTE, sleeper.pid: ProcessType.MPS}
    assert snapshot.gpus[0].processes_unavailable is None and snapshot.gpus[1].processes_unavailable is None
    for version in missing:
        name = f"nvmlDeviceGetMPSComputeRunningProcesses{version}"
        assert fake.calls[f"_nvmlGetFunctionPointer:{name}"] == 1, "a missing symbol is asked for once"
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 6, "compute and graphics keep their v3"
    assert fake.calls["_nvmlGetFunctionPointer:nvmlDeviceGetComputeRunningProcesses_v2"] == 0


def test_mps_list_failing_on_one_gpu_hides_nothing_else(fake, make_backend, sleeper):
    fake.fail("nvmlDeviceGetMPSComputeRunningProcesses_v3", pynvml.NVMLError_NotSupported, gpu=0)
    fake.gpus[0].compute_procs = [FakeProcess(sleeper.pid, 10 * MIB)]
    fake.gpus[1].mps_procs = [FakeProcess(sleeper.pid, 5 * GIB)]
    collector = Collector(make_backend(fake))
    for _ in range(2):
        snapshot = collector.collect()
    assert [(p.pid, p.type) for p in snapshot.gpus[0].processes] == [(sleeper.pid, ProcessType.COMPUTE)]
    assert [(p.pid, p.type) for p in snapshot.gpus[1].processes] == [(sleeper.pid, ProcessType.MPS)]
    assert snapshot.gpus[0].processes_unavailable is None
    assert fake.gpu_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", 0) == 1, "NotSupported is remembered"


def test_memory_in_use_with_no_visible_process_gets_a_hint(fake, make_backend, sleeper):
    fake.gpus[0].memory_used = 40 * GIB  # e.g. clients in another container
    fake.gpus[1].memory_used = 40 * GIB
    fake.gpus[1].mps_procs = [FakeProcess(sleeper.pid, 39 * GIB)]
    snapshot = Collector(make_backend(fake)).collect()
    hint = snapshot.gpus[0].processes_hint
    assert hint is not None and hint.startswith("40.0 GiB in use but no process is visible")
    assert "\n" not in hint
    assert snapshot.gpus[1].processes_hint is None, "its MPS client is listed"
    fake.gpus[0].memory_used = 1 * GIB  # the driver's own reservation, or little: no hint
    assert Collector(make_backend(fake)).collect().gpus[0].processes_hint is None
    fake.gpus[0].memory_used = 40 * GIB
    fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVMLError_NoPermission, gpu=0)
    fake.fail("nvmlDeviceGetGraphicsRunningProcesses_v3", pynvml.NVMLError_NoPermission, gpu=0)
    state = Collector(make_backend(fake)).collect().gpus[0]
    assert state.processes_unavailable is Reason.NO_PERMISSION and state.processes_hint is None, "the reason says it"


def test_an_empty_mps_list_is_asked_again_only_every_recheck_interval(fake, make_backend, sleeper, monkeypatch):
    """Most GPUs never run MPS: an empty client list costs one call per GPU per MPS_RECHECK_S, not per refresh."""
    from nvtopy.backends.nvml import backend as nvml_module

    now = [1000.0]
    monkeypatch.setattr(nvml_module.time, "monotonic", lambda: now[0])
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 10 * MIB)]
    collector = Collector(make_backend(fake))
    for _ in range(5):  # five refreshes within a second: GPU 0's empty MPS list is asked once
        collector.collect()
        now[0] += 0.2
    assert fake.gpu_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", 0) == 1
    fake.gpus[0].mps_procs = [FakeProcess(sleeper.pid, 3 * GIB)]  # an MPS client starts
    collector.collect()
    assert sleeper.pid not in {p.pid for p in collector.collect().gpus[0].processes}, "not before the recheck"
    now[0] += nvml_module.MPS_RECHECK_S
    assert sleeper.pid in {p.pid for p in collector.collect().gpus[0].processes}
    asked = fake.gpu_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", 0)
    for _ in range(3):  # while it has clients, every refresh
        collector.collect()
    assert fake.gpu_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", 0) == asked + 3


def test_process_utilization_samples_are_read_out_of_pynvml_structures():
    """The fields come through ctypes' own getter (not pynvml's decoding one), older samples without enc/dec too."""
    from types import SimpleNamespace

    from nvtopy.backends.nvml.backend import _UtilSample

    raw = pynvml.c_nvmlProcessUtilizationSample_t(pid=4242, timeStamp=1_700_000_000_000_000, smUtil=55, memUtil=21)
    raw.encUtil, raw.decUtil = 3, 4
    assert _UtilSample.of(raw) == (4242, 1_700_000_000_000_000, 55, 21, 3, 4)
    old = SimpleNamespace(pid=7, timeStamp=1, smUtil=9, memUtil=8)
    assert _UtilSample.of(old) == (7, 1, 9, 8, 0, 0)


def test_an_empty_graphics_list_is_asked_again_only_after_the_recheck(fake, make_backend, sleeper, monkeypatch):
    """Compute processes every refresh; an empty graphics list every GRAPHICS_RECHECK_S (issue 27: driver calls)."""
    from nvtopy.backends.nvml import backend as nvml_module

    now = [1000.0]
    monkeypatch.setattr(nvml_module.time, "monotonic", lambda: now[0])
    fake.gpus[0].compute_procs = [FakeProcess(os.getpid(), 10 * MIB)]
    collector = Collector(make_backend(fake))
    for _ in range(3):  # three refreshes 0.5 s apart: the empty graphics list is asked once
        collector.collect()
        now[0] += 0.5
    assert fake.gpu_count("nvmlDeviceGetGraphicsRunningProcesses_v3", 0) == 1
    assert fake.gpu_count("nvmlDeviceGetComputeRunningProcesses_v3", 0) == 3, "compute: every refresh"
    fake.gpus[0].graphics_procs = [FakeProcess(sleeper.pid, 1 * GIB)]  # a graphics process starts
    now[0] += nvml_module.GRAPHICS_RECHECK_S
    assert sleeper.pid in {p.pid for p in collector.collect().gpus[0].processes}
    asked = fake.gpu_count("nvmlDeviceGetGraphicsRunningProcesses_v3", 0)
    for _ in range(3):  # while it has processes, every refresh
        collector.collect()
    assert fake.gpu_count("nvmlDeviceGetGraphicsRunningProcesses_v3", 0) == asked + 3


def test_the_memory_clock_is_read_again_when_the_pstate_moves_or_after_the_recheck(fake, make_backend, clock):
    """The SM clock every read; the memory clock, set by the P-state, when it moves or every CLOCK_MEM_RECHECK_S."""
    from nvtopy.backends.nvml import backend as nvml_module

    backend = make_backend(fake)
    groups = {"pstate", "clocks"}

    def clock_calls() -> int:
        return fake.gpu_count("nvmlDeviceGetClockInfo", 0)

    assert backend.read_sample(0, groups).values["clock_mem_mhz"] == 1593
    assert clock_calls() == 2
    clock.advance(2)
    reading = backend.read_sample(0, groups)
    assert "clock_mem_mhz" not in reading.values and "clock_sm_mhz" in reading.values, "same P-state: kept"
    assert clock_calls() == 3
    fake.gpus[0].pstate, fake.gpus[0].clock_mem = 8, 405  # the GPU idles: P8, a lower memory clock
    clock.advance(2)
    assert backend.read_sample(0, groups).values["clock_mem_mhz"] == 405, "the P-state moved: read at once"
    assert clock_calls() == 5
    fake.gpus[0].clock_mem = 810  # an application clock set within the same P-state
    clock.advance(nvml_module.CLOCK_MEM_RECHECK_S)
    assert backend.read_sample(0, groups).values["clock_mem_mhz"] == 810, "never older than the recheck"
    assert clock_calls() == 7


def test_without_a_pstate_the_memory_clock_is_read_every_time(fake, make_backend, clock):
    fake.fail("nvmlDeviceGetPerformanceState", pynvml.NVMLError_NotSupported)
    backend = make_backend(fake)
    for _ in range(3):
        clock.advance(2)
        assert backend.read_sample(0, {"pstate", "clocks"}).values["clock_mem_mhz"] == 1593
    assert fake.gpu_count("nvmlDeviceGetClockInfo", 0) == 6
