"""NvmlBackend health groups against the fake pynvml: remapped rows, retired pages, PCIe link, NVLink.

Each group is checked for its values, the calls it costs (one nvmlDeviceGetFieldValues
where NVML has field ids), its fallback to the dedicated calls, and every way a call or
a single field-value entry fails.
"""

from __future__ import annotations

import sys
import threading

import pynvml
import pytest

from nvtopy.model import HEALTH_GROUPS, SAMPLE_GROUPS, NvLink, Reason
from nvtopy.sources.collector import Collector

from ..fake_pynvml import FakeGpu, FakeNvLink, FakeNvml
from .test_nvml_backend import LINUX

HEALTH = sorted(HEALTH_GROUPS)
HEALTH_FIELDS = [name for group in HEALTH for name in SAMPLE_GROUPS[group]]
FV = "nvmlDeviceGetFieldValues"
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def nvlink_gpu(index: int = 0, links: int = 4, down: tuple[int, ...] = ()) -> FakeGpu:
    """An H100 SXM: its links reach NVSwitches 05..08, link ``down`` inactive."""
    return FakeGpu(
        index,
        name="NVIDIA H100 80GB HBM3",
        nvlinks=[
            FakeNvLink(active=link not in down, version=4, remote=f"00000000:{5 + link % 4:02X}:00.0")
            for link in range(links)
        ],
    )


# --------------------------------------------------------------------- values and costs


def test_healthy_defaults_every_field_has_a_value(make_backend):
    fake = FakeNvml(2)
    backend = make_backend(fake)
    reading = backend.read_sample(0, HEALTH)
    assert reading.unavailable == {} and not reading.lost
    assert {name: reading.values[name] for name in HEALTH_FIELDS} == {
        "nvlinks": (),  # a PCIe board: no link
        "nvlink_rx_bytes_per_s": 0,
        "nvlink_tx_bytes_per_s": 0,
        "pcie_link_gen": 4,
        "pcie_link_width": 16,
        "pcie_replay_counter": 0,
        "remapped_rows_corrected": 0,
        "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "retired_pages_sbe": 0,
        "retired_pages_dbe": 0,
        "retired_pages_pending": False,
    }
    static = backend.read_static(0)
    assert (static.pcie_link_gen_max, static.pcie_link_width_max, static.nvlink_count) == (4, 16, 0)
    assert static.unavailable == LINUX


def test_unhealthy_values_and_one_field_values_call_per_group(make_backend):
    gpu = FakeGpu(0, remapped_rows=(3, 1, 1, 0), retired_pages=(3, 2, 1), pcie_gen=3, pcie_width=8, pcie_replay=7)
    fake = FakeNvml([gpu])
    backend = make_backend(fake)
    backend.read_static(0)  # the link count (one field-values call) is static
    before = backend.call_counts()
    reading = backend.read_sample(0, ["remapped_rows", "retired_pages", "pcie_link"])
    assert reading.unavailable == {}
    values = reading.values
    assert (values["remapped_rows_corrected"], values["remapped_rows_uncorrected"]) == (3, 1)
    assert values["remapped_rows_pending"] is True and values["remapped_rows_failure"] is False
    assert (values["retired_pages_sbe"], values["retired_pages_dbe"], values["retired_pages_pending"]) == (3, 2, True)
    assert (values["pcie_link_gen"], values["pcie_link_width"], values["pcie_replay_counter"]) == (3, 8, 7)
    spent = {k: v - before.get(k, 0) for k, v in backend.call_counts().items() if v != before.get(k, 0)}
    assert spent == {
        FV: 3,  # remapped rows, retired pages, replay counter: one each
        "nvmlDeviceGetCurrPcieLinkGeneration": 1,
        "nvmlDeviceGetCurrPcieLinkWidth": 1,
    }
    assert fake.calls["nvmlDeviceGetRemappedRows"] == fake.calls["nvmlDeviceGetRetiredPages"] == 0


