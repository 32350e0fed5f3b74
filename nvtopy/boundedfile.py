"""Opening and reading the files nvtopy is pointed at: regular files only, small ones read whole under a cap.

Why one home: every path nvtopy reads comes from outside it -- a config file, a
recording, ``--ca-file``, the exporter's certificate and key, a log file appended
to, a container runtime's config -- and any of them may be a symlink to
``/dev/zero`` (read whole, it grows without end), a FIFO (``open()`` blocks until
someone writes, forever) or a terminal. Here a path is opened with ``O_NONBLOCK``
(a FIFO's ``open`` returns at once instead of waiting for a writer) and checked
with ``fstat`` on the descriptor itself (no race with a rename): anything but a
regular file is refused with a reason in words. A regular file never blocks, so
no read needs a deadline; a small one is read whole only up to its cap, which is
checked before reading (``st_size``) and while reading (``/proc`` files say 0).

Errors are :class:`FileRefusedError`, whose ``str()`` is the reason alone (``no
such file``, ``not a regular file (a FIFO)``, ``larger than 1 MiB``): each caller
says it in its own line, naming the file and what it does without it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO

__all__ = ["FileMissingError", "FileRefusedError", "open_regular", "read_bounded", "size_text"]

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 16

# What a file that is not regular is, in words.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefusedError(Exception):
    """A file that cannot be read or is not read; ``str()`` is the reason, a few words without the path."""


class FileMissingError(FileRefusedError):
    """There is no such file (which some callers take in silence: an optional config file)."""


def size_text(limit: int) -> str:
    """``1 MiB``, ``64 KiB``, ``100 bytes``: a cap as a message says it."""
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    if limit >= 1 << 10 and limit % (1 << 10) == 0:
        return f"{limit >> 10} KiB"
    return f"{limit} bytes"


def _refusal(exc: OSError) -> FileRefusedError:
    if isinstance(exc, FileNotFoundError):
        return FileMissingError("no such file")
    if isinstance(exc, IsADirectoryError):
        return FileRefusedError("is a directory")
    return FileRefusedError(f"cannot read it ({exc.strerror or exc})")


def _open_checked(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` (a regular file) and its stat; FileRefusedError for anything else."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:  # missing, not permitted, a directory, a socket (ENXIO)
        raise _refusal(exc) from None
    except ValueError:  # a NUL in the path
        raise FileRefusedError("not a file name (a NUL character)") from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise _refusal(exc) from None
    if stat.S_ISREG(info.st_mode):
        return fd, info
    os.close(fd)
    if stat.S_ISDIR(info.st_mode):
        raise FileRefusedError("is a directory")
    kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
    raise FileRefusedError(f"not a regular file ({kind})")


def read_bounded(path: str | os.PathLike[str], limit: int, *, cut: bool = False) -> bytes:
    """The whole of the regular file ``path``, at most ``limit`` bytes; FileRefusedError otherwise.

    A file larger than ``limit`` is refused whole (``larger than 1 MiB``), never cut: a cut
    config or certificate would read as something else. ``cut``: its first ``limit`` bytes
    instead, for files whose beginning is what matters (a ``/proc`` file of a process).
    """
    fd, info = _open_checked(path)
    too_large = FileRefusedError(f"larger than {size_text(limit)}")
    try:
        if cut:
            return _read_up_to(fd, limit)
        if info.st_size > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:  # grew while read, or a /proc file (st_size 0)
                raise too_large
            chunks.append(chunk)
    except OSError as exc:
        raise _refusal(exc) from None
    finally:
        os.close(fd)


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(_CHUNK, limit - size))
        if not chunk:
            break
        size += len(chunk)
        chunks.append(chunk)
    return b"".join(chunks)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary (a buffered file, as ``open(path, "rb")``), if it is a regular file.

    For files read line by line with a bound of their own (a recording: at most so many bytes a
    line), whose whole size is no concern. FileRefusedError for anything else.
    """
    fd, _ = _open_checked(path)
    try:
        if _FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file never blocks: the flag was for the open alone
        return os.fdopen(fd, "rb")
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise _refusal(exc) from None
