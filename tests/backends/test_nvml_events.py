"""NvmlBackend.open_events against the fake pynvml: registration, notes, waiting, mapping, closing."""

from __future__ import annotations

import logging
import threading
import time

import pynvml
import pytest

from nvtopy.backends.base import NoEvents
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.backends.nvml.events import (
    LOST_NOTE,
    NO_PERMISSION_NOTE,
    NOT_SUPPORTED_NOTE,
    NvmlEventStream,
    merge_notes,
)
from nvtopy.model import GpuEvent

from ..fake_pynvml import XID, FakeGpu, FakeNvml
from ..waiting import until

NO_XID = pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeSingleBitEccError


@pytest.fixture
def streams():
    """Streams opened by a test, closed after it (close is idempotent)."""
    opened = []
    yield opened
    for stream in opened:
        stream.close()


def opened(backend: NvmlBackend, streams: list):
    stream = backend.open_events()
    streams.append(stream)
    return stream


# --------------------------------------------------------------------- registration and notes


def test_registers_xid_only_where_supported(make_backend, streams):
    fake = FakeNvml([FakeGpu(0), FakeGpu(1, event_types=NO_XID), FakeGpu(2)])
    backend = make_backend(fake)
    stream = opened(backend, streams)
    assert isinstance(stream, NvmlEventStream) and stream.watching
    assert stream.notes == {1: NOT_SUPPORTED_NOTE}
    (event_set,) = fake.event_sets
    assert {index: types_ for index, (types_, _handle) in event_set.registered.items()} == {0: XID, 2: XID}
    counts = backend.call_counts()
    assert counts["nvmlEventSetCreate"] == 1 and counts["nvmlDeviceGetSupportedEventTypes"] == 3
    assert counts["nvmlDeviceRegisterEvents"] == 2


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_same_note_on_every_gpu_is_said_once(make_backend, streams):
    fake = FakeNvml([FakeGpu(0, event_types=0), FakeGpu(1, event_types=NO_XID)])
    stream = opened(make_backend(fake), streams)
    assert stream.notes == {None: NOT_SUPPORTED_NOTE}
    assert not stream.watching and fake.event_sets[0].freed, "no set is held open with nothing registered"
    started = time.monotonic()
    assert stream.wait(0.1) == []
    assert 0.08 <= time.monotonic() - started < 0.5, "waits out the timeout: no busy loop"
    assert fake.calls["nvmlEventSetWait_v2"] == 0


def test_no_permission_to_register(make_backend, streams):
    fake = FakeNvml(2)
    fake.fail("nvmlDeviceRegisterEvents", pynvml.NVMLError_NoPermission)
    stream = opened(make_backend(fake), streams)
    assert stream.notes == {None: NO_PERMISSION_NOTE}


def test_mixed_reasons_stay_per_gpu(make_backend, streams):
    fake = FakeNvml(3)
    fake.fail("nvmlDeviceRegisterEvents", pynvml.NVMLError_NoPermission, gpu=0)
    fake.fail("nvmlDeviceGetSupportedEventTypes", pynvml.NVMLError_Unknown, gpu=1)
    stream = opened(make_backend(fake), streams)
    assert set(stream.notes) == {0, 1} and stream.notes[0] == NO_PERMISSION_NOTE
    assert stream.notes[1].startswith("cannot watch Xid events")
    assert stream.watching, "GPU 2 is watched"


def test_lost_gpu_at_open_gets_a_note_and_its_state_is_untouched(make_backend, streams):
    fake = FakeNvml(2)
    fake.gpus[1].lost = True
    backend = make_backend(fake)
    stream = opened(backend, streams)
    assert stream.notes == {1: LOST_NOTE}
    assert backend._gpus[1].handle is None and backend._gpus[1].retry_at == 0.0, "the GPU's reader owns its state"
    assert backend._gpus[0].handle is None, "a handle of the events' own, not stored on the GPU"


def test_uses_the_gpu_handle_when_there_is_one(make_backend, streams):
    fake = FakeNvml(2)
    backend = make_backend(fake)
    backend.read_static(0)
    handles = fake.calls["nvmlDeviceGetHandleByIndex"]
    opened(backend, streams)
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == handles + 1, "only GPU 1 needed one"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVMLError_NotSupported, "not supported by this driver"),
        (pynvml.NVMLError_FunctionNotFound, "not supported by this driver"),
        (pynvml.NVMLError_NoPermission, NO_PERMISSION_NOTE),
        (pynvml.NVMLError_Unknown, "cannot watch Xid events"),
    ],
)
def test_event_set_create_failing_gives_no_events(make_backend, error, words):
    fake = FakeNvml(2)
    fake.fail("nvmlEventSetCreate", error)
    stream = make_backend(fake).open_events()
    assert isinstance(stream, NoEvents) and words in stream.notes[None] and list(stream.notes) == [None]
    assert stream.wait(0.01) == []


def test_open_events_never_raises(make_backend):
    fake = FakeNvml(1)
    fake.fail("nvmlEventSetCreate", RuntimeError("the binding broke"))
    stream = make_backend(fake).open_events()
    assert isinstance(stream, NoEvents) and "the binding broke" in stream.notes[None]


def test_zero_gpus(make_backend, streams):
    stream = opened(make_backend(FakeNvml(0)), streams)
    assert stream.notes == {} and not stream.watching and stream.wait(0.01) == []


def test_merge_notes():
    assert merge_notes({0: "a", 1: "a"}, 2) == {None: "a"}
    assert merge_notes({0: "a"}, 2) == {0: "a"}
    assert merge_notes({0: "a", 1: "b"}, 2) == {0: "a", 1: "b"}
    assert merge_notes({}, 0) == {}


