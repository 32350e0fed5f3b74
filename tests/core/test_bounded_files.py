"""Every file nvtopy reads goes through ``nvtopy.boundedfile``: a FIFO is refused at once, a device is refused, a
file over its cap is refused (or cut, where its beginning is what matters), and a regular file reads as before.

Each reader of the package is listed here (:data:`READERS`) and handed a FIFO and a link to a character
device: each must answer within a deadline, saying so. ``open()`` of a FIFO blocks until someone writes to
it, so each call runs on a thread waited for at most :data:`DEADLINE` seconds; a reader still blocked is
let go by opening the FIFO for writing once, so no thread outlives its test.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvtopy.backends import diagnose
from nvtopy.backends.host.owners import OwnerResolver
from nvtopy.boundedfile import FileMissingError, FileRefusedError, open_regular, read_bounded, size_text
from nvtopy.commands import log
from nvtopy.commands.exporter.server import tls_context
from nvtopy.commands.report import read_recording
from nvtopy.config import Config, load_config
from nvtopy.errors import NvtopyError, UsageError
from nvtopy.sources.remote.tls import client_context
from nvtopy.sources.replay import load_recording

DEADLINE = 10.0  # seconds a reader may take to refuse (it takes microseconds; a blocked one never returns)
STILL_WAITING = "still waiting"


def call_within(call: Callable[[], Any], seconds: float = DEADLINE) -> Any:
    """``call()`` on a thread, waited for at most ``seconds``: its result, what it raised, or STILL_WAITING."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except Exception as exc:  # handed to the test, which says what it expected
            box["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return box.get("result", STILL_WAITING)


def release_fifo(fifo: Path) -> None:
    """A reader blocked opening ``fifo`` (the old way) goes on once a writer opens it and closes it."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading it, as it should be
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _dummy(tmp_path: Path) -> str:
    path = tmp_path / "dummy.pem"
    path.write_text("not a certificate\n")
    return str(path)


def _said(result: Any) -> str:
    return str(result) if isinstance(result, BaseException) else repr(result)


# name -> (the call, given the path and a scratch directory; what it answers for a file it refuses, with {path}
# and {kind} filled in). None: the reader says nothing and goes on without the file.
READERS: dict[str, tuple[Callable[[str, Path], Any], str | None]] = {
    "config": (
        lambda path, _: load_config(path),
        repr((Config(), ["config file {path}: not a regular file ({kind}); using defaults"])),
    ),
    "--ca-file": (lambda path, _: client_context(path), "--ca-file '{path}': not a regular file ({kind})"),
    "--tls-cert": (lambda path, tmp: tls_context(path, _dummy(tmp)), "--tls-cert {path}: not a regular file ({kind})"),
    "--tls-key": (lambda path, tmp: tls_context(_dummy(tmp), path), "--tls-key {path}: not a regular file ({kind})"),
    "--tls-client-ca": (
        lambda path, tmp: tls_context(_dummy(tmp), _dummy(tmp), path),
        "--tls-client-ca {path}: not a regular file ({kind})",
    ),
    "replay": (lambda path, _: load_recording(path), "cannot read {path}: not a regular file ({kind})"),
    "report": (lambda path, _: list(read_recording(path)), "cannot read {path}: not a regular file ({kind})"),
    "log's existing header": (lambda path, _: log._existing_columns(path, ("gpu",)), None),
    "a runtime's config (owners)": (lambda path, _: OwnerResolver()._read_bytes(path, 1 << 16), None),
    "doctor's /proc reads": (lambda path, _: diagnose._read(path), None),
    "doctor's kernel module version": (lambda path, _: diagnose.kernel_module_version(path), None),
    "doctor's mapped library": (lambda path, _: diagnose.loaded_library_version(path), None),
    "doctor's RECORD hashes": (lambda path, _: diagnose._file_hash(path), None),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_fifo_is_refused_at_once_by_every_reader(tmp_path, reader):
    """open() of a FIFO blocked until someone wrote to it: nvtopy hung before its first line."""
    call, said = READERS[reader]
    fifo = tmp_path / "file"
    os.mkfifo(fifo)
    try:
        result = call_within(lambda: call(str(fifo), tmp_path))
    finally:
        release_fifo(fifo)
    assert result != STILL_WAITING, f"{reader}: still waiting on a FIFO after {DEADLINE:g} s"
    expected = "None" if said is None else said.format(path=fifo, kind="a FIFO")
    assert _said(result) == expected


@pytest.mark.parametrize("reader", list(READERS))
def test_a_device_is_refused_by_every_reader(tmp_path, reader):
    """A link to a device (/dev/null here; /dev/zero grew the process without end) is no file to read."""
    call, said = READERS[reader]
    link = tmp_path / "file"
    link.symlink_to(os.devnull)
    result = call_within(lambda: call(str(link), tmp_path))
    expected = "None" if said is None else said.format(path=link, kind="a character device")
    assert _said(result) == expected


def test_the_errors_say_what_the_file_is(tmp_path):
    assert isinstance(call_within(lambda: read_bounded(tmp_path / "nope", 10)), FileMissingError)
    assert str(call_within(lambda: read_bounded(tmp_path, 10))) == "is a directory"
    assert str(call_within(lambda: open_regular(tmp_path))) == "is a directory"
    with pytest.raises(FileRefusedError, match="NUL"):
        read_bounded("a\0b", 10)


def test_a_regular_file_reads_whole_up_to_its_cap_and_is_refused_past_it(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 1000) == b"x" * 1000
    with pytest.raises(FileRefusedError) as refused:
        read_bounded(path, 999)
    assert str(refused.value) == "larger than 999 bytes"
    assert read_bounded(path, 10, cut=True) == b"x" * 10  # where only the beginning matters
    with open_regular(path) as handle:
        assert handle.readline(5) == b"xxxxx" and handle.seek(998) == 998 and handle.read() == b"xx"


def test_a_proc_file_that_says_it_is_empty_is_still_bounded():
    """/proc files give st_size 0: the cap is checked while reading, too."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc here")
    with pytest.raises(FileRefusedError, match="larger than 64 bytes"):
        read_bounded(maps, 64)
    assert len(read_bounded(maps, 64, cut=True)) == 64


def test_sizes_read_as_people_write_them():
    assert [size_text(n) for n in (1 << 20, 64 << 20, 4096, 1000)] == ["1 MiB", "64 MiB", "4 KiB", "1000 bytes"]


def test_a_missing_recording_or_a_file_without_certificates_is_one_line(tmp_path):
    with pytest.raises(NvtopyError, match="no such file"):
        load_recording(str(tmp_path / "gone.jsonl"))
    with pytest.raises(UsageError, match="holds no PEM certificate"):
        client_context(_dummy(tmp_path))
