"""JSON from outside nvtopy (a recording's line, a Prometheus server's answer), decoded or refused in words.

Why one home: ``json.loads`` raises more than ``JSONDecodeError`` on hostile input --
``RecursionError`` for arrays nested a thousand deep, a plain ``ValueError`` for an
integer of more digits than Python converts -- and a caller that catches only the
first turns a bad line or a bad answer into a crash (or, on a source's thread, into
a misleading "closed the connection"). :func:`decode_json` raises one error,
:class:`JsonRefusedError`, whose ``str()`` says why in a few words; the size of
what is decoded is its caller's bound (a recording's line, an answer's bytes).

Why msgspec first: ``nvtopy --ssh`` decodes 64 hosts' lines a second and the fleet view a
30 MB Prometheus answer a refresh; msgspec's decoder is about 3-4x faster than the standard
library's there. It gives the very values the standard library gives for the JSON it accepts
(integers of any size, the same nearest float, the last of two equal keys); for anything it
refuses -- invalid UTF-8, a lone surrogate escape, ``NaN``, an integer of thousands of digits,
deep nesting, any syntax error -- the line goes through ``json.loads`` as before, so what is
accepted, replaced and refused, and the words of a refusal, are unchanged
(``tests/core/test_jsondecode.py`` compares the two on hostile inputs).
"""

from __future__ import annotations

import itertools
import keyword
import operator
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Union

__all__ = ["CHUNK_BYTES", "AnswerRows", "ChunkedRows", "JsonRefusedError", "TaggedRows", "VectorRows", "decode_json"]


class JsonRefusedError(ValueError):
    """Text that is not JSON nvtopy reads; ``str()`` is why.

    ``kind``: ``"syntax"`` (malformed, or cut short), ``"depth"`` (nested too deeply to read)
    or ``"value"`` (well-formed, with a value Python cannot hold: an integer of 5,000 digits).
    """

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind

    @property
    def syntax(self) -> bool:
        return self.kind == "syntax"


_fast: Callable[[bytes | str], Any] | None = None


def _fast_decoder() -> Callable[[bytes | str], Any]:
    """msgspec's decoder, imported the first time JSON is read (``nvtopy --once`` reads none)."""
    global _fast
    if _fast is None:
        import msgspec.json

        _fast = msgspec.json.Decoder().decode
    return _fast


def decode_json(raw: bytes | str) -> Any:
    """``raw`` (UTF-8 bytes, undecodable ones replaced, or text) as JSON; JsonRefusedError saying why it is not."""
    try:
        return _fast_decoder()(raw)
    except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
        pass  # decoded again as it always was: the same values, replacements and refusals
    import json  # here: a text ``--once`` imports this module (owners read containers' configs) and no JSON

    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefusedError(f"not JSON ({exc.msg})", "syntax") from None
    except RecursionError:
        raise JsonRefusedError("nested too deeply", "depth") from None
    except ValueError as exc:  # an integer longer than Python converts (int_max_str_digits)
        raise JsonRefusedError(" ".join(str(exc).split())[:60] or "a value that cannot be read", "value") from None


