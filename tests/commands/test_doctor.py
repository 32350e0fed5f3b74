"""``nvtopy doctor``: each check over plain facts, the fact readers, the command end to end.

Layers, as the code has them: the checks (``check_*`` in ``nvtopy.commands.doctor``'s
``driver``, ``environment`` and ``gpus``) are pure functions, tested as tables of facts -> status; the readers
(``nvtopy.backends.diagnose``) are tested on files and fakes; the command runs on
the simulation (``--demo``, with its fault specs), against the fake pynvml, and on
the real nvidia-ml-py with ../shared/fake-nvml standing in for the driver.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata
import io
import json
import os
import subprocess
import threading
import time
import types
from pathlib import Path

import pynvml
import pytest

from nvtopy.backends import diagnose
from nvtopy.backends.diagnose import (
    BackendFacts,
    DriverInit,
    GpuFacts,
    HostFacts,
    PythonBindings,
    gather_backend_facts,
    kernel_module_version,
    loaded_library_version,
    parse_proc_mount_options,
    probe_nvml_init,
    python_bindings,
    run_with_timeout,
)
from nvtopy.backends.nvml.backend import NvmlBackend
from nvtopy.backends.simulated.catalog import MODELS
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.commands.doctor import command as doctor
from nvtopy.commands.doctor.checks import diagnose as judge
from nvtopy.commands.doctor.driver import check_driver, check_gpus
from nvtopy.commands.doctor.environment import (
    check_cuda_visible_devices,
    check_pid_namespace,
    check_proc_hidepid,
    check_python_bindings,
)
from nvtopy.commands.doctor.findings import DoctorFinding, Status, exit_code
from nvtopy.commands.doctor.gpus import (
    check_accounting,
    check_memory_health,
    check_mig,
    check_pcie_link,
    check_persistence,
    check_xid_events,
)
from nvtopy.commands.doctor.output import render_json, render_text, use_color
from nvtopy.commands.options import COMMANDS
from nvtopy.model import GpuSample, GpuStatic, HostInfo, Reason
from nvtopy.textsafe import unescape_text

from ..builders import gpu_sample, gpu_static, host_info, mig_instances, run_nvtopy
from ..conftest import FROZEN_TIME, needs_fake_nvml
from ..fake_pynvml import FakeGpu, FakeNvml
from ..package_source import PACKAGE, modules, nodes, reads_the_package

OK, WARN, FAIL, SKIP = Status.OK, Status.WARN, Status.FAIL, Status.SKIP
ORDER = [
    "driver",
    "gpus",
    "persistence-mode",
    "cuda-visible-devices",
    "python-bindings",
    "pid-namespace",
    "proc-hidepid",
    "mig",
    "memory-health",
    "pcie-link",
    "xid-events",
    "accounting",
]
H100, RTX = "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"
GIB = 1 << 30


def gpu(index: int = 0, *, name: str = H100, memory: int = 80 * GIB, accounting: str | None = None, **values):
    """GpuFacts from keyword values: static fields go to the static, the rest to the sample."""
    static_names = set(GpuStatic.__dataclass_fields__) - {"index"}
    static = {k: v for k, v in values.items() if k in static_names}
    sample = {k: v for k, v in values.items() if k not in static_names}
    return GpuFacts(
        static=gpu_static(index, bare=True, name=name, memory_total_bytes=memory, **static),
        sample=gpu_sample(FROZEN_TIME, bare=True, **sample),
        accounting=accounting,
    )


def statuses(findings):
    return [f.status for f in findings]


def node1(**changes) -> HostInfo:
    """The doctor's machine: :func:`host_info` named "node1", with its NVML version."""
    return host_info(**{"hostname": "node1", "nvml_version": "12.550.54.15", **changes})


def nvml_facts(**kwargs) -> BackendFacts:
    facts = BackendFacts(kind="nvml", init=DriverInit(), host=node1(), device_count=1, done=True)
    for key, value in kwargs.items():
        setattr(facts, key, value)
    return facts


# A machine with nothing to say: fixed, so the command's output does not depend on where the tests run.
CLEAN_HOST = HostFacts(
    bindings=PythonBindings(versions={"nvidia-ml-py": "13.615.71"}, ships_module=("nvidia-ml-py",)),
    proc_options={"rw": "", "relatime": ""},
    euid=1000,
    groups=(1000,),
)


# --------------------------------------------------------------------- 1. the driver


@pytest.mark.parametrize(
    ("error", "words", "fix"),
    [
        ("library-not-found", "libnvidia-ml.so.1 is not found", "install the NVIDIA driver"),
        ("driver-not-loaded", "kernel module is not loaded", "modprobe nvidia"),
        ("version-mismatch", "version mismatch", "reboot"),
        ("no-permission", "No permission", "/dev/nvidia*"),
        ("import", "Python bindings", "pip install nvidia-ml-py"),
        ("other", "NVML cannot start", "nvidia-smi"),
    ],
)
def test_driver_init_failures_fail_with_their_fix(error, words, fix):
    finding = check_driver(BackendFacts(kind="nvml", init=DriverInit(error, "Driver Not Loaded")))
    assert finding.status is FAIL and words in finding.title and fix in finding.fix


def test_driver_mismatch_names_both_versions():
    facts = BackendFacts(
        kind="nvml", init=DriverInit("version-mismatch", "RM version mismatch"), kernel_version="550.54.15"
    )
    facts.library_version = "550.90.07"
    finding = check_driver(facts)
    assert finding.status is FAIL
    assert "kernel module 550.54.15" in finding.detail and "library 550.90.07" in finding.detail


@pytest.mark.parametrize(
    ("kernel", "library", "nvml_version", "driver", "status"),
    [
        ("550.54.15", None, "12.550.54.15", "550.54.15", OK),  # all agree
        (None, None, "12.550.54.15", "550.54.15", OK),  # no /proc/driver/nvidia/version: unknown, not wrong
        ("550.54.15", "550.90.07", "12.550.90.07", "550.54.15", FAIL),  # library from another driver
        ("535.104.05", None, "12.550.54.15", "550.54.15", FAIL),  # module not reloaded after an update
        (None, "550.54.15", None, "550.54.15", OK),
        (None, None, None, None, OK),  # nothing to compare
    ],
)
def test_driver_versions_must_agree(kernel, library, nvml_version, driver, status):
    facts = nvml_facts(
        kernel_version=kernel,
        library_version=library,
        host=node1(nvml_version=nvml_version, driver_version=driver),
    )
    finding = check_driver(facts)
    assert finding.status is status, finding
    if status is FAIL:
        assert "mismatch" in finding.title and "reboot" in finding.fix


