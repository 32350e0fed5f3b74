"""A local one-shot's head start: the driver opened and each GPU's first GPM sample taken before the CLI loads.

Why: on Hopper ``nvtopy --once`` prints GPM figures (SM, tensor, DRAM activity), which need two
samples of each GPU more than 100 ms apart (:data:`~nvtopy.backends.nvml.gpm.FIRST_PAIR_S`). The
one-shot cannot end sooner than 105 ms after its first samples, so every millisecond before them is
a millisecond of its run. Through the usual path they come after the interpreter has imported the
CLI, the model, the NVML backend and its host readers (traced on the fake driver, 8 GPUs: about
140 ms after the interpreter started), and the main thread then sat idle for the last 50 ms of the
pair. Started by the program's entry (``dispatch.console``) when its arguments ask for a local
``--once``, this module imports the bindings and, on a thread, opens the driver and takes each
Hopper GPU's first sample (about 50 ms after the start); the main thread waits for it at most
:data:`WAIT_S` (a slow or hung driver is then waited for where it always was: the backend's open,
with ``--timeout``), then imports and reads everything else inside the pair.

The backend's static read (:meth:`~nvtopy.backends.nvml.gpm.NvmlGpmReaders._gpm_first`) then
claims a GPU's sample instead of taking one: only a one-shot, only from the same bindings, only for
the very same device handle; a GPU whose sample is not ready when claimed takes its own, and a
sample that comes later is dropped. So the figures are those of a pair taken the usual way, and the
head start never changes what is printed, only when.

The head start holds its own ``nvmlInit`` reference (NVML counts them): :func:`finish`, called when
the backend closes, frees the samples nobody claimed and gives the reference back.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from typing import TYPE_CHECKING, Any

from ...standin import import_standing_in

if TYPE_CHECKING:
    import pynvml  # noqa: F401 -- imported by begin, ctypes.util standing in; named here for the layer rules

__all__ = ["WAIT_S", "begin", "claim", "finish", "import_bindings"]

WAIT_S = 0.1
"""The longest the program's start waits for the head start (the fake driver: about 3 ms; a real driver
in persistence mode tens of ms). After it the two go on side by side: the backend's own open waits
for a slow driver as it always did."""


class _State:
    """What the head start has opened and sampled; read and changed under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pynvml: Any = None  # the bindings it used (claims from other bindings get nothing)
        self.initialised = False  # its nvmlInit succeeded: one reference to give back
        self.done = threading.Event()  # its thread has ended (or never started)
        self.firsts: dict[
            int, tuple[int | None, Any, float]
        ] = {}  # GPU index -> (handle address, sample, monotonic time)
        self.claimed: set[int] = set()  # indices the backend has asked for: a later sample is dropped
        self.finished = False


_state = _State()


def import_bindings() -> Any:
    """``import pynvml`` with ``ctypes.util`` standing in (:mod:`nvtopy.standin`): the bindings import its
    ``find_library``, never call it on Linux, and it brings subprocess, tempfile and shutil. Raises what
    the import raises; the backend's :func:`~nvtopy.backends.nvml.backend.import_pynvml` words it."""
    return import_standing_in("pynvml", "ctypes.util", ("find_library",))


def begin(wait_s: float = WAIT_S) -> None:
    """Import the bindings, open the driver and take the first GPM samples on a thread; wait at most ``wait_s``.

    Never raises and never prints: whatever fails here (no bindings, no driver, a hung call) is
    met again, and reported, by the backend's own open.
    """
    try:
        pynvml = import_bindings()
    except Exception:  # noqa: BLE001 - the backend's open says why, in its words
        return
    state = _state
    state.pynvml = pynvml
    thread = threading.Thread(target=_take_firsts, args=(state, pynvml), name="nvtopy-headstart", daemon=True)
    thread.start()
    state.done.wait(wait_s)


def _take_firsts(state: _State, pynvml: Any) -> None:
    """``nvmlInit``, then each GPU's handle and, where GPM is supported, its first sample."""
    try:
        pynvml.nvmlInit()
        with state.lock:
            state.initialised = True
        for index in range(pynvml.nvmlDeviceGetCount()):
            _take_first(state, pynvml, index)
    except Exception:  # noqa: BLE001 - no driver, old bindings: the backend's own open says why
        pass
    finally:
        state.done.set()


def _take_first(state: _State, pynvml: Any, index: int) -> None:
    """GPU ``index``'s first GPM sample, kept unless the backend has claimed the GPU meanwhile."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return
        sample = pynvml.nvmlGpmSampleAlloc()
    except Exception:  # noqa: BLE001 - a lost GPU, no GPM calls in this driver: its own read says so
        return
    try:
        pynvml.nvmlGpmSampleGet(handle, sample)
    except Exception:  # noqa: BLE001 - as above; the buffer is given back
        kept = False
    else:
        taken_at = time.monotonic()
        with state.lock:
            kept = index not in state.claimed and not state.finished
            if kept:
                state.firsts[index] = (_address(handle), sample, taken_at)
    if not kept:  # failed, or claimed meanwhile: the backend took its own
        with contextlib.suppress(Exception):
            pynvml.nvmlGpmSampleFree(sample)


def claim(pynvml: Any, index: int, handle: Any) -> tuple[Any, float] | None:
    """GPU ``index``'s first GPM sample and when it was taken, if the head start has it for ``handle``.

    Either way the index is claimed: a sample the head start takes after this is not kept.
    """
    state = _state
    with state.lock:
        state.claimed.add(index)
        first = state.firsts.pop(index, None) if pynvml is state.pynvml else None
    if first is None:
        return None
    address, sample, taken_at = first
    if address is None or address != _address(handle):
        with state.lock:
            state.firsts[index] = first  # another device's: freed by finish()
        return None
    return sample, taken_at


def finish(pynvml: Any) -> None:
    """At a backend's close (on ``pynvml``): free the samples nobody claimed, give the ``nvmlInit`` back.

    Only once its thread has ended: a thread still in the driver keeps what it holds, and the
    driver cleans up after the exiting process.
    """
    state = _state
    if pynvml is not state.pynvml or not state.done.is_set():
        return
    with state.lock:
        if state.finished:
            return
        state.finished = True
        leftovers = [sample for _, sample, _ in state.firsts.values()]
        state.firsts.clear()
        initialised, state.initialised = state.initialised, False
    try:
        for sample in leftovers:
            pynvml.nvmlGpmSampleFree(sample)
        if initialised:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - closing: nothing useful to report
        pass


def _address(handle: Any) -> int | None:
    """The device a handle points at (NVML's handles are pointers, the same for a device while NVML is open)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
