"""nvtopy against nvidia-smi on real machines: every capture in ../shared/nvidia-smi-captures, field by field.

For each real ``nvidia-smi -q -x`` / ``-q`` capture, ../shared/fake-nvml/capture.py writes a profile (that
machine's GPUs, values, N/A fields and processes, served through the real NVML calls by the fake driver) and
the values a correct monitor must report (``--expected``). ``nvtopy --once --json`` then runs on the fake
driver serving the profile (one subprocess per capture), and every field that the expected JSON has and
nvtopy shows must be equal -- and N/A exactly where nvidia-smi said N/A. Where nvtopy differs on purpose (a
definition that differs from nvidia-smi's), ``EXCEPTIONS`` says which field and why.

Skipped cleanly where ../shared (or a C compiler) is absent, as in a user's clone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nvtopy.model import THROTTLE_REASON_BITS, GpuStatic

from ..builders import run_nvtopy
from ..conftest import FAKE_NVML_SRC, needs_fake_nvml
from ..waiting import exec_shown

CAPTURES = FAKE_NVML_SRC.parent / "nvidia-smi-captures"
needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason="../shared/nvidia-smi-captures is not available")


def _capture_files() -> list[Path]:
    """The captures capture.py reads: XML (-q -x) and text (-q); SOURCES.md and the CSV are not captures of -q."""
    if not CAPTURES.is_dir():
        return []
    return sorted(p for p in CAPTURES.iterdir() if p.suffix in (".xml", ".txt"))


# Where nvtopy's definition differs from nvidia-smi's, on purpose: what -> why. The README's "Agreement with
# nvidia-smi" lists the same. The process name is not compared; the power limit is compared with the enforced one.
EXCEPTIONS: dict[str, str] = {
    "process name": (
        "nvidia-smi's process name is nvmlSystemGetProcessName, which reads /proc of the machine it runs on; "
        "nvtopy shows the same /proc's user and command for the processes it can see, and for a pid this PID "
        "namespace cannot see no command at all ('not visible from this PID namespace') rather than the name "
        "of whatever local process happens to have that number"
    ),
    "power limit": (
        "nvtopy's power limit is the enforced one (nvmlDeviceGetEnforcedPowerLimit, nvidia-smi's 'Enforced Power "
        "Limit', power.limit.enforced), what the GPU is held to; nvidia-smi's 'Power Limit' (power.limit) is the "
        "one requested by software, which the GH200 capture shows at 900 W while 700 W is enforced"
    ),
}
# Live processes standing in for the first captured ones (FAKE_NVML_PROFILE_PIDS): nvtopy must join them with
# this host (user, command) while the other captured pids stay rows of their own.
LIVE_WORKERS = 3


def _load_capture_tool() -> ModuleType:
    """capture.py itself (standard library only), run in-process through its documented command line."""
    spec = importlib.util.spec_from_file_location("fake_nvml_capture", FAKE_NVML_SRC / "capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def capture_tool() -> ModuleType:
    return _load_capture_tool()


def _convert(tool: ModuleType, capture: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The profile and the expected values of one capture (``capture.py CAPTURE -o P --expected E``).

    A capture capture.py cannot represent is skipped with the reason it gives."""
    profile, expected = out / "profile.txt", out / "expected.json"
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = tool.main([str(capture), "-o", str(profile), "--expected", str(expected)])
        except SystemExit as exc:  # argparse or an explicit exit
            status = exc.code
    if status:
        pytest.skip(f"capture.py cannot represent it: {errors.getvalue().strip()[:300]}")
    return profile, json.loads(expected.read_text())