def test_driver_open_error_and_simulation():
    assert check_driver(nvml_facts(open_error="NVML cannot count GPUs: Unknown Error")).status is FAIL
    simulated = check_driver(BackendFacts(kind="simulated", host=node1(), device_count=4))
    assert simulated.status is OK and "Simulated" in simulated.title


def test_driver_that_did_not_answer():
    facts = BackendFacts(kind="nvml", stage="initialising NVML (nvmlInit)")
    finding = check_driver(facts, finished=False, timeout_s=1)
    assert finding.status is FAIL
    assert finding.title == "The NVIDIA driver did not answer within 1 s"
    assert "nvmlInit" in finding.detail and "dmesg" in finding.fix


@pytest.mark.parametrize(
    ("count", "gpus", "expected"),
    [
        (None, [], [SKIP]),
        (0, [], [WARN]),
        (2, [gpu(0), gpu(1)], [OK]),
        (2, [gpu(0), gpu(1, lost=True)], [FAIL]),
        (
            2,
            [
                gpu(0),
                GpuFacts(
                    GpuStatic(index=1, unavailable={"uuid": Reason.NO_PERMISSION, "name": Reason.NO_PERMISSION}),
                    GpuSample(timestamp=0.0),
                ),
            ],
            [WARN],
        ),
    ],
)
def test_gpus_present_and_answering(count, gpus, expected):
    facts = nvml_facts(device_count=count, gpus=gpus)
    assert statuses(check_gpus(facts)) == expected


# --------------------------------------------------------------------- 2. persistence mode


@pytest.mark.parametrize(
    ("modes", "status", "named"),
    [
        ((True, True), OK, ()),
        ((True, False), WARN, (1,)),
        ((False, False), WARN, (0, 1)),
        ((None, None), SKIP, ()),
        ((None, True), OK, ()),
    ],
)
def test_persistence_mode(modes, status, named):
    finding = check_persistence([gpu(i, persistence_mode=mode) for i, mode in enumerate(modes)])
    assert finding.status is status
    if status is WARN:
        assert finding.gpus == named and "nvidia-smi -pm 1" in finding.fix and "persistenced" in finding.fix


# --------------------------------------------------------------------- 3. CUDA_VISIBLE_DEVICES


def statics(*names_and_memory):
    return [
        gpu_static(i, bare=True, name=n, memory_total_bytes=m, uuid=f"GPU-{i}aaa")
        for i, (n, m) in enumerate(names_and_memory)
    ]


SAME = statics((H100, 80 * GIB), (H100, 80 * GIB))
MIXED = statics((H100, 80 * GIB), (RTX, 24 * GIB))
MIXED_MEMORY = statics(("NVIDIA A100", 80 * GIB), ("NVIDIA A100", 40 * GIB))


@pytest.mark.parametrize(
    ("value", "order", "gpus", "status"),
    [
        (None, None, SAME, OK),
        (None, None, MIXED, OK),  # every GPU: nothing selected by index (the finding advises the order)
        ("", None, SAME, WARN),  # set but empty: no GPU at all
        ("0,1", None, SAME, OK),  # alike: CUDA's order is the bus order
        ("1", None, MIXED, WARN),  # the case: by index, mixed, FASTEST_FIRST
        ("1", "FASTEST_FIRST", MIXED, WARN),
        ("1", "PCI_BUS_ID", MIXED, OK),
        ("1", " pci_bus_id ", MIXED, OK),
        ("0", None, MIXED_MEMORY, WARN),  # same name, different memory: differ too
        ("GPU-1aaa", None, MIXED, OK),  # by UUID: order does not matter
        ("1", None, None, SKIP),  # the driver did not say which GPUs there are
        ("0,0", None, SAME, WARN),  # a device twice: CUDA exposes none
        ("0,7", "PCI_BUS_ID", SAME, WARN),  # cut short at the first invalid entry
        ("7", None, SAME, WARN),  # no such GPU: nothing visible
    ],
)
def test_cuda_visible_devices(value, order, gpus, status):
    finding = check_cuda_visible_devices(value, order, gpus)
    assert finding.status is status, finding
    if value == "1" and status is WARN:
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in finding.fix and RTX in finding.detail


def test_cuda_visible_devices_unset_on_mixed_gpus_advises_the_order():
    finding = check_cuda_visible_devices(None, None, MIXED)
    assert finding.status is OK and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in finding.fix


# --------------------------------------------------------------------- 4. Python bindings


@pytest.mark.parametrize(
    ("bindings", "status"),
    [
        (PythonBindings({"nvidia-ml-py": "13.615.71"}, ("nvidia-ml-py",), "nvidia-ml-py", "/x/pynvml.py"), OK),
        (  # both, and the old pynvml's package is what Python imports: the shadowing
            PythonBindings(
                {"nvidia-ml-py": "13.615.71", "pynvml": "11.5.0"},
                ("nvidia-ml-py", "pynvml"),
                "pynvml",
                "/x/pynvml/__init__.py",
            ),
            FAIL,
        ),
        (  # both ship the module, NVIDIA's is in place (for now)
            PythonBindings(
                {"nvidia-ml-py": "13.615.71", "pynvml": "11.5.0"},
                ("nvidia-ml-py", "pynvml"),
                "nvidia-ml-py",
                "/x/pynvml.py",
            ),
            WARN,
        ),
        (  # the new utils-only pynvml beside nvidia-ml-py: deprecated, harmless
            PythonBindings(
                {"nvidia-ml-py": "13.615.71", "pynvml": "13.0.1"}, ("nvidia-ml-py",), "nvidia-ml-py", "/x/pynvml.py"
            ),
            WARN,
        ),
        (PythonBindings({"pynvml": "11.5.0"}, ("pynvml",), "pynvml", "/x/pynvml/__init__.py"), WARN),
        (PythonBindings({"pynvml": "13.0.1"}, (), None, None), FAIL),
        (PythonBindings({}, (), None, None), FAIL),
        (PythonBindings({}, (), None, "/somewhere/pynvml.py"), WARN),
    ],
)
def test_python_bindings(bindings, status):
    finding = check_python_bindings(bindings)
    assert finding.status is status, finding
    if len(bindings.versions) == 2:
        assert finding.fix == "pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"


class _Hash:
    def __init__(self, value: str) -> None:
        self.mode, self.value = "sha256", value


class _Entry(str):
    """A RECORD entry: a path with a hash, as importlib.metadata gives it."""

    hash: _Hash | None = None


