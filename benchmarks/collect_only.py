"""The monitor's collection alone: what nvtopy's TUI spends off its UI thread, with no UI at all.

It runs the very poller the TUI runs (the NVML backend opened on the poller's
thread, the monitor's field groups, the Xid event watcher, chart history, a 1 s
interval) and throws each snapshot away. ``make bench-peers`` runs it beside
nvitop, nvtopy and :mod:`textual_floor` in the same tmux harness: the
collection's CPU plus Textual's floor is the least any Textual monitor built on
this collection can spend, which says whether a CPU aim is within reach before
anyone optimises the drawing.

    LD_LIBRARY_PATH=.cache/fake-nvml/build FAKE_NVML_GPUS=8 .venv/bin/python benchmarks/collect_only.py
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots (default 1)")
    args = parser.parse_args()

    from nvtopy.backends.open import backend_opener, nvml_spec
    from nvtopy.sources.poller import MONITOR_GROUPS, Poller

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGHUP, lambda *_: done.set())
    opener = backend_opener(nvml_spec())
    poller = Poller(None, interval=args.interval, groups=MONITOR_GROUPS, opener=opener, events=True)
    poller.subscribe(lambda snapshot: None)
    poller.subscribe_failure(lambda error: (print(f"collect_only: {error}", file=sys.stderr), done.set()))
    poller.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        poller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
