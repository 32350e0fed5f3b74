"""GPU health through NVML: memory repair counters, the PCIe link, and NVLink.

The four health groups of :data:`nvtopy.model.SAMPLE_GROUPS` (``remapped_rows``,
``retired_pages``, ``pcie_link``, ``nvlink``) and the static facts they are judged
against (``pcie_link_gen_max``, ``pcie_link_width_max``, ``nvlink_count``), for
:class:`nvtopy.backends.nvml.backend.NvmlBackend`, which mixes :class:`NvmlHealthReaders` in.

Why ``nvmlDeviceGetFieldValues`` first: one call answers a whole group (every
NVLink of a GPU included, by ``scopeId``), where the dedicated calls take one
per value -- 18 links of an H100 would be 100+ calls a reading. Each entry carries
its own return code, so each field still fails on its own. A driver that does
not know a group's field ids (every entry ``NOT_SUPPORTED``) or lacks the call
gets the dedicated calls instead, and that choice is remembered per GPU.

Why a mixin and not functions: the readers share the backend's plumbing (call
counting, the per-(GPU, call) ``NotSupported`` memory, the lost-GPU handling);
this module must not import ``nvml`` (no import cycles), so it names only what it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ...model import SAMPLE_GROUPS, NvLink, Reason
from ..base import Reading

__all__ = ["NvLinkState", "NvmlHealthReaders", "field_value"]

SCOPE_ALL = 0xFFFFFFFF  # scopeId of the NVLink throughput fields: the sum over every link
_LINKS_WITH_OWN_IDS = 12  # links 0-11 have a field id per error counter; later ones use scopeId fields
_FIELDS_CALL = "nvmlDeviceGetFieldValues"


def field_value(entry: Any, nvml: Any) -> int | None:
    """The integer in an nvmlFieldValue_t, whatever its declared type (None: an unknown type)."""
    kind = entry.valueType
    value = entry.value
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        return int(value.dVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(value.uiVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(value.ulVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(value.ullVal)
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(value.sllVal)
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_INT:
        return int(value.siVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return int(value.usVal)
    return None


class _Field(NamedTuple):
    """One decoded entry of a field-values answer: a value, or why there is none."""

    value: int | None
    reason: Reason | None
    timestamp_us: int  # when the driver sampled it (0: not given)


class _LinkStatic(NamedTuple):
    """What a link connects to: read once per link (see :meth:`NvmlHealthReaders._link_statics`)."""

    version: int | None
    remote: str | None
    final: bool  # False: a transient failure, asked again at the next reading


class _Counter(NamedTuple):
    """A throughput counter as last read: KiB since driver load, at driver and local time."""

    kib: int
    driver_s: float | None  # the entry's own timestamp, seconds (None: the driver gave none)
    local_s: float  # the backend's clock


class NvLinkState:
    """Per-GPU NVLink memory: the link count, the previous counters, each link's static facts.

    Only the thread reading this GPU touches it (one thread per GPU), so no lock.
    """

    __slots__ = ("count", "errors_by_field", "previous", "state_by_field", "statics")

    def __init__(self) -> None:
        self.count: int | None = None  # links the board has (None: not read yet, or unreadable)
        self.previous: dict[tuple[int, str], _Counter] = {}  # (link, "tx"/"rx") -> last counter
        self.statics: dict[int, _LinkStatic] = {}
        self.state_by_field = True  # False: the driver lacks NVML_FI_DEV_NVLINK_GET_STATE (per-link calls)
        self.errors_by_field = True  # False: it lacks the error-counter fields (nvmlDeviceGetNvLinkErrorCounter)


class _GpuLike(Protocol):
    index: int
    nvlink: NvLinkState


class NvmlHealthReaders:
    """The health readers of :class:`~nvtopy.backends.nvml.backend.NvmlBackend` (a mixin: see the module doc)."""

    # Provided by NvmlBackend.
    _nvml: Any
    _unsupported: set[tuple[int, str]]
    _missing: set[str]
    _clock: Callable[[], float]
    _query: Callable[..., tuple[Any, Reason | None]]
    _failed: Callable[..., Reason]
    _reason: Callable[[BaseException], Reason]
    _store: Callable[..., None]  # (reading, name, (value, reason), convert): the value converted, or why not

    # ----------------------------------------------------------------- field values

    def _fields(self, gpu: _GpuLike, key: str, ids: Sequence[int | tuple[int, int]]) -> list[_Field] | Reason:
        """One nvmlDeviceGetFieldValues call, decoded; a Reason when the call itself failed.

        ``ids``: field ids, or (field id, scope id) pairs (the NVLink per-link fields).
        An entry saying GPU_IS_LOST loses the GPU (raises, as any call would).
        """
        if _FIELDS_CALL in self._missing:
            self._unsupported.add((gpu.index, key))
            return Reason.NOT_SUPPORTED
        values, reason = self._query(gpu, key, _FIELDS_CALL, list(ids))
        if reason is not None:
            return reason
        nvml = self._nvml
        decoded: list[_Field] = []
        for entry in values:
            code = int(entry.nvmlReturn)
            if code == nvml.NVML_SUCCESS:
                value = field_value(entry, nvml)
                decoded.append(_Field(value, None if value is not None else Reason.UNKNOWN, int(entry.timestamp)))
                continue
            error = nvml.NVMLError(code)
            if isinstance(error, nvml.NVMLError_GpuIsLost):
                self._failed(gpu, key, _FIELDS_CALL, error)  # raises: nothing else of this GPU can succeed
            decoded.append(_Field(None, self._reason(error), 0))
        return decoded

    def _group_by_fields(
        self, gpu: _GpuLike, reading: Reading, key: str, fields: Mapping[str, tuple[int, Callable[[int], Any]]]
    ) -> bool:
        """Fill ``fields`` (name -> (field id, convert)) from one field-values call.

        Returns False when the caller should use the dedicated calls: the driver lacks
        the call, or knows none of these ids (remembered for this GPU, not asked again).
        """
        if (gpu.index, key) in self._unsupported:
            return False
        result = self._fields(gpu, key, [field_id for field_id, _ in fields.values()])
        if result is Reason.NOT_SUPPORTED:
            return False
        if isinstance(result, Reason):
            for name in fields:
                reading.unavailable[name] = result
            return True
        if all(entry.reason is Reason.NOT_SUPPORTED for entry in result):
            self._unsupported.add((gpu.index, key))
            return False
        for (name, (_, convert)), entry in zip(fields.items(), result, strict=True):
            if entry.reason is not None:
                reading.unavailable[name] = entry.reason
            else:
                reading.values[name] = convert(entry.value)  # type: ignore[arg-type]
        return True

    # ----------------------------------------------------------------- memory health

    def _read_remapped_rows(self, gpu: _GpuLike, reading: Reading) -> None:
        """Row remapping (Ampere and later): NVML_FI_DEV_REMAPPED_* or nvmlDeviceGetRemappedRows."""
        nvml = self._nvml
        fields = {
            "remapped_rows_corrected": (nvml.NVML_FI_DEV_REMAPPED_COR, int),
            "remapped_rows_uncorrected": (nvml.NVML_FI_DEV_REMAPPED_UNC, int),
            "remapped_rows_pending": (nvml.NVML_FI_DEV_REMAPPED_PENDING, bool),
            "remapped_rows_failure": (nvml.NVML_FI_DEV_REMAPPED_FAILURE, bool),
        }
        if self._group_by_fields(gpu, reading, "remapped_fields", fields):
            return
        result = self._query(gpu, "remapped_rows", "nvmlDeviceGetRemappedRows")
        for position, (name, (_, convert)) in enumerate(fields.items()):
            self._store(reading, name, result, lambda rows, p=position, c=convert: c(rows[p]))

    def _read_retired_pages(self, gpu: _GpuLike, reading: Reading) -> None:
        """Page retirement (up to Turing): NVML_FI_DEV_RETIRED_* or the retired-page lists' lengths."""
        nvml = self._nvml
        fields = {
            "retired_pages_sbe": (nvml.NVML_FI_DEV_RETIRED_SBE, int),
            "retired_pages_dbe": (nvml.NVML_FI_DEV_RETIRED_DBE, int),
            "retired_pages_pending": (nvml.NVML_FI_DEV_RETIRED_PENDING, bool),
        }
        if self._group_by_fields(gpu, reading, "retired_fields", fields):
            return
        for name, cause in (
            ("retired_pages_sbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            ("retired_pages_dbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        ):
            self._store(reading, name, self._query(gpu, name, "nvmlDeviceGetRetiredPages", cause), len)
        pending = self._query(gpu, "retired_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
        self._store(reading, "retired_pages_pending", pending, bool)

    # ----------------------------------------------------------------- PCIe link

    def _read_pcie_link(self, gpu: _GpuLike, reading: Reading) -> None:
        """The link now (it trains down at idle on many boards) and its replay counter."""
        self._store(reading, "pcie_link_gen", self._query(gpu, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"), int)
        self._store(reading, "pcie_link_width", self._query(gpu, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"), int)
        fields = {"pcie_replay_counter": (self._nvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, int)}
        if not self._group_by_fields(gpu, reading, "pcie_replay_fields", fields):
            self._store(
                reading, "pcie_replay_counter", self._query(gpu, "pcie_replay", "nvmlDeviceGetPcieReplayCounter"), int
            )

    def _static_pcie_link(self, gpu: _GpuLike) -> dict[str, tuple[Any, Reason | None]]:
        """The best link the GPU *in its slot* can reach: a current link below it is a downgrade.

        nvmlDeviceGetMaxPcieLinkGeneration is "possible with this device and system"
        (a gen-5 GPU in a gen-4 slot: 4), so a slot's limit is not called a fault; the
        GPU-only nvmlDeviceGetGpuMaxPcieLinkGeneration is the fallback. The width has
        only the device-and-system call.
        """
        generation = self._query(gpu, "pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration")
        if generation[1] is Reason.NOT_SUPPORTED:
            generation = self._query(gpu, "pcie_gpu_gen_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
        return {
            "pcie_link_gen_max": generation,
            "pcie_link_width_max": self._query(gpu, "pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
        }

    # ----------------------------------------------------------------- NVLink

    def _nvlink_count(self, gpu: _GpuLike, refresh: bool = False) -> tuple[int | None, Reason | None]:
        """How many NVLinks the board has (NVML_FI_DEV_NVLINK_LINK_COUNT), cached per GPU.

        An entry NOT_SUPPORTED is a board without NVLink (0), not a missing value: a
        PCIe card would otherwise show "N/A" NVLink forever.
        """
        state = gpu.nvlink
        if state.count is not None and not refresh:
            return state.count, None
        result = self._fields(gpu, "nvlink_count", [self._nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        if isinstance(result, Reason):
            return None, result
        entry = result[0]
        if entry.reason is Reason.NOT_SUPPORTED:
            state.count = 0
        elif entry.reason is not None:
            return None, entry.reason
        else:
            state.count = max(0, min(int(entry.value or 0), int(getattr(self._nvml, "NVML_NVLINK_MAX_LINKS", 36))))
        return state.count, None

    def _read_nvlink(self, gpu: _GpuLike, reading: Reading) -> None:
        """Every link's state, throughput and errors in one field-values call; static facts once per link.

        Rates are counter deltas between two readings of this GPU (None on the first);
        the totals are None until every link has a rate, never a partial sum.
        """
        names = SAMPLE_GROUPS["nvlink"]
        count, reason = self._nvlink_count(gpu)
        if reason is not None or count is None:
            for name in names:
                reading.unavailable[name] = reason or Reason.UNKNOWN
            return
        if count == 0:
            # No link: nothing moves over NVLink (0, as dcgm-exporter reports such a board), no per-link row.
            reading.values.update(nvlinks=(), nvlink_rx_bytes_per_s=0, nvlink_tx_bytes_per_s=0)
            return
        nvml = self._nvml
        state = gpu.nvlink
        links = range(count)
        request: list[tuple[int, int]] = []
        meaning: list[tuple[str, int]] = []  # (kind, link) of each entry of the request

        def ask(field_id: int, scope: int, kind: str, link: int) -> None:
            request.append((field_id, scope))
            meaning.append((kind, link))

        for link in links:
            ask(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link, "tx", link)
            ask(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link, "rx", link)
            if state.state_by_field:
                ask(nvml.NVML_FI_DEV_NVLINK_GET_STATE, link, "state", link)
            if state.errors_by_field:
                for field_id, scope in _error_fields(nvml, link):
                    ask(field_id, scope, "error", link)
        result = self._fields(gpu, "nvlink_fields", request)
        if isinstance(result, Reason):
            for name in names:
                reading.unavailable[name] = result
            return

        counters: dict[tuple[int, str], _Field] = {}
        active: dict[int, bool | None] = dict.fromkeys(links)
        states: list[_Field] = []
        errors: dict[int, list[_Field]] = {link: [] for link in links}
        for (kind, link), entry in zip(meaning, result, strict=True):
            if kind in ("tx", "rx"):
                counters[(link, kind)] = entry
            elif kind == "state":
                states.append(entry)
                active[link] = None if entry.value is None else bool(entry.value)
            else:
                errors[link].append(entry)
        if states and all(entry.reason is Reason.NOT_SUPPORTED for entry in states):
            state.state_by_field = False  # a driver before NVML_FI_DEV_NVLINK_GET_STATE: one call per link
        if not state.state_by_field:
            for link in links:
                value, _why = self._query(gpu, f"nvlink_state:{link}", "nvmlDeviceGetNvLinkState", link)
                active[link] = None if value is None else bool(value)
        if state.errors_by_field and all(
            entry.reason is Reason.NOT_SUPPORTED for entries in errors.values() for entry in entries
        ):
            state.errors_by_field = False
        error_totals = {link: _sum_known(errors[link]) for link in links}
        if not state.errors_by_field:
            error_totals = {link: self._link_errors(gpu, link) if active[link] is not False else None for link in links}

        statics = self._link_statics(gpu, links, active)
        now = self._clock()
        rates: dict[tuple[int, str], int | None] = {}
        failures: list[Reason] = []
        for link in links:
            for kind in ("tx", "rx"):
                rate, why = self._rate(state, link, kind, counters[(link, kind)], now)
                rates[(link, kind)] = rate
                if why is not None:
                    failures.append(why)
        reading.values["nvlinks"] = tuple(
            NvLink(
                link=link,
                active=active[link],
                version=statics[link].version,
                rx_bytes_per_s=rates[(link, "rx")],
                tx_bytes_per_s=rates[(link, "tx")],
                errors=error_totals[link],
                remote=statics[link].remote,
            )
            for link in links
        )
        for name, kind in (("nvlink_rx_bytes_per_s", "rx"), ("nvlink_tx_bytes_per_s", "tx")):
            per_link = [rates[(link, kind)] for link in links]
            if all(rate is not None for rate in per_link):
                reading.values[name] = sum(rate for rate in per_link if rate is not None)
            else:
                # The first reading has no rate yet; else the reason a counter could not be read.
                reading.unavailable[name] = next(iter(failures), Reason.NOT_AVAILABLE)

    @staticmethod
    def _rate(state: NvLinkState, link: int, kind: str, entry: _Field, now: float) -> tuple[int | None, Reason | None]:
        """Bytes/s of one counter since the last reading; (None, why) when there is no rate yet."""
        key = (link, kind)
        if entry.reason is not None or entry.value is None:
            state.previous.pop(key, None)
            return None, entry.reason or Reason.UNKNOWN
        current = _Counter(entry.value, entry.timestamp_us / 1e6 if entry.timestamp_us > 0 else None, now)
        previous = state.previous.get(key)
        state.previous[key] = current
        if previous is None:
            return None, None
        if previous.driver_s is not None and current.driver_s is not None:
            seconds = current.driver_s - previous.driver_s
        else:
            seconds = current.local_s - previous.local_s
        delta = current.kib - previous.kib
        if seconds <= 0 or delta < 0:  # the same sample twice, or counters reset (GPU reset): start again
            return None, None
        return int(delta * 1024 / seconds), None

    def _link_errors(self, gpu: _GpuLike, link: int) -> int | None:
        """CRC flit + CRC data + replay + recovery errors of one link, one call each (older drivers)."""
        nvml = self._nvml
        known = []
        for counter in (
            nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            nvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
            nvml.NVML_NVLINK_ERROR_DL_REPLAY,
            nvml.NVML_NVLINK_ERROR_DL_RECOVERY,
        ):
            value, _why = self._query(
                gpu, f"nvlink_error:{link}:{counter}", "nvmlDeviceGetNvLinkErrorCounter", link, counter
            )
            if value is not None:
                known.append(int(value))
        return sum(known) if known else None

    def _link_statics(self, gpu: _GpuLike, links: range, active: dict[int, bool | None]) -> dict[int, _LinkStatic]:
        """Each link's version and remote PCI bus id: read once, when the link is first seen up.

        A down link is not asked (a driver may refuse, and NotSupported would be
        remembered for good); a transient failure is asked again at the next reading.
        """
        statics = gpu.nvlink.statics
        for link in links:
            known = statics.get(link)
            if (known is not None and known.final) or active[link] is False:
                continue
            version, version_why = self._query(gpu, f"nvlink_version:{link}", "nvmlDeviceGetNvLinkVersion", link)
            remote, remote_why = self._query(gpu, f"nvlink_remote:{link}", "nvmlDeviceGetNvLinkRemotePciInfo", link)
            final = all(why in (None, Reason.NOT_SUPPORTED, Reason.NO_PERMISSION) for why in (version_why, remote_why))
            statics[link] = _LinkStatic(
                int(version) if version is not None else None,
                _bus_id(remote) if remote is not None else None,
                final,
            )
        empty = _LinkStatic(None, None, False)
        return {link: statics.get(link, empty) for link in links}


def _error_fields(nvml: Any, link: int) -> list[tuple[int, int]]:
    """The error-counter field ids of one link: CRC flit, CRC data, replay, recovery.

    Links 0-11 have an id per counter; later links (18 on Hopper) only the scopeId
    fields NVML_FI_DEV_NVLINK_ERROR_DL_{CRC,REPLAY,RECOVERY}.
    """
    if link < _LINKS_WITH_OWN_IDS:
        return [
            (getattr(nvml, f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}"), 0)
            for kind in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
        ]
    return [
        (nvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, link),
        (nvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, link),
        (nvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, link),
    ]


def _sum_known(entries: list[_Field]) -> int | None:
    """The sum of the counters that answered; None when none did."""
    known = [entry.value for entry in entries if entry.value is not None]
    return sum(known) if known else None


def _bus_id(info: Any) -> str:
    value = getattr(info, "busId", "")
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
