"""The I/O thread patches a host's last snapshot in place; a refresh decoding that snapshot holds the session's lock.

``StreamReader(in_place=True)`` changes the last snapshot's GPU and process objects rather than copying them
(tests/formats/test_stream_in_place.py holds the values to the copying reader's). What keeps a refresh from
decoding a snapshot half patched is :attr:`Session.lock`: the I/O thread applies a line and publishes it
holding it, and the refresh takes and decodes a host's newest value holding it. Shown here with the real
reading code (``SshStreams._stream_line``) on one thread and the lock held on another.
"""

from __future__ import annotations

import json
import threading
import time

from nvtopy.formats.stream import hello_line
from nvtopy.sources.remote.ssh.session import Mode, Session, State
from nvtopy.sources.remote.ssh.streams import SshStreams
from nvtopy.sources.remote.ssh.targets import expand

from . import fake_ssh


def _streams() -> tuple[SshStreams, Session]:
    streams = SshStreams(expand(["gpu-a"], {}), lambda target: ["true"], "", 1.0)
    session = streams.sessions[0]
    streams._line(session, hello_line("gpu-a", 1.0).rstrip("\n").encode(), time.monotonic())
    assert session.mode is Mode.NVTOPY and session.status.state is State.LIVE
    return streams, session


def test_a_patch_waits_for_the_refresh_that_holds_the_session():
    streams, session = _streams()
    lines = [line.encode() for line in fake_ssh.snapshot_lines(gpus=2, processes=2, count=3)]
    streams._stream_line(session, lines[0], time.monotonic())
    streams._stream_line(session, lines[1], time.monotonic())
    latest = session.latest
    assert latest is not None and latest.patch is not None  # the second line came as a patch
    shown = json.dumps(latest.payload)
    began = threading.Event()

    def io_thread() -> None:
        began.set()
        streams._stream_line(session, lines[2], time.monotonic())

    with session.lock:  # as SshHosts.poll_once holds it while it decodes the host
        thread = threading.Thread(target=io_thread, daemon=True)
        thread.start()
        assert began.wait(5.0)
        deadline = time.monotonic() + 0.3  # the patch applies in microseconds once it may: no change meanwhile
        while time.monotonic() < deadline:
            assert session.latest is latest
            assert json.dumps(latest.payload) == shown, "the snapshot being decoded was changed under the refresh"
            time.sleep(0.01)
    thread.join(5.0)
    assert not thread.is_alive()
    assert session.latest is not latest and session.latest is not None
    assert session.latest.sequence == latest.sequence + 1
    assert json.dumps(session.latest.payload) == _whole(lines)
    streams.stop()


def _whole(lines: list[bytes]) -> str:
    """The third line's snapshot, whole: the copying reader's."""
    from nvtopy.formats.stream import StreamReader

    reader = StreamReader()
    for line in lines:
        said = reader.read(line)
    return json.dumps(said)


def test_a_patch_that_does_not_fit_drops_the_host_and_leaves_its_last_snapshot_as_it_was():
    streams, session = _streams()
    lines = [line.encode() for line in fake_ssh.snapshot_lines(gpus=2, processes=2, count=2)]
    streams._stream_line(session, lines[0], time.monotonic())
    latest = session.latest
    assert latest is not None
    shown = json.dumps(latest.payload)
    bad = {"nvtopy_stream": 1, "patch": {"gpus": {"$list": [{"power_draw_w": 1.0, "processes": {"$list": []}}, {}]}}}
    streams._stream_line(session, json.dumps(bad).encode(), time.monotonic())
    assert session.status.state is State.LOST
    count = len(latest.payload["gpus"][0]["processes"])
    assert session.status.reason == f"sent a line that is no snapshot (a patch of 0 items for a list of {count})"
    assert session.latest is latest and json.dumps(latest.payload) == shown
    streams.stop()
