"""``make device-check``: nvtopy on a real NVIDIA GPU, checked end to end in one command.

Why it exists: every figure nvtopy shows is tested against simulated and fake GPUs;
this is the check for the first machine with a real one (PyTorch and nvidia-smi,
but no Textual and no network). It carries what it needs: nvtopy's runtime
dependencies as wheels in ``.whl/`` (``make device-wheels`` fetches them where there
is a network), installed into a temporary folder, never into the machine's Python.

Checks, each PASS, FAIL or SKIP (with the reason) and its numbers:
``wheels``, ``doctor``, ``against-nvidia-smi``, ``job-process`` (a PyTorch job's
pid, user and command in ``nvtopy --once --json``), ``job-memory`` (its GPU memory
against torch's reserved plus a context allowance), ``gpm-activity`` (SM and
tensor activity high during matrix products, falling when the job sleeps),
``track`` (``nvtopy.track`` with torch's allocated/reserved) and ``exporter`` (one
scrape). Results go to ``$OUT`` if set, else ``./device-check-results``:
``summary.txt`` and ``results.json``, with the raw outputs beside them. The exit
status is 1 when any check FAILs.

Here, without a GPU: ``NVTOPY_DEVICE_CHECK_FAKE=1`` (build ``../shared/fake-nvml``)
or ``=DIR`` (a folder holding a built ``libnvidia-ml.so.1``) runs every check the
fake driver can answer; a stand-in process takes the job's place and the torch
checks SKIP.

Only the standard library here: this file must run before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30
# What the job's GPU memory may exceed torch's reservation by: the CUDA context, cuBLAS workspaces and
# kernels (about 0.5 GiB on an H100 with CUDA 12).
CONTEXT_ALLOWANCE_BYTES = 1 * GIB
BUSY_SM_MIN = 50.0  # % of SMs active during bf16 products of 8192x8192 matrices (an H100 shows ~90+)
BUSY_TENSOR_MIN = 20.0  # % of tensor pipes active during them
IDLE_SM_MAX = 15.0  # % of SMs active while the job sleeps (nothing else should run on the GPU)
MAX_SAVED_BYTES = 4 << 20  # each raw output saved beside the summary
MAX_SCRAPE_BYTES = 16 << 20
RUNTIME_MODULES = ("pynvml", "psutil", "prometheus_client", "rich", "textual", "nvtopy")
STATUSES = ("PASS", "FAIL", "SKIP")


@dataclass
class Check:
    """One check's outcome: its name, PASS/FAIL/SKIP, one line saying why, and the numbers behind it."""

    name: str
    status: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        numbers = "  ".join(f"{k}={_fmt(v)}" for k, v in self.numbers.items())
        return f"{self.status:4}  {self.name:18} {self.detail}" + (f"\n      {numbers}" if numbers else "")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def gib(value: int | None) -> float | None:
    return None if value is None else round(value / GIB, 3)


class Budget:
    """The whole run's deadline: each step gets at most what is left of it."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        return max(1.0, min(cap, self.end - time.monotonic()))


def wait_for(condition: Callable[[], Any], seconds: float, every: float = 0.1) -> Any:
    """Poll until ``condition()`` is truthy (returned) or ``seconds`` pass (None)."""
    end = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() >= end:
            return value or None
        time.sleep(every)


def save(out: Path, name: str, text: str | bytes) -> None:
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    (out / name).write_bytes(data[:MAX_SAVED_BYTES])


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ----------------------------------------------------------------------------------- the environment


@dataclass
class Runner:
    """How to run nvtopy and Python children: the interpreter, their environment, the fake driver if any."""

    python: str
    env: dict[str, str]
    fake: bool
    ready: bool = False  # nvtopy and its dependencies import in this environment

    def nvtopy(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """``nvtopy ARGS`` with a deadline; a timeout is a CompletedProcess with returncode 124."""
        command = [self.python, "-m", "nvtopy", *args]
        try:
            return subprocess.run(command, check=False, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return subprocess.CompletedProcess(command, 124, out, f"timed out after {timeout:.0f} s")

    def snapshot(self, timeout: float) -> tuple[dict[str, Any] | None, str]:
        """One ``nvtopy --once --json``: the parsed snapshot, or None and why not."""
        result = self.nvtopy("--once", "--json", timeout=timeout)
        if result.returncode != 0:
            return None, f"nvtopy --once --json exited {result.returncode}: {last_line(result.stderr)}"
        try:
            return json.loads(result.stdout), ""
        except ValueError as exc:
            return None, f"nvtopy --once --json printed no JSON: {exc}"


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """nvtopy's runtime requirements, read from pyproject.toml (one home; no tomllib before Python 3.11)."""
    text = pyproject.read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
    return re.findall(r'"([^"]+)"', block.group(1)) if block else []