class VectorRows:
    """A Prometheus instant-vector answer decoded straight into rows: each a ``metric`` of known labels, a ``value``.

    Why: the fleet's read answer is some 210,000 rows (30 MB at 4,096 GPUs), and each row
    decoded as two dicts and a list, then its label values checked as text in Python (a
    ``str.join``) and its labels looked up by ``dict.get``, costs more than reading it.
    Decoded by msgspec into typed objects (msgspec's Structs, untracked by the collector) the
    label values are checked as text in C and a label is an attribute (a slot). Measured on a
    recorded 30 MB answer, this VM loaded: decode 283-304 -> 161-191 ms (dicts: 191-240), the
    row loop that reads them about a fifth faster (docs/performance.md, issue 27).

    ``labels``: every label a row may have (what the query's ``by`` clauses keep); the
    attribute of each is its name without leading and trailing underscores (``__name__``:
    ``name``), None where a row lacks it. :meth:`decode` is strict on purpose: any answer
    this shape does not fit exactly (another label, a label value not text, a value that is
    not a pair ``[time, "text"]``, an error answer, JSON msgspec refuses) is None, and the
    caller decodes it with :func:`decode_json` and checks it as it always did -- what is
    accepted, refused and said is unchanged; only the answers that fit are faster.
    """

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = tuple(labels)
        self.attributes = tuple(label.strip("_") for label in self.labels)
        if len(set(self.attributes)) != len(self.attributes) or not all(
            a.isidentifier() and not keyword.iskeyword(a) for a in self.attributes
        ):
            raise ValueError(f"labels without distinct attribute names: {self.labels}")
        self._attribute = dict(zip(self.labels, self.attributes, strict=True))
        self._types: tuple[Any, Any, Callable[[bytes | str], Any]] | None = None

    def _made(self) -> tuple[Any, Any, Callable[[bytes | str], Any]]:
        """The row types and the envelope's decoder, made the first time (msgspec is imported only then)."""
        if self._types is None:
            import msgspec

            labels, attributes = self.labels, self.attributes
            texts = operator.attrgetter(*attributes) if len(attributes) > 1 else lambda m: (getattr(m, attributes[0]),)

            def as_dict(metric: Any) -> dict[str, str]:
                """The row's labels as a dict (label -> text), in :attr:`labels`' order: for the rare row read whole.
                Two rows' labels compare equal (``==``, in C) where their dicts would."""
                return {label: text for label, text in zip(labels, texts(metric), strict=True) if text is not None}

            # A label is `str` with the default None: null, a number or an object as its value fails to decode.
            # The fields in the order Prometheus writes a row's labels (sorted, byte by byte): msgspec looks a key
            # up from the field after the last one found, so each of a row's labels is found at the first try
            # (in the callers' order, a row's three labels cost some 28 comparisons: 6% of the decode, measured).
            metric = msgspec.defstruct(
                "Labels",
                [(a, str, None) for _, a in sorted(zip(self.labels, self.attributes, strict=True))],
                rename=dict(zip(self.attributes, self.labels, strict=True)),
                forbid_unknown_fields=True,
                namespace={"as_dict": as_dict},
                gc=False,
            )
            row = msgspec.defstruct("Row", [("metric", metric), ("value", tuple[Any, str])], gc=False)
            data = msgspec.defstruct("Data", [("resultType", str), ("result", list[row])], gc=False)  # type: ignore[valid-type]
            answer = msgspec.defstruct("Answer", [("status", str), ("data", data), ("warnings", Any, None)], gc=False)
            self._types = (metric, row, msgspec.json.Decoder(answer).decode)
        return self._types

    def decode(self, raw: bytes | str) -> Any | None:
        """``raw`` as an answer (``.status``, ``.data.resultType``, ``.data.result`` of rows, ``.warnings``);
        None where it does not fit that shape exactly (the caller decodes it as any JSON)."""
        try:
            return self._made()[2](raw)
        except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
            return None

    def row(self, labels: dict[str, str], value: Any) -> Any:
        """A row made of an item decoded as any JSON (and checked by the caller): its labels that are in
        :attr:`labels` (no other is read), its value as it was."""
        metric, row, _ = self._made()
        attribute = self._attribute
        return row(metric(**{attribute[k]: v for k, v in labels.items() if k in attribute}), value)


