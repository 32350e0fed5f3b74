"""``track`` reports the energy a block used, and prints its report when the application set up no logging."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

import nvtopy
from nvtopy.api import state as runtime
from nvtopy.backends.simulated.backend import SimulatedBackend


@pytest.fixture
def backend(clock, monkeypatch):
    """The API's shared backend: simulated on the manual clock, this process on GPU 0."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    made = SimulatedBackend(gpus=2, seed=3, clock=clock, real_pids=[os.getpid()], viewer="alice", steady=True)
    runtime.configure(made)
    yield made
    runtime.reset()


def test_energy_is_the_counter_difference_in_joules(backend, clock):
    with nvtopy.track("step", gpus=[0], interval=60, callback=lambda r: None) as t:
        clock.advance(10.0)  # ten simulated seconds at several hundred watts
    (gpu,) = t.report.gpus
    power = t.report.gpus[0]
    assert gpu.energy_joules is not None and 500 < gpu.energy_joules < 7000, gpu.energy_joules
    assert "energy" in t.report.format() and t.report.as_dict()["gpus"][0]["energy_joules"] == power.energy_joules


def test_no_counter_means_no_energy(backend, clock):
    from nvtopy.backends.simulated.faults import parse_fault_specs

    backend.faults = parse_fault_specs(["unsupported=energy"], gpus=2)
    with nvtopy.track("step", gpus=[0], interval=60, callback=lambda r: None) as t:
        clock.advance(5.0)
    assert t.report.gpus[0].energy_joules is None
    assert "energy" not in t.report.format(), "N/A is left out of the line, never 0 J"


def test_with_logging_set_up_the_report_goes_to_the_logger(backend, clock, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="nvtopy.track"), nvtopy.track("logged", gpus=[0], interval=60):
        clock.advance(1.0)
    assert any("nvtopy.track logged" in r.getMessage() for r in caplog.records)
    assert "nvtopy.track logged" not in capsys.readouterr().err


SCRIPT = textwrap.dedent(
    """
    import os
    import nvtopy
    from nvtopy.api import state
    from nvtopy.backends.simulated.backend import SimulatedBackend

    state.configure(SimulatedBackend(gpus=1, real_pids=[os.getpid()], steady=True))

    @nvtopy.track(gpus=[0])
    def train_step():
        return 42

    assert train_step() == 42
    """
)


def test_without_logging_a_decorated_function_prints_its_report_to_stderr():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "nvtopy.track train_step" in result.stderr and "GPU 0" in result.stderr
    assert result.stdout == "", "stdout is the application's"


def test_with_logging_configured_nothing_goes_to_stderr_twice():
    script = "import logging\nlogging.basicConfig(level=logging.INFO)\n" + SCRIPT
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("nvtopy.track train_step") == 1, "once, through the logging handler"
    assert "INFO:nvtopy.track" in result.stderr
