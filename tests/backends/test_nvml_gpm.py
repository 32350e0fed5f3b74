"""GPM on the NVML backend, against a fake ``pynvml``: the sample pairs, the cost, and every way it fails."""

from __future__ import annotations

import math
import time

import pynvml
import pytest

from nvtopy.backends.nvml.gpm import FIRST_PAIR_S
from nvtopy.model import GPM_FIELDS, MIG_GPM_FIELDS, Reason
from nvtopy.sources.collector import Collector

from ..fake_pynvml import FakeGpu, FakeMig, FakeNvml

MIB = 1 << 20
H100_METRICS = {
    1: 97.0,  # graphics
    2: 52.5,  # SM active
    3: 20.0,  # occupancy
    5: 26.0,  # tensor
    10: 31.0,  # DRAM
    11: 2.0,
    12: 18.0,
    13: 6.0,
    20: 100.0,  # PCIe TX MiB/s
    21: 250.0,  # PCIe RX MiB/s
    60: 1000.0,  # NVLink RX MiB/s
    61: 900.0,
    30: 10.0,  # two decoders
    31: 30.0,
}
GPM_CALLS = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet",
)


def machine(**h100) -> FakeNvml:
    """GPU 0 an A100 (no GPM), GPU 1 an H100 with GPM and the metrics above."""
    a100 = FakeGpu(0, name="NVIDIA A100-SXM4-80GB")
    h100 = FakeGpu(
        1, name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpm=True, gpm_metrics=dict(H100_METRICS), **h100
    )
    return FakeNvml([a100, h100])


def calls(fake: FakeNvml) -> dict[str, int]:
    return {name: fake.calls[name] for name in GPM_CALLS if fake.calls[name]}


def one_shot(make_backend, fake):
    """A backend whose readings wait for a measurable pair (``nvtopy --once``), its GPUs' first samples taken."""
    backend = make_backend(fake)
    backend.one_shot = True
    for index in range(len(fake.gpus)):
        backend.read_static(index)
    return backend


def test_a_one_shot_reading_waits_once_and_gives_every_figure(make_backend):
    fake = machine()
    backend = make_backend(fake)
    backend.one_shot = True
    backend.read_static(1)  # the first sample, with the static fields
    started = time.monotonic()
    reading = backend.read_sample(1, ["gpm"])
    waited = time.monotonic() - started
    assert 0.05 < waited < 0.5, "the rest of the 120 ms between the two samples"
    values = reading.values
    assert not reading.unavailable
    assert (values["graphics_active_percent"], values["sm_active_percent"], values["tensor_active_percent"]) == (
        97.0,
        52.5,
        26.0,
    )
    assert (values["dram_active_percent"], values["sm_occupancy_percent"]) == (31.0, 20.0)
    assert values["gpm_pcie_rx_bytes_per_s"] == 250 * MIB and values["gpm_pcie_tx_bytes_per_s"] == 100 * MIB
    assert values["gpm_nvlink_rx_bytes_per_s"] == 1000 * MIB and values["gpm_nvlink_tx_bytes_per_s"] == 900 * MIB
    assert values["decoder_active_percent"] == 20.0, "the mean of the decoders the GPU has"
    assert calls(fake) == {
        "nvmlGpmQueryDeviceSupport": 1,
        "nvmlGpmSampleAlloc": 2,
        "nvmlGpmSampleGet": 2,
        "nvmlGpmMetricsGet": 1,
    }


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_a_monitor_never_waits_the_first_poll_says_not_available(make_backend):
    fake = machine()
    backend = make_backend(fake)
    backend.read_static(1)
    started = time.monotonic()
    reading = backend.read_sample(1, ["gpm"])
    assert time.monotonic() - started < 0.05, "a poll never sleeps: it would count against the GPU's deadline"
    assert reading.unavailable == dict.fromkeys(GPM_FIELDS, Reason.NOT_AVAILABLE)
    assert fake.calls["nvmlGpmSampleGet"] == 1, "too soon for a pair: the first sample is kept, none taken"
    time.sleep(FIRST_PAIR_S)
    assert backend.read_sample(1, ["gpm"]).values["sm_active_percent"] == 52.5