class TaggedRows(VectorRows):
    """A :class:`VectorRows` whose rows are of one type per series name (a tagged union on ``__name__``): each
    with only the labels rows of that name may have.

    Why: a fleet's read answer is some 50 rows a GPU, and nearly all of them are a GPU's value with three labels
    (``__name__``, ``gpu``, ``instance``). Decoded into one row type of every label any row may have (some 30),
    each row's labels object is 30 slots filled with None and freed again; of a type per name, a handful.
    Measured on a recorded answer of 4,096 GPUs (168,000 rows, 24 MB), this VM: decode and free 153 -> 100 ms.

    ``kinds``: each series name -> the labels its rows may have (``__name__`` aside). A row whose ``__name__``
    is one of ``unnamed`` is a row of no series (an aggregation the query named with ``label_replace`` only so
    its rows have a type of their own): its ``name`` is None and ``__name__`` is not among its labels
    (:meth:`as_dict`), as in an answer that had no name for it. Any other label a row may have is an attribute
    of every row type, None where the type has no such field, so a caller reads each row alike. The answers
    that do not fit exactly (a name not in ``kinds``, a label its type does not have, anything
    :class:`VectorRows` refuses) are None from :meth:`decode`, and their items become rows of one type of every
    label (:class:`VectorRows`'s, through :meth:`row`) as they always did.

    A row's ``value`` is (time, number): Prometheus's text of the number read by msgspec as it decodes the row (not
    strict: a string may hold a number), which gives exactly ``float()``'s value (``test_jsondecode_answer.py``
    compares them); a text msgspec does not read (``+Inf``, ``1e400``, anything not a number) fails the decode, and
    the items are read as any JSON, where :meth:`row` reads it with ``float()`` (ValueError, TypeError: not a
    number). Why: the fleet reads every value as a number, and a text made, hashed and then read per row is some
    40 ms of a refresh at 4,096 GPUs.
    """

    def __init__(self, kinds: Mapping[str, Sequence[str]], unnamed: Collection[str] = ()) -> None:
        every = dict.fromkeys(("__name__", *(label for labels in kinds.values() for label in labels)))
        super().__init__(tuple(every))
        if any("__name__" in labels for labels in kinds.values()) or not set(unnamed) <= set(kinds):
            raise ValueError("kinds name their rows' labels but __name__, and every unnamed kind")
        self.kinds = {name: tuple(dict.fromkeys(labels)) for name, labels in kinds.items()}
        self.unnamed = frozenset(unnamed)
        self._tagged: Callable[[bytes | str], Any] | None = None
        self._row: Any = None  # the row type, once decode has made it
        self._envelope: Callable[[bytes | str], Any] | None = None
        self._rows: Callable[[bytes], Any] | None = None

    def _kind(self, name: str) -> Any:
        """The row type of the series ``name``: a Struct of its labels, tagged with the name."""
        import msgspec

        own = set(self.kinds[name])
        named = name not in self.unnamed
        # as_dict's labels in VectorRows's order (its dicts compare equal, and read the same, as a generic row's)
        fields = [(label, self._attribute[label]) for label in self.labels if label in own]

        def as_dict(metric: Any) -> dict[str, str]:
            """The row's labels as a dict, as :class:`VectorRows`'s ``as_dict`` makes them (``__name__`` first)."""
            said = {"__name__": name} if named else {}
            for label, attribute in fields:
                text = getattr(metric, attribute)
                if text is not None:
                    said[label] = text
            return said

        namespace: dict[str, Any] = {a: None for label, a in self._attribute.items() if label not in own}
        namespace.update(name=name if named else None, as_dict=as_dict)
        ordered = sorted(fields)  # Prometheus writes a row's labels sorted: each found at the first try
        return msgspec.defstruct(
            "Labels",
            [(a, str, None) for _, a in ordered],
            rename={a: label for label, a in ordered},
            tag_field="__name__",
            tag=name,
            forbid_unknown_fields=True,
            namespace=namespace,
            gc=False,
        )

    def decode(self, raw: bytes | str) -> Any | None:
        """``raw`` as an answer whose rows are each of its name's type; None where it does not fit exactly."""
        if self._tagged is None:
            import msgspec

            union = tuple(self._kind(name) for name in self.kinds)
            metric: Any = union[0] if len(union) == 1 else Union[union]  # noqa: UP007 (a tuple of types, made here)
            row = msgspec.defstruct("Row", [("metric", metric), ("value", tuple[Any, float])], gc=False)
            self._row = row
            data = msgspec.defstruct("Data", [("resultType", str), ("result", list[row])], gc=False)  # type: ignore[valid-type]
            answer = msgspec.defstruct("Answer", [("status", str), ("data", data), ("warnings", Any, None)], gc=False)
            self._tagged = msgspec.json.Decoder(answer, strict=False).decode  # a value's text read as its number
        try:
            return self._tagged(raw)
        except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
            return None

    def envelope(self, raw: bytes | str) -> Any | None:
        """``raw`` as an answer whose result is left undecoded (``data.result``: msgspec's ``Raw``, its JSON checked
        as well-formed but not made into objects), for :class:`ChunkedRows`; None where it is not such an answer."""
        if self._envelope is None:
            import msgspec

            data = msgspec.defstruct("Data", [("resultType", str), ("result", msgspec.Raw)], gc=False)
            answer = msgspec.defstruct("Answer", [("status", str), ("data", data), ("warnings", Any, None)], gc=False)
            self._envelope = msgspec.json.Decoder(answer).decode
        try:
            return self._envelope(raw)
        except (ValueError, RecursionError):
            return None

    def answer(self, raw: bytes) -> AnswerRows | None:
        """A successful answer's envelope (``status``, ``data.resultType``, ``warnings``) and where its rows are,
        not yet decoded (:class:`AnswerRows`); None where ``raw`` is no such answer (then decode it otherwise).

        Why not :meth:`envelope` of the whole: msgspec skips over a fleet's 21 MB of rows to check them as
        well-formed, and the result's span is then copied out twice (its ``Raw`` made bytes, its brackets cut),
        some 26 ms of a refresh at 4,096 GPUs -- and :class:`ChunkedRows` checks each row anyway as it decodes it.

        Prometheus writes an answer compactly, its rows first: ``raw`` that begins with :data:`_ANSWER_HEAD` is
        read from its end instead. Its last row's start (``{"metric":`` after a comma: never inside a string of
        well-formed JSON) cuts it in two; the head with the part after the cut (the last row and what follows the
        result: the warnings) is decoded as the whole answer would be. Then ``raw`` is well-formed exactly when
        the rows before the cut are: ``head + rows + "," + tail``, with ``head + tail`` a well-formed answer. Those
        rows begin with ``{`` (a row; not nothing before the comma), and ChunkedRows decodes each of their
        chunks as a JSON array of rows, a malformed one an error in one line as before. Any other ``raw`` (spaces,
        another order of members, a server that writes otherwise): its envelope decoded whole, as before.
        """
        head = _ANSWER_HEAD
        if raw.startswith(head):
            last = raw.rfind(_ROW_START)
            rows_before = last > len(head) and raw[last - 1] == _COMMA and raw[len(head)] == _BRACE
            if last == len(head) or rows_before:
                tail = self.envelope(head + raw[last:])  # the last row and what follows the rows: small
                if tail is not None and tail.status == "success" and tail.data.resultType == "vector":
                    rest = bytes(tail.data.result)
                    return AnswerRows(tail, raw, len(head), last - 1 if rows_before else len(head), rest)
        envelope = self.envelope(raw)
        if envelope is None or envelope.status != "success":
            return None
        result = bytes(envelope.data.result)  # well-formed JSON: msgspec checked it
        start, end = len(result) - len(result.lstrip()), len(result.rstrip())
        if result[start : start + 1] != b"[":
            return None
        return AnswerRows(envelope, result, start + 1, end - 1, None)

    def decode_rows(self, raw: bytes) -> list[Any]:
        """``raw``, a JSON array of rows, each of its name's type; ValueError (msgspec's) where one does not fit."""
        if self._rows is None:
            import msgspec

            self.decode(b"{}")  # the row type, made once
            self._rows = msgspec.json.Decoder(list[self._row], strict=False).decode  # type: ignore[name-defined]
        return self._rows(raw)

    def row(self, labels: dict[str, str], value: Any) -> Any:
        """A row of every label (:class:`VectorRows`'s) made of an item decoded as any JSON; an unnamed kind's
        ``__name__`` left out, as :meth:`decode` reads it."""
        if labels.get("__name__") in self.unnamed:
            labels = {k: v for k, v in labels.items() if k != "__name__"}
        return super().row(labels, (value[0], float(value[1])))  # ValueError or TypeError: not a number's text


