"""MIG selection end to end: the collector limited to a MIG device, and the CLI as a user runs it.

The simulated GPUs place each process on a MIG instance by its pid
(:func:`nvtopy.backends.simulated.mig.instance_of`), so "only that instance's
processes" is checked against the simulation's own rule, whatever processes
happen to run when the subprocess looks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from nvtopy.backends.open import open_backend, simulated_spec
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.backends.simulated.mig import instance_of
from nvtopy.model import MigInstance
from nvtopy.render.processes import ProcessFilter
from nvtopy.selection import select_gpus
from nvtopy.sources.collector import Collector

from ..builders import run_nvtopy

# Steady, with eight process slots per GPU: each of GPU 1's three MIG devices runs processes.
DEMO = ("--demo", "--demo-fault", "mig=3@1", "--demo-steady", "--demo-procs", "8")


# --------------------------------------------------------------------------- the collector


@pytest.fixture
def mig_collector(sim):
    backend = sim(gpus=4, faults=parse_fault_specs(["mig=3@1", "mig=7@2"], gpus=4), processes_per_gpu=8, steady=True)
    return Collector(backend)


def test_collector_shows_exactly_the_selected_mig_device(mig_collector):
    whole = mig_collector.collect().gpu(1)
    assert whole is not None and len(whole.mig) == 3
    chosen = whole.mig[1].instance
    others = {p.pid for m in whole.mig if m.instance is not chosen for p in m.processes}
    assert others, "the other instances run processes: leaving them out is seen"

    mig_collector.select(select_gpus(mig_collector.statics(), [chosen.uuid[:12]]))
    (gpu,) = mig_collector.collect().gpus
    assert gpu.index == 1
    assert gpu.static.mig_instances == (chosen,)
    assert [m.instance for m in gpu.mig] == [chosen]
    assert gpu.processes, "the chosen instance runs processes"
    assert all(chosen.runs(p) for p in gpu.processes)
    assert not others & {p.pid for p in gpu.processes}


def test_collector_selection_of_two_gpus_limits_only_the_one_named_by_mig(mig_collector):
    statics = mig_collector.statics()
    legacy = f"MIG-{statics[2].uuid}/5/0"  # GPU 2's instance with GPU instance 5
    mig_collector.select(select_gpus(statics, f"1,{legacy}"))
    one, two = mig_collector.collect().gpus
    assert (one.index, len(one.mig)) == (1, 3), "GPU 1 named whole: all of it"
    assert [m.instance.gpu_instance_id for m in two.mig] == [5]
    assert all(p.gpu_instance_id == 5 for p in two.processes)


def test_the_collector_and_the_tui_filter_narrow_a_gpu_alike(mig_collector):
    """``--gpus MIG-...`` (the collector) and the GPU picker (ProcessFilter.limit) show the same slice of a GPU."""
    whole = mig_collector.collect().gpu(1)
    assert whole is not None
    chosen = whole.mig[2].instance
    by_filter = ProcessFilter(gpus=frozenset({1}), instances=frozenset({chosen.key(1)})).limit(whole)
    mig_collector.select(select_gpus(mig_collector.statics(), [chosen.uuid]))
    (by_collector,) = mig_collector.collect().gpus
    assert by_filter.static == by_collector.static
    assert by_filter.static.mig_instances == (chosen,)
    assert [u.index for u in by_filter.sample.mig_usage] == [u.index for u in by_collector.sample.mig_usage]
    assert {p.pid for p in by_filter.processes} == {p.pid for p in by_collector.processes} != set()


PACKAGE = Path(__file__).resolve().parents[2] / "nvtopy"
# An f-string "gpu/gi/ci" whose middle part is a GPU instance id: the MIG label.
_MIG_LABEL = re.compile(r"\{[^{}]*\}/\{(?:gi|[^{}]*gpu_instance_id[^{}]*)\}/\{")


def test_narrowing_to_mig_instances_and_their_label_have_one_home():
    """One function narrows a GPU to MIG instances (selection.narrow_to_instances) and one writes ``1/2/0``
    (model.MigKey.label): the collector, the TUI filter and the model no longer each restate them."""
    sources = {path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}
    labels = {name: len(_MIG_LABEL.findall(text)) for name, text in sources.items() if _MIG_LABEL.search(text)}
    assert labels == {"model.py": 1}
    narrowing = {name for name, text in sources.items() if "mig_usage=tuple(" in text}
    assert narrowing == {"selection.py"}
    rules = {name for name, text in sources.items() if "process.compute_instance_id ==" in text}
    assert rules == {"model.py"}


# --------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def demo_instances() -> tuple[MigInstance, ...]:
    """GPU 1's MIG devices as ``nvtopy --demo --demo-fault mig=3@1`` has them (the same seed, the same UUIDs)."""
    backend = open_backend(simulated_spec(faults=["mig=3@1"], steady=True, processes_per_gpu=8))
    try:
        instances = backend.read_static(1).mig_instances
    finally:
        backend.close()
    assert len(instances) == 3 and all(m.uuid for m in instances)
    return instances