def _nvtopy_json(fake_lib: str, profile: Path, live_pids: list[int]) -> dict[str, Any]:
    """``nvtopy --once --json`` on the fake driver serving the profile (one subprocess)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update(
        LD_LIBRARY_PATH=fake_lib,
        FAKE_NVML_PROFILE=str(profile),
        FAKE_NVML_PROFILE_PIDS=",".join(map(str, live_pids)),
    )
    result = run_nvtopy("--once", "--json", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _mask(names: list[str] | None) -> int | None:
    """nvtopy's reason names as NVML's mask (nvtopy and capture.py spell one bit differently)."""
    if names is None:
        return None
    bits = {name: bit for bit, name in THROTTLE_REASON_BITS}
    return sum(bits.get(name, 0) or int(name, 16) for name in names)


def _pstate(value: int | None) -> str | None:
    return None if value is None else f"P{value}"


def _kib(value: int | None) -> int | None:
    return None if value is None else value * 1024


def expected_fields(gpu: dict[str, Any]) -> dict[str, Any]:
    """What nvidia-smi printed for one GPU, under nvtopy's JSON names and units, for every field nvtopy shows."""
    mem, temp, power, pcie = gpu["memory"], gpu["temperature"], gpu["power"], gpu["pcie"]
    ecc, retired, remapped = gpu["ecc"], gpu["retired_pages"], gpu["remapped_rows"]
    fields: dict[str, Any] = {
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "serial": gpu["serial"],
        "bus_id": gpu["pci_bus_id"],
        "compute_capability": gpu["cuda_compute_capability"],
        "persistence_mode": gpu["persistence_mode"],
        "compute_mode": gpu["compute_mode"],
        "memory_total_bytes": mem["total"],
        "memory_used_bytes": mem["used"],
        "memory_free_bytes": mem["free"],
        "memory_reserved_bytes": mem["reserved"],
        "utilization_gpu_percent": gpu["utilization"]["gpu"],
        "utilization_memory_percent": gpu["utilization"]["memory"],
        "encoder_percent": gpu["utilization"]["encoder"],
        "decoder_percent": gpu["utilization"]["decoder"],
        "temperature_c": temp["gpu"],
        "temperature_slowdown_c": temp["slowdown"],
        "temperature_shutdown_c": temp["shutdown"],
        "fan_percent": gpu["fan"],
        "power_draw_w": power["draw"],
        "power_limit_w": power["enforced_limit"],
        "power_default_limit_w": power["default_limit"],
        "power_min_limit_w": power["min_limit"],
        "power_max_limit_w": power["max_limit"],
        "clock_sm_mhz": gpu["clocks"]["sm"],
        "clock_mem_mhz": gpu["clocks"]["memory"],
        "clock_sm_max_mhz": gpu["max_clocks"]["sm"],
        "clock_mem_max_mhz": gpu["max_clocks"]["memory"],
        "pstate": _pstate(gpu["pstate"]),
        "ecc_mode": ecc["mode_current"],
        "ecc_corrected_volatile": ecc["volatile_corrected"],
        "ecc_uncorrected_volatile": ecc["volatile_uncorrected"],
        "ecc_corrected_aggregate": ecc["aggregate_corrected"],
        "ecc_uncorrected_aggregate": ecc["aggregate_uncorrected"],
        "retired_pages_sbe": retired["single_bit"],
        "retired_pages_dbe": retired["double_bit"],
        "retired_pages_pending": retired["pending"],
        "remapped_rows_corrected": remapped["correctable"],
        "remapped_rows_uncorrected": remapped["uncorrectable"],
        "remapped_rows_pending": remapped["pending"],
        "remapped_rows_failure": remapped["failure"],
        "pcie_link_gen": pcie["gen_current"],
        "pcie_link_width": pcie["width_current"],
        "pcie_link_gen_max": pcie["gen_max"],
        "pcie_link_width_max": pcie["width_max"],
        "pcie_replay_counter": pcie["replay_counter"],
        "pcie_rx_bytes_per_s": _kib(pcie["rx_kb_s"]),
        "pcie_tx_bytes_per_s": _kib(pcie["tx_kb_s"]),
        "throttle_reasons_mask": gpu["clock_event_reasons"]["mask"],
        "mig_mode": gpu["mig"]["mode_current"],
        "mig_mode_pending": gpu["mig"]["mode_pending"],
    }
    for mig in gpu["mig"]["devices"]:
        label = f"mig[{mig['gpu_instance_id']}/{mig['compute_instance_id']}]"
        fields.update(
            {
                f"{label}.uuid": mig["uuid"],
                f"{label}.profile": mig["profile"],
                f"{label}.memory_total_bytes": mig["memory"]["total"],
                f"{label}.memory_used_bytes": mig["memory"]["used"],
                f"{label}.memory_free_bytes": mig["memory"]["free"],
                f"{label}.sm_count": mig["multiprocessor_count"],
                f"{label}.slices": mig["gpu_slices"],
                f"{label}.copy_engines": mig["copy_engine_count"],
                f"{label}.encoders": mig["encoder_count"],
                f"{label}.decoders": mig["decoder_count"],
                f"{label}.jpeg_decoders": mig["jpg_count"],
                f"{label}.ofa": mig["ofa_count"],
                f"{label}.pids": sorted(
                    p["pid"]
                    for p in gpu["processes"]
                    if (p.get("gpu_instance_id"), p.get("compute_instance_id"))
                    == (mig["gpu_instance_id"], mig["compute_instance_id"])
                ),
            }
        )
    fields["processes"] = sorted(
        (p["pid"], p["type"], p["used_memory"], p.get("gpu_instance_id"), p.get("compute_instance_id"))
        for p in gpu["processes"]
    )
    return fields


