"""MIG on the NVML backend, against a fake ``pynvml``: instances, their memory, their processes, and failures."""

from __future__ import annotations

import pynvml
import pytest

from nvtopy.model import ALL_GROUPS, Reason, mig_profile
from nvtopy.selection import Selection
from nvtopy.sources.collector import Collector

from ..fake_pynvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

GIB = 1 << 30
MIB = 1 << 20
UUIDS = ("MIG-11111111-aaaa-bbbb-cccc-000000000001", "MIG-22222222-aaaa-bbbb-cccc-000000000002")


def mig_h100() -> FakeNvml:
    """GPU 0 without MIG, GPU 1 an H100 with a 3g and a 2g instance (slot 1 empty) and two processes."""
    plain = FakeGpu(0, name="NVIDIA H100 80GB HBM3")
    mig = FakeGpu(
        1,
        name="NVIDIA H100 80GB HBM3",
        mig_mode=(1, 1),
        mig_slots=[
            FakeMig(UUIDS[0], "3g.40gb", 1, 0, memory_total=40 * GIB, memory_used=12 * GIB, sms=60, slices=3),
            None,
            FakeMig(UUIDS[1], "2g.20gb", 5, 0, memory_total=20 * GIB, memory_used=1 * GIB, sms=32, slices=2),
        ],
        compute_procs=[
            FakeProcess(4242, 11 * GIB, gpu_instance_id=1, compute_instance_id=0),
            FakeProcess(4343, 900 * MIB, gpu_instance_id=5, compute_instance_id=0),
        ],
    )
    for gpu in (plain, mig):
        gpu.graphics_procs = []
    return FakeNvml([plain, mig])


@pytest.fixture
def fake() -> FakeNvml:
    return mig_h100()


def test_instances_are_read_with_the_static_fields(fake, make_backend):
    static = make_backend(fake).read_static(1)
    assert (static.mig_mode, static.mig_mode_pending, static.mig_pending_change) == (True, True, False)
    assert static.mig_devices == UUIDS, "the empty slot is skipped"
    first, second = static.mig_instances
    assert (first.index, first.gpu_instance_id, first.compute_instance_id, first.profile) == (0, 1, 0, "3g.40gb")
    assert (first.memory_total_bytes, first.sm_count, first.slices, first.copy_engines) == (40 * GIB, 60, 3, 3)
    assert (second.index, second.gpu_instance_id, second.profile, second.sm_count) == (2, 5, "2g.20gb", 32)
    assert first.label(1) == "1/1/0" and second.label(1) == "1/5/0"
    assert not first.unavailable


def test_a_gpu_without_mig_asks_nothing_of_mig(fake, make_backend):
    backend = make_backend(fake)
    static = backend.read_static(0)
    assert static.mig_mode is False and static.mig_instances == ()
    reading = backend.read_sample(0, ["mig"])
    assert reading.values["mig_usage"] == ()
    for call in ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetAttributes"):
        assert fake.gpu_count(call, 0) == 0, call


def test_each_poll_reads_each_instance_memory_once(fake, make_backend):
    backend = make_backend(fake)
    backend.read_static(1)
    before = fake.gpu_count("nvmlDeviceGetMemoryInfo", 1)
    usage = backend.read_sample(1, ["mig"]).values["mig_usage"]
    assert [(u.index, u.memory_used_bytes, u.memory_free_bytes) for u in usage] == [
        (0, 12 * GIB, 28 * GIB),
        (2, 1 * GIB, 19 * GIB),
    ]
    assert fake.gpu_count("nvmlDeviceGetMemoryInfo", 1) - before == 2, "one call per instance, handles reused"
    assert fake.gpu_count("nvmlDeviceGetMigDeviceHandleByIndex", 1) == 3, "handles acquired once, at the static read"


def test_the_snapshot_joins_instances_usage_and_processes(fake, make_backend):
    snapshot = Collector(make_backend(fake)).collect(join=False)
    gpu = snapshot.gpus[1]
    states = gpu.mig
    assert [s.label for s in states] == ["1/1/0", "1/5/0"]
    assert [[p.pid for p in s.processes] for s in states] == [[4242], [4343]]
    assert states[0].memory_used_bytes == 12 * GIB and states[0].memory_total_bytes == 40 * GIB
    assert states[0].memory_used_percent == pytest.approx(30.0)
    assert {p.pid: p.instance_label for p in gpu.processes} == {4242: "1/1/0", 4343: "1/5/0"}
    assert snapshot.gpus[0].mig == () and all(p.instance_label is None for p in snapshot.gpus[0].processes)