def _dist(root: Path, version: str, files: dict[str, bytes | None]):
    entries = []
    for name, data in files.items():
        entry = _Entry(name)
        if data is not None:
            entry.hash = _Hash(base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode())
        entries.append(entry)
    return types.SimpleNamespace(version=version, files=entries, locate_file=lambda entry: root / str(entry))


def _reader(dists):
    def distribution(name):
        if name not in dists:
            raise importlib.metadata.PackageNotFoundError(name)
        return dists[name]

    return distribution


def test_python_bindings_reads_who_owns_the_imported_file(tmp_path):
    official = b"# NVIDIA's pynvml.py\n"
    old = b"# pynvml 11.5 package\n"
    (tmp_path / "pynvml.py").write_bytes(official)
    (tmp_path / "pynvml").mkdir()
    (tmp_path / "pynvml" / "__init__.py").write_bytes(old)
    dists = {
        "nvidia-ml-py": _dist(tmp_path, "13.615.71", {"pynvml.py": official}),
        "pynvml": _dist(tmp_path, "11.5.0", {"pynvml/__init__.py": old, "pynvml/nvml.py": None}),
    }
    package = types.SimpleNamespace(origin=str(tmp_path / "pynvml" / "__init__.py"))
    found = python_bindings(_reader(dists), lambda name: package)
    assert found.provider == "pynvml" and set(found.ships_module) == {"nvidia-ml-py", "pynvml"}
    assert check_python_bindings(found).status is FAIL
    module = types.SimpleNamespace(origin=str(tmp_path / "pynvml.py"))
    assert python_bindings(_reader(dists), lambda name: module).provider == "nvidia-ml-py"


def test_python_bindings_same_file_from_both_is_told_apart_by_its_hash(tmp_path):
    official, old = b"official\n", b"old copy\n"
    dists = {
        "nvidia-ml-py": _dist(tmp_path, "13.615.71", {"pynvml.py": official}),
        "pynvml": _dist(tmp_path, "11.4.1", {"pynvml.py": old}),
    }
    spec = types.SimpleNamespace(origin=str(tmp_path / "pynvml.py"))
    (tmp_path / "pynvml.py").write_bytes(old)  # pynvml was installed last: its copy is on disk
    assert python_bindings(_reader(dists), lambda name: spec).provider == "pynvml"
    (tmp_path / "pynvml.py").write_bytes(official)
    assert python_bindings(_reader(dists), lambda name: spec).provider == "nvidia-ml-py"


def test_python_bindings_of_this_environment():
    found = python_bindings()
    assert "nvidia-ml-py" in found.versions and found.provider == "nvidia-ml-py"
    assert Path(found.module_path).resolve() == Path(pynvml.__file__).resolve()


# --------------------------------------------------------------------- 5. PID namespace, 6. hidepid


@pytest.mark.parametrize(
    ("foreign", "container", "status", "words"),
    [
        (True, "docker", WARN, "--pid=host"),
        (True, None, WARN, "hostPID"),
        (False, "kubernetes", OK, None),
        (False, None, OK, None),
    ],
)
def test_pid_namespace(foreign, container, status, words):
    finding = check_pid_namespace(foreign, container)
    assert finding.status is status
    assert words is None or words in finding.fix


@pytest.mark.parametrize(
    ("options", "euid", "groups", "status"),
    [
        (None, 1000, (), SKIP),
        ({"rw": ""}, 1000, (), OK),
        ({"hidepid": "0"}, 1000, (), OK),
        ({"hidepid": "off"}, 1000, (), OK),
        ({"hidepid": "2"}, 1000, (1000,), WARN),
        ({"hidepid": "invisible"}, 1000, (), WARN),
        ({"hidepid": "1"}, 0, (), OK),  # root sees every process
        ({"hidepid": "2", "gid": "27"}, 1000, (27, 1000), OK),  # the exempt group
        ({"hidepid": "2", "gid": "27"}, 1000, (1000,), WARN),
    ],
)
def test_proc_hidepid(options, euid, groups, status):
    assert check_proc_hidepid(options, euid, groups).status is status


MOUNTINFO = """\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 30 0:24 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw,hidepid=invisible,gid=27
31 26 0:29 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw,fd=29
"""


def test_parse_proc_mount_options():
    options = parse_proc_mount_options(MOUNTINFO)
    assert options["hidepid"] == "invisible" and options["gid"] == "27" and "noexec" in options
    assert parse_proc_mount_options("22 27 0:21 / /proc rw,relatime - proc proc rw\n") == {"rw": "", "relatime": ""}
    mounts = "proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=2 0 0\n"
    assert parse_proc_mount_options(None, mounts)["hidepid"] == "2"
    assert parse_proc_mount_options("", "") is None
    # A second proc mounted over the first: the last one is what /proc shows.
    stacked = MOUNTINFO + "40 26 0:40 / /proc rw,relatime - proc proc rw\n"
    assert "hidepid" not in parse_proc_mount_options(stacked)


def test_host_facts_of_this_machine_are_read_without_error():
    facts = diagnose.host_facts({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert facts.cuda_visible_devices == "0" and facts.cuda_device_order == "PCI_BUS_ID"
    assert facts.proc_options is not None and facts.euid == os.geteuid()


# --------------------------------------------------------------------- 7. MIG, 8. memory, 9. PCIe


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ([gpu(0), gpu(1, mig_mode=False)], [OK]),
        ([gpu(0, mig_mode=True, mig_instances=mig_instances("MIG-a", "MIG-b"))], [OK]),
        (
            [
                gpu(0, mig_mode=True),
                gpu(
                    1,
                    mig_mode=True,
                    mig_instances=mig_instances(
                        "MIG-a",
                    ),
                ),
            ],
            [FAIL],
        ),
        ([gpu(0, mig_mode=True), gpu(1, mig_mode=True)], [FAIL, FAIL]),
    ],
)
def test_mig_without_instances(gpus, expected):
    findings = check_mig(gpus)
    assert statuses(findings) == expected
    for finding in findings:
        if finding.status is FAIL:
            assert "-cgi" in finding.fix and "-mig 0" in finding.fix


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, [SKIP]),  # not reported (neither Ampere+ nor ECC pages)
        ({"remapped_rows_pending": False, "remapped_rows_failure": False}, [OK]),
        ({"remapped_rows_pending": True, "remapped_rows_failure": False}, [WARN]),
        ({"remapped_rows_pending": False, "remapped_rows_failure": True}, [FAIL]),
        ({"remapped_rows_pending": True, "remapped_rows_failure": True}, [FAIL, WARN]),
        ({"retired_pages_pending": True}, [WARN]),
        ({"retired_pages_sbe": 60, "retired_pages_dbe": 4, "retired_pages_pending": False}, [FAIL]),
    ],
)
def test_memory_health(values, expected):
    findings = check_memory_health([gpu(3, **values)])
    assert statuses(findings) == expected
    assert all(f.gpus == (3,) for f in findings if f.status is not OK and f.status is not SKIP)
    if WARN in expected:
        assert any("nvidia-smi -r -i 3" in (f.fix or "") for f in findings)


