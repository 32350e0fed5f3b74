"""The stdio stream: what ``nvtopy serve-stdio`` writes on another machine for ``nvtopy --ssh``.

The near side runs ``ssh HOST 'nvtopy serve-stdio ...'`` and reads the far side's stdout,
one line at a time. The protocol, all of it:

1. **the hello**, at once: ``{"nvtopy_stream": 1, "version": "<nvtopy's>", "hostname": "<host>",
   "interval_s": <seconds>}`` -- the far side is alive and speaks stream version 1;
2. **a snapshot a line**, the first as soon as one is read, then one an interval: exactly the line
   ``nvtopy record`` writes (:func:`~nvtopy.formats.contract.snapshot_to_dict` with its processes,
   encoded compactly by :func:`~nvtopy.formats.contract.encode`), read back by
   :func:`~nvtopy.formats.contract_decoder.snapshot_from_dict`;
3. or **a failure**, ``{"nvtopy_stream": 1, "error": "<one line>"}`` (no driver, no GPU), after
   which the far side exits non-zero. Its shape never changes: a far side of any later stream
   version that fails says why in words an older near side can read.

**Patches.** After its first snapshot line, the far side (:class:`StreamWriter`) sends each
snapshot as ``{"nvtopy_stream": 1, "patch": <what changed since the previous one>}``, and a whole
snapshot line again every :data:`WHOLE_EVERY` snapshots. Why: a monitor watching 64 hosts decodes
64 lines a second, and most of each line is what it was a second ago (names, UUIDs, owners,
commands, NVLink lists read every 5 s, health readings): a patch carries only the changed values,
so the near side parses a third of the bytes, and the values that did not change stay the very
same objects, which the decoder recognises and does not check again
(:class:`~nvtopy.formats.contract_decoder.SnapshotDecoder`). The near side (:class:`StreamReader`)
applies each patch to the previous snapshot, in order, and hands on a whole snapshot object: what
a snapshot line would have been, value for value. A patch is:

- for an object: its keys whose value changed, each with its patch, plus ``"$removed": [keys]``;
- for a list of objects the same length as before: ``{"$list": [a patch per item]}``;
- anything else (a number, text, a list whose length changed, a new key): the new value itself.

A patch that does not fit what came before (a ``$list`` of another length, a patch before any
snapshot, a state grown past :data:`MAX_STATE_BYTES` since the last whole snapshot) is a
:class:`StreamError`: the host is dropped and asked again, and the stream begins whole.

The far side ends when its stdin reaches end of file (the near side closed the session), on
SIGTERM, SIGHUP or SIGINT, and when its stdout is closed.

Why line-delimited JSON, the record/replay contract: a snapshot crosses the wire in the one
format nvtopy already writes, documents (README, "JSON schema") and reads back with one decoder
that checks every value of untrusted input; a line is a frame, so a reader needs no length
prefix, and a stream captured to a file (minus its hello) replays as a recording. Only the
hello and the failure are this module's own, both tagged ``nvtopy_stream`` (a snapshot has no
such key), so one line is always one of the three.

Reading (:func:`read_line`) treats the far side as untrusted: the line is bounded
(:data:`MAX_LINE`), decoded by :func:`~nvtopy.jsondecode.decode_json` (no crash on nesting or
huge integers), every field's type checked, the text of a hello or a failure made safe for a
terminal (:mod:`nvtopy.textsafe`); anything else is a :class:`StreamError` with a short reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..interval import MAX_INTERVAL, MIN_INTERVAL
from ..jsondecode import JsonRefusedError, decode_json
from ..model import Snapshot
from ..textsafe import escape_text, excerpt, unescape_text
from .contract import encode, snapshot_to_dict

__all__ = [
    "MAX_LINE",
    "MAX_STATE_BYTES",
    "STREAM_KEY",
    "STREAM_VERSION",
    "WHOLE_EVERY",
    "StreamError",
    "StreamFailure",
    "StreamHello",
    "StreamPatch",
    "StreamReader",
    "StreamWriter",
    "apply_patch",
    "error_line",
    "hello_line",
    "patch_of",
    "read_line",
    "snapshot_line",
]

STREAM_KEY = "nvtopy_stream"
"""The key of the stream's own lines (the hello, a failure); a snapshot line has none."""
STREAM_VERSION = 1
"""The stream version this nvtopy writes and reads: a far side that speaks a newer one is refused, in words."""
MAX_LINE = 16 << 20
"""Bytes of one line at most (a snapshot of 8 GPUs and their processes is kilobytes): a longer one is refused."""
TEXT_LIMIT = 300
"""Characters of a hello's text or a failure's message kept (the rest is cut and marked): one line."""
_NAME_LIMIT = 253  # a hostname (DNS: 253), a version
WHOLE_EVERY = 300
"""A whole snapshot line every this many snapshots (five minutes at 1 s), the rest patches."""
MAX_STATE_BYTES = 4 * MAX_LINE
"""Bytes of whole line and patches since the last whole line, at most: a stream of patches adding keys forever
cannot grow the near side's state past this (it is an upper bound of that state's size)."""
PATCH_KEY = "patch"
REMOVED = "$removed"
LIST = "$list"


