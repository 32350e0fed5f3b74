"""Xid critical errors through NVML's event sets, for :meth:`NvmlBackend.open_events`.

Why events and not polling: an Xid (79 "fallen off the bus", 48 "double-bit ECC",
...) is reported once, when it happens; no counter keeps it. NVML queues it for
every event set that registered ``nvmlEventTypeXidCriticalError`` on that GPU.

One stream lives on a thread of its own: :meth:`NvmlEventStream.wait` blocks in
``nvmlEventSetWait_v2`` (no polling loop) for at most the caller's timeout, so the
thread notices a stop request within that timeout. It never raises: a failing
driver is logged once per kind of failure and reads as "no event".
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...model import GpuEvent, Reason
from ..base import EventStream, NoEvents

if TYPE_CHECKING:
    import logging

__all__ = ["NvmlEventStream", "open_xid_events"]


def _logger() -> logging.Logger:
    """This module's logger, :mod:`logging` imported at the first failure (``nvtopy --once`` opens no events,
    and the import is 3 ms of its start)."""
    import logging

    return logging.getLogger(__name__)


NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId: the event names no MIG instance
DRAIN_TIMEOUT_MS = 1  # not 0: NVML's documentation does not say 0 polls, and a wait forever would hang the thread
MAX_DRAIN = 256  # events read in one wait(): a storm cannot keep the thread in here

NOT_SUPPORTED_NOTE = "Xid events not supported on this GPU"
NO_PERMISSION_NOTE = "no permission to watch Xid events (run as root)"
LOST_NOTE = "GPU lost: Xid events not watched"

Target = tuple[int, Any, Reason | None]
"""(GPU index, its handle or None, why there is no handle)."""


def note_for(reason: Reason, detail: object = None) -> str:
    """The sentence a view shows when a GPU's Xid events are not watched."""
    if reason is Reason.NOT_SUPPORTED:
        return NOT_SUPPORTED_NOTE
    if reason is Reason.NO_PERMISSION:
        return NO_PERMISSION_NOTE
    if reason is Reason.LOST:
        return LOST_NOTE
    return f"cannot watch Xid events: {detail}" if detail else "cannot watch Xid events"


def open_xid_events(
    nvml: Any, targets: Sequence[Target], count: Callable[[str], None], reason_of: Callable[[BaseException], Reason]
) -> EventStream:
    """Register Xid critical errors of every GPU that supports them; never raises.

    ``count(name)`` counts each NVML call (the backend's counter); ``reason_of`` classifies an NVMLError.
    """
    try:
        count("nvmlEventSetCreate")
        event_set = nvml.nvmlEventSetCreate()
    except nvml.NVMLError as exc:
        reason = reason_of(exc)
        return NoEvents(
            note_for(reason, exc) if reason is not Reason.NOT_SUPPORTED else "Xid events not supported by this driver"
        )
    xid_bit = int(nvml.nvmlEventTypeXidCriticalError)
    notes: dict[int, str] = {}
    handles: dict[int, int] = {}  # the handle's pointer value -> GPU index
    for index, handle, why in targets:
        if handle is None:
            notes[index] = note_for(why or Reason.UNKNOWN)
            continue
        try:
            count("nvmlDeviceGetSupportedEventTypes")
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            if not supported & xid_bit:
                notes[index] = NOT_SUPPORTED_NOTE
                continue
            count("nvmlDeviceRegisterEvents")
            nvml.nvmlDeviceRegisterEvents(handle, xid_bit, event_set)
        except nvml.NVMLError as exc:
            notes[index] = note_for(reason_of(exc), exc)
            continue
        handles[handle_key(handle)] = index
    stream = NvmlEventStream(nvml, event_set if handles else None, handles, count)
    if not handles:
        _free(nvml, event_set, count)  # nothing to wait for: no set held open
    stream.notes = merge_notes(notes, len(targets))
    return stream


def merge_notes(notes: dict[int, str], gpus: int) -> dict[int | None, str]:
    """Per-GPU notes; one note under ``None`` when every GPU has the same one (said once, not per GPU)."""
    if gpus and len(notes) == gpus and len(set(notes.values())) == 1:
        return {None: next(iter(notes.values()))}
    return dict(notes.items())  # items(), not the dict: its key type widens to int | None