def run(*args: str, cvd: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    return run_nvtopy(*args, env=env)


def _mig_uuids(gpu: dict) -> list[str]:
    """The MIG devices a JSON GPU lists (UUID strings, or objects with a ``uuid``)."""
    return [m if isinstance(m, str) else m["uuid"] for m in gpu.get("mig_devices") or []]


def _shown(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cli_unfiltered_shows_every_instance_and_processes_on_several(demo_instances):
    data = _shown(run(*DEMO, "--once", "--json"))
    gpu = data["gpus"][1]
    assert _mig_uuids(gpu) == [m.uuid for m in demo_instances]
    on = {instance_of(p["pid"], demo_instances).index for p in gpu["processes"]}
    assert len(on) > 1, "processes on several instances: the filtered runs below can show a difference"


@pytest.mark.parametrize("which", [0, 1, 2])
def test_cli_only_visible_with_one_mig_device_shows_exactly_it(demo_instances, which):
    chosen = demo_instances[which]
    result = run(*DEMO, "--only-visible", "--once", "--json", cvd=chosen.uuid)
    data = _shown(result)
    assert result.stderr == ""
    assert [g["index"] for g in data["gpus"]] == [1]
    (gpu,) = data["gpus"]
    assert _mig_uuids(gpu) == [chosen.uuid]
    assert gpu["processes"], "steady slots: the instance runs processes"
    assert all(instance_of(p["pid"], demo_instances) is chosen for p in gpu["processes"])


def test_cli_only_visible_with_several_mig_devices_shows_the_first_and_warns(demo_instances):
    second, first = demo_instances[1], demo_instances[2]
    cvd = f"{first.uuid[:12]},{second.uuid}"
    result = run(*DEMO, "--only-visible", "--once", "--json", cvd=cvd)
    data = _shown(result)
    assert result.stderr == (
        "nvtopy: warning: CUDA_VISIBLE_DEVICES lists 2 MIG devices: a CUDA process uses only the first "
        f"({first.uuid}, GPU 1/3/0); showing it\n"
    )
    (gpu,) = data["gpus"]
    assert gpu["index"] == 1 and _mig_uuids(gpu) == [first.uuid]
    assert all(instance_of(p["pid"], demo_instances) is first for p in gpu["processes"])


# GPU 1 with MIG enabled and no MIG device configured: CUDA exposes nothing of it.
NO_MIG_DEVICE = ("--demo", "--demo-gpus", "2", "--demo-fault", "mig=0@1")


@pytest.mark.parametrize(("cvd", "shown"), [(None, [0]), ("1", []), ("0,1", [0])])
def test_cli_only_visible_leaves_out_a_mig_gpu_without_mig_devices(cvd, shown):
    result = run(*NO_MIG_DEVICE, "--only-visible", "--once", "--json", cvd=cvd)
    assert [g["index"] for g in _shown(result)["gpus"]] == shown
    assert result.stderr == (
        "nvtopy: warning: GPU 1 has MIG enabled and no MIG device configured: CUDA exposes nothing there\n"
    )


def test_cli_disjoint_gpus_and_only_visible_say_why_nothing_is_shown():
    result = run("--demo", "--demo-gpus", "2", "--gpus", "0", "--only-visible", "--once", cvd="1")
    assert result.returncode == 0 and result.stdout.splitlines()[1:] == ["No GPUs selected."]
    assert result.stderr == (
        "nvtopy: warning: --gpus '0' and --only-visible have nothing in common: "
        "CUDA_VISIBLE_DEVICES='1' exposes GPU 1 only\n"
    )


def test_cli_gpus_mig_prefix_and_legacy_form(demo_instances):
    first, second = demo_instances[0], demo_instances[1]
    data = _shown(run(*DEMO, "--gpus", f"0,{first.uuid[:9].lower()}", "--once", "--json"))
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    assert _mig_uuids(data["gpus"][1]) == [first.uuid]
    parent = _shown(run(*DEMO, "--once", "--json"))["gpus"][1]["uuid"]
    data = _shown(run(*DEMO, "--gpus", f"MIG-{parent[:12]}/2/0", "--once", "--json"))
    (gpu,) = data["gpus"]
    assert _mig_uuids(gpu) == [second.uuid]
    assert all(instance_of(p["pid"], demo_instances) is second for p in gpu["processes"])


def test_cli_gpus_unknown_mig_device_is_one_line_exit_2(demo_instances):
    result = run(*DEMO, "--gpus", "MIG-ffff", "--once")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("nvtopy: error: --gpus: no MIG device matches 'MIG-ffff' (MIG devices: 1/1/0 ")
    assert demo_instances[2].uuid[:12] in result.stderr


def test_the_monitor_says_why_no_gpu_is_selected(monkeypatch, capsys):
    """In the monitor too, not only on stderr once it has quit: the reason is a notification beside "No GPUs"."""
    import asyncio

    from nvtopy.commands import dispatch
    from nvtopy.tui.app import NvtopyApp

    from ..tui_helpers import wait_until, widget_lines

    seen: dict[str, object] = {}

    def run_in_pilot(app: NvtopyApp, *args, **kwargs) -> None:
        async def session() -> None:
            async with app.run_test(size=(120, 40), notifications=True) as pilot:
                await wait_until(pilot, lambda: bool(app._notifications), message="a notification")
                await wait_until(pilot, lambda: app.snapshot is not None, message="a snapshot")
                await pilot.pause()
                seen["notes"] = [str(n.message) for n in app._notifications]
                seen["gpus"] = widget_lines(app.query_one("#gpus"))

        asyncio.run(session())

    monkeypatch.setattr(NvtopyApp, "run", run_in_pilot)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert dispatch.main(["--demo", "--demo-gpus", "2", "--gpus", "0", "--only-visible"]) == 0
    why = "--gpus '0' and --only-visible have nothing in common: CUDA_VISIBLE_DEVICES='1' exposes GPU 1 only"
    assert seen["notes"] == [why]
    assert "No GPUs selected" in seen["gpus"][0]
    assert capsys.readouterr().err == f"nvtopy: warning: {why}\n", "and on stderr once the terminal is back"


async def test_the_monitor_tells_no_gpu_found_from_none_selected(sim):
    from nvtopy.tui.app import NvtopyApp

    from ..tui_helpers import started, widget_lines

    for backend, select, words in (
        (sim(gpus=0), None, "No NVIDIA GPU found"),
        (sim(gpus=2), lambda collector: (), "No GPUs selected"),
    ):
        app = NvtopyApp.for_backend(backend, interval=2.0, select=select)
        async with app.run_test(size=(120, 40)) as pilot:
            await started(pilot, app)
            assert widget_lines(app.query_one("#gpus"))[0].startswith(words)
