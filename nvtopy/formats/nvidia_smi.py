"""Reading ``nvidia-smi -q -x`` (XML) and ``nvidia-smi -q`` (text) output: what nvidia-smi said, per GPU.

Why nvtopy has its own reader: ``nvtopy doctor --against-nvidia-smi`` compares
nvtopy's figures with nvidia-smi's, and a saved capture is untrusted input from
anywhere. So the text is bounded (:data:`MAX_BYTES`), an XML document with an
internal DTD subset or an ``<!ENTITY`` is refused before parsing (entity
expansion, "billion laughs"; the ``<!DOCTYPE nvidia_smi_log SYSTEM "...">``
line every real capture has is fine: expat never fetches it), and every value
is kept as it was only after conversion to a number, a flag or bounded text.

Both formats become one tree with normalised keys (``fb_memory_usage`` and "FB
Memory Usage" are one key), so one extractor reads both, across the driver
generations the captures show (``power_readings`` / ``gpu_power_readings``,
single/double-bit ECC totals before Ampere, SRAM/DRAM after).

Each GPU's :attr:`SmiGpu.fields` holds only what nvidia-smi printed: ``None``
where it printed ``N/A``, ``[Not Supported]`` or an error text; a field it did
not print at all is absent (nothing to compare). Units are nvtopy's contract
units (W, MHz, °C, %) except memory, which stays in MiB as nvidia-smi prints it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..model import Reason

__all__ = [
    "MAX_BYTES",
    "NA_WORDS",
    "SmiError",
    "SmiGpu",
    "SmiLog",
    "na_reason",
    "normal_bus_id",
    "parse_nvidia_smi",
    "smi_flag",
]

MAX_BYTES = 8 << 20  # 8 MiB: the largest real capture (8 GPUs, every process) is under 0.4 MiB
MAX_GPUS = 1024
_MAX_TEXT = 256  # a value longer than this is no value nvidia-smi prints


class SmiError(ValueError):
    """The text is not nvidia-smi output nvtopy can read; ``str()`` says why in a few words."""


Value = float | str | bool | None


@dataclass(frozen=True, slots=True)
class SmiGpu:
    """One GPU as nvidia-smi printed it: its position, and the fields it printed (``None``: N/A)."""

    position: int
    fields: dict[str, Value] = field(default_factory=dict)

    @property
    def uuid(self) -> str | None:
        value = self.fields.get("uuid")
        return value if isinstance(value, str) else None

    @property
    def bus_id(self) -> str | None:
        value = self.fields.get("bus_id")
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str | None:
        value = self.fields.get("name")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class SmiLog:
    """A whole ``nvidia-smi -q`` report: the machine's versions and its GPUs in nvidia-smi's order."""

    format: str  # "xml" or "text"
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[SmiGpu, ...]


# --------------------------------------------------------------------- one tree for both formats


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


class _Node:
    """A section (children) or a value (text); keys normalised."""

    __slots__ = ("attrs", "children", "key", "raw", "value")

    def __init__(self, raw: str, value: str | None = None, attrs: dict[str, str] | None = None) -> None:
        self.raw = raw
        self.key = _norm(raw)
        self.value = value
        self.children: list[_Node] = []
        self.attrs = attrs or {}

    def child(self, *names: str) -> _Node | None:
        for name in names:
            key = _norm(name)
            for node in self.children:
                if node.key == key:
                    return node
        return None

    def find(self, path: str) -> _Node | None:
        """``"a/b|c"``: each step may list alternatives with ``|``."""
        node: _Node | None = self
        for step in path.split("/"):
            if node is None:
                return None
            node = node.child(*step.split("|"))
        return node

    def get(self, *paths: str) -> str | None:
        """The text of the first path that is a value (``None``: none printed)."""
        for path in paths:
            node = self.find(path)
            if node is not None and not (node.value is None and node.children):
                return node.value if node.value is not None else ""
        return None


_FORBIDDEN = re.compile(rb"<!ENTITY|<!DOCTYPE[^>\[]*\[", re.IGNORECASE)


def _xml_tree(data: bytes) -> _Node:
    if b"\x00" in data:  # UTF-16/32 would hide an <!ENTITY from the check below; nvidia-smi writes UTF-8
        raise SmiError("not UTF-8 XML (it holds NUL bytes)")
    if _FORBIDDEN.search(data):
        raise SmiError("it declares a DTD subset or entities (refused: nvidia-smi never writes one)")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise SmiError(f"not well-formed XML ({exc})") from None
    if _norm(root.tag) != "nvidiasmilog":
        raise SmiError(f"the XML is not an nvidia_smi_log (its root is <{root.tag[:40]}>)")

    def convert(element: ET.Element) -> _Node:
        node = _Node(element.tag, attrs=dict(element.attrib))
        kids = list(element)
        if kids:
            node.children = [convert(kid) for kid in kids]
        else:
            node.value = re.sub(r"\s+", " ", element.text or "").strip()
        return node

    return convert(root)


def _last_text_report(body: str) -> str:
    """The last ``==NVSMI LOG==`` report of a text capture (captures may hold several: idle, then load)."""
    start = body.rfind("==NVSMI LOG==")
    body = body[start + len("==NVSMI LOG==") :]
    end = re.search(r"^#{20,}$", body, re.MULTILINE)
    return body[: end.start()] if end else body


def _text_tree(body: str) -> _Node:
    root = _Node("nvidia_smi_log")
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for line in _last_text_report(body).split("\n"):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        stripped = line.strip()
        value: str | None
        if " : " in stripped:
            key, _, value = stripped.partition(" : ")
            key, value = key.strip(), value.strip()
        elif stripped.endswith(":"):
            key, value = stripped[:-1].strip(), ""
        else:
            key, value = stripped, None
        while stack[-1][0] >= indent:
            stack.pop()
        node = _Node(key, value)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


# --------------------------------------------------------------------- values


NA_WORDS: dict[str, Reason] = {
    "n/a": Reason.NOT_AVAILABLE,
    "not supported": Reason.NOT_SUPPORTED,
    "unknown error": Reason.UNKNOWN,
    "insufficient permissions": Reason.NO_PERMISSION,
    "not found": Reason.NOT_AVAILABLE,
    "gpu is lost": Reason.LOST,
    "requested functionality has been deprecated": Reason.NOT_SUPPORTED,
    "function not found": Reason.NOT_SUPPORTED,
    "none": Reason.NOT_AVAILABLE,
}
"""What nvidia-smi prints, bracketed or not, where it has no value (N/A, or the NVML error), and what it means."""
_NA = re.compile(rf"^\[?({'|'.join(map(re.escape, NA_WORDS))})\]?$", re.IGNORECASE)


def na_reason(raw: str) -> Reason | None:
    """Why nvidia-smi printed no value (``[Not Supported]`` -> not supported); None: ``raw`` is not such a word."""
    match = _NA.match(raw.strip())
    return NA_WORDS[match.group(1).lower()] if match else None


def _text(raw: str | None) -> str | None:
    if raw is None:
        return None
    raw = raw.split("[Deprecated", 1)[0].strip()
    return None if not raw or _NA.match(raw) else raw[:_MAX_TEXT]


def _number(raw: str | None) -> float | None:
    text = _text(raw)
    if text is None:
        return None
    match = re.match(r"^[-+]?\d+(\.\d+)?", text)
    return float(match.group(0)) if match else None


def smi_flag(raw: str | None) -> bool | None:
    text = _text(raw)
    if text is None:
        return None
    word = text.lower()
    if word in ("enabled", "yes", "active", "on", "true"):
        return True
    if word in ("disabled", "no", "not active", "off", "false"):
        return False
    return None


def normal_bus_id(raw: str | None) -> str | None:
    """``00000000:53:00.0``, whatever case or domain width was printed (``0000:53:00.0``)."""
    text = _text(raw)
    match = re.match(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$", text or "")
    if not match:
        return text
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"


def _put(fields: dict[str, Value], key: str, raw: str | None, convert: object = _number) -> None:
    """Store ``convert(raw)`` under ``key``, or nothing when nvidia-smi did not print the field."""
    if raw is not None:
        fields[key] = convert(raw)  # type: ignore[operator]


def _gpu_nodes(root: _Node) -> Iterator[_Node]:
    for node in root.children:
        if node.key == "gpu" or node.raw.startswith("GPU "):
            yield node


def _extract_gpu(position: int, gpu: _Node) -> SmiGpu:
    fields: dict[str, Value] = {}
    put = _put
    put(fields, "name", gpu.get("product_name"), _text)
    put(fields, "uuid", gpu.get("uuid", "gpu_uuid"), _text)
    put(fields, "serial", gpu.get("serial", "serial_number"), _text)
    bus = gpu.get("pci/pci_bus_id|bus_id")
    if bus is None:
        bus = gpu.attrs.get("id") or (gpu.raw.split(" ", 1)[1] if " " in gpu.raw else None)
    put(fields, "bus_id", bus, normal_bus_id)
    put(fields, "persistence_mode", gpu.get("persistence_mode"), smi_flag)
    put(fields, "compute_mode", gpu.get("compute_mode"), _text)
    put(fields, "pstate", gpu.get("performance_state"), _text)
    put(fields, "fan_percent", gpu.get("fan_speed"))
    for key in ("total", "used", "reserved"):
        put(fields, f"memory_{key}_mib", gpu.get(f"fb_memory_usage/{key}"))
    put(fields, "utilization_gpu_percent", gpu.get("utilization/gpu_util|gpu"))
    put(fields, "utilization_memory_percent", gpu.get("utilization/memory_util|memory"))
    put(fields, "encoder_percent", gpu.get("utilization/encoder_util|encoder"))
    put(fields, "decoder_percent", gpu.get("utilization/decoder_util|decoder"))
    put(fields, "temperature_c", gpu.get("temperature/gpu_temp|gpu_current_temp"))
    put(fields, "temperature_slowdown_c", gpu.get("temperature/gpu_temp_slow_threshold|gpu_slowdown_temp"))
    put(fields, "temperature_shutdown_c", gpu.get("temperature/gpu_temp_max_threshold|gpu_shutdown_temp"))
    _extract_power(gpu, fields)
    for key, element in (("sm", "sm_clock|sm"), ("mem", "mem_clock|memory")):
        put(fields, f"clock_{key}_mhz", gpu.get(f"clocks/{element}"))
        put(fields, f"clock_{key}_max_mhz", gpu.get(f"max_clocks/{element}"))
    put(fields, "ecc_mode", gpu.get("ecc_mode/current_ecc|current"), smi_flag)
    _extract_ecc(gpu, fields)
    put(fields, "mig_mode", gpu.get("mig_mode/current_mig|current"), smi_flag)
    put(fields, "mig_mode_pending", gpu.get("mig_mode/pending_mig|pending"), smi_flag)
    return SmiGpu(position, fields)


def _extract_power(gpu: _Node, fields: dict[str, Value]) -> None:
    """Power draw and limits: ``power_readings`` before R535, ``gpu_power_readings`` after (R610: a ceiling block)."""
    readings = gpu.find("gpu_power_readings") or gpu.find("power_readings")
    if readings is None:
        return
    ceiling = readings.find("gpu_ceiling_power_limit") or _Node("none")
    draw = readings.get("power_draw")
    if _number(draw) is None:  # power.draw is the 1-s average where the driver has one, else the instant one
        for other in (readings.get("average_power_draw"), readings.get("instant_power_draw")):
            if _number(other) is not None:
                draw = other
                break
    _put(fields, "power_draw_w", draw)
    enforced = readings.get("enforced_power_limit", "current_power_limit") or ceiling.get("current_power_limit")
    _put(fields, "power_limit_w", enforced)
    _put(fields, "power_default_limit_w", readings.get("default_power_limit") or ceiling.get("default_power_limit"))
    _put(fields, "power_min_limit_w", readings.get("min_power_limit"))
    _put(fields, "power_max_limit_w", readings.get("max_power_limit"))


def _extract_ecc(gpu: _Node, fields: dict[str, Value]) -> None:
    """ECC totals: single/double-bit totals before Ampere, SRAM + DRAM from Ampere on."""
    errors = gpu.find("ecc_errors")
    if errors is None:
        return
    for counter in ("volatile", "aggregate"):
        section = errors.find(counter)
        if section is None:
            continue
        if section.find("single_bit") is not None or section.find("double_bit") is not None:
            corrected = _number(section.get("single_bit/total"))
            uncorrected = _number(section.get("double_bit/total"))
        else:
            sram_unc = section.get("sram_uncorrectable")
            if sram_unc is None:
                parts = [_number(section.get(k)) for k in ("sram_uncorrectable_parity", "sram_uncorrectable_secded")]
                sram_unc_n = _sum(parts)
            else:
                sram_unc_n = _number(sram_unc)
            corrected = _sum([_number(section.get("sram_correctable")), _number(section.get("dram_correctable"))])
            uncorrected = _sum([sram_unc_n, _number(section.get("dram_uncorrectable"))])
        fields[f"ecc_corrected_{counter}"] = corrected
        fields[f"ecc_uncorrected_{counter}"] = uncorrected


def _sum(values: list[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return sum(numbers) if numbers else None


# --------------------------------------------------------------------- the entry point


def parse_nvidia_smi(data: bytes) -> SmiLog:
    """Parse ``nvidia-smi -q -x`` or ``-q`` output (detected from the content); :class:`SmiError` if unreadable."""
    if len(data) > MAX_BYTES:
        raise SmiError(f"larger than {MAX_BYTES >> 20} MiB")
    head = data.lstrip()[:512]
    if head.startswith((b"<", b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf<")):
        root, fmt = _xml_tree(data), "xml"
    else:
        try:
            body = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SmiError("neither XML nor UTF-8 text") from None
        if "==NVSMI LOG==" not in body:
            raise SmiError("not nvidia-smi -q output (no <nvidia_smi_log> nor ==NVSMI LOG==)")
        root, fmt = _text_tree(body), "text"
    nodes = list(_gpu_nodes(root))
    if len(nodes) > MAX_GPUS:
        raise SmiError(f"more than {MAX_GPUS} GPUs")
    gpus = tuple(_extract_gpu(i, node) for i, node in enumerate(nodes))
    return SmiLog(
        format=fmt,
        driver_version=_text(root.get("driver_version", "kmd_version")),
        cuda_version=_text(root.get("cuda_version", "cuda_umd_version")),
        gpus=gpus,
    )