def test_each_later_poll_is_one_sample_and_one_measurement_without_waiting(make_backend):
    fake = machine()
    backend = one_shot(make_backend, fake)
    backend.read_sample(1, ["gpm"])
    backend.one_shot = False
    before = calls(fake)
    started = time.monotonic()
    for _ in range(5):
        fake.gpus[1].gpm_metrics[2] = 10.0
        time.sleep(FIRST_PAIR_S)
        assert backend.read_sample(1, ["gpm"]).values["sm_active_percent"] == 10.0
    assert time.monotonic() - started < 6 * FIRST_PAIR_S + 0.2
    after = calls(fake)
    assert after["nvmlGpmSampleGet"] - before["nvmlGpmSampleGet"] == 5
    assert after["nvmlGpmMetricsGet"] - before["nvmlGpmMetricsGet"] == 5
    assert after["nvmlGpmSampleAlloc"] == before["nvmlGpmSampleAlloc"] == 2, "the two buffers are reused"
    assert fake.gpu_count("nvmlGpmQueryDeviceSupport", 1) == 1, "support is asked once"


def test_a_gpu_without_gpm_is_na_and_never_asked_again(make_backend):
    fake = machine()
    backend = make_backend(fake)
    for _ in range(3):
        reading = backend.read_sample(0, ["gpm"])
        assert reading.unavailable == dict.fromkeys(GPM_FIELDS, Reason.NOT_SUPPORTED)
        assert not any(name in reading.values for name in GPM_FIELDS), "N/A, never 0"
    assert fake.gpu_count("nvmlGpmQueryDeviceSupport", 0) == 1
    assert fake.gpu_count("nvmlGpmSampleGet", 0) == 0


def test_a_driver_without_gpm_calls_is_na_and_never_asked_again(make_backend):
    fake = machine()
    fake.remove("nvmlGpmQueryDeviceSupport")
    backend = make_backend(fake)
    for _ in range(3):
        assert backend.read_sample(1, ["gpm"]).unavailable["sm_active_percent"] is Reason.NOT_SUPPORTED
    assert fake.calls["nvmlGpmQueryDeviceSupport"] == 1


def test_one_failing_metric_leaves_the_others(make_backend):
    fake = machine(gpm_codes={5: pynvml.NVML_ERROR_NO_PERMISSION, 10: pynvml.NVML_ERROR_UNKNOWN})
    reading = one_shot(make_backend, fake).read_sample(1, ["gpm"])
    assert reading.unavailable == {
        "tensor_active_percent": Reason.NO_PERMISSION,
        "dram_active_percent": Reason.UNKNOWN,
    }
    assert reading.values["sm_active_percent"] == 52.5


def test_no_permission_to_sample_is_said_and_asked_again(make_backend):
    fake = machine()
    fake.fail("nvmlGpmSampleGet", pynvml.NVMLError_NoPermission, gpu=1, times=1)
    backend = make_backend(fake)
    backend.one_shot = True
    assert backend.read_sample(1, ["gpm"]).unavailable["sm_active_percent"] is Reason.NO_PERMISSION
    assert backend.read_sample(1, ["gpm"]).values["sm_active_percent"] == 52.5, "a refusal is not remembered"


def test_a_lost_gpu_while_sampling_is_lost(make_backend):
    fake = machine()
    backend = one_shot(make_backend, fake)
    backend.read_sample(1, ["gpm"])
    fake.gpus[1].lost = True
    reading = backend.read_sample(1, ["gpm", "temperature"])
    assert reading.lost and reading.unavailable["sm_active_percent"] is Reason.LOST


@pytest.mark.parametrize("value", [100.4, 250.0, -0.1, -42.0, math.nan, math.inf, -math.inf, 1e308])
def test_a_percentage_no_gpu_gives_is_na_out_of_range_never_clamped(make_backend, value):
    fake = machine()
    fake.gpus[1].gpm_metrics[2] = value  # SM active
    fake.gpus[1].gpm_metrics[30] = value  # one decoder: the decoders' mean is no figure either
    sample = Collector(one_shot(make_backend, fake)).collect().gpus[1].sample
    for name in ("sm_active_percent", "decoder_active_percent"):
        assert getattr(sample, name) is None and sample.why(name) is Reason.OUT_OF_RANGE, (name, value)
    assert sample.tensor_active_percent == 26.0 and sample.why("tensor_active_percent") is None, "the others stay"


@pytest.mark.parametrize("value", [-0.1, math.nan, math.inf, -math.inf, 1e308])
def test_a_rate_no_link_carries_is_na_out_of_range(make_backend, value):
    fake = machine()
    fake.gpus[1].gpm_metrics[21] = value  # PCIe RX, MiB/s
    sample = Collector(one_shot(make_backend, fake)).collect().gpus[1].sample
    assert sample.gpm_pcie_rx_bytes_per_s is None and sample.why("gpm_pcie_rx_bytes_per_s") is Reason.OUT_OF_RANGE
    assert sample.gpm_pcie_tx_bytes_per_s == 100.0 * MIB