class StreamError(ValueError):
    """A line that is not the stream's (junk, a wrong type, a newer stream version); ``str()`` says why, safely."""


@dataclass(frozen=True, slots=True)
class StreamHello:
    """The first line: the far side runs nvtopy ``version`` on ``hostname``, a snapshot every ``interval_s``.

    ``version`` and ``hostname`` are made safe for a terminal (they are for showing: the snapshots
    carry the host's exact name).
    """

    version: str
    hostname: str
    interval_s: float
    stream: int = STREAM_VERSION


@dataclass(frozen=True, slots=True)
class StreamPatch:
    """A patch line: what changed since the previous snapshot (:class:`StreamReader` applies it)."""

    patch: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """The far side cannot serve (``message``: why, one line, safe for a terminal); it exits non-zero after it."""

    message: str


# ----------------------------------------------------------------- writing


def hello_line(hostname: str, interval: float) -> str:
    """The first line of a stream: who speaks, which version, how often snapshots follow."""
    data = {
        STREAM_KEY: STREAM_VERSION,
        "version": __version__,
        "hostname": escape_text(hostname),
        "interval_s": float(interval),
    }
    return encode(data) + "\n"


def error_line(message: str) -> str:
    """The line that says why the far side cannot serve (one line however many the message has)."""
    text = excerpt(message, TEXT_LIMIT, safe=False)
    return encode({STREAM_KEY: STREAM_VERSION, "error": escape_text(text)}) + "\n"


def snapshot_line(snapshot: Snapshot) -> str:
    """A snapshot as ``nvtopy record`` writes it: the JSON contract with its processes, on one line."""
    return encode(snapshot_to_dict(snapshot, processes=True)) + "\n"


# ----------------------------------------------------------------- patches


def _same(a: Any, b: Any) -> bool:
    """JSON values equal, types included (``1``, ``1.0`` and ``true`` are three values)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(value, b[key]) for key, value in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def patch_of(old: Any, new: Any) -> Any:
    """What turns ``old`` into ``new`` (JSON values; see the module docstring): :func:`apply_patch`'s input."""
    if type(old) is dict and type(new) is dict:
        patch: dict[str, Any] = {}
        for key, value in new.items():
            if key not in old:
                patch[key] = value
            elif not _same(old[key], value):
                patch[key] = patch_of(old[key], value)
        removed = [key for key in old if key not in new]
        if removed:
            patch[REMOVED] = removed
        return patch
    if (
        type(old) is list
        and type(new) is list
        and len(old) == len(new)
        and all(type(item) is dict for item in old)
        and all(type(item) is dict for item in new)
    ):
        return {LIST: [patch_of(a, b) for a, b in zip(old, new, strict=True)]}
    return new


