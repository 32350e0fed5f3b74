"""Shared fixtures: deterministic simulated backends and a controllable clock."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# ../shared/fake-nvml beside the checkout (a user's clone has none: tests using it skip).
FAKE_NVML_SRC = Path(os.environ.get("NVTOPY_FAKE_NVML_DIR", ROOT.parent / "shared" / "fake-nvml"))
# Tests that run the real nvidia-ml-py against ../shared/fake-nvml: skipped where it (or a C compiler) is absent.
needs_fake_nvml = pytest.mark.skipif(
    not (FAKE_NVML_SRC / "fake_nvml.c").exists() or shutil.which("make") is None or shutil.which("cc") is None,
    reason="../shared/fake-nvml (or a C compiler) is not available",
)


def _has_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# Tests of what a machine without an NVIDIA driver sees (skipped where a real driver is loaded).
without_nvml_driver = pytest.mark.skipif(_has_nvml(), reason="this machine has an NVIDIA driver")
FROZEN_TIME = 1_795_000_000.0  # a fixed Unix time: simulated values depend only on it


# pytest caches each test module's assertion-rewritten bytecode only where Python may write bytecode: under
# PYTHONDONTWRITEBYTECODE=1 (set in some shells) every pytest process, each xdist worker included, rewrote all
# ~140 test modules again (6.4 s of CPU per process on the 2-core CI machine, 1.6 s with the cache). The
# package's own bytecode is `make install`'s (compileall); this only lets the test modules' cache be written.
sys.dont_write_bytecode = False

# A child inherits an ignored SIGINT (a run started in the background by a non-interactive shell, or under
# nohup, ignores it): the tests that send SIGINT to a child they started would then wait for an exit that
# never comes. Python's own default handler again, as in a terminal: the children get SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    """End this process's nvtopy fork servers (tests/cli_runner.py) and reap them: their runs' CPU then counts."""
    from .cli_runner import shutdown

    shutdown()


# The longest tests, in seconds (make test's --durations, 2-core machine, 2026-11-30): the slow tests start longest
# first. A name not here (or no longer a test's) only orders less well: the order is all it changes.
LONGEST_S = {
    "test_64_hosts_x_8_gpus": 40,
    "test_health_before_the_first_collection_then_a_hung_driver_and_its_recovery": 23,
    "test_report_against_a_real_prometheus": 20,
    "test_faults_reach_the_webhook_as_readable_alerts_and_nothing_else": 17,
    "test_the_queries_per_refresh_do_not_grow_with_hosts": 15,
    "test_one_hung_gpu_keeps_health_200_and_is_named": 12,
    "test_fake_driver_0_2_s_per_call_quit_is_prompt_after_the_first_frame": 8,
}

# `make test`'s timing pass collects only the files that say "mark.timing" (a grep, in the Makefile).
TIMING_SPELLING = "mark.timing"


def _encodable(value: object) -> object:
    """``value`` with every string's lone surrogates written as escapes (``\\udcff``), through dicts and lists."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_encodable(v) for v in value)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config: pytest.Config, report: object) -> Iterator[dict | None]:
    """A report as xdist sends it, with lone surrogates written as escapes in every string.

    Why: hostile text (undecodable bytes read with ``surrogateescape``) reaches a failing assertion's message
    (``assert command == expected``, where ``expected`` is a hostile argv) and captured output, and execnet
    encodes strictly: a worker could not send the report, so a *failed* test became an INTERNALERROR that
    stopped the whole run and hid the failure (tests/end_to_end/test_text_policy.py, fresh clones,
    2026-11-30: the crash was in ``longrepr.reprcrash.message``, not in the captured sections).
    """
    data = yield
    return None if data is None else _encodable(data)  # type: ignore[return-value]


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Group, check, then order the run for pytest-xdist (the tests themselves are unchanged).

    Before the other plugins: the tests of a module that use a module- or class-scoped fixture (a real
    Prometheus with three exporters, a compiled capture set) form one ``xdist_group`` (xdist reads it next):
    with ``--dist loadgroup`` the fixture is set up once, not once per worker. And a timing test whose file
    does not spell ``mark.timing`` stops the run: the timing pass would not collect it, the main pass leaves
    it out.

    After them (``-m`` has deselected what the pass does not run): the ``slow`` tests (mostly waiting: a
    Prometheus scraping, a player filling its bound) go first, longest first (``LONGEST_S``), so that their
    waits overlap the rest of the run instead of being its tail; each is followed by a quicker test, as xdist's
    first hand-out gives each worker two tests in a row: two slow ones on one worker (the two exporter
    readiness tests, 37 s in all; the sshd test then the 64 hosts) made the timing pass's tail.
    """
    spelled: dict[Path, bool] = {}
    for item in items:
        if item.get_closest_marker("timing") is not None:
            if item.path not in spelled:
                spelled[item.path] = TIMING_SPELLING in item.path.read_text(encoding="utf-8")
            if not spelled[item.path]:
                raise pytest.UsageError(
                    f"{item.nodeid} is a timing test but its file never says {TIMING_SPELLING!r}: "
                    "make test's timing pass collects only the files that do (Makefile)"
                )
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group"):
            continue
        scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    yield
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    slow.sort(key=lambda item: -LONGEST_S.get(getattr(item, "originalname", item.name), 0))  # stable
    rest = iter([item for item in items if item.get_closest_marker("slow") is None])
    items[:] = [pair for item in slow for pair in (item, next(rest, None)) if pair is not None] + list(rest)


@pytest.fixture(scope="session")
def xdg_config_homes(tmp_path_factory) -> Iterator[Path]:
    """Fresh empty directories, one a ``next``, in one folder of this process's: each test's XDG config home.

    Not ``tmp_path_factory.mktemp`` a test: it finds its next number by listing the whole base folder, which
    grows by a folder or two a test (the autouse fixture below cost 1.7 ms of CPU a test, 0.4 ms now).
    """
    folder = tmp_path_factory.mktemp("xdg-config")

    def fresh() -> Iterator[Path]:
        for number in itertools.count():
            home = folder / str(number)
            home.mkdir()  # never there before: an error, not a shared directory, if it were
            yield home

    return fresh()


@pytest.fixture(autouse=True)
def isolated_preferences(xdg_config_homes, monkeypatch):
    """No test sees the developer's own preferences: an empty XDG config directory of its own (so no
    ~/.config/nvtopy/config.toml, and the column chooser writes there), no $NVTOPY_CONFIG, no NO_COLOR; and
    the default cell palette again after the test (a colour-blind theme switches it for the process)."""
    from nvtopy.render.cells import use_palette

    monkeypatch.setenv("XDG_CONFIG_HOME", str(next(xdg_config_homes)))
    monkeypatch.delenv("NVTOPY_CONFIG", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    # The terminal's size is the test's own too: pytest-xdist's workers inherit COLUMNS=80 (and LINES) from
    # pytest's terminal, a serial run does not, and the text view fits its columns to COLUMNS.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    yield
    use_palette("default")


class ManualClock:
    """A clock tests advance by hand."""

    def __init__(self, start: float = FROZEN_TIME) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock):
    """A factory of deterministic simulated backends on the manual clock."""
    from nvtopy.backends.simulated.backend import SimulatedBackend

    made = []

    def make(**kwargs):
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("viewer", "alice")
        backend = SimulatedBackend(**kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def make_backend(clock):
    """A factory of NVML backends over a fake ``pynvml`` (tests/fake_pynvml.py), on the manual clock, closed after."""
    from nvtopy.backends.nvml.backend import NvmlBackend

    made: list[NvmlBackend] = []

    def make(nvml, **kwargs) -> NvmlBackend:
        kwargs.setdefault("clock", clock)
        backend = NvmlBackend(nvml=nvml, foreign_pids=False, **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def nvtopy_cmd() -> list[str]:
    """The command that runs the CLI of this checkout."""
    from .builders import NVTOPY

    return list(NVTOPY)


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory) -> str:
    """A directory holding ../shared/fake-nvml built as libnvidia-ml.so.1 (for LD_LIBRARY_PATH), built once.

    Once, not once per pytest-xdist worker nor once per run: the first worker to get there builds while the
    others wait for it (about 5 s of CPU each build, 20 s on a busy 2-core machine, on the critical path of
    ``make test``'s timing pass, which came after the main pass had built the same), and the build is kept, by
    what it is built from, beside pytest's numbered run directories (``/tmp/pytest-of-USER``).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    run = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()
    # pytest's own directory for this user's runs; a --basetemp of one's own: the run's directory, as before.
    kept = next((parent for parent in run.parents if parent.name.startswith("pytest-of-")), run)
    build = kept / f"fake-nvml-{_fake_nvml_key()}"
    failed = run / "fake-nvml.failed"  # the build's error, for every worker of this run to skip with
    with _exclusive(kept / "fake-nvml.lock", deadline_s=300):
        if not build.is_dir() and not failed.exists():
            building = run / "fake-nvml"  # then renamed: a build cut short is never taken for a whole one
            result = subprocess.run(
                ["make", "-s", "-C", str(FAKE_NVML_SRC), f"BUILD={building}"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if result.returncode != 0:
                failed.write_text(result.stderr.strip()[:200] or f"make exited {result.returncode}")
            else:
                building.rename(build)
    if failed.exists():
        pytest.skip(f"cannot build fake-nvml: {failed.read_text()}")
    return str(build)


def _fake_nvml_key() -> str:
    """What the fake driver is built from: its source and Makefile, and make's compiler variables."""
    digest = hashlib.sha256()
    for name in ("fake_nvml.c", "Makefile"):
        source = FAKE_NVML_SRC / name
        digest.update(source.read_bytes() if source.is_file() else b"")  # none: make fails, the tests skip
    for variable in ("CC", "CFLAGS", "LDFLAGS", "LDLIBS"):
        digest.update(f"{variable}={os.environ.get(variable, '')}\0".encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _exclusive(path: Path, deadline_s: float) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (one process at a time), waiting at most ``deadline_s`` for it."""
    with open(path, "a") as handle:
        end = time.monotonic() + deadline_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise TimeoutError(f"{path} still locked after {deadline_s:.0f} s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