PCIE = {"pcie_link_gen_max": 5, "pcie_link_width_max": 16}


@pytest.mark.parametrize(
    ("values", "status", "words"),
    [
        ({}, SKIP, None),
        ({**PCIE, "pcie_link_gen": 5, "pcie_link_width": 16, "utilization_gpu_percent": 90}, OK, "maximum"),
        ({**PCIE, "pcie_link_gen": 5, "pcie_link_width": 8, "utilization_gpu_percent": 0}, WARN, "x8"),  # width: always
        ({**PCIE, "pcie_link_gen": 3, "pcie_link_width": 16, "utilization_gpu_percent": 80}, WARN, "busy at 80 %"),
        ({**PCIE, "pcie_link_gen": 1, "pcie_link_width": 16, "utilization_gpu_percent": 2}, OK, "normal"),  # idle
        ({**PCIE, "pcie_link_gen": 1, "pcie_link_width": 16}, OK, "load unknown"),  # MIG: no utilisation
        ({**PCIE, "pcie_link_gen": 3, "pcie_link_width": 16, "utilization_gpu_percent": 10}, WARN, None),  # threshold
        ({**PCIE, "pcie_link_gen": 3, "pcie_link_width": 16, "utilization_gpu_percent": 9}, OK, "idle"),
    ],
)
def test_pcie_link(values, status, words):
    (finding,) = check_pcie_link([gpu(2, **values)])
    assert finding.status is status, finding
    assert words is None or words in f"{finding.title} {finding.detail}"


# --------------------------------------------------------------------- 10. events and accounting


@pytest.mark.parametrize(
    ("notes", "count", "status", "gpus"),
    [
        (None, 4, SKIP, ()),
        ({}, 0, SKIP, ()),
        ({}, 4, OK, ()),
        ({None: "Xid events not supported by this driver"}, 4, WARN, ()),
        ({1: "Xid events not supported on this GPU", 3: "no permission"}, 4, WARN, (1, 3)),
    ],
)
def test_xid_events(notes, count, status, gpus):
    finding = check_xid_events(notes, count)
    assert finding.status is status and finding.gpus == gpus
    if status is WARN:
        assert "dmesg" in finding.fix


@pytest.mark.parametrize(
    ("states", "foreign", "status"),
    [
        ((None, None), False, SKIP),
        (("enabled", "enabled"), False, OK),
        (("disabled", "disabled"), False, OK),  # the default: advice, not a warning
        (("disabled", "enabled"), True, WARN),  # in a container nvtopy needs it to map pids
        (("no_permission", "enabled"), False, WARN),
        (("not_supported", "not_supported"), False, SKIP),
    ],
)
def test_accounting(states, foreign, status):
    finding = check_accounting([gpu(i, accounting=s) for i, s in enumerate(states)], foreign)
    assert finding.status is status, finding
    if "disabled" in states:
        assert "nvidia-smi -am 1" in finding.fix


def test_exit_code_is_one_only_for_a_fail():
    assert exit_code([DoctorFinding("a", OK, "t"), DoctorFinding("b", WARN, "t"), DoctorFinding("c", SKIP, "t")]) == 0
    assert exit_code([DoctorFinding("a", OK, "t"), DoctorFinding("b", FAIL, "t")]) == 1
    assert exit_code([]) == 0


# --------------------------------------------------------------------- the fact readers


PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version: gcc\n"
)
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16)\n"


@pytest.mark.parametrize(("text", "version"), [(PROPRIETARY, "550.54.15"), (OPEN, "560.35.03"), ("garbage\n", None)])
def test_kernel_module_version(tmp_path, text, version):
    path = tmp_path / "version"
    path.write_text(text)
    assert kernel_module_version(str(path)) == version
    assert kernel_module_version(str(tmp_path / "absent")) is None


def test_loaded_library_version(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15\n"
    )
    assert loaded_library_version(str(maps)) == "550.54.15"
    maps.write_text("7f02-7f03 r-xp 00000000 08:01 2 /tmp/fake/libnvidia-ml.so.1\n")
    assert loaded_library_version(str(maps)) is None  # fake-nvml's file: no version in its name


def _nvml_raising(error: BaseException | None):
    def init():
        if error is not None:
            raise error

    return types.SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVMLError_LibraryNotFound=pynvml.NVMLError_LibraryNotFound,
        NVMLError_DriverNotLoaded=pynvml.NVMLError_DriverNotLoaded,
        NVMLError_LibRmVersionMismatch=pynvml.NVMLError_LibRmVersionMismatch,
        NVMLError_NoPermission=pynvml.NVMLError_NoPermission,
        nvmlInit=init,
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (None, None),
        (pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "library-not-found"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "driver-not-loaded"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH), "version-mismatch"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), "no-permission"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN), "other"),
        (OSError("bad ELF header"), "library-not-found"),
    ],
)
def test_probe_nvml_init_tells_the_failures_apart(error, kind):
    assert probe_nvml_init(_nvml_raising(error)).error == kind


def test_run_with_timeout():
    assert run_with_timeout(lambda: None, 1.0) is True
    release = threading.Event()
    start = time.monotonic()
    assert run_with_timeout(lambda: release.wait(30), 0.2) is False  # a hanging call: abandoned
    assert time.monotonic() - start < 2
    release.set()
    with pytest.raises(ZeroDivisionError):
        run_with_timeout(lambda: 1 / 0, 1.0)  # a bug in the gathering is raised, not hidden


def test_gather_on_the_simulation(sim):
    facts = BackendFacts(kind="simulated", waiting_for="the simulated driver")
    backend = sim(gpus=2, faults=parse_fault_specs(["remapped=0/3/1/0@1"], 2))
    gather_backend_facts(facts, lambda: backend)
    assert facts.done and facts.stage == "done" and facts.device_count == 2
    assert [g.static.index for g in facts.gpus] == [0, 1]
    assert facts.gpus[1].sample.remapped_rows_pending is True and facts.gpus[0].sample.remapped_rows_pending is False
    assert facts.gpus[0].sample.persistence_mode is True and facts.event_notes == {}
    assert facts.gpus[0].unread == ()