def shown_fields(gpu: dict[str, Any]) -> dict[str, Any]:
    """The same fields as nvtopy's ``--once --json`` shows them (health readings for the link and memory health)."""
    readings = gpu["health"]["readings"]
    memory, pcie = readings["memory"], readings["pcie"]
    fields: dict[str, Any] = {
        name: gpu[name]
        for name in (
            "name",
            "uuid",
            "serial",
            "bus_id",
            "compute_capability",
            "persistence_mode",
            "compute_mode",
            "memory_total_bytes",
            "memory_used_bytes",
            "memory_free_bytes",
            "memory_reserved_bytes",
            "utilization_gpu_percent",
            "utilization_memory_percent",
            "encoder_percent",
            "decoder_percent",
            "temperature_c",
            "temperature_slowdown_c",
            "temperature_shutdown_c",
            "fan_percent",
            "power_draw_w",
            "power_limit_w",
            "power_default_limit_w",
            "power_min_limit_w",
            "power_max_limit_w",
            "clock_sm_mhz",
            "clock_mem_mhz",
            "clock_sm_max_mhz",
            "clock_mem_max_mhz",
            "pstate",
            "ecc_mode",
            "ecc_corrected_volatile",
            "ecc_uncorrected_volatile",
            "ecc_corrected_aggregate",
            "ecc_uncorrected_aggregate",
            "pcie_rx_bytes_per_s",
            "pcie_tx_bytes_per_s",
            "mig_mode",
            "mig_mode_pending",
        )
    }
    for name in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"):
        fields[name] = memory[name]
    for name in ("remapped_rows_corrected", "remapped_rows_uncorrected", "remapped_rows_pending"):
        fields[name] = memory[name]
    fields["remapped_rows_failure"] = memory["remapped_rows_failure"]
    for name in ("link_gen", "link_width", "link_gen_max", "link_width_max", "replay_counter"):
        fields[f"pcie_{name}"] = pcie[name]
    fields["throttle_reasons_mask"] = _mask(gpu["throttle_reasons"])
    for mig in gpu["mig_devices"]:
        label = f"mig[{mig['gpu_instance_id']}/{mig['compute_instance_id']}]"
        for name in ("uuid", "profile", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "sm_count"):
            fields[f"{label}.{name}"] = mig[name]
        for name in ("slices", "copy_engines", "encoders", "decoders", "jpeg_decoders", "ofa"):
            fields[f"{label}.{name}"] = mig[name]
        fields[f"{label}.pids"] = sorted(mig["pids"])
    fields["processes"] = sorted(
        (p["pid"], p["type"], p["gpu_memory_bytes"], p["gpu_instance_id"], p["compute_instance_id"])
        for p in gpu["processes"]
    )
    return fields


def disagreements(expected: dict[str, Any], shown: dict[str, Any]) -> list[str]:
    """Every field whose shown value differs from what nvidia-smi printed (N/A = None on both sides)."""
    out = []
    for name in sorted(set(expected) | set(shown)):
        want, got = expected.get(name, "<absent>"), shown.get(name, "<absent>")
        if isinstance(want, float) and isinstance(got, float):
            same = abs(want - got) < 5e-4  # watts: to the milliwatt NVML reports
        else:
            same = want == got and type(want) is type(got)
        if not same:
            out.append(f"{name}: nvidia-smi {want!r}, nvtopy {got!r}")
    return out


def unexplained_nulls(gpu: dict[str, Any], shown: dict[str, Any]) -> list[str]:
    """The N/A fields nvtopy shows without saying why (every N/A carries its reason in ``unavailable``)."""
    reasons = gpu["unavailable"]
    names = [name for name, value in shown.items() if value is None and "." not in name]
    missing = [name for name in names if name.removesuffix("_mask") not in reasons]
    for mig in gpu["mig_devices"]:
        label = f"mig[{mig['gpu_instance_id']}/{mig['compute_instance_id']}]"
        missing += [f"{label}.{k}" for k, v in mig.items() if v is None and k not in mig["unavailable"]]
    missing += [
        f"process {p['pid']}.gpu_memory_bytes"
        for p in gpu["processes"]
        if p["gpu_memory_bytes"] is None and "gpu_memory_bytes" not in p["unavailable"]
    ]
    return missing


def _captured_pids() -> set[int]:
    """Every pid any capture names (XML ``<pid>`` and text ``Process ID``)."""
    found: set[int] = set()
    for path in _capture_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for xml_pid, text_pid in re.findall(r"<pid>\s*(\d+)\s*</pid>|Process ID\s*:\s*(\d+)", text):
            found.add(int(xml_pid or text_pid))
    return found


@pytest.fixture(scope="module")
def live_pids():
    """Processes of this host that stand in for the first captured ones.

    None of them has a pid another capture entry keeps: a live sleep that happened to get
    pid 10380 made the T4 capture's own pid 10380 one row with it (seen once in a CI run).
    A colliding sleep is kept alive until the end, so its pid is not handed out again.
    """
    taken = _captured_pids()
    procs: list[subprocess.Popen[bytes]] = []
    standing_in: list[int] = []
    while len(standing_in) < LIVE_WORKERS:
        proc = subprocess.Popen(["sleep", "300"])
        procs.append(proc)
        exec_shown(proc.pid)  # a live row's command is compared with its argv
        if proc.pid not in taken:
            standing_in.append(proc.pid)
    yield standing_in
    for proc in procs:
        proc.kill()
        proc.wait()


