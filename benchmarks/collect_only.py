"""The monitor's collection alone: what nvtopy's TUI spends off its UI thread, with no UI at all.

It runs the very poller the TUI runs (the NVML backend opened on the poller's
thread, the monitor's field groups, the Xid event watcher, chart history, a 1 s
interval) and throws each snapshot away. ``make bench-peers`` runs it beside
nvitop, nvtopy and :mod:`textual_floor` in the same tmux harness: the
collection's CPU plus Textual's floor is the least any Textual monitor built on
this collection can spend, which says whether a CPU aim is within reach before
anyone optimises the drawing.

    LD_LIBRARY_PATH=.cache/fake-nvml/build FAKE_NVML_GPUS=8 .venv/bin/python benchmarks/collect_only.py

``--polls N`` instead runs N polls at once on the calling thread, each a second later on a
stepped clock (every field group at its cadence, as live), after 3 to warm up, and exits: for
instruction counts, the difference of two N under callgrind is the cost of that many polls
(no Xid thread, no sleeping):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python benchmarks/collect_only.py --polls 30   # and --polls 10
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots (default 1)")
    parser.add_argument("--polls", type=int, help="run this many polls on a stepped clock at once, then exit")
    args = parser.parse_args()
    if args.polls is not None:
        return stepped(args.polls)

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


def stepped(polls: int) -> int:
    """``--polls``: the poller's own poll, a second apart on a stepped clock, with no thread of its own."""
    import time
    import types

    from nvtopy.backends.open import backend_opener, nvml_spec
    from nvtopy.sources import poller as poller_module
    from nvtopy.sources.poller import MONITOR_GROUPS, Poller

    backend = backend_opener(nvml_spec())()
    poller = Poller(backend, interval=1.0, groups=MONITOR_GROUPS)
    poller.subscribe(lambda snapshot: None)
    now = [time.monotonic()]
    # Only the poller's cadence reads this clock; the GPU reads' deadlines keep the real one.
    poller_module.time = types.SimpleNamespace(monotonic=lambda: now[0])  # type: ignore[assignment]
    for _ in range(3 + polls):
        now[0] += 1.0
        poller.poll_once()
    assert poller.collector is not None
    poller.collector.close()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