def test_gather_keeps_the_groups_a_backend_can_read(sim):
    backend = sim(gpus=1)
    read_sample = backend.read_sample

    def without_pcie(index, groups):
        if "pcie_link" in groups:
            raise KeyError("pcie_link")  # an older backend: no reader for the group
        return read_sample(index, groups)

    backend.read_sample = without_pcie
    facts = gather_backend_facts(BackendFacts(kind="simulated"), lambda: backend)
    (only,) = facts.gpus
    assert only.unread == ("pcie_link",) and only.sample.persistence_mode is True
    assert check_pcie_link(facts.gpus)[0].status is SKIP


def test_gather_on_nvml_asks_accounting_and_balances_init(clock):
    fake = FakeNvml([FakeGpu(0), FakeGpu(1)])
    modes = {0: 1, 1: 0}
    fake.nvmlDeviceGetAccountingMode = lambda handle: modes[handle.index]
    facts = BackendFacts(kind="nvml")
    gather_backend_facts(
        facts, lambda: NvmlBackend(nvml=fake, clock=clock, foreign_pids=False, close_at_exit=False), nvml=fake
    )
    assert facts.init == DriverInit() and facts.device_count == 2
    assert [g.accounting for g in facts.gpus] == ["enabled", "disabled"]
    assert fake.init_count == 0, "doctor's own nvmlInit and the backend's are both shut down"
    assert facts.gpus[0].sample.pcie_link_width == 16 and facts.gpus[0].static.pcie_link_width_max == 16


@pytest.mark.parametrize(
    ("error", "state"),
    [
        (pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), "no_permission"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED), "not_supported"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), "lost"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN), "unknown"),
    ],
)
def test_gather_on_nvml_accounting_errors(clock, error, state):
    fake = FakeNvml(1)

    def refuse(handle):
        raise error

    fake.nvmlDeviceGetAccountingMode = refuse
    facts = gather_backend_facts(
        BackendFacts(kind="nvml"),
        lambda: NvmlBackend(nvml=fake, clock=clock, foreign_pids=False, close_at_exit=False),
        nvml=fake,
    )
    assert facts.gpus[0].accounting == state


def test_gather_on_nvml_stops_at_a_failed_init():
    opened = []
    facts = gather_backend_facts(
        BackendFacts(kind="nvml"),
        lambda: opened.append(1),
        nvml=_nvml_raising(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)),
    )
    assert facts.init.error == "driver-not-loaded" and facts.done and opened == []


def test_gather_without_bindings():
    def missing():
        from nvtopy.errors import BackendUnavailableError

        raise BackendUnavailableError("cannot import pynvml (No module named 'pynvml')")

    facts = gather_backend_facts(BackendFacts(kind="nvml"), lambda: None, nvml_loader=missing)
    assert facts.init.error == "import"
    finding = check_driver(facts)
    assert finding.status is FAIL and "pip install nvidia-ml-py" in finding.fix


# --------------------------------------------------------------------- the command on the simulation


def run_doctor(*argv: str, host: HostFacts = CLEAN_HOST, gather=None, env=None, monkeypatch=None, capsys=None):
    """Run the command through its own parser and ``run`` (as dispatch does); returns (exit code, stdout)."""
    parser = doctor.build_parser("doctor")
    args = parser.parse_args(list(argv))
    code = doctor.run("doctor", args, host=host, gather=gather)
    return code, capsys.readouterr().out if capsys is not None else ""


def doctor_json(capsys, *argv: str, host: HostFacts = CLEAN_HOST, gather=None) -> tuple[int, dict]:
    code, out = run_doctor("--json", *argv, host=host, gather=gather, capsys=capsys)
    data = json.loads(out)
    assert data["exit_code"] == code
    return code, data


def findings_of(data: dict, key: str) -> list[dict]:
    return [f for f in data["findings"] if f["id"] == key]


