"""The one backend factory: the CLI and the Python API describe backends alike and open them in one place."""

from __future__ import annotations

import dataclasses
import os

import pytest

from nvtopy.api import state
from nvtopy.backends import open as factory
from nvtopy.backends.open import (
    DEMO_GPUS,
    DEMO_LIFETIME_SCALE,
    DEMO_MODEL,
    DEMO_PROCESSES,
    BackendSpec,
    backend_opener,
    nvml_spec,
    open_backend,
    simulated_spec,
)
from nvtopy.backends.simulated import backend as simulated
from nvtopy.backends.simulated.catalog import find_model
from nvtopy.backends.simulated.faults import SimFaults
from nvtopy.commands import options
from nvtopy.commands.monitor import build_parser
from nvtopy.errors import UsageError


def cli_spec(*argv: str, close_at_exit: bool = True) -> BackendSpec:
    return options.backend_spec(build_parser().parse_args(list(argv)), close_at_exit=close_at_exit)


@pytest.fixture
def no_simulation(monkeypatch):
    """Opening a simulation fails the test: the checks must come before it."""

    def refuse(**_):
        raise AssertionError("a backend was opened")

    monkeypatch.setattr(simulated, "SimulatedBackend", refuse)


@pytest.fixture
def api_specs(monkeypatch):
    """The specs the Python API hands to the factory."""
    seen: list[BackendSpec] = []

    def recording(spec: BackendSpec):
        seen.append(spec)
        return open_backend(spec)

    state.reset()
    monkeypatch.setattr(state, "open_backend", recording)
    yield seen
    state.reset()


def test_defaults_are_the_demo_defaults():
    spec = simulated_spec()
    assert (spec.kind, spec.gpus, spec.model, spec.seed) == ("simulated", DEMO_GPUS, find_model(DEMO_MODEL), 0)
    assert (spec.processes_per_gpu, spec.lifetime_scale, spec.steady) == (DEMO_PROCESSES, DEMO_LIFETIME_SCALE, False)
    assert spec.faults == SimFaults() and spec.real_pids == () and spec.clock is None
    assert spec.waiting_for == "the simulated driver"
    assert nvml_spec().waiting_for == "the NVIDIA driver"


def test_cli_and_api_ask_for_the_same_simulation(api_specs, monkeypatch):
    state.configure("simulated")
    monkeypatch.setenv("NVTOPY_BACKEND", "simulated")
    state.reset()
    state.shared_backend()
    configured, from_environment = api_specs
    cli = cli_spec("--demo")
    # The API adds this process as a GPU process of the simulation; everything else is the same.
    assert configured.real_pids == from_environment.real_pids == (os.getpid(),)
    assert dataclasses.replace(configured, real_pids=()) == dataclasses.replace(from_environment, real_pids=()) == cli
    assert cli == simulated_spec()


def test_api_settings_reach_the_factory(api_specs, monkeypatch):
    state.configure("simulated", gpus=2, model="RTX 4090", seed=5, hostname="node-7", faults=["lost@1"])
    (spec,) = api_specs
    assert (spec.gpus, spec.model.name, spec.seed) == (2, find_model("RTX 4090").name, 5)
    assert spec.faults.lost == {1}
    assert dict(spec.options) == {"hostname": "node-7"}
    assert state.shared_backend().host_info().hostname == "node-7"
    monkeypatch.setenv("NVTOPY_BACKEND", "demo")
    monkeypatch.setenv("NVTOPY_SIM_GPUS", "3")
    monkeypatch.setenv("NVTOPY_SIM_SEED", "9")
    state.reset()
    state.shared_backend()
    assert (api_specs[-1].gpus, api_specs[-1].seed) == (3, 9)


def test_cli_options_reach_the_factory():
    spec = cli_spec("--demo-gpus", "2", "--demo-model", "T4", "--demo-seed", "4", "--demo-procs", "5", "--demo-steady")
    assert (spec.kind, spec.gpus, spec.model.name, spec.seed) == ("simulated", 2, find_model("T4").name, 4)
    assert (spec.processes_per_gpu, spec.steady) == (5, True)
    assert cli_spec("--demo-fault", "lost@1").faults.lost == {1}
    assert cli_spec().kind == "nvml"
    assert cli_spec("--demo-procs", "3").kind == "nvml"  # as before: the default alone asks for no simulation
    assert cli_spec(close_at_exit=False).close_at_exit is False


@pytest.mark.parametrize(
    "argv",
    [
        ("--demo-model", "no-such-gpu"),
        ("--demo-model", "A100"),  # ambiguous
        ("--demo-fault", "bogus"),
        ("--demo-gpus", "2", "--demo-fault", "lost@3"),  # a GPU the simulation lacks
    ],
)
def test_bad_settings_fail_before_anything_opens(no_simulation, argv):
    with pytest.raises(UsageError):
        options.backend_opener(build_parser().parse_args(list(argv)))
    with pytest.raises(UsageError):
        options.open_backend(build_parser().parse_args(list(argv)))


def test_api_bad_settings_are_usage_errors(no_simulation):
    with pytest.raises(UsageError, match="no-such-gpu"):
        state.configure("simulated", model="no-such-gpu")
    with pytest.raises(UsageError, match="configure"):
        state.configure("quantum")


def test_the_opener_opens_later(monkeypatch):
    built = []
    real = simulated.SimulatedBackend

    def spy(**settings):
        built.append(settings)
        return real(**settings)

    monkeypatch.setattr(simulated, "SimulatedBackend", spy)
    waiting_for, opener = options.backend_opener(build_parser().parse_args(["--demo", "--demo-gpus", "1"]))
    assert waiting_for == "the simulated driver" and built == []
    backend = opener()
    try:
        assert backend.device_count() == 1 and len(built) == 1
    finally:
        backend.close()
    assert backend_opener(simulated_spec(gpus=1)).func is factory.open_backend


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="quantum"):
        open_backend(BackendSpec("quantum"))
