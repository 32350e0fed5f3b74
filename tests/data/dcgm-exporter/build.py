"""How the golden ``/metrics`` captures here were written (run it to write them again: ``python build.py``).

One machine, ``gpu-node-07``: two H100 80GB HBM3, GPU 1 in MIG mode with two 3g.40gb GPU
instances (GPU_I_ID 1 and 2), as three generations of dcgm-exporter would serve it:

- ``3.3.metrics``: dcgm-exporter 3.3 -- the legacy names and units (MHz, mJ, %, MiB), the
  ``Hostname`` label, the ``DCGM_FI_DRIVER_VERSION`` label row, ``err_code``/``err_msg`` on the
  XID row (3.3.6 on), DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL a counter, no FB_RESERVED row;
- ``4.8.metrics``: dcgm-exporter 4.8.3/4.8.4 -- the legacy names and units, ``hostname``
  (PR #655), FB_RESERVED, NVLINK_BANDWIDTH_TOTAL a gauge;
- ``4.9.metrics``: dcgm-exporter 4.9.0 -- DCGM 4.7's names and units (Hz, J, ratios 0-1,
  bytes), ``hostname``, ``DCGM_FI_SYSTEM_DRIVER_VERSION``, the new default FB_CAPACITY_BYTES.

Written from the documented names, units, types, help texts and label order
(``../shared/docs/dcgm-names.md`` sections 1 and 2: etc/default-counters.csv and
dcp-metrics-included.csv of 4.8.2, the 4.9.0 release text, DCGM's field names), never from
nvtopy's exporter: a reader tested against them is tested against dcgm-exporter, not against
itself. Values as dcgm-exporter renders them (Go's ``%d`` for an int64 field, ``%f`` for a
double), no timestamps. The counter set is the default one plus what a site's CSV commonly
adds (``DCGM_FI_DEV_FB_TOTAL`` before 4.9, where 4.9 made FB_CAPACITY_BYTES a default;
``DCGM_FI_PROF_SM_ACTIVE`` and ``DCGM_FI_PROF_SM_OCCUPANCY``, commented rows of the DCP CSV).
MIG as dcgm-exporter's default "flex" mode has it: a MIG GPU has no whole-GPU series, each of
its GPU instances every field, the instance's own framebuffer and profiling figures and its
GPU's others; utilisation (DCGM_FI_DEV_GPU_UTIL and the like) is blank under MIG and left out.

The 4.9.0 help texts and types are unconfirmed (the docs say why): the texts here say the
unit; the ``*_TOTAL`` series are counters, as DCGM's naming standard has them.

``<generation>.expected.json``: what nvtopy must read of the machine from that capture: the
machine's figures in nvtopy's units (bytes, MHz, mJ, %), written from the same values (the
same for every generation, but for FB_RESERVED, which 3.3's default CSV lacks).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024
HOST = "gpu-node-07"
DRIVER = "570.172.08"
MODEL = "NVIDIA H100 80GB HBM3"

# The machine, in the legacy units: per GPU, then per GPU instance of the MIG GPU.
GPUS = [
    {
        "gpu": "0",
        "UUID": "GPU-9c1f6f5e-2d3b-4a8e-b7f1-0c6a1e52d4a3",
        "pci_bus_id": "00000000:18:00.0",
        "sm_clock": 1980,
        "mem_clock": 2619,
        "memory_temp": 41,
        "gpu_temp": 47,
        "power": 412.537,
        "energy_mj": 8716204113,
        "pcie_replay": 3,
        "gpu_util": 87,
        "mem_copy_util": 41,
        "enc_util": 0,
        "dec_util": 0,
        "xid": 31,
        "fb_free": 33429,
        "fb_used": 47620,
        "fb_reserved": 510,
        "fb_total": 81559,
        "nvlink_bandwidth": 0,
        "vgpu_license": 0,
        "uncorrectable_rows": 0,
        "correctable_rows": 2,
        "row_remap_failure": 0,
        "gr_engine": 0.912345,
        "sm_active": 0.8825,
        "sm_occupancy": 0.3561,
        "tensor": 0.402,
        "dram": 0.517,
        "pcie_tx": 1234567890,
        "pcie_rx": 876543210,
        "instances": [],
    },
    {
        "gpu": "1",
        "UUID": "GPU-4e7a2b19-8c5d-4f06-a3e2-7b91d0c8f512",
        "pci_bus_id": "00000000:2A:00.0",
        "sm_clock": 1755,
        "mem_clock": 2619,
        "memory_temp": 35,
        "gpu_temp": 39,
        "power": 236.104,
        "energy_mj": 5512906270,
        "pcie_replay": 0,
        "xid": 0,
        "nvlink_bandwidth": 0,
        "vgpu_license": 0,
        "uncorrectable_rows": 0,
        "correctable_rows": 0,
        "row_remap_failure": 0,
        "instances": [
            {
                "GPU_I_PROFILE": "3g.40gb",
                "GPU_I_ID": "1",
                "fb_free": 10238,
                "fb_used": 30210,
                "fb_total": 40448,
                "gr_engine": 0.72,
                "sm_active": 0.6921,
                "sm_occupancy": 0.3012,
                "tensor": 0.3344,
                "dram": 0.4102,
            },
            {
                "GPU_I_PROFILE": "3g.40gb",
                "GPU_I_ID": "2",
                "fb_free": 40436,
                "fb_used": 12,
                "fb_total": 40448,
                "gr_engine": 0.0,
                "sm_active": 0.0,
                "sm_occupancy": 0.0,
                "tensor": 0.0,
                "dram": 0.0,
            },
        ],
    },
]


def _int(value: float) -> str:
    return f"{round(value):d}"


def _double(value: float) -> str:
    return f"{value:f}"


# (key, legacy name, legacy help, legacy type, legacy format, 4.9 name, 4.9 help, 4.9 type, 4.9 value from legacy)
ROWS = [
    ("sm_clock", "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge", _int,
     "DCGM_FI_DEV_SM_CLOCK_HERTZ", "SM clock frequency (in Hz).", "gauge", lambda v: _int(v * 1_000_000)),
    ("mem_clock", "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "gauge", _int,
     "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "Memory clock frequency (in Hz).", "gauge", lambda v: _int(v * 1_000_000)),
    ("memory_temp", "DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "gauge", _int,
     "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "Memory temperature (in C).", "gauge", _int),
    ("gpu_temp", "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge", _int,
     "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "GPU temperature (in C).", "gauge", _int),
    ("power", "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge", _double,
     "DCGM_FI_DEV_BOARD_POWER_WATTS", "Board power draw (in W).", "gauge", _double),
    ("energy_mj", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter",
     _int, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "Total energy consumption since the driver was loaded (in J).",
     "counter", lambda v: f"{v // 1000}.{v % 1000:03d}000"),
    ("pcie_replay", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "counter", _int,
     "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "Total number of PCIe retries.", "counter", _int),
    ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", _int,
     "DCGM_FI_DEV_GPU_UTIL_RATIO", "GPU utilization (ratio 0-1).", "gauge", lambda v: _double(v / 100)),
    ("mem_copy_util", "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "gauge", _int,
     "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "Memory utilization (ratio 0-1).", "gauge", lambda v: _double(v / 100)),
    ("enc_util", "DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "gauge", _int,
     "DCGM_FI_DEV_ENC_UTIL_RATIO", "Encoder utilization (ratio 0-1).", "gauge", lambda v: _double(v / 100)),
    ("dec_util", "DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "gauge", _int,
     "DCGM_FI_DEV_DEC_UTIL_RATIO", "Decoder utilization (ratio 0-1).", "gauge", lambda v: _double(v / 100)),
    ("xid", "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge", _int,
     "DCGM_FI_DEV_XID_ERROR", "Value of the last XID error encountered.", "gauge", _int),
    ("fb_free", "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", _int,
     "DCGM_FI_DEV_FB_FREE_BYTES", "Framebuffer memory free (in bytes).", "gauge", lambda v: _int(v * MIB)),
    ("fb_used", "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge", _int,
     "DCGM_FI_DEV_FB_USED_BYTES", "Framebuffer memory used (in bytes).", "gauge", lambda v: _int(v * MIB)),
    ("fb_reserved", "DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", "gauge", _int,
     "DCGM_FI_DEV_FB_RESERVED_BYTES", "Framebuffer memory reserved (in bytes).", "gauge", lambda v: _int(v * MIB)),
    ("fb_total", "DCGM_FI_DEV_FB_TOTAL", "Total framebuffer memory (in MiB).", "gauge", _int,
     "DCGM_FI_DEV_FB_CAPACITY_BYTES", "Total framebuffer memory (in bytes).", "gauge", lambda v: _int(v * MIB)),
    ("nvlink_bandwidth", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
     "Total number of NVLink bandwidth counters for all lanes.", "counter", _int,
     "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "NVLink throughput, all lanes (in bytes per second).",
     "gauge", _int),
    ("vgpu_license", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status", "gauge", _int,
     "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status", "gauge", _int),
    ("uncorrectable_rows", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "Number of remapped rows for uncorrectable errors", "counter", _int,
     "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "Number of remapped rows for uncorrectable errors", "counter",
     _int),
    ("correctable_rows", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
     "counter", _int, "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "Number of remapped rows for correctable errors",
     "counter", _int),
    ("row_remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "gauge", _int,
     "DCGM_FI_DEV_ROW_REMAP_FAILED", "Whether remapping of rows has failed", "gauge", _int),
    ("gr_engine", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gauge", _double,
     "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "Ratio of time the graphics engine is active.", "gauge", _double),
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "gauge",
     _double, "DCGM_FI_PROF_SM_UTIL_RATIO", "The ratio of cycles an SM has at least 1 warp assigned.", "gauge",
     _double),
    ("sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", "gauge",
     _double, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "The ratio of number of warps resident on an SM.", "gauge",
     _double),
    ("tensor", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge",
     _double, "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge",
     _double),
    ("dram", "DCGM_FI_PROF_DRAM_ACTIVE",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "gauge", _double,
     "DCGM_FI_PROF_DRAM_UTIL_RATIO",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "gauge", _double),
    ("pcie_tx", "DCGM_FI_PROF_PCIE_TX_BYTES",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gauge", _int, "DCGM_FI_PROF_PCIE_TX_BYTES",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gauge", _int),
    ("pcie_rx", "DCGM_FI_PROF_PCIE_RX_BYTES",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gauge", _int, "DCGM_FI_PROF_PCIE_RX_BYTES",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
     "in bytes per second.", "gauge", _int),
]  # fmt: skip

# Per generation: the host label, the driver label, rows left out, the NVLink row's type, the XID attributes.
GENERATIONS = {
    "3.3": {"host": "Hostname", "driver": "DCGM_FI_DRIVER_VERSION", "without": {"fb_reserved"}, "new": False},
    "4.8": {"host": "hostname", "driver": "DCGM_FI_DRIVER_VERSION", "without": set(), "new": False},
    "4.9": {"host": "hostname", "driver": "DCGM_FI_SYSTEM_DRIVER_VERSION", "without": set(), "new": True},
}
XID_MESSAGES = {31: "GPU memory page fault"}


def exposition(generation: str) -> str:
    said = GENERATIONS[generation]
    lines = []
    for key, name, help_text, kind, render, new_name, new_help, new_kind, new_render in ROWS:
        if key in said["without"]:
            continue
        if said["new"]:
            name, help_text, kind, render = new_name, new_help, new_kind, new_render
        elif key == "nvlink_bandwidth" and generation != "3.3":
            kind = "gauge"  # from 4.8.3 (dcgm-names.md, note B)
        rows = []
        for gpu in GPUS:
            base = {
                "gpu": gpu["gpu"],
                "UUID": gpu["UUID"],
                "pci_bus_id": gpu["pci_bus_id"],
                "device": f"nvidia{gpu['gpu']}",
                "modelName": MODEL,
            }
            entities = [({}, gpu)] if not gpu["instances"] else [(i, {**gpu, **i}) for i in gpu["instances"]]
            for instance, values in entities:
                if key not in values:
                    continue  # blank under MIG (utilisation), or not this entity's
                labels = {**base}
                if instance:
                    labels["GPU_I_PROFILE"] = instance["GPU_I_PROFILE"]
                    labels["GPU_I_ID"] = instance["GPU_I_ID"]
                labels[said["host"]] = HOST
                labels[said["driver"]] = DRIVER
                if key == "xid" and values["xid"]:
                    labels["err_code"] = str(values["xid"])
                    labels["err_msg"] = XID_MESSAGES[values["xid"]]
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                rows.append(f"{name}{{{text}}} {render(values[key])}")
        if rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows]
    return "\n".join(lines) + "\n"


def expected(generation: str) -> dict[str, object]:
    """What nvtopy reads of the machine from a generation's capture: per GPU, its figures in nvtopy's units (None:
    not said, or not the GPU's own). The same figures for every generation, but for the rows one leaves out."""
    without = GENERATIONS[generation]["without"]
    gpus = []
    for gpu in GPUS:
        mig = bool(gpu["instances"])
        whole = not mig

        def own(key: str, scale: int = 1, gpu: dict[str, object] = gpu, whole: bool = whole) -> object:
            value = gpu.get(key) if key not in without else None
            if not whole or value is None:
                return None
            return round(value * scale, 6) if scale == 100 else value * scale  # type: ignore[operator]

        gpus.append(
            {
                "index": int(gpu["gpu"]),
                "uuid": gpu["UUID"],
                "name": MODEL,
                "bus_id": gpu["pci_bus_id"],
                "memory_total_bytes": own("fb_total", MIB),
                "memory_used_bytes": own("fb_used", MIB),
                "memory_free_bytes": own("fb_free", MIB),
                "memory_reserved_bytes": own("fb_reserved", MIB),
                "utilization_gpu_percent": own("gpu_util"),
                "utilization_memory_percent": own("mem_copy_util"),
                "encoder_percent": own("enc_util"),
                "decoder_percent": own("dec_util"),
                "clock_sm_mhz": gpu["sm_clock"],
                "clock_mem_mhz": gpu["mem_clock"],
                "temperature_c": gpu["gpu_temp"],
                "power_draw_w": gpu["power"],
                "energy_mj": gpu["energy_mj"],
                "last_xid": gpu["xid"] or None,  # 0: none came
                "pcie_replay_counter": gpu["pcie_replay"],
                "remapped_rows_corrected": gpu["correctable_rows"],
                "remapped_rows_uncorrected": gpu["uncorrectable_rows"],
                "remapped_rows_failure": bool(gpu["row_remap_failure"]),
                "graphics_active_percent": own("gr_engine", 100),
                "sm_active_percent": own("sm_active", 100),
                "sm_occupancy_percent": own("sm_occupancy", 100),
                "tensor_active_percent": own("tensor", 100),
                "dram_active_percent": own("dram", 100),
                "gpm_pcie_tx_bytes_per_s": own("pcie_tx"),
                "gpm_pcie_rx_bytes_per_s": own("pcie_rx"),
                "mig_mode": True if mig else None,
                "mig_instances": [
                    {
                        "index": number,
                        "gpu_instance_id": int(i["GPU_I_ID"]),
                        "profile": i["GPU_I_PROFILE"],
                        "memory_total_bytes": i["fb_total"] * MIB,
                        "memory_used_bytes": i["fb_used"] * MIB,
                        "memory_free_bytes": i["fb_free"] * MIB,
                        "graphics_active_percent": round(i["gr_engine"] * 100, 6),
                        "sm_active_percent": round(i["sm_active"] * 100, 6),
                        "sm_occupancy_percent": round(i["sm_occupancy"] * 100, 6),
                        "tensor_active_percent": round(i["tensor"] * 100, 6),
                        "dram_active_percent": round(i["dram"] * 100, 6),
                    }
                    for number, i in enumerate(gpu["instances"])  # type: ignore[arg-type]
                ],
            }
        )
    return {"hostname": HOST, "driver_version": DRIVER, "gpus": gpus}


if __name__ == "__main__":
    for generation in GENERATIONS:
        (HERE / f"{generation}.metrics").write_text(exposition(generation), encoding="utf-8")
        said = json.dumps(expected(generation), indent=1) + "\n"
        (HERE / f"{generation}.expected.json").write_text(said, encoding="utf-8")