def _with_live_pids(expected: dict[str, Any], live: list[int]) -> set[int]:
    """Replace the first captured pids (capture order over all GPUs) as FAKE_NVML_PROFILE_PIDS does; the live ones."""
    used: set[int] = set()
    entries = (p for gpu in expected["gpus"] for p in gpu["processes"] if p["pid"] is not None)
    for proc, pid in zip(entries, live, strict=False):
        proc["pid"] = pid
        used.add(pid)
    return used


@needs_fake_nvml
@needs_captures
@pytest.mark.parametrize("capture", _capture_files(), ids=lambda p: p.name)
def test_capture_agrees_with_nvidia_smi(
    capture: Path, capture_tool: ModuleType, fake_lib: str, live_pids: list[int], tmp_path
) -> None:
    profile, expected = _convert(capture_tool, capture, tmp_path)
    data = _nvtopy_json(fake_lib, profile, live_pids)
    live = _with_live_pids(expected, live_pids)
    assert data["driver_version"] == expected["driver_version"]
    assert data["cuda_driver_version"] == expected["cuda_version"]
    for name in ("driver_version", "cuda_driver_version", "nvml_version"):
        assert (data[name] is None) == (name in data.get("unavailable", {})), (
            f"{name} N/A with its reason, else a value"
        )
    if expected["cuda_version"] is None and "cuda_version" in expected["_errors"]:  # nvidia-smi: "Not Found"
        assert data["unavailable"]["cuda_driver_version"] == "not_available"
    assert len(data["gpus"]) == expected["gpu_count"], "one GPU shown for each GPU in the capture"
    problems, agreed = [], 0
    for want, got in zip(expected["gpus"], data["gpus"], strict=True):
        wanted, shown = expected_fields(want), shown_fields(got)
        agreed += sum(1 for name, value in wanted.items() if value not in (None, []) and shown.get(name) == value)
        problems += [f"GPU {want['index']} {line}" for line in disagreements(wanted, shown)]
        problems += [f"GPU {want['index']} {name}: N/A without a reason" for name in unexplained_nulls(got, shown)]
        for proc in got["processes"]:
            if proc["pid"] in live:  # joined with this host: its user and command, and it may be signalled
                assert proc["command"] == "sleep 300" and proc["user"] and not proc["foreign"], proc
    assert problems == [], "\n".join(problems)
    buses = [g["bus_id"] for g in data["gpus"]]
    short = [GpuStatic(index=g["index"], bus_id=g["bus_id"]).short_bus_id for g in data["gpus"]]
    assert len(set(short)) == len(set(buses)), f"the short bus ids tell the GPUs apart: {short}"
    assert agreed >= 8 * len(expected["gpus"]), "every capture has figures to agree on, not only N/A"


@pytest.mark.parametrize(
    ("bus_id", "short"),
    [
        ("00000000:3B:00.0", "3B:00.0"),
        ("00000008:06:00.0", "0008:06:00.0"),  # GB300: four GPUs on bus 06 of domains 8, 9, 0x18, 0x19
        ("0000F8D6:00:00.0", "F8D6:00:00.0"),  # Azure: every GPU is 00:00.0 of a domain of its own
        ("00012345:01:00.0", "12345:01:00.0"),
    ],
)
def test_short_bus_id_keeps_a_domain_other_than_0(bus_id: str, short: str) -> None:
    from nvtopy.selection import parse_bus_id

    static = GpuStatic(index=0, bus_id=bus_id)
    assert static.short_bus_id == short
    assert parse_bus_id(short) == parse_bus_id(bus_id), "what is shown can be typed back (--gpus)"


def test_a_not_found_cuda_version_is_na_with_its_reason(make_backend) -> None:
    """R430 and older print CUDA Version "Not Found" (the K80 capture): null in JSON, and the top level says why."""
    import pynvml

    from nvtopy.formats.contract import snapshot_to_dict
    from nvtopy.model import Reason
    from nvtopy.sources.collector import Collector

    from ..fake_pynvml import FakeNvml

    fake = FakeNvml(1)
    fake.fail("nvmlSystemGetCudaDriverVersion", pynvml.NVMLError_NotFound)
    backend = make_backend(fake)
    assert backend.host_info().unavailable == {"cuda_driver_version": Reason.NOT_AVAILABLE}
    data = snapshot_to_dict(Collector(backend).collect())
    assert data["cuda_driver_version"] is None and data["unavailable"] == {"cuda_driver_version": "not_available"}
    assert data["driver_version"] == "550.54.15"