def test_static_pcie_max_prefers_the_slot_limited_call(make_backend):
    gpu = FakeGpu(0, pcie_gen_max=4, pcie_gpu_gen_max=5, pcie_width_max=16)  # a gen-5 GPU in a gen-4 slot
    fake = FakeNvml([gpu])
    assert make_backend(fake).read_static(0).pcie_link_gen_max == 4
    assert fake.calls["nvmlDeviceGetGpuMaxPcieLinkGeneration"] == 0

    fake = FakeNvml([FakeGpu(0, pcie_gen_max=4, pcie_gpu_gen_max=5)])
    fake.remove("nvmlDeviceGetMaxPcieLinkGeneration")
    static = make_backend(fake).read_static(0)
    assert static.pcie_link_gen_max == 5 and static.unavailable == LINUX, "the GPU-only call when the other is missing"


def test_static_health_failures_are_reasons(make_backend):
    fake = FakeNvml(2)
    fake.fail("nvmlDeviceGetMaxPcieLinkWidth", pynvml.NVMLError_NotSupported, gpu=0)
    fake.fail("nvmlDeviceGetMaxPcieLinkGeneration", pynvml.NVMLError_NoPermission, gpu=1)
    fake.gpus[1].field_errors[pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT] = pynvml.NVML_ERROR_UNKNOWN
    backend = make_backend(fake)
    s0, s1 = backend.read_static(0), backend.read_static(1)
    assert s0.unavailable == {**LINUX, "pcie_link_width_max": Reason.NOT_SUPPORTED} and s0.pcie_link_gen_max == 4
    assert s1.unavailable == {**LINUX, "pcie_link_gen_max": Reason.NO_PERMISSION, "nvlink_count": Reason.UNKNOWN}
    assert s1.pcie_link_width_max == 16
    assert fake.gpu_count("nvmlDeviceGetGpuMaxPcieLinkGeneration", 1) == 0, "NoPermission is not NotSupported"


def test_link_count_entry_not_supported_is_a_board_without_nvlink(make_backend):
    fake = FakeNvml([nvlink_gpu(0)])
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT] = NOT_SUPPORTED
    backend = make_backend(fake)
    assert backend.read_static(0).nvlink_count == 0
    reading = backend.read_sample(0, ["nvlink"])
    assert reading.values == {"nvlinks": (), "nvlink_rx_bytes_per_s": 0, "nvlink_tx_bytes_per_s": 0}


# --------------------------------------------------------------------- fallbacks and NotSupported memory


def test_field_values_missing_falls_back_to_the_dedicated_calls(make_backend):
    gpus = [FakeGpu(i, remapped_rows=(5, 0, 0, 1), retired_pages=(1, 0, 1), pcie_replay=9) for i in range(2)]
    fake = FakeNvml(gpus)
    fake.remove(FV)  # a driver before nvmlDeviceGetFieldValues
    backend = make_backend(fake)
    for _ in range(2):
        r0, r1 = backend.read_sample(0, HEALTH), backend.read_sample(1, HEALTH)
    for reading in (r0, r1):
        assert reading.values["remapped_rows_corrected"] == 5 and reading.values["remapped_rows_failure"] is True
        assert reading.values["retired_pages_sbe"] == 1 and reading.values["retired_pages_dbe"] == 0
        assert reading.values["retired_pages_pending"] is True and reading.values["pcie_replay_counter"] == 9
        assert reading.unavailable == dict.fromkeys(SAMPLE_GROUPS["nvlink"], Reason.NOT_SUPPORTED)
    assert fake.calls[FV] == 1, "a missing symbol is asked for once, for every group and GPU"
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 4 and fake.calls["nvmlDeviceGetPcieReplayCounter"] == 4
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 8  # single- and double-bit, 2 GPUs, 2 readings


def test_unknown_field_ids_fall_back_once_and_stay(make_backend):
    fake = FakeNvml([FakeGpu(0, remapped_rows=(2, 0, 0, 0))])
    for field_id in (pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_UNC):
        fake.gpus[0].field_errors[field_id] = NOT_SUPPORTED
    for field_id in (pynvml.NVML_FI_DEV_REMAPPED_PENDING, pynvml.NVML_FI_DEV_REMAPPED_FAILURE):
        fake.gpus[0].field_errors[field_id] = NOT_SUPPORTED  # a driver that does not know ids 142-145
    backend = make_backend(fake)
    for _ in range(3):
        reading = backend.read_sample(0, ["remapped_rows"])
    assert reading.values["remapped_rows_corrected"] == 2 and reading.unavailable == {}
    assert fake.calls[FV] == 1 and fake.calls["nvmlDeviceGetRemappedRows"] == 3


