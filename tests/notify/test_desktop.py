"""Desktop notifications on a real private session bus (dbus-daemon) with a tiny Notifications service.

The service (data/notifications_service.py) runs on the system python3's PyGObject, no dependency of
nvtopy's: these tests skip, saying why, where dbus-daemon or PyGObject is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvtopy.alerts.catalog import AlertSeverity
from nvtopy.alerts.events import Transition
from nvtopy.notify import Dispatcher, parse_channels
from nvtopy.notify.channel import ChannelError, ChannelUnavailable
from nvtopy.notify.desktop import DesktopChannel, gvariant_string

from .helpers import DEADLINE_S, Problems, make_event, wait_for

pytestmark = pytest.mark.timeout(90)
SERVICE = Path(__file__).parent / "data" / "notifications_service.py"
SYSTEM_PYTHON = "/usr/bin/python3"


def _why_no_bus() -> str | None:
    if not shutil.which("dbus-daemon"):
        return "dbus-daemon is not installed (Debian: dbus-daemon)"
    if not shutil.which("gdbus"):
        return "gdbus is not installed (Debian: libglib2.0-bin)"
    probe = (
        subprocess.run(
            [SYSTEM_PYTHON, "-c", "from gi.repository import Gio, GLib"], capture_output=True, timeout=30, check=False
        )
        if os.path.exists(SYSTEM_PYTHON)
        else None
    )
    if probe is None or probe.returncode != 0:
        return "the system python3 has no PyGObject for the test's Notifications service (Debian: python3-gi)"
    return None


class Bus:
    """A private session bus and, on it, the test's Notifications service."""

    def __init__(self, tmp_path: Path) -> None:
        self.daemon = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self.daemon.stdout is not None
        self.address = self.daemon.stdout.readline().strip()  # dbus-daemon prints it once it listens
        assert self.address.startswith("unix:"), self.address
        self.environ = {"DBUS_SESSION_BUS_ADDRESS": self.address, "PATH": os.environ.get("PATH", os.defpath)}
        self.record = tmp_path / "notifications.jsonl"
        self.service: subprocess.Popen[str] | None = None

    def start_service(self, mode: str) -> None:
        self.service = subprocess.Popen(
            [SYSTEM_PYTHON, str(SERVICE), mode, str(self.record)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **self.environ},
            text=True,
            start_new_session=True,
        )
        assert self.service.stdout is not None
        assert self.service.stdout.readline().strip() == "READY"  # it owns the name

    def notifications(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        for proc in (self.service, self.daemon):
            if proc is not None:
                proc.kill()
                proc.wait(DEADLINE_S)
                if proc.stdout is not None:
                    proc.stdout.close()


@pytest.fixture
def bus(tmp_path) -> Iterator[Bus]:
    why = _why_no_bus()
    if why:
        pytest.skip(why)
    started = Bus(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def test_a_notification_reaches_the_desktop_with_its_words_and_urgency(bus):
    bus.start_service("ok")
    channel = DesktopChannel(bus.environ)
    tricky = "12"  # reads as a number in GVariant text: must arrive as the string it is
    channel.send(make_event(0, title=tricky), time.monotonic() + DEADLINE_S)
    channel.send(
        make_event(1, severity=AlertSeverity.WARNING, summary="it's a \\ 'quoted' \"line\"\nwith \x1b[31m escapes"),
        time.monotonic() + DEADLINE_S,
    )
    channel.send(make_event(2, transition=Transition.CLEARED), time.monotonic() + DEADLINE_S)
    first, second, third = bus.notifications()
    assert first["app"] == "nvtopy" and first["summary"] == "FIRING critical: 12"
    assert first["hints"]["urgency"] == 2 and first["body"].startswith("GPU 1 on host-a fell off the bus (event 0)\n")
    assert "What to do: Drain the node and reset the GPU." in first["body"]
    assert second["hints"]["urgency"] == 1
    assert second["body"].startswith("it's a \\ 'quoted' \"line\"\\x0awith \\x1b[31m escapes\n")  # escaped, not raw
    assert third["hints"]["urgency"] == 0 and third["summary"] == "cleared: Xid 79 on GPU 1"


def test_a_bus_without_a_notification_service_is_a_failure_reported_once(bus):
    problems = Problems()
    dispatcher = Dispatcher([DesktopChannel(bus.environ)], problems)
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].failed == 3, "three failed sends")
        wait_for(lambda: problems.items, "the report")
        (report,) = problems.about("desktop")
        assert report.startswith("failed: gdbus exited 1: ") and "org.freedesktop.Notifications" in report
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_a_notification_service_that_never_answers_is_cut_off_at_the_deadline(bus):
    bus.start_service("hang")
    problems = Problems()
    dispatcher = Dispatcher([DesktopChannel(bus.environ)], problems, send_timeout=1.0)
    try:
        dispatcher.send(make_event(0))
        wait_for(lambda: problems.items, "the report")
        assert len(bus.notifications()) == 1
        (report,) = problems.about("desktop")
        assert report.startswith("failed: gdbus ")  # its own timeout (1 s) or our kill: either way, by the deadline
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_no_session_bus_makes_the_channel_unavailable_once():
    channel = DesktopChannel({"PATH": os.environ.get("PATH", os.defpath)})
    assert channel.unavailable_reason() == "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    problems = Problems()
    dispatcher = Dispatcher([channel], problems)
    try:
        for n in range(3):
            dispatcher.send(make_event(n))
        wait_for(lambda: dispatcher.stats()[0].skipped == 3, "all three to be skipped")
        wait_for(lambda: problems.items, "the report")
        assert problems.about("desktop") == [
            "unavailable: no session bus (DBUS_SESSION_BUS_ADDRESS is not set) (no more alerts are sent to it)"
        ]
    finally:
        assert dispatcher.close(DEADLINE_S)