CHUNK_BYTES = 64 << 10
"""Bytes of an answer's rows decoded at a time by :class:`ChunkedRows`: some 450 rows of a fleet's answer, whose
objects stay in the processor's caches while the reader reads them (measured at 4,096 GPUs: decoding, reading and
freeing 145,000 rows 101 ms whole, 62 ms in chunks of 64 KiB, 77 ms in chunks of 1 MiB)."""
_ROW_START = b'{"metric":'
_SPACE = frozenset(b" \t\r\n")  # JSON's whitespace, as byte values
_COMMA = ord(",")
_BRACE = ord("{")
_ANSWER_HEAD = b'{"status":"success","data":{"resultType":"vector","result":['
"""How Prometheus begins a successful instant query's answer (compact JSON, its members in this order)."""


class AnswerRows(NamedTuple):
    """A successful answer as :meth:`TaggedRows.answer` found it: its rows are ``buffer[start:end]`` (rows
    separated by commas, not yet decoded; checked as :class:`ChunkedRows` decodes them), then ``last`` (a JSON
    array of the rest of them, already checked; None: none)."""

    envelope: Any  # .status, .data.resultType, .warnings
    buffer: bytes
    start: int
    end: int
    last: bytes | None


class ChunkedRows:
    """An answer's result rows (``buffer[start:end]``, the JSON array's inside, then ``last``), decoded a chunk of
    them at a time as they are iterated: each chunk's rows are read, then freed, while still in the caches, rather
    than a fleet's 145,000 rows decoded into some 60 MB of objects, then walked, then freed.

    Where a chunk ends: before a row's start, ``{"metric":`` -- which in well-formed JSON is never inside a string
    (a ``"`` that follows ``{`` in a string would end it), so every one is a row's start -- and before the ``,``
    before it. In malformed rows a cut may fall inside a string: that chunk does not decode, and the answer is an
    error as it would be whole. An answer written otherwise (whitespace in the pattern, ``value`` first) is one
    chunk: the same rows, decoded at once. ``last``: a JSON array of the rows after ``end`` (None: none), the
    last chunk. ``decode(chunk)``: the chunk's rows (a JSON array), ValueError where one does not fit;
    ``fallback(chunk)``: its rows made another way (decoded as any JSON and checked item by item), raising the
    reader's error when the chunk is not rows. ``counted(n)``: told the rows of each chunk as it is decoded.
    """

    __slots__ = ("_body", "_counted", "_decode", "_end", "_fallback", "_first", "_last", "_size", "_start")

    def __init__(
        self,
        body: bytes,
        decode: Callable[[bytes], list[Any]],
        fallback: Callable[[bytes], list[Any]],
        counted: Callable[[int], object],
        size: int | None = None,
        *,
        start: int = 0,
        end: int | None = None,
        last: bytes | None = None,
    ) -> None:
        self._body, self._start, self._end, self._last = body, start, len(body) if end is None else end, last
        self._decode, self._fallback, self._counted = decode, fallback, counted
        self._size = max(1, CHUNK_BYTES if size is None else size)
        self._first: list[Any] | None = None  # the first chunk's rows, decoded by first() before iterating

    def __bool__(self) -> bool:
        return self._last is not None or not self._blank(self._start, self._end)

    def _blank(self, start: int, end: int) -> bool:
        """Whether ``body[start:end]`` is only whitespace (a byte at a time from each end: no copy of 21 MB)."""
        body = self._body
        while start < end and body[start] in _SPACE:
            start += 1
        return start >= end

    def first(self) -> Any | None:
        """The first row (None: none), its chunk decoded now and kept for the iteration."""
        if self._first is None:
            self._first = self._rows(next(self._chunks(), b"[]"))
        return self._first[0] if self._first else None

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._lists())

    def _lists(self) -> Iterator[list[Any]]:
        chunks = self._chunks()
        if self._first is not None:
            next(chunks, None)
            first, self._first = self._first, None
            yield first
        for chunk in chunks:
            yield self._rows(chunk)

    def _rows(self, chunk: bytes) -> list[Any]:
        try:
            rows = self._decode(chunk)
        except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
            rows = self._fallback(chunk)
        self._counted(len(rows))
        return rows

    def _chunks(self) -> Iterator[bytes]:
        """The rows as JSON arrays of about :attr:`_size` bytes each, cut before a row's start; then ``last``."""
        body, size, start, end = self._body, self._size, self._start, self._end
        view = memoryview(body)
        if not self._blank(start, end):
            while True:
                cut = body.find(_ROW_START, start + size, end)
                comma = -1
                while cut >= 0:
                    comma = cut - 1
                    while comma > start and body[comma] in _SPACE:
                        comma -= 1
                    if comma > start and body[comma] == _COMMA:  # a row's start after the comma between two rows
                        break
                    cut = body.find(_ROW_START, cut + 1, end)  # not after a comma (malformed): look further
                if cut < 0:
                    yield b"".join((b"[", view[start:end], b"]"))  # one copy of the chunk, not a slice and a sum
                    break
                yield b"".join((b"[", view[start:comma], b"]"))
                start = cut
        if self._last is not None:
            yield self._last