def test_board_without_row_remapping_is_asked_once(make_backend):
    fake = FakeNvml([FakeGpu(0, remapped_rows=None, retired_pages=None), FakeGpu(1, remapped_rows=(1, 0, 0, 0))])
    backend = make_backend(fake)
    for _ in range(3):
        r0 = backend.read_sample(0, ["remapped_rows", "retired_pages"])
        r1 = backend.read_sample(1, ["remapped_rows"])
    expected = dict.fromkeys(SAMPLE_GROUPS["remapped_rows"] + SAMPLE_GROUPS["retired_pages"], Reason.NOT_SUPPORTED)
    assert r0.unavailable == expected and r0.values == {}
    assert r1.values["remapped_rows_corrected"] == 1
    # One field-values call per group, one dedicated call each (all NotSupported), then nothing.
    assert fake.gpu_count(FV, 0) == 2
    assert fake.gpu_count("nvmlDeviceGetRemappedRows", 0) == 1
    assert (
        fake.gpu_count("nvmlDeviceGetRetiredPages", 0) == 2
        and fake.gpu_count("nvmlDeviceGetRetiredPagesPendingStatus", 0) == 1
    )
    assert fake.gpu_count(FV, 1) == 3, "the other GPU is still read"


def test_dedicated_pcie_link_calls_not_supported_are_remembered(make_backend):
    fake = FakeNvml(1)
    fake.fail("nvmlDeviceGetCurrPcieLinkWidth", pynvml.NVMLError_NotSupported)
    backend = make_backend(fake)
    for _ in range(3):
        reading = backend.read_sample(0, ["pcie_link"])
    assert reading.unavailable == {"pcie_link_width": Reason.NOT_SUPPORTED} and reading.values["pcie_link_gen"] == 4
    assert fake.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 1 and fake.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 3


# --------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, Reason.NO_PERMISSION),
        (pynvml.NVML_ERROR_UNKNOWN, Reason.UNKNOWN),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, Reason.NOT_SUPPORTED),
    ],
)
def test_one_failing_entry_leaves_the_others(make_backend, code, reason):
    fake = FakeNvml([FakeGpu(0, remapped_rows=(4, 2, 0, 0), retired_pages=(1, 1, 0))])
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_REMAPPED_UNC] = code
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_RETIRED_PENDING] = code
    backend = make_backend(fake)
    reading = backend.read_sample(0, ["remapped_rows", "retired_pages"])
    assert reading.unavailable == {"remapped_rows_uncorrected": reason, "retired_pages_pending": reason}
    assert reading.values["remapped_rows_corrected"] == 4 and reading.values["retired_pages_dbe"] == 1
    assert not reading.lost
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 0, "a partial answer is not a reason to fall back"
    del fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_REMAPPED_UNC]
    assert backend.read_sample(0, ["remapped_rows"]).values["remapped_rows_uncorrected"] == 2, "asked again"


@pytest.mark.parametrize(
    ("error", "reason"),
    [(pynvml.NVMLError_NoPermission, Reason.NO_PERMISSION), (pynvml.NVMLError_Unknown, Reason.UNKNOWN)],
)
def test_failing_field_values_call_fails_its_group_only(make_backend, error, reason):
    fake = FakeNvml(1)
    fake.fail(FV, error, when=lambda ids: pynvml.NVML_FI_DEV_REMAPPED_COR in ids)
    backend = make_backend(fake)
    reading = backend.read_sample(0, HEALTH)
    assert reading.unavailable == dict.fromkeys(SAMPLE_GROUPS["remapped_rows"], reason)
    assert reading.values["retired_pages_sbe"] == 0 and reading.values["pcie_link_gen"] == 4
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 0, "only NotSupported falls back"


