"""``nvtopy --once`` against a baseline checkout and against ``nvitop --once``, in one run, on the same fake driver.

Why a benchmark of its own: the one-shot is what scripts, ``watch -n1`` and shell
prompts run, and its time is dominated by what no steady-state benchmark sees:
the interpreter's start, imports, opening the driver and, on Hopper, the GPM
sample pair (two samples at least 105 ms apart). Its figures move with the
machine, so every command runs interleaved with the others, each repeat in turn,
and the verdicts are ratios within the run.

Two profiles of the fake driver (../shared/fake-nvml, 8 GPUs x 64 real ``sleep``
processes reported as GPU processes): ``a100`` (A100-SXM4-80GB: no GPM, so no
wait) and ``h100`` (H100 80GB HBM3: GPM, so nvtopy waits for its pair). Each
command's wall time is measured around its process, its CPU time is the child's
own user+sys (``os.wait4``), medians of ``-n`` runs after one discarded warm-up.

Floor rows say what no change to nvtopy's one-shot path can remove: the
interpreter's start (``python -c pass``, with nvtopy's venv), the start plus
importing the CLI's entry point, and the head start a local ``--once`` begins
with (``nvtopy/backends/nvml/headstart.py``: the bindings imported, the driver
opened, each Hopper GPU's first GPM sample): what must run before the first GPM
sample can be taken. On the ``h100`` profile that last row plus the pair's 105 ms
(``FIRST_PAIR_S``) is printed as the GPM floor: no one-shot that shows GPM
figures ends sooner.

    .venv/bin/python benchmarks/bench_once.py -n 15 --baseline /work/main/.venv/bin/nvtopy
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PROFILES = {"a100": "A100-SXM4-80GB", "h100": "H100 80GB HBM3"}
TARGET = 0.75  # issue 27: --once wall and CPU at most 0.75x nvitop's


@dataclass
class Command:
    """One command line timed in every repeat; ``kind``: "tool" (compared) or "floor" (what cannot be removed)."""

    name: str
    argv: list[str]
    kind: str = "tool"
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    failures: int = 0

    def median(self, what: str) -> float | None:
        values = self.walls if what == "wall" else self.cpus
        return statistics.median(values) if values else None


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, the child's CPU seconds user+sys, exit code) of one run, output discarded."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return wall, usage.ru_utime + usage.ru_stime, child.returncode


def fake_library(given: str | None) -> Path:
    """The folder of the fake libnvidia-ml.so.1: given, or built as ``make bench-peers`` builds it."""
    if given:
        return Path(given)
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_peers

    skipped = bench_peers.why_skip()
    if skipped:
        print(f"bench_once skipped: {skipped}", file=sys.stderr)
        raise SystemExit(0)  # as make bench-peers skips: a clone without ../shared is no failure
    return bench_peers.prepare_fake() / "build"


def default_nvitop() -> str | None:
    for root in (ROOT, Path("/work/main")):
        candidate = root / ".cache" / "peers-venv" / "bin" / "nvitop"
        if candidate.exists():
            return str(candidate)
    return None


def commands(args: argparse.Namespace) -> list[Command]:
    python = str(ROOT / ".venv" / "bin" / "python")
    mine = str(ROOT / ".venv" / "bin" / "nvtopy")
    cmds = [Command("nvtopy --once", [mine, "--once"]), Command("nvtopy --once --json", [mine, "--once", "--json"])]
    if args.baseline:
        cmds += [
            Command("baseline --once", [args.baseline, "--once"]),
            Command("baseline --once --json", [args.baseline, "--once", "--json"]),
        ]
    if args.nvitop:
        cmds.append(Command("nvitop --once", [args.nvitop, "--once"]))
    if not args.no_floor:
        cmds += [
            Command("floor: python -c pass", [python, "-c", "pass"], "floor"),
            Command("floor: + import the CLI", [python, "-c", "import nvtopy.commands.dispatch"], "floor"),
            Command(
                "floor: the head start (bindings, driver, first GPM samples)",
                # what a local --once does before anything else (nvtopy/backends/nvml/headstart.py): the
                # nvtopy package, the bindings, nvmlInit and each Hopper GPU's first sample; then the process
                # ends as a one-shot does (os._exit: no interpreter teardown, which --once no longer pays either)
                [python, "-c", "import os; from nvtopy.backends.nvml import headstart as h; h.begin(5); os._exit(0)"],
                "floor",
            ),
        ]
        if args.nvitop:
            peer_python = str(Path(args.nvitop).with_name("python"))
            cmds.append(Command("floor: nvitop's python -c pass", [peer_python, "-c", "pass"], "floor"))
    return cmds


def check_figures(argv: list[str], env: dict[str, str], profile: str) -> str:
    """What one ``--once --json`` printed: GPUs, processes, GPUs with SM activity (GPM) -- honest figures or not."""
    out = subprocess.run([*argv, "--json"], env=env, stdout=subprocess.PIPE, check=True).stdout
    snapshot = json.loads(out)
    gpus = snapshot["gpus"]
    processes = sum(len(gpu["processes"]) for gpu in gpus)
    with_gpm = sum(gpu.get("sm_active_percent") is not None for gpu in gpus)
    cpu = sum(p.get("cpu_percent") is not None for gpu in gpus for p in gpu["processes"])
    busy = snapshot["host_usage"].get("cpu_busy_percent")
    expect_gpm = len(gpus) if profile == "h100" else 0
    verdict = "ok" if with_gpm == expect_gpm else f"EXPECTED {expect_gpm} GPUs with GPM"
    return (
        f"{len(gpus)} GPUs, {processes} processes ({cpu} with CPU %), {with_gpm} GPUs with SM activity "
        f"({verdict}), host CPU busy {'N/A' if busy is None else f'{busy:.0f} %'}"
    )


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def report(profile: str, cmds: list[Command], runs: int) -> dict[str, object]:
    by_name = {c.name: c for c in cmds}
    peer = by_name.get("nvitop --once")
    print(f"\n## {profile} ({PROFILES[profile]}), median of {runs} interleaved runs")
    print("| command | wall s | CPU s | wall / nvitop | CPU / nvitop | wall / baseline | CPU / baseline |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows: dict[str, object] = {}
    for cmd in cmds:
        wall, cpu = cmd.median("wall"), cmd.median("cpu")
        twin = by_name.get(cmd.name.replace("nvtopy", "baseline")) if cmd.name.startswith("nvtopy") else None
        cells = [
            f"{wall:.3f}" if wall is not None else "-",
            f"{cpu:.3f}" if cpu is not None else "-",
            ratio(wall, peer.median("wall") if peer else None),
            ratio(cpu, peer.median("cpu") if peer else None),
            ratio(wall, twin.median("wall") if twin else None) if twin else "",
            ratio(cpu, twin.median("cpu") if twin else None) if twin else "",
        ]
        failed = f" ({cmd.failures} failed)" if cmd.failures else ""
        print(f"| {cmd.name}{failed} | " + " | ".join(cells) + " |")
        rows[cmd.name] = {"wall_s": wall, "cpu_s": cpu, "walls": cmd.walls, "cpus": cmd.cpus, "failures": cmd.failures}
    mine = by_name["nvtopy --once"]
    imports = by_name.get("floor: the head start (bindings, driver, first GPM samples)")
    if profile == "h100" and imports is not None and imports.median("wall") is not None:
        from nvtopy.backends.nvml.gpm import FIRST_PAIR_S

        floor = (imports.median("wall") or 0.0) + FIRST_PAIR_S
        rows["gpm_floor_s"] = floor
        versus = f" = {ratio(floor, peer.median('wall'))} nvitop" if peer is not None else ""
        pair = f"{FIRST_PAIR_S * 1000:.0f} ms"
        print(f"  GPM floor: the head start before the first samples + the {pair} pair = {floor:.3f} s{versus}")
    if peer is not None and peer.median("wall"):
        for what in ("wall", "cpu"):
            value = (mine.median(what) or 0) / (peer.median(what) or 1)
            verdict = "ok" if value <= TARGET else "MISSED"
            print(f"  --once {what} / nvitop: {value:.2f}x (target <= {TARGET}x) {verdict}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=15, help="interleaved runs of each command (medians)")
    parser.add_argument("--baseline", metavar="NVTOPY", help="another checkout's nvtopy executable to compare with")
    parser.add_argument("--nvitop", metavar="PATH", default=default_nvitop(), help="nvitop executable (peers venv)")
    parser.add_argument("--profiles", default="a100,h100", help="comma list of: " + ", ".join(PROFILES))
    parser.add_argument("-g", "--gpus", type=int, default=8)
    parser.add_argument("-p", "--procs", type=int, default=64, help="real sleep processes reported as GPU processes")
    parser.add_argument("--fake", metavar="DIR", help="folder holding a built fake libnvidia-ml.so.1")
    parser.add_argument("--no-floor", action="store_true", help="leave out the floor rows")
    args = parser.parse_args()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profile {unknown[0]!r}: {', '.join(PROFILES)}")
    library = fake_library(args.fake)
    sleepers = [subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL) for _ in range(args.procs)]
    base_env = dict(
        os.environ,
        LD_LIBRARY_PATH=str(library),
        FAKE_NVML_GPUS=str(args.gpus),
        FAKE_NVML_PIDS=",".join(str(s.pid) for s in sleepers),
        COLUMNS="200",
        LINES="50",
        TERM="xterm-256color",
    )
    base_env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool runs from its bytecode
    envs = {p: dict(base_env, FAKE_NVML_MODEL=PROFILES[p]) for p in profiles}
    table = {p: commands(args) for p in profiles}
    results: dict[str, object] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": args.runs, "profiles": {}}
    try:
        time.sleep(1.1)  # the sleepers must be older than a second: the CPU % of a younger one is measured
        for profile in profiles:
            print(f"# {profile}: {check_figures(table[profile][0].argv, envs[profile], profile)}")
        for repeat in range(args.runs + 1):  # the first round is a discarded warm-up
            for profile in profiles:
                for cmd in table[profile]:
                    wall, cpu, code = timed(cmd.argv, envs[profile])
                    if code != 0:
                        cmd.failures += 1
                    elif repeat > 0:
                        cmd.walls.append(wall)
                        cmd.cpus.append(cpu)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    print(f"\n# nvtopy --once on fake-nvml: {args.gpus} GPUs x {args.procs} processes; CPU = the child's user+sys")
    for profile in profiles:
        results["profiles"][profile] = report(profile, table[profile], args.runs)  # type: ignore[index]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "once.json").write_text(json.dumps(results, indent=2))
    print(f"\n  details: {RESULTS / 'once.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