def test_demo_is_healthy_and_exits_zero(capsys):
    code, out = run_doctor("--demo", capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("nvtopy doctor  demo-node  driver 550.54.15  4 GPUs  [simulated]")
    ids = [line.split()[1] for line in lines[2:] if line[:4].strip() in ("OK", "WARN", "FAIL", "SKIP")]
    assert ids == ORDER
    assert "\x1b" not in out, "no colour in a pipe"
    assert lines[-1].startswith("OK: 0 fail, 0 warn")


def test_demo_json_is_valid_and_complete(capsys):
    code, data = doctor_json(capsys, "--demo")
    assert code == 0 and data["backend"] == "simulated" and data["gpu_count"] == 4
    assert data["status"] == "ok" and data["hostname"] == "demo-node" and data["driver_version"] == "550.54.15"
    assert [f["id"] for f in data["findings"]] == ORDER
    for finding in data["findings"]:
        assert set(finding) == {"id", "status", "title", "detail", "fix", "gpus"}
        assert finding["status"] in ("ok", "warn", "fail", "skip") and finding["title"]
    assert sum(data["counts"].values()) == len(data["findings"])
    assert data["counts"]["ok"] == sum(f["status"] == "ok" for f in data["findings"])


def test_demo_persistence_off_is_a_warning_not_a_failure(capsys):
    code, data = doctor_json(capsys, "--demo", "--demo-model", "RTX 4090", "--demo-gpus", "2")
    assert code == 0 and data["status"] == "warn"
    (finding,) = findings_of(data, "persistence-mode")
    assert finding["status"] == "warn" and finding["gpus"] == [0, 1]


def require_faults(*specs: str) -> list[str]:
    """``--demo-fault`` arguments; the simulation must know every spec (a spec it lost is a failure, never a skip)."""
    parse_fault_specs(specs, 4)  # raises UsageError, failing the test, where a spec is unknown
    return [arg for spec in specs for arg in ("--demo-fault", spec)]


def test_demo_remapped_rows(capsys):
    faults = require_faults("remapped=0/3/1/0@2", "remapped=0/8/0/1@1")
    code, data = doctor_json(capsys, "--demo", *faults)
    assert code == 1 and data["status"] == "fail"
    by_gpu = {tuple(f["gpus"]): f["status"] for f in findings_of(data, "memory-health")}
    assert by_gpu == {(1,): "fail", (2,): "warn"}


def test_demo_pcie_downgrade_width_and_busy_generation(capsys):
    faults = require_faults("pcie-downgrade=5/8@1", "pcie-downgrade=3/16@2", "stuck@2")
    code, data = doctor_json(capsys, "--demo", "--demo-steady", *faults)
    found = {tuple(f["gpus"]): f for f in findings_of(data, "pcie-link")}
    assert found[(1,)]["status"] == "warn" and "x8" in found[(1,)]["title"]  # width: whatever the load
    assert found[(2,)]["status"] == "warn" and "busy" in found[(2,)]["detail"]  # stuck: 100 % busy
    assert code == 0


def test_demo_pcie_generation_at_idle_is_said_to_be_normal(capsys):
    faults = require_faults("pcie-downgrade=1/16")
    _, data = doctor_json(capsys, "--demo", "--demo-procs", "0", *faults)  # no process: every GPU idle
    findings = findings_of(data, "pcie-link")
    assert {f["status"] for f in findings} == {"ok"} and len(findings) == 4
    assert all("normal" in f["detail"] for f in findings)


def test_demo_events_unsupported(capsys):
    faults = require_faults("events-unsupported@0,3")
    code, data = doctor_json(capsys, "--demo", *faults)
    (finding,) = findings_of(data, "xid-events")
    assert code == 0 and finding["status"] == "warn" and finding["gpus"] == [0, 3]


def test_demo_foreign_pids_need_the_host_pid_namespace(capsys):
    code, data = doctor_json(capsys, "--demo", "--demo-fault", "foreign")
    (finding,) = findings_of(data, "pid-namespace")
    assert code == 0 and finding["status"] == "warn" and "--pid=host" in finding["fix"]


def test_demo_lost_gpu_fails(capsys):
    code, data = doctor_json(capsys, "--demo", "--demo-fault", "lost@2")
    (finding,) = findings_of(data, "gpus")
    assert code == 1 and finding["status"] == "fail" and finding["gpus"] == [2]


def test_gpus_option_restricts_the_gpu_checks(capsys):
    faults = require_faults("remapped=0/3/1/0@2")
    _, data = doctor_json(capsys, "--demo", "--gpus", "1", *faults)
    assert findings_of(data, "memory-health")[0]["status"] == "ok"
    _, data = doctor_json(capsys, "--demo", "--gpus", "2", *faults)
    assert findings_of(data, "memory-health")[0]["gpus"] == [2]


def test_cuda_visible_devices_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    _, data = doctor_json(capsys, "--demo", host=diagnose.host_facts())
    assert findings_of(data, "cuda-visible-devices")[0]["status"] == "warn"


# --------------------------------------------------------------------- a driver that does not answer


def test_a_hanging_gather_is_a_fail_within_the_timeout(capsys):
    release = threading.Event()

    def hang(facts, opener):
        facts.stage = "initialising NVML (nvmlInit)"
        release.wait(60)

    start = time.monotonic()
    code, data = doctor_json(capsys, "--timeout", "0.3", gather=hang)
    elapsed = time.monotonic() - start
    release.set()
    assert code == 1 and elapsed < 2
    driver = data["findings"][0]
    assert driver["status"] == "fail" and driver["title"] == "The NVIDIA driver did not answer within 0.3 s"
    assert "nvmlInit" in driver["detail"]
    host_checks = ("cuda-visible-devices", "python-bindings", "pid-namespace", "proc-hidepid")
    assert all(f["status"] != "skip" for f in data["findings"] if f["id"] in host_checks)
    assert {f["status"] for f in data["findings"] if f["id"] in ("mig", "memory-health", "xid-events")} == {"skip"}


def test_demo_slow_open_is_a_fail(capsys):
    start = time.monotonic()
    code, data = doctor_json(capsys, "--demo", "--demo-fault", "slow=3", "--timeout", "0.3")
    assert code == 1 and time.monotonic() - start < 2.5
    assert data["findings"][0]["title"] == "The simulated driver did not answer within 0.3 s"


def test_demo_hang_on_one_gpu_reports_the_gpus_read_before(capsys):
    faults = require_faults("hang=5@2")
    start = time.monotonic()
    code, out = run_doctor("--demo", "--timeout", "0.5", *faults, capsys=capsys)
    assert code == 1 and time.monotonic() - start < 3
    assert "did not answer within 0.5 s" in out and "reading GPU 2" in out
    assert "Only GPUs 0, 1 read" in out


# --------------------------------------------------------------------- output: hostile text, colour


HOSTILE = "Evil\x1b]0;owned\x07 GPU\x1b[2J\u202e"


def test_hostile_gpu_name_is_escaped_in_text_and_json(sim, capsys):
    model = dataclasses.replace(MODELS[0], name=HOSTILE)
    backend = sim(gpus=2, model=model, faults=parse_fault_specs(["remapped=0/0/1/0@1"], 2))
    facts = gather_backend_facts(BackendFacts(kind="simulated"), lambda: backend)
    findings = judge(facts, CLEAN_HOST)
    out = io.StringIO()
    render_text(findings, facts, out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "Evil\\e]0;owned\\x07 GPU\\e[2J\\u202e" in text
    data = json.loads(render_json(findings, facts))
    (finding,) = findings_of(data, "memory-health")
    assert "\x1b" not in finding["title"] and unescape_text(finding["title"]).startswith(f"GPU 1 ({HOSTILE})")


def test_hostile_environment_value_is_escaped(capsys):
    host = dataclasses.replace(CLEAN_HOST, cuda_visible_devices="0\x1b[31m,1")
    _, out = run_doctor("--demo", host=host, capsys=capsys)
    assert "\x1b" not in out and "0\\e[31m" in out


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_tty_without_no_color():
    assert use_color(_Tty(), no_color=False, environ={}) is True
    assert use_color(io.StringIO(), no_color=False, environ={}) is False
    assert use_color(_Tty(), no_color=True, environ={}) is False
    assert use_color(_Tty(), no_color=False, environ={"NO_COLOR": "1"}) is False
    assert use_color(_Tty(), no_color=False, environ={"NO_COLOR": ""}) is True  # no-color.org: non-empty
    assert use_color(_Tty(), no_color=False, environ={"TERM": "dumb"}) is False  # a dumb terminal: none
    findings = [DoctorFinding("driver", FAIL, "broken", "why", "fix it")]
    out = io.StringIO()
    render_text(findings, BackendFacts(kind="nvml"), out, color=True)
    assert "\x1b[1;31mFAIL\x1b[0m  driver" in out.getvalue()


# --------------------------------------------------------------------- usage errors and exit codes


def test_usage_errors_exit_two(capsys):
    assert doctor.main(["--demo", "--demo-fault", "nonsense"]) == 2
    assert "unknown fault" in capsys.readouterr().err
    for bad in ("0", "-1", "abc", "nan"):
        with pytest.raises(SystemExit) as exc:
            doctor.main(["--timeout", bad])
        assert exc.value.code == 2


def test_main_exit_codes(capsys):
    assert doctor.main(["--demo", "--json", "--demo-fault", "lost@0"]) == 1
    capsys.readouterr()
    assert doctor.main(["--demo", "--demo-fault", "foreign", "--no-color"]) == 0


# --------------------------------------------------------------------- the real nvidia-ml-py on fake-nvml


def run_on_fake(fake_lib: str, *args: str, **knobs: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FAKE_NVML_") and k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NO_COLOR")
    }
    env.update(knobs)
    env["LD_LIBRARY_PATH"] = fake_lib
    return run_nvtopy("doctor", *args, env=env, timeout=60)


def fake_json(fake_lib: str, *args: str, **knobs: str) -> tuple[int, dict]:
    result = run_on_fake(fake_lib, "--json", *args, **knobs)
    assert result.stderr == "", result.stderr
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.returncode and data["backend"] == "nvml"
    return result.returncode, data


@needs_fake_nvml
def test_fake_nvml_healthy(fake_lib):
    code, data = fake_json(fake_lib, FAKE_NVML_GPUS="2")
    assert code == 0 and data["driver_version"] == "550.54.15" and data["gpu_count"] == 2
    statuses_ = {f["id"]: f["status"] for f in data["findings"]}
    assert statuses_["driver"] == "ok" and statuses_["gpus"] == "ok" and statuses_["persistence-mode"] == "ok"
    assert statuses_["memory-health"] == "ok" and statuses_["xid-events"] == "ok" and statuses_["mig"] == "ok"
    assert findings_of(data, "accounting")[0]["title"].startswith("Accounting is off")
    text = run_on_fake(fake_lib, FAKE_NVML_GPUS="2")
    assert text.returncode == 0 and "NVIDIA driver 550.54.15 answers" in text.stdout and text.stderr == ""


@needs_fake_nvml
def test_fake_nvml_remapped_rows(fake_lib):
    code, data = fake_json(fake_lib, FAKE_NVML_GPUS="3", FAKE_NVML_REMAPPED="1:0/2/1/0,2:0/9/0/1")
    assert code == 1
    by_gpu = {tuple(f["gpus"]): f["status"] for f in findings_of(data, "memory-health")}
    assert by_gpu == {(1,): "warn", (2,): "fail"}


@needs_fake_nvml
def test_fake_nvml_pcie_downgrade(fake_lib):
    # A frozen clock where GPU 1 idles (3 %) and the others work: a lower generation is a downgrade only under load.
    knobs = {"FAKE_NVML_GPUS": "4", "FAKE_NVML_TIME": "1795000042"}
    snapshot = run_nvtopy(
        "--once",
        "--json",
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")},
            **knobs,
            "LD_LIBRARY_PATH": fake_lib,
        },
    )
    util = {g["index"]: g["utilization_gpu_percent"] for g in json.loads(snapshot.stdout)["gpus"]}
    code, data = fake_json(fake_lib, **knobs, FAKE_NVML_PCIE_DOWNGRADE="0:3/16,1:3/16,2:3/16,3:5/8")
    found = {f["gpus"][0]: f for f in findings_of(data, "pcie-link")}
    assert set(found) == {0, 1, 2, 3}
    for index in (0, 1, 2):  # generation only: WARN while busy, OK (normal) at idle
        busy = util[index] >= 10
        assert found[index]["status"] == ("warn" if busy else "ok"), (index, util[index], found[index])
        if not busy:
            assert "normal" in found[index]["detail"]
    assert found[3]["status"] == "warn" and "x8" in found[3]["title"]  # width: always
    assert any(u < 10 for u in util.values()) and any(u >= 10 for u in util.values()), util
    assert code == 0


