"""Shared parts of the notify tests: an event, a poll with a deadline, a problem recorder, a loopback receiver."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nvtopy.alerts.catalog import AlertSeverity
from nvtopy.alerts.events import AlertEvent, Transition

from ..waiting import until

DEADLINE_S = 15.0  # the longest any poll here waits: far past every deadline under test, on a loaded machine


def make_event(n: int = 0, **overrides: Any) -> AlertEvent:
    values: dict[str, Any] = {
        "rule_id": "gpu-xid",
        "alert": "GpuXid",
        "title": "Xid 79 on GPU 1",
        "severity": AlertSeverity.CRITICAL,
        "transition": Transition.FIRING,
        "key": f"gpu-xid/host-a/GPU-1234/{n}",
        "at": 1_700_000_000.0 + n,
        "host": "host-a",
        "summary": f"GPU 1 on host-a fell off the bus (event {n})",
        "description": "The GPU stopped answering on PCIe.",
        "action": "Drain the node and reset the GPU.",
        "gpu_index": 1,
        "gpu_uuid": "GPU-1234",
        "xid": 79,
        "value": "79",
    }
    values.update(overrides)
    return AlertEvent(**values)


def wait_for(check: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """:func:`tests.waiting.until` with these tests' deadline (``what`` second, as every call here passes it)."""
    return until(check, deadline_s, what)


class Problems:
    """An ``on_problem`` callback that records (channel, text) and the thread it was called on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[tuple[str, str]] = []
        self.threads: set[str] = set()

    def __call__(self, channel: str, text: str) -> None:
        with self._lock:
            self.items.append((channel, text))
            self.threads.add(threading.current_thread().name)

    def about(self, channel: str, containing: str = "") -> list[str]:
        with self._lock:
            return [text for name, text in self.items if name == channel and containing in text]

    def all_text(self) -> str:
        with self._lock:
            return "\n".join(f"{name}: {text}" for name, text in self.items)


@dataclass
class Receiver:
    """A real HTTP server on loopback that records each POST's JSON body.

    ``mode``: "ok" (200), "reject" (500) or "hang" (never answers until :meth:`stop`).
    """

    mode: str = "ok"
    port: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver._lock:
                    receiver.bodies.append(body)
                if receiver.mode == "hang":
                    receiver._release.wait(DEADLINE_S * 2)
                    return
                self.send_response(500 if receiver.mode == "reject" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.bodies)

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(DEADLINE_S)


def free_port() -> int:
    """A loopback port nothing listens on (connecting to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