# --------------------------------------------------------------------- waiting


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_timeout_is_no_event(make_backend, streams):
    fake = FakeNvml(2)
    stream = opened(make_backend(fake), streams)
    started = time.monotonic()
    assert stream.wait(0.1) == []
    assert 0.08 <= time.monotonic() - started < 0.5
    assert fake.event_waits == [100]


def test_xid_events_mapped_to_gpus_and_drained(make_backend, streams):
    fake = FakeNvml(3)
    backend = make_backend(fake)
    stream = opened(backend, streams)
    fake.post_event(1, 79)
    fake.post_event(0, 13)
    fake.post_event(2, 48, gpu_instance_id=1, compute_instance_id=0)
    before = time.time()
    events = stream.wait(0.25)
    assert [(e.gpu_index, e.kind, e.xid, e.gpu_instance_id, e.compute_instance_id) for e in events] == [
        (1, "xid", 79, None, None),  # 0xFFFFFFFF: no MIG instance named
        (0, "xid", 13, None, None),
        (2, "xid", 48, 1, 0),
    ]
    assert all(isinstance(e, GpuEvent) and before <= e.timestamp <= time.time() for e in events)
    assert fake.event_waits == [250, 1, 1, 1], "drained with a 1 ms wait after the first event"
    assert backend.call_counts()["nvmlEventSetWait_v2"] == 4
    assert "nvmlDeviceGetIndex" not in backend.call_counts(), "mapped by the registered handle, no call"
    assert stream.wait(0.01) == []


def test_event_from_another_handle_object_is_named_by_index(make_backend, streams):
    fake = FakeNvml(2)
    backend = make_backend(fake)
    stream = opened(backend, streams)
    fake.post_event(1, 31, fresh_handle=True)
    assert [(e.gpu_index, e.xid) for e in stream.wait(0.25)] == [(1, 31)]
    assert backend.call_counts()["nvmlDeviceGetIndex"] == 1


def test_event_whose_gpu_cannot_be_named_is_dropped(make_backend, streams, caplog):
    fake = FakeNvml(2)
    stream = opened(make_backend(fake), streams)
    fake.fail("nvmlDeviceGetIndex", pynvml.NVMLError_Unknown)
    fake.post_event(1, 31, fresh_handle=True)
    fake.post_event(0, 13)
    with caplog.at_level(logging.WARNING, logger="nvtopy.backends.nvml.events"):
        events = stream.wait(0.25)
    assert [(e.gpu_index, e.xid) for e in events] == [(0, 13)]
    assert "not registered" in caplog.text


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_wait_wakes_when_an_event_arrives(make_backend, streams):
    fake = FakeNvml(2)
    stream = opened(make_backend(fake), streams)
    timer = threading.Timer(0.05, fake.post_event, args=(1, 79))
    timer.start()
    started = time.monotonic()
    events = stream.wait(0.25)
    timer.join()
    assert [(e.gpu_index, e.xid) for e in events] == [(1, 79)]
    assert time.monotonic() - started < 0.2, "woken by the event, not the timeout"


@pytest.mark.timing  # a wall-clock bound under half a second: apart from the loaded main pass
def test_a_waiting_thread_stops_within_half_a_second(make_backend):
    fake = FakeNvml(2)
    backend = make_backend(fake)
    stop = threading.Event()
    seen: list[GpuEvent] = []

    def run() -> None:
        stream = backend.open_events()  # opened, waited on and closed by its own thread
        try:
            while not stop.is_set():
                seen.extend(stream.wait(0.25))
        finally:
            stream.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 2
    while not fake.event_sets and time.monotonic() < deadline:
        time.sleep(0.01)
    fake.post_event(0, 43)
    until(lambda: seen, 5.0, "the Xid 43 seen by the waiting thread")  # then stopped in its next wait
    stop.set()
    started = time.monotonic()
    thread.join(1)
    assert not thread.is_alive() and time.monotonic() - started < 0.5
    assert [(e.gpu_index, e.xid) for e in seen] == [(0, 43)]
    assert fake.event_sets[0].freed


@pytest.mark.parametrize("error", [pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_Unknown, OSError("ctypes")])
def test_wait_never_raises_and_does_not_spin(make_backend, streams, caplog, error):
    fake = FakeNvml(2)
    stream = opened(make_backend(fake), streams)
    fake.fail("nvmlEventSetWait_v2", error)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="nvtopy.backends.nvml.events"):
        assert stream.wait(0.05) == [] and stream.wait(0.05) == []
    assert time.monotonic() - started >= 0.09, "a failing wait pauses for its timeout"
    assert caplog.text.count("Xid events:") == 1, "logged once, not every wait"
    fake.heal()
    fake.post_event(1, 79)
    assert [e.xid for e in stream.wait(0.25)] == [79], "events still arrive once the driver answers"


# --------------------------------------------------------------------- closing


def test_close_frees_the_set_once(make_backend):
    fake = FakeNvml(2)
    backend = make_backend(fake)
    stream = backend.open_events()
    stream.close()
    stream.close()
    assert fake.calls["nvmlEventSetFree"] == 1 and fake.event_sets[0].freed
    assert not stream.wait(0.01)
    assert fake.calls["nvmlEventSetWait_v2"] == 0, "a closed stream asks the driver nothing"


def test_close_after_the_backend_shut_down_does_not_raise(make_backend):
    fake = FakeNvml(1)
    backend = make_backend(fake)
    stream = backend.open_events()
    backend.close()
    stream.close()  # nvmlEventSetFree says Uninitialized: nothing left to release
    assert fake.calls["nvmlEventSetFree"] == 1