@needs_fake_nvml
def test_fake_nvml_mig_without_instances(fake_lib):
    code, data = fake_json(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_MIG="0", FAKE_NVML_MIG_DEVICES="0")
    assert code == 1
    (finding,) = findings_of(data, "mig")
    assert finding["status"] == "fail" and finding["gpus"] == [0]
    code, data = fake_json(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_MIG="0", FAKE_NVML_MIG_DEVICES="2")
    assert findings_of(data, "mig")[0]["status"] == "ok"


@needs_fake_nvml
def test_fake_nvml_events_not_supported(fake_lib):
    code, data = fake_json(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_NOT_SUPPORTED="events")
    (finding,) = findings_of(data, "xid-events")
    assert code == 0 and finding["status"] == "warn" and "not supported" in finding["detail"]
    code, data = fake_json(
        fake_lib, FAKE_NVML_GPUS="3", FAKE_NVML_NOT_SUPPORTED="events", FAKE_NVML_NOT_SUPPORTED_GPUS="1"
    )
    assert findings_of(data, "xid-events")[0]["gpus"] == [1]


@needs_fake_nvml
def test_fake_nvml_accounting(fake_lib):
    _, data = fake_json(fake_lib, FAKE_NVML_GPUS="2", FAKE_NVML_ACCOUNTING="1")
    (finding,) = findings_of(data, "accounting")
    assert finding["status"] == "ok" and finding["title"] == "Accounting is on (GPUs 0, 1)"


@needs_fake_nvml
def test_fake_nvml_driver_not_loaded(fake_lib):
    result = run_on_fake(fake_lib, "--no-color", FAKE_NVML_DRIVER_NOT_LOADED="1")
    assert result.returncode == 1 and result.stderr == "" and "Traceback" not in result.stdout
    assert "FAIL  driver" in result.stdout and "modprobe nvidia" in result.stdout
    code, data = fake_json(fake_lib, FAKE_NVML_DRIVER_NOT_LOADED="1")
    assert code == 1 and data["findings"][0]["status"] == "fail" and data["gpu_count"] is None


@needs_fake_nvml
def test_fake_nvml_hung_init_ends_within_the_timeout(fake_lib):
    start = time.monotonic()
    result = run_on_fake(fake_lib, "--json", "--timeout", "1", FAKE_NVML_HANG="nvmlInit_v2+nvmlInitWithFlags:30")
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result.stderr
    assert elapsed < 5, f"took {elapsed:.1f} s"  # 1 s of waiting plus the interpreter's start
    driver = json.loads(result.stdout)["findings"][0]
    assert driver["status"] == "fail" and driver["title"] == "The NVIDIA driver did not answer within 1 s"
    assert "nvmlInit" in driver["detail"]