def handle_key(handle: Any) -> int:
    """What identifies a device handle: the pointer value of NVML's handle (the object's id otherwise)."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (ctypes.ArgumentError, TypeError):
        return id(handle)


def _free(nvml: Any, event_set: Any, count: Callable[[str], None]) -> None:
    try:
        count("nvmlEventSetFree")
        nvml.nvmlEventSetFree(event_set)
    except nvml.NVMLError as exc:  # e.g. Uninitialized after the backend closed: nothing left to release
        _logger().debug("nvmlEventSetFree: %s", exc)


class NvmlEventStream(EventStream):
    """Xid events of the GPUs registered in one NVML event set (see :func:`open_xid_events`)."""

    def __init__(self, nvml: Any, event_set: Any, handles: dict[int, int], count: Callable[[str], None]) -> None:
        self.notes: dict[int | None, str] = {}
        self._nvml = nvml
        self._set = event_set  # None: nothing registered, or closed
        self._handles = handles
        self._count = count
        self._idle = threading.Event()  # waited on instead of NVML when there is nothing to wait for
        self._logged: set[str] = set()
        self._legacy = False  # the driver lacks nvmlEventSetWait_v2: the unversioned call

    @property
    def watching(self) -> bool:
        """True while an event set is registered and open."""
        return self._set is not None

    def wait(self, timeout_s: float) -> list[GpuEvent]:
        if self._set is None:
            self._idle.wait(max(0.0, timeout_s))
            return []
        nvml = self._nvml
        try:
            data = self._wait_once(max(1, round(timeout_s * 1000)))
        except nvml.NVMLError_Timeout:
            return []
        except Exception as exc:  # noqa: BLE001 - never raise out of wait: log, and pause as long as asked
            self._failed(exc)
            self._idle.wait(max(0.0, timeout_s))  # a wait that fails at once must not become a busy loop
            return []
        events = [event for event in (self._event(data),) if event is not None]
        for _ in range(MAX_DRAIN):  # what else is queued, without waiting for more
            try:
                data = self._wait_once(DRAIN_TIMEOUT_MS)
            except Exception:  # noqa: BLE001 - Timeout: the queue is empty; anything else: next wait() says it
                break
            event = self._event(data)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> None:
        event_set, self._set = self._set, None
        self._idle.set()
        if event_set is not None:
            _free(self._nvml, event_set, self._count)

    def _wait_once(self, timeout_ms: int) -> Any:
        nvml = self._nvml
        if not self._legacy:
            try:
                self._count("nvmlEventSetWait_v2")
                return nvml.nvmlEventSetWait_v2(self._set, timeout_ms)
            except nvml.NVMLError_FunctionNotFound:
                self._legacy = True
        return self._wait_legacy(timeout_ms)

    def _wait_legacy(self, timeout_ms: int) -> Any:
        """The unversioned nvmlEventSetWait: it writes only device, type and data (no instance ids)."""
        nvml = self._nvml
        function = nvml._nvmlGetFunctionPointer("nvmlEventSetWait")
        data = nvml.c_nvmlEventData_t()
        data.gpuInstanceId = data.computeInstanceId = NO_INSTANCE
        self._count("nvmlEventSetWait")
        ret = function(self._set, ctypes.byref(data), ctypes.c_uint(timeout_ms))
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return data

    def _event(self, data: Any) -> GpuEvent | None:
        """A GpuEvent from nvmlEventData_t; None when its GPU cannot be named."""
        nvml = self._nvml
        index = self._handles.get(handle_key(data.device))
        if index is None:  # a handle object other than the one registered: ask NVML whose it is
            try:
                self._count("nvmlDeviceGetIndex")
                index = int(nvml.nvmlDeviceGetIndex(data.device))
            except nvml.NVMLError as exc:
                self._failed(exc, what="an event from a device not registered")
                return None
        event_type = int(data.eventType)
        is_xid = bool(event_type & int(nvml.nvmlEventTypeXidCriticalError))
        return GpuEvent(
            timestamp=time.time(),
            gpu_index=index,
            kind="xid" if is_xid else f"event 0x{event_type:x}",
            xid=int(data.eventData) if is_xid else None,
            gpu_instance_id=_instance(data.gpuInstanceId),
            compute_instance_id=_instance(data.computeInstanceId),
        )

    def _failed(self, exc: BaseException, what: str = "nvmlEventSetWait") -> None:
        """Log a failure once per kind (a lost GPU may fail every wait for good)."""
        kind = f"{what}:{type(exc).__name__}"
        if kind in self._logged:
            return
        self._logged.add(kind)
        logger = _logger()
        import logging  # loaded by _logger(): a lookup in sys.modules

        level = logging.INFO if isinstance(exc, self._nvml.NVMLError_GpuIsLost) else logging.WARNING
        logger.log(level, "Xid events: %s failed: %s", what, exc)


def _instance(value: Any) -> int | None:
    number = int(value)
    return None if number == NO_INSTANCE else number