def test_dedicated_call_errors_each_on_its_own(make_backend):
    fake = FakeNvml([FakeGpu(0, retired_pages=(2, 1, 0))])
    fake.remove(FV)
    fake.fail("nvmlDeviceGetRetiredPages", pynvml.NVMLError_NoPermission, when=lambda cause: cause == 1)
    fake.fail("nvmlDeviceGetRetiredPagesPendingStatus", pynvml.NVMLError_Unknown, times=1)
    backend = make_backend(fake)
    reading = backend.read_sample(0, ["retired_pages"])
    assert reading.values == {"retired_pages_sbe": 2}
    assert reading.unavailable == {"retired_pages_dbe": Reason.NO_PERMISSION, "retired_pages_pending": Reason.UNKNOWN}
    again = backend.read_sample(0, ["retired_pages"])
    assert again.values["retired_pages_pending"] is False, "Unknown is not remembered"


def test_lost_in_one_entry_loses_the_gpu(make_backend, clock):
    fake = FakeNvml(2)
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_RETIRED_DBE] = pynvml.NVML_ERROR_GPU_IS_LOST
    backend = make_backend(fake)
    backend.read_static(0)
    reading = backend.read_sample(0, ["retired_pages", "pcie_link"])
    assert reading.lost
    assert set(reading.unavailable) == set(SAMPLE_GROUPS["retired_pages"] + SAMPLE_GROUPS["pcie_link"])
    assert set(reading.unavailable.values()) == {Reason.LOST}
    assert fake.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 0, "nothing more is asked of a lost GPU"
    assert backend.read_sample(1, HEALTH).unavailable == {}, "the other GPU keeps reporting"
    del fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_RETIRED_DBE]
    clock.advance(1.5)
    assert not backend.read_sample(0, HEALTH).lost, "re-acquired by UUID after the backoff"
    assert fake.uuid_lookups == [fake.gpus[0].uuid]


@pytest.mark.parametrize("group", HEALTH)
def test_lost_gpu_loses_every_health_group(make_backend, group):
    fake = FakeNvml([nvlink_gpu(0), FakeGpu(1)])
    backend = make_backend(fake)
    backend.read_static(0)
    fake.gpus[0].lost = True
    reading = backend.read_sample(0, [group])
    assert reading.lost and reading.unavailable == dict.fromkeys(SAMPLE_GROUPS[group], Reason.LOST)


# --------------------------------------------------------------------- NVLink


def test_nvlink_first_reading_then_rates_from_entry_timestamps(make_backend, clock):
    fake = FakeNvml([nvlink_gpu(0, links=4, down=(3,))])
    stamp = [1_000_000_000_000]
    fake.field_time_us = lambda: stamp[0]
    backend = make_backend(fake)
    assert backend.read_static(0).nvlink_count == 4
    first = backend.read_sample(0, ["nvlink"])
    assert first.unavailable == {
        "nvlink_rx_bytes_per_s": Reason.NOT_AVAILABLE,  # no rate before two readings
        "nvlink_tx_bytes_per_s": Reason.NOT_AVAILABLE,
    }
    assert first.values["nvlinks"] == (
        NvLink(0, True, 4, None, None, 0, "00000000:05:00.0"),
        NvLink(1, True, 4, None, None, 0, "00000000:06:00.0"),
        NvLink(2, True, 4, None, None, 0, "00000000:07:00.0"),
        NvLink(3, False, None, None, None, 0, None),  # a down link is not asked what it reaches
    )
    for link, nvlink in enumerate(fake.gpus[0].nvlinks[:3]):
        nvlink.tx_kib += 1024 * (link + 1)  # 1, 2, 3 MiB in the 0.5 s below
        nvlink.rx_kib += 512
    stamp[0] += 500_000
    clock.advance(10)  # the driver's timestamps win over the local clock
    second = backend.read_sample(0, ["nvlink"])
    assert second.unavailable == {}
    links = second.values["nvlinks"]
    assert [link.tx_bytes_per_s for link in links] == [2 << 20, 4 << 20, 6 << 20, 0]
    assert [link.rx_bytes_per_s for link in links] == [1 << 20, 1 << 20, 1 << 20, 0]
    assert second.values["nvlink_tx_bytes_per_s"] == 12 << 20
    assert second.values["nvlink_rx_bytes_per_s"] == 3 << 20
    assert fake.calls[FV] == 1 + 2, "the link count, then one call per reading for every link"
    assert fake.calls["nvmlDeviceGetNvLinkRemotePciInfo"] == 3 and fake.calls["nvmlDeviceGetNvLinkVersion"] == 3
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 0 and fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 0
    assert len(fake.field_requests[-1]) == 4 * (2 + 1 + 4), "tx, rx, state and 4 error counters per link"


