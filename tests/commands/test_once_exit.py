"""A local ``nvtopy --once`` runs without the cyclic garbage collector and ends without the interpreter's teardown.

Why it matters: the one-shot is a tenth of a second of CPU that scripts and prompts run again and again;
CPython's collector ran 36 times in one (walking the imported modules for next to nothing) and the teardown
freed every object one by one after the output was flushed: about 12 % of its instructions together. What
must hold: only the program's own entry (``dispatch.console``) does it, and only for a local one-shot; the
output is flushed whole and the exit code kept; any other run (the monitor, simulated GPUs) keeps both.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# The program's entry with its command replaced: it reports whether the collector runs, writes without a newline
# (a buffered pipe: only a flush gets it out) and returns 3; an atexit handler tells whether the teardown ran.
_PROGRAM = (
    "import atexit, gc, sys\n"
    "from nvtopy.commands import dispatch\n"
    "from nvtopy.backends.nvml import headstart\n"
    "headstart.begin = lambda *a, **k: None  # no driver here: only the entry's own policy is under test\n"
    "atexit.register(lambda: print(' teardown ran', end=''))\n"
    "def main():\n"
    "    print(f'gc {gc.isenabled()}', end='')\n"
    "    sys.stderr.write('said')\n"
    "    return 3\n"
    "dispatch.main = main\n"
    "sys.argv = ['nvtopy', *sys.argv[1:]]\n"
    "dispatch.console()\n"
)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe's stdout is buffered
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM, *argv], capture_output=True, text=True, timeout=60, check=False, env=env
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv", [["--once"], ["--once", "--json"]])
def test_a_local_one_shot_runs_without_the_collector_and_skips_the_teardown(argv):
    done = _run(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (3, "gc False", "said")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv", [[], ["--once", "--demo"], ["--json"]])
def test_any_other_run_keeps_the_collector_and_the_teardown(argv):
    done = _run(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (3, "gc True teardown ran", "said")