def test_a_mig_instances_absurd_figure_is_na_out_of_range(make_backend):
    fake = machine(
        mig_mode=(1, 1),
        mig_slots=[FakeMig("MIG-aaaa", "3g.40gb", 1, 0)],
        gpm_mig={1: {1: 80.0, 2: math.nan, 3: 30.0, 5: 1e308, 10: -3.0}},
    )
    usage = Collector(one_shot(make_backend, fake)).collect().gpus[1].sample.mig_usage[0]
    for name in ("sm_active_percent", "tensor_active_percent", "dram_active_percent"):
        assert getattr(usage, name) is None and usage.unavailable[name] is Reason.OUT_OF_RANGE, name
    assert (usage.graphics_active_percent, usage.sm_occupancy_percent) == (80.0, 30.0)


def test_mig_instances_get_their_own_figures(make_backend):
    fake = machine(
        mig_mode=(1, 1),
        mig_slots=[FakeMig("MIG-aaaa", "3g.40gb", 1, 0), FakeMig("MIG-bbbb", "3g.40gb", 2, 0)],
        gpm_mig={1: {1: 80.0, 2: 60.0, 3: 30.0, 5: 40.0, 10: 20.0}, 2: {1: 0.0, 2: 0.0, 3: 0.0, 5: 0.0, 10: 0.0}},
    )
    backend = one_shot(make_backend, fake)
    reading = backend.read_sample(1, ["mig", "gpm"])
    first, second = reading.values["mig_usage"]
    assert (first.sm_active_percent, first.tensor_active_percent, first.dram_active_percent) == (60.0, 40.0, 20.0)
    assert second.sm_active_percent == 0.0 and not second.unavailable
    assert reading.values["sm_active_percent"] == 52.5, "the whole GPU keeps its own figures"
    assert fake.calls["nvmlGpmMigSampleGet"] == 4, "first samples with the static fields, then one per poll"
    time.sleep(FIRST_PAIR_S)
    backend.read_sample(1, ["mig", "gpm"])
    assert fake.calls["nvmlGpmMigSampleGet"] == 6, "one per instance per poll"


def test_mig_instances_on_a_board_without_gpm_say_why(make_backend):
    fake = machine()
    fake.gpus[0].mig_mode = (1, 1)
    fake.gpus[0].mig_slots = [FakeMig("MIG-cccc")]
    backend = make_backend(fake)
    backend.read_static(0)
    (usage,) = backend.read_sample(0, ["mig", "gpm"]).values["mig_usage"]
    assert usage.memory_used_bytes is not None
    assert {name: usage.unavailable[name] for name in MIG_GPM_FIELDS} == dict.fromkeys(
        MIG_GPM_FIELDS, Reason.NOT_SUPPORTED
    )


def test_close_frees_the_sample_buffers(make_backend):
    fake = machine()
    backend = one_shot(make_backend, fake)
    backend.read_sample(1, ["gpm"])
    assert len(fake.gpm_samples) == 2
    backend.close()
    assert fake.calls["nvmlGpmSampleFree"] == 2 and fake.gpm_samples == {}


@pytest.mark.parametrize("groups", [["gpm"], ["gpm", "memory", "temperature"]])
def test_gpm_costs_one_sample_and_one_measurement_per_poll(make_backend, groups):
    fake = machine()
    backend = one_shot(make_backend, fake)
    backend.read_sample(1, groups)
    time.sleep(FIRST_PAIR_S)
    before = sum(fake.gpu_calls[(name, 1)] for name, _ in list(fake.gpu_calls) if name.startswith("nvmlGpm"))
    backend.read_sample(1, groups)
    after = sum(fake.gpu_calls[(name, 1)] for name, _ in list(fake.gpu_calls) if name.startswith("nvmlGpm"))
    assert after - before == 2, "nvmlGpmSampleGet on the GPU and nvmlGpmMetricsGet on its pair"


def test_the_first_sample_is_taken_right_after_the_uuid_before_the_other_static_calls(make_backend):
    """A one-shot's wait for its pair counts from the first sample: the sooner it is taken, the more of the
    static read, the processes and the other readings fall inside the wait (``nvtopy --once``)."""
    fake = machine()
    order: list[str] = []
    for name in ("nvmlDeviceGetUUID", "nvmlGpmSampleGet", "nvmlDeviceGetName", "nvmlDeviceGetMigMode"):
        fake.fail(name, pynvml.NVMLError_Unknown, gpu=1, when=lambda *_, name=name: order.append(name) and False)
    backend = make_backend(fake)
    backend.read_static(1)
    assert order == ["nvmlDeviceGetUUID", "nvmlGpmSampleGet", "nvmlDeviceGetName", "nvmlDeviceGetMigMode"]
    assert FIRST_PAIR_S == 0.105, "NVML wants more than 100 ms between the two; 5 ms over it"
