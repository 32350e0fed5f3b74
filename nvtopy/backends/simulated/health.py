"""GPU health for the simulated backend: memory repair counters, PCIe link, NVLink, throttling, Xid events.

Why a module of its own: these readings follow the board (row remapping from
Ampere on, page retirement before it; a PCIe generation and NVLink count per
model) and the health faults of :mod:`.sim_faults` (the scenarios of
fake-nvml's ``FAKE_NVML_*`` knobs), not the workload model of
:mod:`.simulated`. Everything here is a pure function of its arguments -- the
model, the faults, the GPU index, the backend's clock -- so the simulation stays
deterministic: same seed and clock readings, same values.

Healthy by default: nothing remapped or retired, the replay counter at 0, every
NVLink up without errors. Realistic at rest: the PCIe link trains down to
generation 1 when the GPU idles (under 5 % utilisation) and back to its
maximum under load; its width stays.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from ...model import GpuEvent, NvLink
from ..base import EventStream
from .catalog import GpuModel
from .faults import SimFaults

__all__ = [
    "EVENTS_UNSUPPORTED_NOTE",
    "LINK_BYTES_PER_S",
    "SimEventStream",
    "capped_sm_clock",
    "health_static",
    "nvlink_values",
    "pcie_link_values",
    "remapped_rows_values",
    "retired_pages_values",
    "throttle_temperature",
]

LINK_BYTES_PER_S = 25 * 10**9
"""What one NVLink (versions 2 to 4) carries per direction: 25 GB/s."""
_LINK_SHARE_AT_FULL_LOAD = 0.45  # a busy job moves about half of what its links could (all-reduce between steps)
IDLE_UTILIZATION_PERCENT = 5.0  # below this the link trains down to generation 1 and the SM clock drops to idle
# HGX boards: four NVSwitches, link l on switch l mod 4 (as fake-nvml numbers them).
_NVSWITCH_BUS_IDS = tuple(f"00000000:{0x05 + k:02X}:00.0" for k in range(4))

# NVML clock-event bits (nvml.h) and the share of the max SM clock each leaves (as fake-nvml caps them).
_IDLE = 0x001
_SW_POWER_CAP = 0x004
_HW_SLOWDOWN = 0x008
_SYNC_BOOST = 0x010
_SW_THERMAL = 0x020
_HW_THERMAL = 0x040
_HW_POWER_BRAKE = 0x080
_CLOCK_SHARE = (
    (_HW_SLOWDOWN | _HW_THERMAL | _HW_POWER_BRAKE, 0.45),
    (_SW_THERMAL, 0.70),
    (_SW_POWER_CAP, 0.85),
    (_SYNC_BOOST, 0.95),
)
MAX_OPERATING_BELOW_SLOWDOWN_C = 2  # nvidia-smi's "GPU Max Operating Temp" sits this far below slowdown

EVENTS_UNSUPPORTED_NOTE = "Xid events not supported on this GPU"  # the NVML backend's words
_RECHECK_S = 0.25  # how often a wait looks at a clock that does not follow real time (a test's manual clock)


def health_static(model: GpuModel) -> dict[str, object]:
    """The static health fields: the PCIe link the board can reach and how many NVLinks it has."""
    return {
        "pcie_link_gen_max": model.pcie_gen_max,
        "pcie_link_width_max": model.pcie_width_max,
        "nvlink_count": model.nvlinks,
    }


def remapped_rows_values(model: GpuModel, faults: SimFaults, index: int) -> dict[str, object] | None:
    """The "remapped_rows" group; None where the board has no row remapping (before Ampere, no ECC).

    A ``remapped`` fault is reported even on such a board (as fake-nvml does): asked for, shown.
    """
    forced = faults.on_gpu(faults.remapped, index)
    if forced is None and not model.row_remapping:
        return None
    corrected, uncorrected, pending, failure = forced or (0, 0, False, False)
    return {
        "remapped_rows_corrected": corrected,
        "remapped_rows_uncorrected": uncorrected,
        "remapped_rows_pending": pending,
        "remapped_rows_failure": failure,
    }


def retired_pages_values(model: GpuModel, faults: SimFaults, index: int) -> dict[str, object] | None:
    """The "retired_pages" group; None where the board does not retire pages (Ampere and later, no ECC)."""
    forced = faults.on_gpu(faults.retired, index)
    if forced is None and not model.page_retirement:
        return None
    sbe, dbe, pending = forced or (0, 0, False)
    return {"retired_pages_sbe": sbe, "retired_pages_dbe": dbe, "retired_pages_pending": pending}


def pcie_link_values(
    model: GpuModel, faults: SimFaults, index: int, utilization: float, since_open_s: float
) -> dict[str, object]:
    """The "pcie_link" group: the link now (gen 1 at idle, its max under load, or the downgrade) and the replays."""
    downgrade = faults.on_gpu(faults.pcie_downgrade, index)
    if downgrade is not None:  # a link that trained at a lower speed stays there, busy or not
        gen, width = min(downgrade[0], model.pcie_gen_max), min(downgrade[1], model.pcie_width_max)
    else:
        gen = 1 if utilization < IDLE_UTILIZATION_PERCENT else model.pcie_gen_max
        width = model.pcie_width_max
    replay = faults.on_gpu(faults.pcie_replay, index)
    if replay is None:
        replays = 0
    else:
        count, grows = replay
        replays = count + (int(max(0.0, since_open_s)) if grows else 0)
    return {"pcie_link_gen": gen, "pcie_link_width": width, "pcie_replay_counter": replays}


def nvlink_values(
    model: GpuModel,
    faults: SimFaults,
    index: int,
    *,
    gpus: int,
    now: float,
    work_percent: float,
    phase: float,
    bus_id: Callable[[int], str],
) -> dict[str, object]:
    """The "nvlink" group: every link and the totals.

    A board without NVLink: no link and nothing moving (``()`` and 0 B/s, as
    the NVML backend and dcgm-exporter report such a board), not "N/A" forever.

    ``work_percent``: how much the GPU really computes (its utilisation; near 0
    on a stuck GPU, which moves nothing): each active link carries up to about
    half its bandwidth at full load, a little more or less as steps go.
    ``bus_id``: the PCI bus id of a GPU index (peer-connected boards).
    """
    if not model.nvlinks:
        return {"nvlinks": (), "nvlink_rx_bytes_per_s": 0, "nvlink_tx_bytes_per_s": 0}
    down = faults.on_gpu(faults.nvlink_down, index) or frozenset()
    errors = faults.on_gpu(faults.nvlink_errors, index) or 0
    load = max(0.0, min(100.0, work_percent)) / 100 * _LINK_SHARE_AT_FULL_LOAD * LINK_BYTES_PER_S
    links = []
    for link in range(model.nvlinks):
        active = link not in down
        rx = tx = 0
        if active:
            rx = int(load * (1 + 0.1 * math.sin(now / 3.0 + phase + 0.7 * link)))
            tx = int(load * (1 + 0.1 * math.cos(now / 3.0 + phase + 0.7 * link)))
        if model.nvswitch:
            remote: str | None = _NVSWITCH_BUS_IDS[link % len(_NVSWITCH_BUS_IDS)]
        elif gpus >= 2:  # peer GPUs, as fake-nvml wires them: link l of GPU i reaches GPU (i + 1 + l mod (G-1)) mod G
            remote = bus_id((index + 1 + link % (gpus - 1)) % gpus)
        else:
            remote = None  # a lone peer-connected board: nothing at the other end
        links.append(
            NvLink(
                link=link,
                active=active,
                version=model.nvlink_version,
                rx_bytes_per_s=rx,
                tx_bytes_per_s=tx,
                errors=errors,
                remote=remote,
            )
        )
    return {
        "nvlinks": tuple(links),
        "nvlink_rx_bytes_per_s": sum(link.rx_bytes_per_s or 0 for link in links),
        "nvlink_tx_bytes_per_s": sum(link.tx_bytes_per_s or 0 for link in links),
    }


def capped_sm_clock(model: GpuModel, mask: int, clock_mhz: int) -> int:
    """The SM clock under a forced clock-event ``mask``: capped at the share its worst reason leaves.

    Caps as fake-nvml's: HW slowdown, HW thermal and the power brake 45 % of
    max, SW thermal 70 %, SW power cap 85 %, sync boost 95 %; never below the
    idle clock, and the idle bit means the idle clock.
    """
    if mask & _IDLE:
        return min(clock_mhz, model.sm_idle_mhz)
    share = min((share for bits, share in _CLOCK_SHARE if mask & bits), default=1.0)
    return min(clock_mhz, max(model.sm_idle_mhz, int(model.sm_max_mhz * share)))


def throttle_temperature(model: GpuModel, mask: int, temperature_c: float) -> float:
    """A forced thermal slowdown comes with a GPU at its thermal limits (as fake-nvml raises it)."""
    if mask & _SW_THERMAL:
        temperature_c = max(temperature_c, model.slowdown_c - MAX_OPERATING_BELOW_SLOWDOWN_C)
    if mask & _HW_THERMAL:
        temperature_c = max(temperature_c, model.slowdown_c)
    return temperature_c


class SimEventStream(EventStream):
    """The Xid events of the ``xid=`` faults, each delivered once, when the backend's clock says they are due.

    Why the backend's clock and not real time: tests drive a manual clock and
    must see an event exactly when they advance it past the event's time; the
    demo's clock is real time. An event due before the stream opened is still
    delivered (unlike NVML, where an event set sees only what happens after it
    registered): a monitor opens its stream a moment after the backend, and
    ``xid=79`` at 0 s must not be lost in that moment. Its timestamp is the
    simulated time it happened (the same on every run).

    Waiting blocks on an event that :meth:`close` sets: with the real clock
    until the next event is due or the timeout; with any other clock it looks
    again every 0.25 s while an event is pending (a manual clock moves without
    telling), and not at all when none is.
    """

    def __init__(self, *, clock: Callable[[], float], opened_at: float, faults: SimFaults, gpus: int) -> None:
        self._clock = clock
        self._opened_at = opened_at
        self._faults = faults
        self._gpus = gpus
        self._delivered: set[tuple[int, int]] = set()  # (index of the xid fault, GPU)
        self._closed = threading.Event()
        self._real_time = clock is time.time
        # Per GPU; said once under None when it holds for every GPU (as the NVML backend merges its notes).
        unsupported = [index for index in range(gpus) if not faults.events_supported(index)]
        if gpus and len(unsupported) == gpus:
            self.notes: dict[int | None, str] = {None: EVENTS_UNSUPPORTED_NOTE}
        else:
            self.notes = dict.fromkeys(unsupported, EVENTS_UNSUPPORTED_NOTE)

    def _scan(self) -> tuple[list[GpuEvent], float | None]:
        """The events due now (marked delivered), and the clock seconds until the next pending one."""
        since_open = self._clock() - self._opened_at
        due: list[tuple[float, int, int, GpuEvent]] = []
        next_in: float | None = None
        for k, fault in enumerate(list(self._faults.xids)):
            for gpu in fault.gpus if fault.gpus is not None else range(self._gpus):
                if gpu >= self._gpus or (k, gpu) in self._delivered or not self._faults.events_supported(gpu):
                    continue
                if fault.after_s <= since_open:
                    self._delivered.add((k, gpu))
                    event = GpuEvent(timestamp=self._opened_at + fault.after_s, gpu_index=gpu, xid=fault.xid)
                    due.append((fault.after_s, k, gpu, event))
                else:
                    wait = fault.after_s - since_open
                    next_in = wait if next_in is None else min(next_in, wait)
        due.sort(key=lambda item: item[:3])
        return [item[3] for item in due], next_in

    def wait(self, timeout_s: float) -> list[GpuEvent]:
        deadline = time.monotonic() + max(0.0, timeout_s)
        while not self._closed.is_set():
            events, next_in = self._scan()
            if events:
                return events
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if next_in is not None:
                remaining = min(remaining, next_in if self._real_time else _RECHECK_S)
            self._closed.wait(max(remaining, 0.001))
        return []

    def close(self) -> None:
        self._closed.set()