def test_nvlink_rates_from_the_local_clock_when_entries_have_no_timestamp(make_backend, clock):
    fake = FakeNvml([nvlink_gpu(0, links=2)])
    fake.field_time_us = lambda: 0
    backend = make_backend(fake)  # no read_static: the link count is read when first needed
    backend.read_sample(0, ["nvlink"])
    fake.gpus[0].nvlinks[0].tx_kib += 2048
    clock.advance(2.0)
    reading = backend.read_sample(0, ["nvlink"])
    assert reading.values["nvlinks"][0].tx_bytes_per_s == 1 << 20
    assert reading.values["nvlink_tx_bytes_per_s"] == 1 << 20 and reading.values["nvlink_rx_bytes_per_s"] == 0


def test_nvlink_counter_reset_restarts_the_rate(make_backend, clock):
    fake = FakeNvml([nvlink_gpu(0, links=1)])
    fake.field_time_us = lambda: 0
    fake.gpus[0].nvlinks[0].tx_kib = 10_000
    backend = make_backend(fake)
    backend.read_sample(0, ["nvlink"])
    fake.gpus[0].nvlinks[0].tx_kib = 5  # the GPU was reset: counters start again
    clock.advance(1)
    reset = backend.read_sample(0, ["nvlink"])
    assert reset.values["nvlinks"][0].tx_bytes_per_s is None
    assert reset.unavailable["nvlink_tx_bytes_per_s"] is Reason.NOT_AVAILABLE
    fake.gpus[0].nvlinks[0].tx_kib = 1029
    clock.advance(1)
    assert backend.read_sample(0, ["nvlink"]).values["nvlink_tx_bytes_per_s"] == 1024 * 1024


def test_nvlink_errors_summed_links_past_eleven_use_scoped_fields(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=14)])
    errors = {
        pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 1,
        pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: 2,
        pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 4,
        pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 8,
        pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: 100,  # not one of the counted kinds
    }
    fake.gpus[0].nvlinks[2].errors = dict(errors)
    fake.gpus[0].nvlinks[13].errors = dict(errors)
    reading = make_backend(fake).read_sample(0, ["nvlink"])
    links = reading.values["nvlinks"]
    assert [link.errors for link in links] == [0, 0, 15] + [0] * 10 + [15]
    request = fake.field_requests[-1]
    assert (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 13) in request
    assert (pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L2, 0) in request
    assert (pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 2) not in request
    assert fake.calls[FV] == 2  # the count, then everything else


def test_nvlink_state_field_missing_uses_the_per_link_call_from_then_on(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=3, down=(1,))])
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_NVLINK_GET_STATE] = NOT_SUPPORTED
    backend = make_backend(fake)
    for _ in range(2):
        reading = backend.read_sample(0, ["nvlink"])
    assert [link.active for link in reading.values["nvlinks"]] == [True, False, True]
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 6
    assert all(field_id != pynvml.NVML_FI_DEV_NVLINK_GET_STATE for field_id, _ in fake.field_requests[-1])


def test_nvlink_error_fields_missing_use_the_error_counter_call(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=2, down=(1,))])
    fake.gpus[0].nvlinks[0].errors = {pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 3, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 1}
    for link in range(2):
        for kind in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY"):
            fake.gpus[0].field_errors[getattr(pynvml, f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}")] = NOT_SUPPORTED
    backend = make_backend(fake)
    for _ in range(2):
        reading = backend.read_sample(0, ["nvlink"])
    assert [link.errors for link in reading.values["nvlinks"]] == [4, None]  # the down link is not asked
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 2 * 4
    assert len(fake.field_requests[-1]) == 2 * 3, "tx, rx and state only, once the error fields proved missing"


def test_nvlink_link_facts_read_once_transient_failures_retried(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=2)])
    fake.fail("nvmlDeviceGetNvLinkRemotePciInfo", pynvml.NVMLError_Unknown, times=1, when=lambda link: link == 1)
    fake.fail("nvmlDeviceGetNvLinkVersion", pynvml.NVMLError_NotSupported, when=lambda link: link == 0)
    backend = make_backend(fake)
    first = backend.read_sample(0, ["nvlink"]).values["nvlinks"]
    assert [(link.version, link.remote) for link in first] == [(None, "00000000:05:00.0"), (4, None)]
    for _ in range(3):
        links = backend.read_sample(0, ["nvlink"]).values["nvlinks"]
    assert [(link.version, link.remote) for link in links] == [(None, "00000000:05:00.0"), (4, "00000000:06:00.0")]
    assert fake.gpu_count("nvmlDeviceGetNvLinkRemotePciInfo", 0) == 3, "link 0 once, link 1 twice"
    assert fake.gpu_count("nvmlDeviceGetNvLinkVersion", 0) == 3, "link 0 once (NotSupported), link 1 twice"