def test_through_dispatch_once_registered(monkeypatch, capsys):
    """The COMMANDS entry the report asks for: ``nvtopy doctor`` reaches this module through dispatch."""
    from nvtopy.commands import dispatch

    monkeypatch.setitem(COMMANDS, "doctor", ("doctor.command", "check the driver, GPUs and setup; print fixes"))
    assert dispatch.main(["doctor", "--demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "simulated"
    assert dispatch.main(["doctor", "--demo", "--demo-fault", "lost@1"]) == 1
    assert dispatch.main(["doctor", "--demo", "--demo-fault", "bogus"]) == 2


# --------------------------------------------------------------------- one home: the monitor's rules and colours


@pytest.mark.parametrize(
    "values",
    [
        {"remapped_rows_pending": False, "remapped_rows_failure": False, "ecc_uncorrected_volatile": 0},
        {"remapped_rows_pending": True, "remapped_rows_failure": True},
        {"retired_pages_sbe": 60, "retired_pages_dbe": 4, "retired_pages_pending": True},
        {"retired_pages_sbe": 63, "retired_pages_pending": False},  # one below the limit
        {"ecc_uncorrected_volatile": 3},  # the monitor WARNs; doctor once said memory was fine
        {**PCIE, "pcie_link_gen": 5, "pcie_link_width": 8, "utilization_gpu_percent": 0},
        {**PCIE, "pcie_link_gen": 3, "pcie_link_width": 16, "utilization_gpu_percent": 10},
        {**PCIE, "pcie_link_gen": 3, "pcie_link_width": 16, "utilization_gpu_percent": 9},
        {**PCIE, "pcie_link_gen": None, "pcie_link_width": 8},
    ],
)
def test_doctor_and_the_monitor_agree_on_memory_and_pcie(values):
    """Each memory or PCIe problem doctor reports is one the monitor's verdict finds, same severity, same words."""
    from nvtopy.health.verdict import HealthInputs, assess
    from nvtopy.model import Severity

    facts = gpu(1, **values)
    label = f"GPU 1 ({H100}): "
    said = [
        (f.status.value, f.title.removeprefix(label))
        for f in [*check_memory_health([facts]), *check_pcie_link([facts])]
        if f.status in (WARN, FAIL)
    ]
    verdict = assess(facts.static, facts.sample, HealthInputs(now=FROZEN_TIME))
    found = [(f.severity.value.lower(), f.text) for f in verdict.findings if f.severity is not Severity.OK]
    assert sorted(said) == sorted(found)


def _doctor_sources() -> dict[str, str]:
    package = Path(doctor.__file__).parent
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(package.glob("*.py"))}


def test_doctor_restates_no_health_threshold():
    """The thresholds and the readings they judge are health/'s: doctor calls the rules, it does not redo them."""
    restated = ("RETIRED_PAGES_LIMIT", "BUSY_UTILIZATION", "retired_pages_sbe", "pcie_link_width_max")
    for name, text in _doctor_sources().items():
        assert not [word for word in restated if word in text], name


def test_doctor_has_no_colour_table_of_its_own():
    """Doctor's colours come from render/ (FINDING_CATEGORY through --once's ANSI codes): no escape codes here."""
    for name, text in _doctor_sources().items():
        assert "\\x1b[" not in text and "\\033[" not in text, name


def test_doctor_colours_are_the_monitors_finding_colours():
    from nvtopy.render.cells import DIM, FINDING_CATEGORY
    from nvtopy.render.text import RESET, STYLES

    findings = [DoctorFinding(key, status, key) for key, status in (("a", OK), ("b", WARN), ("c", FAIL), ("d", SKIP))]
    out = io.StringIO()
    render_text(findings, BackendFacts(kind="nvml"), out, color=True)
    text = out.getvalue()
    for status, category in ((OK, FINDING_CATEGORY[Status.OK.severity]), (SKIP, DIM)):  # type: ignore[index]
        assert f"{STYLES[category]}{status.value.upper():<4}{RESET}" in text
    assert f"{STYLES[FINDING_CATEGORY[FAIL.severity]]}FAIL{RESET}" in text  # type: ignore[index]


def _package_modules():
    """Each module of the package ('nvtopy/...') and its text, read once per test process (tests/package_source.py)."""
    return {path.relative_to(PACKAGE.parent).as_posix(): text for path, text in modules().items()}


def _package_nodes():
    """Each module of the package ('nvtopy/...') and every node of it, parsed once a run (tests/package_source.py)."""
    return {path.relative_to(PACKAGE.parent).as_posix(): nodes(path) for path in modules()}


@reads_the_package
def test_severity_has_one_colour_map():
    """Severity -> colour category is written once, in render/cells.py; every view (and doctor) looks it up there."""
    import ast

    categories = {"GOOD", "WARN", "HOT", "ALERT", "BAD", "DIM", "PLAIN"}
    colours = {"red", "green", "yellow", "bold red", "$error", "$warning", "$success"}
    homes = []
    for name, walked in _package_nodes().items():
        for node in walked:
            if not isinstance(node, ast.Dict):
                continue
            keyed = [k for k in node.keys if isinstance(k, ast.Attribute) and ast.unparse(k).startswith("Severity.")]
            coloured = [
                v
                for v in node.values
                if (isinstance(v, ast.Name) and v.id in categories)
                or (isinstance(v, ast.Constant) and (v.value in colours or str(v.value).startswith("\x1b[")))
            ]
            if keyed and coloured:
                homes.append(f"{name}:{node.lineno}")
    assert {home.split(":")[0] for home in homes} == {"nvtopy/render/cells.py"}, homes  # SEVERITY/FINDING_CATEGORY


def test_one_utf8_stdout_writer():
    """JSON on stdout as UTF-8 is written in one place (commands.options.write_utf8), whatever the command."""
    writers = [
        name
        for name, text in _package_modules().items()
        if 'getattr(sys.stdout, "buffer"' in text or "sys.stdout.buffer" in text
    ]
    assert writers == ["nvtopy/commands/options.py"]


@reads_the_package
def test_one_quoting_of_outside_values():
    """A value from outside quoted back in a message has one home: textsafe.quoted, repr of textsafe.excerpt's cut.

    No other module cuts a value and repr()s it itself (``repr(text[:39] + "…")``): that was written twice
    (errors.quoted_name, selection._shown) before.
    """
    import ast

    homes = []
    for name, walked in _package_nodes().items():
        for node in walked:
            is_repr = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "repr"
            if is_repr and ("…" in ast.unparse(node) or "excerpt(" in ast.unparse(node)):
                homes.append(name)
    assert homes == ["nvtopy/textsafe.py"]
    from nvtopy.textsafe import quoted

    assert quoted("fast") == "'fast'" and quoted("\x1b[2J") == "'\\x1b[2J'"
    assert quoted("x" * 100, 40) == "'" + "x" * 39 + "…'"