def test_no_helper_program_makes_the_channel_unavailable(tmp_path):
    channel = DesktopChannel({"DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent", "PATH": str(tmp_path)})
    with pytest.raises(ChannelUnavailable, match="neither gdbus nor notify-send is installed"):
        channel.send(make_event(0), time.monotonic() + DEADLINE_S)


def test_notify_send_is_used_where_gdbus_is_missing(tmp_path):
    """A stand-in notify-send (a script recording its argv): checks the arguments nvtopy gives it."""
    record = tmp_path / "argv"
    fake = tmp_path / "notify-send"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > {record}\n')
    fake.chmod(0o755)
    channel = DesktopChannel({"DBUS_SESSION_BUS_ADDRESS": "unix:path=/x", "PATH": str(tmp_path)})
    channel.send(make_event(0), time.monotonic() + DEADLINE_S)
    argv = record.read_text().split("\0")[:-1]
    assert argv[:3] == ["--urgency=critical", "--app-name=nvtopy", "FIRING critical: Xid 79 on GPU 1"]
    assert argv[3].startswith("GPU 1 on host-a fell off the bus (event 0)\n")


def test_a_failing_notify_send_is_a_failure(tmp_path):
    fake = tmp_path / "notify-send"
    fake.write_text("#!/bin/sh\necho 'cannot connect' >&2\nexit 1\n")
    fake.chmod(0o755)
    channel = DesktopChannel({"DBUS_SESSION_BUS_ADDRESS": "unix:path=/x", "PATH": str(tmp_path)})
    with pytest.raises(ChannelError, match="notify-send exited 1: cannot connect"):
        channel.send(make_event(0), time.monotonic() + DEADLINE_S)


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("12", "'12'"),
        ("it's", "'it\\'s'"),
        ("a\\b", "'a\\\\b'"),
        ('say "hi"', "'say \"hi\"'"),
        ("line\nnext\x1b", "'line\\u000anext\\u001b'"),
        ("GPU ✓", "'GPU ✓'"),
    ],
)
def test_gvariant_string_quotes_and_escapes(text, literal):
    assert gvariant_string(text) == literal


def test_the_desktop_entry_parses():
    (channel,) = parse_channels(["desktop"])
    assert channel.name == "desktop" and "desktop notifications" in channel.description


def test_systemds_user_bus_counts_as_a_session_bus_without_the_variable(tmp_path):
    (tmp_path / "bus").write_text("")  # GLib looks for $XDG_RUNTIME_DIR/bus when the variable is not set
    channel = DesktopChannel({"XDG_RUNTIME_DIR": str(tmp_path), "PATH": os.environ.get("PATH", os.defpath)})
    assert channel.unavailable_reason() in (None, "neither gdbus nor notify-send is installed")
    assert DesktopChannel({"XDG_RUNTIME_DIR": str(tmp_path / "none")}).unavailable_reason() == (
        "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    )