def test_nvlink_link_coming_up_is_then_asked_its_facts(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=2, down=(1,))])
    backend = make_backend(fake)
    assert backend.read_sample(0, ["nvlink"]).values["nvlinks"][1].remote is None
    fake.gpus[0].nvlinks[1].active = True
    link = backend.read_sample(0, ["nvlink"]).values["nvlinks"][1]
    assert (link.active, link.version, link.remote) == (True, 4, "00000000:06:00.0")


def test_nvlink_throughput_entry_failing(make_backend):
    fake = FakeNvml([nvlink_gpu(0, links=2)])
    fake.gpus[0].field_errors[pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX] = pynvml.NVML_ERROR_NO_PERMISSION
    backend = make_backend(fake)
    for _ in range(2):
        reading = backend.read_sample(0, ["nvlink"])
    assert reading.unavailable == {"nvlink_rx_bytes_per_s": Reason.NO_PERMISSION}
    assert reading.values["nvlink_tx_bytes_per_s"] == 0
    assert [link.rx_bytes_per_s for link in reading.values["nvlinks"]] == [None, None]


def test_nvlink_unreadable_when_field_values_are_missing(make_backend):
    fake = FakeNvml([nvlink_gpu(0)])
    fake.remove(FV)
    backend = make_backend(fake)
    static = backend.read_static(0)
    assert static.nvlink_count is None and static.unavailable == {**LINUX, "nvlink_count": Reason.NOT_SUPPORTED}
    for _ in range(2):
        reading = backend.read_sample(0, ["nvlink"])
    assert reading.unavailable == dict.fromkeys(SAMPLE_GROUPS["nvlink"], Reason.NOT_SUPPORTED)
    assert fake.calls[FV] == 1


def test_collector_carries_health_into_the_snapshot(make_backend, clock):
    fake = FakeNvml([nvlink_gpu(0, links=2), FakeGpu(1, remapped_rows=(0, 3, 1, 1), pcie_gen=1, pcie_width=4)])
    fake.field_time_us = lambda: 0
    collector = Collector(make_backend(fake))
    collector.collect()
    fake.gpus[0].nvlinks[1].rx_kib += 4096
    clock.advance(1)
    g0, g1 = collector.collect().gpus
    assert g0.static.nvlink_count == 2 and g1.static.nvlink_count == 0
    assert g0.sample.nvlink_rx_bytes_per_s == 4 << 20 and g0.sample.nvlinks[1].rx_bytes_per_s == 4 << 20
    assert g1.sample.nvlinks == () and g1.sample.remapped_rows_failure is True
    assert (g1.sample.pcie_link_gen, g1.static.pcie_link_gen_max) == (1, 4)


# --------------------------------------------------------------------- threads


def test_call_counts_do_not_lose_updates_across_gpu_threads(make_backend):
    """One thread per GPU, as the collector runs them: every call is counted exactly once.

    (CPython's GIL rarely splits ``counter[name] += 1``; the lock makes it certain, on
    free-threaded builds too. This checks the counts stay exact, not the race itself.)
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        gpus, rounds = 4, 300
        fake = FakeNvml(gpus)
        backend = make_backend(fake)
        for index in range(gpus):
            backend.read_static(index)
        before = backend.call_counts()

        def work(index: int) -> None:
            for _ in range(rounds):
                backend.read_sample(index, ["power", "pcie_link"])

        threads = [threading.Thread(target=work, args=(index,)) for index in range(gpus)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    counts = backend.call_counts()
    for name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetCurrPcieLinkGeneration", FV):
        assert counts[name] - before.get(name, 0) == gpus * rounds, name