def test_selecting_one_instance_leaves_out_the_others_and_their_processes(fake, make_backend):
    collector = Collector(make_backend(fake))
    collector.select(Selection((1,), instance_pairs={1: (UUIDS[1].upper(),)}))
    gpu = collector.collect(join=False).gpus[0]
    assert gpu.index == 1 and [s.label for s in gpu.mig] == ["1/5/0"]
    assert [p.pid for p in gpu.processes] == [4343]
    assert [u.index for u in gpu.sample.mig_usage] == [2]
    assert gpu.static.temperature_slowdown_c is not None, "the GPU's own readings stay"


def test_one_failing_instance_value_is_na_with_its_reason(fake, make_backend):
    fake.fail("nvmlDeviceGetAttributes", pynvml.NVMLError_NoPermission, gpu=1)
    fake.fail("nvmlDeviceGetComputeInstanceId", pynvml.NVMLError_NotSupported, gpu=1)
    static = make_backend(fake).read_static(1)
    first = static.mig_instances[0]
    assert first.uuid == UUIDS[0] and first.profile == "3g.40gb" and first.gpu_instance_id == 1
    assert first.sm_count is None and first.unavailable["sm_count"] is Reason.NO_PERMISSION
    assert first.compute_instance_id is None and first.unavailable["compute_instance_id"] is Reason.NOT_SUPPORTED
    assert first.label(1) == "1/1/?"
    assert fake.gpu_count("nvmlDeviceGetComputeInstanceId", 1) == 1, "NotSupported is asked once per GPU"


def test_instance_memory_failing_is_na_and_the_rest_reads(fake, make_backend):
    backend = make_backend(fake)
    backend.read_static(1)
    fake.fail("nvmlDeviceGetMemoryInfo", pynvml.NVMLError_Unknown, gpu=1, times=1)
    reading = backend.read_sample(1, ["mig", "temperature"])
    first, second = reading.values["mig_usage"]
    assert first.memory_used_bytes is None and first.unavailable["memory_used_bytes"] is Reason.UNKNOWN
    assert second.memory_used_bytes == 1 * GIB
    assert reading.values["temperature_c"] == 45


def test_a_gpu_lost_while_reading_an_instance_is_lost(fake, make_backend):
    backend = make_backend(fake)
    backend.read_static(1)
    fake.gpus[1].lost = True
    reading = backend.read_sample(1, ["mig"])
    assert reading.lost and reading.unavailable["mig_usage"] is Reason.LOST


def test_mig_mode_waiting_for_a_reset(fake, make_backend):
    fake.gpus[0].mig_mode = (0, 1)
    static = make_backend(fake).read_static(0)
    assert (static.mig_mode, static.mig_mode_pending, static.mig_pending_change) == (False, True, True)
    assert static.mig_instances == ()


def test_an_unreadable_name_leaves_the_profile_na(fake, make_backend):
    fake.gpus[1].mig_slots = [FakeMig(UUIDS[0], profile="")]
    static = make_backend(fake).read_static(1)
    assert static.mig_instances[0].profile is None
    assert static.mig_instances[0].unavailable["profile"] is Reason.UNKNOWN


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", "1g.5gb+me"),
        ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "1c.3g.40gb"),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA H100 MIG ", None),
        ("NVIDIA H100 MIG x.y", None),
    ],
)
def test_the_profile_is_read_from_the_device_name(name, profile):
    assert mig_profile(name) == profile


def test_every_group_of_a_mig_gpu_reads(fake, make_backend):
    backend = make_backend(fake)
    backend.read_static(1)
    fake.fail("nvmlDeviceGetUtilizationRates", pynvml.NVMLError_NotSupported, gpu=1)
    reading = backend.read_sample(1, ALL_GROUPS)
    assert reading.unavailable["utilization_gpu_percent"] is Reason.NOT_SUPPORTED
    assert len(reading.values["mig_usage"]) == 2