def apply_patch(old: Any, patch: Any) -> Any:
    """``old`` with ``patch`` applied: a new value, sharing every unchanged part with ``old`` (never changed).

    Raises :class:`StreamError` for a patch that does not fit ``old``. Only an object in a patch can be a
    patch of its own; every other value is the new value as it is, set without a call (a line's patch is
    mostly numbers: this runs for 64 hosts a second).
    """
    if type(patch) is not dict:
        return patch
    if type(old) is list:
        return _patched_list(old, patch)
    if type(old) is not dict:
        return patch
    if not patch:
        return old  # unchanged: the very object (an item of a list patch that did not change)
    return _patched_object(old, patch)


def _patched_list(old: list[Any], patch: dict[str, Any]) -> Any:
    """:func:`apply_patch` of a list: ``{"$list": [a patch per item]}``, else the patch is the new value."""
    items = patch.get(LIST)
    if len(patch) != 1 or type(items) is not list:
        return patch  # a new value (an object where a list was)
    if len(items) != len(old):
        raise StreamError(f"a patch of {len(items)} items for a list of {len(old)}")
    return [
        (_patched_object(a, b) if type(a) is dict and type(b) is dict else apply_patch(a, b)) if b else a
        for a, b in zip(old, items, strict=True)
    ]


def _patched_object(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """:func:`apply_patch` of a non-empty patch of an object: its values set in one C call (``old | patch``, a
    line's patch is mostly numbers), then the few that are patches of their own (objects) applied in place of
    what that set. Why not a step per key: every GPU and process of 64 hosts, every second (the I/O thread's
    largest cost). A patch that removes keys is applied key by key, in its order, as it always was."""
    if REMOVED in patch:
        return _patched_in_order(old, patch)
    new = old | patch
    for key, value in patch.items():
        if type(value) is dict and key in old:
            was = old[key]
            if type(was) is dict:
                new[key] = _patched_object(was, value) if value else was
            elif type(was) is list:
                new[key] = _patched_list(was, value)
    return new


def _patched_in_order(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    new = old.copy()
    for key, value in patch.items():
        if type(value) is dict:
            new[key] = apply_patch(old[key], value) if key in old else value
        elif key == REMOVED:
            if type(value) is not list:
                raise StreamError(f"{REMOVED} is {_shown(value)}, not a list of keys")
            for gone in value:
                if type(gone) is str:
                    new.pop(gone, None)
        else:
            new[key] = value
    return new


class StreamWriter:
    """The far side's lines of one stream: the hello, then the first snapshot whole, then patches."""

    def __init__(self, whole_every: int = WHOLE_EVERY) -> None:
        self._last: dict[str, Any] | None = None
        self._since_whole = 0
        self._whole_every = whole_every

    def snapshot(self, snapshot: Snapshot) -> str:
        """The line for ``snapshot``: a whole snapshot line (the first, and every ``whole_every``), else a patch."""
        data = snapshot_to_dict(snapshot, processes=True)
        last, self._last = self._last, data
        if last is None or self._since_whole + 1 >= self._whole_every:
            self._since_whole = 0
            return encode(data) + "\n"
        self._since_whole += 1
        return encode({STREAM_KEY: STREAM_VERSION, PATCH_KEY: patch_of(last, data)}) + "\n"


class StreamReader:
    """The near side of one stream: each line read, patches applied in order; whole snapshot objects out."""

    def __init__(self) -> None:
        self._state: dict[str, Any] | None = None
        self._state_bytes = 0
        self.patch: dict[str, Any] | None = None
        """The patch that made the newest snapshot object of the one before (None: it came whole): a decoder
        that decoded the one before decodes this one from it (``SnapshotDecoder.decode``'s ``patch``)."""

    def read(self, raw: bytes) -> StreamHello | StreamFailure | dict[str, Any]:
        """The hello, a failure, or the whole snapshot object this line makes (:func:`read_line`'s, patched)."""
        said = read_line(raw)
        if isinstance(said, StreamPatch):
            if self._state is None:
                raise StreamError("a patch before any snapshot")
            self._state_bytes += len(raw)
            if self._state_bytes > MAX_STATE_BYTES:
                raise StreamError(f"patches past {MAX_STATE_BYTES >> 20} MiB without a whole snapshot")
            state = apply_patch(self._state, said.patch)
            if type(state) is not dict or "gpus" not in state or "timestamp" not in state:
                raise StreamError("a patch that makes no snapshot")
            self._state, self.patch = state, said.patch
            return state
        if isinstance(said, dict):
            self._state, self._state_bytes, self.patch = said, len(raw), None
        return said


# ----------------------------------------------------------------- reading


def read_line(raw: bytes) -> StreamHello | StreamFailure | StreamPatch | dict[str, Any]:
    """One line of a stream: the hello, a failure, a patch, or a snapshot line's object (for ``snapshot_from_dict``).

    Raises :class:`StreamError` for anything else, its message short and safe to print.
    """
    if len(raw) > MAX_LINE:
        raise StreamError(f"a line longer than {MAX_LINE >> 20} MiB: not an nvtopy stream")
    try:
        data = decode_json(raw)
    except JsonRefusedError as exc:
        raise StreamError(f"not an nvtopy stream line: {exc}") from None
    if type(data) is not dict:
        raise StreamError(f"not an nvtopy stream line: a JSON {_json_kind(data)}, not an object")
    if STREAM_KEY not in data:
        if "gpus" not in data or "timestamp" not in data:
            raise StreamError("not an nvtopy stream line: an object that is no snapshot")
        return data
    stream = data[STREAM_KEY]
    if type(stream) is not int or stream < 1:
        raise StreamError(f"not an nvtopy stream line: {STREAM_KEY} is {_shown(stream)}")
    if "error" in data:  # a failure reads the same in every stream version
        return StreamFailure(_text(data["error"], "error", TEXT_LIMIT))
    if stream == STREAM_VERSION and PATCH_KEY in data:
        patch = data[PATCH_KEY]
        if type(patch) is not dict:
            raise StreamError(f"a patch that is {_shown(patch)}, not an object")
        return StreamPatch(patch)
    if stream > STREAM_VERSION:
        version = data.get("version")
        by = f" (nvtopy {_text(version, 'version', 40)})" if type(version) is str else ""
        raise StreamError(
            f"the far side{by} speaks stream version {stream}; this nvtopy reads {STREAM_VERSION}: "
            "upgrade nvtopy here (or run the same version on both sides)"
        )
    interval: Any = data.get("interval_s")
    if type(interval) not in (int, float) or not math.isfinite(interval) or not 0 < interval <= MAX_INTERVAL:
        raise StreamError(f"a hello whose interval_s is {_shown(interval)}, not seconds")
    return StreamHello(
        version=_text(data.get("version"), "version", _NAME_LIMIT),
        hostname=_text(data.get("hostname"), "hostname", _NAME_LIMIT),
        interval_s=max(MIN_INTERVAL, float(interval)),
        stream=stream,
    )


def _text(value: Any, name: str, limit: int) -> str:
    """A string field of the stream's own lines, unescaped, then made safe and short for a terminal."""
    if type(value) is not str:
        raise StreamError(f"not an nvtopy stream line: {name} is {_shown(value)}, not text")
    return excerpt(unescape_text(value) or "", limit)


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


def _shown(value: Any) -> str:
    """A value of the wrong kind, quoted briefly and safely (a 5,000-digit number stays a short line)."""
    if isinstance(value, dict | list):
        return f"a JSON {_json_kind(value)}"
    return excerpt(repr(value), 40)