def can_import(python: str, env: dict[str, str]) -> tuple[bool, str]:
    code = "import " + ", ".join(RUNTIME_MODULES)
    result = subprocess.run([python, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=60)
    return result.returncode == 0, last_line(result.stderr)


def install_wheels(python: str, wheels: Path, target: Path) -> tuple[bool, str]:
    """Install the requirements from ``wheels`` into ``target`` without a network: pip if there is one,
    else each wheel unpacked (a wheel is a zip of what site-packages holds; ours are all root-installed)."""
    if find_spec("pip") is not None:
        command = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index"]
        command += ["--find-links", str(wheels), "--target", str(target), *requirements()]
        result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            return False, f"pip install --no-index failed: {last_line(result.stderr)}"
        return True, "pip install --no-index --target"
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
    return True, "wheels unpacked (no pip)"


def prepare(args: argparse.Namespace, out: Path, stack: contextlib.ExitStack) -> tuple[Runner, Check]:
    """The children's environment (fake driver, carried wheels) and the ``wheels`` check."""
    env = dict(os.environ)
    fake_dir = fake_driver(stack)
    if fake_dir is not None:
        env["LD_LIBRARY_PATH"] = fake_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        env.setdefault("FAKE_NVML_GPUS", "1")
        env.setdefault("FAKE_NVML_MODEL", "H100 80GB HBM3")
    env["PYTHONUNBUFFERED"] = "1"
    runner = Runner(python=args.python, env=env, fake=fake_dir is not None)
    wheels = Path(args.wheels)
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    paths = [str(ROOT)]
    numbers: dict[str, Any] = {"wheels": len(found)}
    if found:
        target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nvtopy-device-check-")))
        ok, how = install_wheels(args.python, wheels, target)
        if not ok:
            return runner, Check("wheels", "FAIL", how, numbers)
        paths.insert(0, str(target))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ok, why = can_import(args.python, env)
    runner.ready = ok
    if not ok:
        hint = "" if found else f" (no wheels in {wheels}: run 'make device-wheels' where there is a network)"
        return runner, Check("wheels", "FAIL", f"nvtopy cannot run: {why}{hint}", numbers)
    if not found:
        return runner, Check("wheels", "SKIP", f"no wheels in {wheels}: this Python already has them", numbers)
    return runner, Check("wheels", "PASS", f"{len(found)} wheels installed offline ({how})", numbers)


def fake_driver(stack: contextlib.ExitStack) -> str | None:
    """The folder of the fake libnvidia-ml.so.1 that NVTOPY_DEVICE_CHECK_FAKE names (1: build it), or None."""
    value = os.environ.get("NVTOPY_DEVICE_CHECK_FAKE", "").strip()
    if not value or value == "0":
        return None
    if value != "1":
        if not (Path(value) / "libnvidia-ml.so.1").is_file():
            raise SystemExit(f"device-check: NVTOPY_DEVICE_CHECK_FAKE={value} holds no libnvidia-ml.so.1")
        return value
    source = Path(os.environ.get("NVTOPY_FAKE_NVML_DIR", ROOT.parent / "shared" / "fake-nvml"))
    if not (source / "fake_nvml.c").is_file():
        raise SystemExit(f"device-check: no fake driver to build in {source}")
    build = stack.enter_context(tempfile.TemporaryDirectory(prefix="nvtopy-fake-nvml-"))
    make = ["make", "-s", "-C", str(source), f"BUILD={build}"]
    result = subprocess.run(make, check=False, capture_output=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"device-check: cannot build the fake driver: {last_line(result.stderr.decode())}")
    return build


def environment(runner: Runner) -> dict[str, Any]:
    """What machine this was: for the summary's head, never a check."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "driver": "fake-nvml" if runner.fake else "nvml",
        "torch_installed": find_spec("torch") is not None,
    }
    smi = shutil.which("nvidia-smi")
    if smi and not runner.fake:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            query = [smi, "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"]
            answer = subprocess.run(query, check=False, capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = answer.stdout.strip()
    return info


# ----------------------------------------------------------------------------------- the checks


def check_doctor(runner: Runner, budget: Budget, out: Path) -> Check:
    result = runner.nvtopy("doctor", "--json", timeout=budget.left(60))
    save(out, "doctor.json", result.stdout + result.stderr)
    try:
        report = json.loads(result.stdout)
    except ValueError:
        return Check("doctor", "FAIL", f"exited {result.returncode} without JSON: {last_line(result.stderr)}")
    counts = report.get("counts", {})
    numbers = {"gpus": report.get("gpu_count"), "driver": report.get("driver_version"), **counts}
    failed = [f.get("title", "?") for f in report.get("findings", []) if f.get("status") == "fail"]
    if result.returncode != 0 or failed:
        return Check("doctor", "FAIL", "; ".join(failed)[:300] or f"exited {result.returncode}", numbers)
    return Check("doctor", "PASS", f"no FAIL finding ({counts.get('warn', 0)} WARN)", numbers)


def check_against_nvidia_smi(runner: Runner, budget: Budget, out: Path) -> Check:
    name = "against-nvidia-smi"
    helped = runner.nvtopy("doctor", "--help", timeout=budget.left(30))
    if "--against-nvidia-smi" not in helped.stdout:
        return Check(name, "SKIP", "not available: this nvtopy's doctor has no --against-nvidia-smi")
    if shutil.which("nvidia-smi", path=runner.env.get("PATH")) is None:
        return Check(name, "SKIP", "no nvidia-smi on PATH")
    result = runner.nvtopy("doctor", "--against-nvidia-smi", "--no-color", timeout=budget.left(90))
    save(out, "against-nvidia-smi.txt", result.stdout + result.stderr)
    if result.returncode == 0:
        return Check(name, "PASS", "nvtopy and nvidia-smi agree within tolerance")
    return Check(name, "FAIL", f"exited {result.returncode}: {last_line(result.stdout + result.stderr)}")


class Job:
    """The process nvtopy must find: devcheck/torch_load.py, or a stand-in under the fake driver."""

    def __init__(self, runner: Runner, folder: Path, deadline: float, log: Path) -> None:
        self.control = folder / "control"
        self.status_file = folder / "status.json"
        self.control.write_text("work")
        self.log = log.open("w")
        self.stand_in = runner.fake
        if runner.fake:  # the fake driver reports this pid as its GPU process
            command = [runner.python, "-c", f"import time; time.sleep({deadline:.0f})", "device-check-stand-in"]
        else:
            command = [runner.python, str(ROOT / "devcheck" / "torch_load.py"), "--control", str(self.control)]
            command += ["--status", str(self.status_file), "--deadline", f"{deadline:.0f}"]
        self.process = subprocess.Popen(command, env=runner.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid
        self.command = command
        if runner.fake:
            runner.env["FAKE_NVML_PIDS"] = str(self.pid)

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_file.read_text()[:MAX_SAVED_BYTES])
        except (OSError, ValueError):
            return {}

    def wait_phase(self, phase: str, seconds: float) -> dict[str, Any] | None:
        """Ask for ``phase`` and wait until the job says it is in it (None: it did not, or it ended)."""
        self.control.write_text(phase)

        def reached() -> dict[str, Any] | None:
            status = self.status()
            exited = self.process.poll()
            if status.get("phase") == phase or status.get("error") or exited is not None:
                return {"exit_code": exited, **status}  # never empty: a job that died without a word ends the wait
            return None

        status = wait_for(reached, seconds)
        return status if status and status.get("phase") == phase else None

    def stop(self) -> None:
        """Ask the torch job to stop (it frees its memory on the way out); the stand-in just ends."""
        with contextlib.suppress(OSError):
            self.control.write_text("stop")
        if self.stand_in:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()


def find_process(snapshot: dict[str, Any], pid: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    for gpu in snapshot.get("gpus", []):
        for proc in gpu.get("processes") or []:
            if proc.get("pid") == pid:
                return gpu, proc
    return None, None


def check_job_process(runner: Runner, job: Job, budget: Budget, out: Path) -> tuple[Check, dict[str, Any] | None]:
    """The job in ``--once --json``: its pid, user and command (polled: a new process shows after a refresh)."""
    found: dict[str, Any] = {}

    def seen() -> bool:
        snapshot, why = runner.snapshot(budget.left(30))
        found.update(snapshot=snapshot, why=why)
        return snapshot is None or find_process(snapshot, job.pid)[1] is not None  # nvtopy failing: no retry

    wait_for(seen, budget.left(30), every=0.5)
    snapshot = found.get("snapshot")
    if snapshot is not None:
        save(out, "once.json", json.dumps(snapshot, indent=1))
    if snapshot is None:
        return Check("job-process", "FAIL", found.get("why", "no snapshot")), None
    gpu, proc = find_process(snapshot, job.pid)
    if proc is None:
        listed = [p.get("pid") for g in snapshot.get("gpus", []) for p in g.get("processes") or []]
        return Check("job-process", "FAIL", f"pid {job.pid} not among the GPU processes {listed[:20]}"), None
    user = pwd.getpwuid(os.getuid()).pw_name
    script = Path(job.command[1]).name if not runner.fake else job.command[-1]
    numbers = {"pid": job.pid, "gpu": gpu.get("index"), "user": proc.get("user"), "command": proc.get("command")}
    wrong = []
    if proc.get("user") != user:
        wrong.append(f"user {proc.get('user')!r}, expected {user!r}")
    if script not in (proc.get("command") or ""):
        wrong.append(f"command {proc.get('command')!r} lacks {script!r}")
    if wrong:
        return Check("job-process", "FAIL", "; ".join(wrong), numbers), proc
    return Check(
        "job-process", "PASS", f"pid {job.pid} on GPU {gpu.get('index')}, user and command right", numbers
    ), proc


def check_job_memory(proc: dict[str, Any], status: dict[str, Any]) -> Check:
    used, reserved = proc.get("gpu_memory_bytes"), status.get("reserved_bytes")
    numbers = {
        "nvml_gib": gib(used),
        "torch_reserved_gib": gib(reserved),
        "torch_allocated_gib": gib(status.get("allocated_bytes")),
        "context_gib": gib(used - reserved) if used is not None and reserved is not None else None,
    }
    if used is None or reserved is None:
        why = (proc.get("unavailable") or {}).get("gpu_memory_bytes", "not reported")
        return Check("job-memory", "FAIL", f"no per-process memory ({why})", numbers)
    if reserved <= used <= reserved + CONTEXT_ALLOWANCE_BYTES:
        return Check("job-memory", "PASS", "NVML's figure = torch reserved + context (within 1 GiB)", numbers)
    return Check("job-memory", "FAIL", "NVML's figure is not torch reserved plus at most 1 GiB of context", numbers)


def gpm_readings(runner: Runner, pid: int, count: int, budget: Budget) -> tuple[list[float], list[float], str]:
    """SM and tensor activity of the job's GPU over ``count`` snapshots (why not, when GPM has none)."""
    sm: list[float] = []
    tensor: list[float] = []
    why = ""
    for _ in range(count):
        snapshot, why = runner.snapshot(budget.left(30))
        gpu = find_process(snapshot, pid)[0] if snapshot else None
        if gpu is None:
            why = why or f"pid {pid} not found"
            continue
        if gpu.get("sm_active_percent") is None:
            why = (gpu.get("unavailable") or {}).get("sm_active_percent", "GPM not reported")
            continue
        sm.append(float(gpu["sm_active_percent"]))
        tensor.append(float(gpu.get("tensor_active_percent") or 0.0))
    return sm, tensor, why


def check_gpm(runner: Runner, job: Job, budget: Budget) -> Check:
    name = "gpm-activity"
    busy_sm, busy_tensor, why = gpm_readings(runner, job.pid, 3, budget)
    if not busy_sm:
        if "support" in str(why).lower():
            return Check(name, "SKIP", f"no GPM on this GPU ({why}): Hopper and newer")
        return Check(name, "FAIL", f"no SM activity during the products: {why}")
    if job.wait_phase("idle", budget.left(20)) is None:
        return Check(name, "FAIL", "the job did not go idle when asked")
    time.sleep(1.0)  # let the products in flight drain (the job synchronises every 8)
    idle_sm, idle_tensor, why = gpm_readings(runner, job.pid, 3, budget)
    numbers = {
        "busy_sm_pct": max(busy_sm),
        "busy_tensor_pct": max(busy_tensor),
        "idle_sm_pct": min(idle_sm) if idle_sm else None,
        "idle_tensor_pct": min(idle_tensor) if idle_tensor else None,
    }
    job.wait_phase("work", budget.left(20))
    if not idle_sm:
        return Check(name, "FAIL", f"no SM activity while idle: {why}", numbers)
    bad = []
    if max(busy_sm) < BUSY_SM_MIN:
        bad.append(f"SM active {max(busy_sm):.0f}% < {BUSY_SM_MIN:.0f}% during products")
    if max(busy_tensor) < BUSY_TENSOR_MIN:
        bad.append(f"tensor active {max(busy_tensor):.0f}% < {BUSY_TENSOR_MIN:.0f}% during products")
    if min(idle_sm) > IDLE_SM_MAX:
        bad.append(f"SM active {min(idle_sm):.0f}% > {IDLE_SM_MAX:.0f}% while the job sleeps")
    if bad:
        return Check(name, "FAIL", "; ".join(bad), numbers)
    return Check(name, "PASS", "high during the products, falls when the job sleeps", numbers)


def check_track(status: dict[str, Any]) -> Check:
    if status.get("track_error"):
        return Check("track", "FAIL", f"nvtopy.track raised {status['track_error']}")
    report = status.get("track") or {}
    gpus = report.get("gpus") or []
    if not gpus:
        return Check("track", "FAIL", "the report names no GPU")
    gpu = gpus[0]
    torch = gpu.get("torch") or {}
    own = status.get("track_torch_end") or {}
    numbers = {
        "seconds": report.get("wall_seconds"),
        "samples": gpu.get("samples"),
        "torch_allocated_gib": gib(torch.get("allocated_end_bytes")),
        "torch_reserved_gib": gib(torch.get("reserved_end_bytes")),
        "process_gib": gib(gpu.get("process_memory_end_bytes")),
        "sm_active_mean_pct": gpu.get("sm_active_mean_percent"),
        "tensor_active_mean_pct": gpu.get("tensor_active_mean_percent"),
    }
    bad = []
    if not torch:
        bad.append("no torch figures in the report")
    elif (torch.get("allocated_end_bytes"), torch.get("reserved_end_bytes")) != (
        own.get("allocated_bytes"),
        own.get("reserved_bytes"),
    ):
        bad.append(f"torch figures {torch} differ from torch's own {own}")
    process = gpu.get("process_memory_end_bytes")
    if process is None or (torch and process < torch.get("reserved_end_bytes", 0)):
        bad.append(f"the process's NVML memory {process} is under torch's reserved")
    if not gpu.get("samples"):
        bad.append("no background sample during the span")
    if bad:
        return Check("track", "FAIL", "; ".join(bad)[:300], numbers)
    return Check("track", "PASS", "torch allocated/reserved and the process's memory reported", numbers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def exporter(runner: Runner, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as sink:
        process = subprocess.Popen(
            [runner.python, "-m", "nvtopy", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "0.5"],
            env=runner.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def check_exporter(runner: Runner, pid: int | None, budget: Budget, out: Path) -> Check:
    """One scrape of ``nvtopy exporter`` on a loopback port: the GPU's utilisation and the job's series."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    body: dict[str, str] = {}

    def scraped() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                body["text"] = reply.read(MAX_SCRAPE_BYTES).decode("utf-8", "replace")
        except (OSError, urllib.error.URLError):
            return False
        wanted = "DCGM_FI_DEV_GPU_UTIL{" in body["text"]
        return wanted and (pid is None or f'pid="{pid}"' in body["text"])

    with exporter(runner, port, out / "exporter.log") as process:
        wait_for(lambda: scraped() or process.poll() is not None, budget.left(30), every=0.25)
        exited = process.poll()
    text = body.get("text", "")
    save(out, "metrics.txt", text)
    util = re.findall(r"^DCGM_FI_DEV_GPU_UTIL\{[^}]*\} (\S+)", text, re.M)
    series = [line for line in text.splitlines() if line.startswith("nvtopy_process_") and f'pid="{pid}"' in line]
    numbers = {"port": port, "bytes": len(text), "gpu_util": ",".join(util), "process_series": len(series)}
    if not text:
        why = f"exited {exited}" if exited is not None else "no answer in time"
        return Check("exporter", "FAIL", f"no scrape: the exporter {why} (exporter.log)", numbers)
    if not util:
        return Check("exporter", "FAIL", "no DCGM_FI_DEV_GPU_UTIL series", numbers)
    if pid is not None and not series:
        return Check("exporter", "FAIL", f"no nvtopy_process_* series for pid {pid}", numbers)
    whose = f"and pid {pid}'s series" if pid is not None else "(no job running: process series not checked)"
    return Check("exporter", "PASS", f"DCGM_FI_DEV_GPU_UTIL {whose}", numbers)


# ----------------------------------------------------------------------------------- the run


def run_checks(args: argparse.Namespace, out: Path) -> tuple[list[Check], dict[str, Any]]:
    budget = Budget(args.budget)
    checks: list[Check] = []
    with contextlib.ExitStack() as stack:
        runner, wheels = prepare(args, out, stack)
        checks.append(wheels)
        info = environment(runner)
        if not runner.ready:
            for name in ("doctor", "against-nvidia-smi", "job-process", "job-memory", "gpm-activity", "track"):
                checks.append(Check(name, "SKIP", "nvtopy cannot run here (see wheels)"))
            checks.append(Check("exporter", "SKIP", "nvtopy cannot run here (see wheels)"))
            return checks, info
        checks.append(check_doctor(runner, budget, out))
        checks.append(check_against_nvidia_smi(runner, budget, out))
        checks.extend(job_checks(runner, budget, out, stack, info))
    return checks, info


def job_checks(
    runner: Runner, budget: Budget, out: Path, stack: contextlib.ExitStack, info: dict[str, Any]
) -> list[Check]:
    """The checks around the job: start it, find it, measure it, scrape it, stop it."""
    no_torch = ""
    if runner.fake:
        no_torch = "fake driver: torch's memory and activity never reach it (a stand-in process is the job)"
    elif not info["torch_installed"]:
        no_torch = f"no torch in {sys.executable}"
    if no_torch and not runner.fake:
        skipped = [Check(n, "SKIP", no_torch) for n in ("job-process", "job-memory", "gpm-activity", "track")]
        return [*skipped, check_exporter(runner, None, budget, out)]
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nvtopy-device-job-")))
    job = Job(runner, folder, budget.left(600), out / "job.log")
    stack.callback(job.stop)
    checks: list[Check] = []
    status: dict[str, Any] = {}
    if not runner.fake:
        status = job.wait_phase("work", budget.left(120)) or job.status()
        info.update({k: status[k] for k in ("torch_version", "device_name") if k in status})
        if status.get("phase") != "work":
            code = job.process.poll()
            ended = f"it exited with code {code} (job.log)" if code is not None else "not ready in time"
            why = status.get("error") or ended
            failed = [Check(n, "FAIL", f"the torch job did not start: {why}") for n in ("job-process", "job-memory")]
            skipped = [Check(n, "SKIP", "no torch job") for n in ("gpm-activity", "track")]
            return [*failed, *skipped, check_exporter(runner, None, budget, out)]
    process, proc = check_job_process(runner, job, budget, out)
    checks.append(process)
    if no_torch:
        checks += [Check(n, "SKIP", no_torch) for n in ("job-memory", "gpm-activity", "track")]
    else:
        checks.append(check_job_memory(proc, status) if proc else Check("job-memory", "FAIL", "the job was not found"))
        checks.append(check_gpm(runner, job, budget))
        checks.append(check_track(status))
    checks.append(check_exporter(runner, job.pid, budget, out))
    return checks


def write_results(out: Path, checks: list[Check], info: dict[str, Any], seconds: float) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = "FAIL" if counts["FAIL"] else "PASS"
    head = [
        f"nvtopy device-check: {verdict} ({counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP)"
        f" in {seconds:.1f} s",
        "  " + "  ".join(f"{k}={v}" for k, v in info.items()),
    ]
    summary = "\n".join([*head, *(c.line() for c in checks)]) + "\n"
    (out / "summary.txt").write_text(summary)
    results = {
        "verdict": verdict,
        "counts": counts,
        "seconds": round(seconds, 1),
        "environment": info,
        "checks": [dataclasses.asdict(c) for c in checks],
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    return summary


def download_wheels(dest: Path) -> int:
    """``make device-wheels``: nvtopy's runtime requirements and theirs, as cp312 manylinux x86_64 wheels."""
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest)]
    command += ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.12"]
    command += ["--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", *requirements()]
    return subprocess.run(command, check=False, timeout=600).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run (default 240)")
    parser.add_argument("--wheels", default=str(ROOT / ".whl"), help="the carried wheels (default .whl/)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs nvtopy and the job")
    parser.add_argument("--out", default=os.environ.get("OUT") or "device-check-results", help="results folder")
    parser.add_argument("--download-wheels", action="store_true", help="fill --wheels with pip download, and exit")
    args = parser.parse_args(argv)
    if args.download_wheels:
        return download_wheels(Path(args.wheels))
    if not 10 <= args.budget <= 3600:
        parser.error("--budget must be between 10 and 3600 seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    checks, info = run_checks(args, out)
    summary = write_results(out, checks, info, time.monotonic() - started)
    print(summary, end="")
    print(f"results: {out.resolve()}/summary.txt, results.json")
    return 1 if any(c.status == "FAIL" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
