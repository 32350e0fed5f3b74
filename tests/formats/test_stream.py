"""The stdio stream (``nvtopy serve-stdio`` -> ``nvtopy --ssh``): what is written reads back as it was sent,
and a hostile far side is refused in a short, safe sentence, never a crash."""

from __future__ import annotations

import json

import pytest

from nvtopy._version import __version__
from nvtopy.backends.simulated.faults import parse_fault_specs
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.contract_decoder import snapshot_from_dict
from nvtopy.formats.stream import (
    MAX_LINE,
    STREAM_VERSION,
    TEXT_LIMIT,
    StreamError,
    StreamFailure,
    StreamHello,
    error_line,
    hello_line,
    read_line,
    snapshot_line,
)
from nvtopy.sources.collector import Collector

FAULTS = [
    "lost@1",
    "unsupported=fan+power@0",
    "xid=79:0@2",
    "remapped=0/3/1/0@3",
    "throttle=0x8@0",
    "idle-held@2",
    "mig=3@3",
    "gpm-absurd=nan@0",
]


def comparable(data: dict) -> dict:
    """A snapshot's JSON but what a replay names itself by (``backend``: "replay of ...", the reader's version)."""
    data = dict(data)
    data.pop("backend")
    data.pop("nvtopy_version")
    return data


def test_snapshots_of_a_faulty_node_read_back_as_they_were_sent(sim, clock):
    backend = sim(gpus=4, seed=7, faults=parse_fault_specs(FAULTS, gpus=4))
    collector = Collector(backend)
    for _ in range(4):
        clock.advance(1)
        sent = collector.collect()
        line = snapshot_line(sent)
        assert line.endswith("\n") and line.count("\n") == 1, "one line a snapshot"
        data = read_line(line.encode("utf-8"))
        assert isinstance(data, dict)
        received = snapshot_from_dict(data)
        assert comparable(snapshot_to_dict(received)) == comparable(snapshot_to_dict(sent))
    gpus = snapshot_to_dict(received)["gpus"]  # the faults crossed the wire, N/A with their reasons
    assert gpus[0]["fan_percent"] is None and gpus[0]["unavailable"]["fan_percent"] == "not_supported"
    assert [gpus[i]["lost"] for i in range(4)] == [False, True, True, False]  # 2: Xid 79, fallen off the bus
    assert gpus[1]["health"]["verdict"] == "FAIL"
    assert gpus[3]["health"]["findings"][0]["code"] == "remap-pending"
    assert len(gpus[3]["mig_devices"]) == 3


def test_a_snapshot_line_is_what_record_writes(sim, clock):
    from io import StringIO

    from nvtopy.formats.writers import JsonlWriter

    snapshot = Collector(sim(gpus=2, seed=3)).collect()
    recorded = StringIO()
    JsonlWriter(recorded, None, processes=True).write(snapshot)  # nvtopy record's writer
    assert snapshot_line(snapshot) == recorded.getvalue()


def test_hello_round_trip():
    hello = read_line(hello_line("node-7", 2.5).encode())
    assert hello == StreamHello(version=__version__, hostname="node-7", interval_s=2.5, stream=STREAM_VERSION)
    assert json.loads(hello_line("n", 1)) == {
        "nvtopy_stream": 1,
        "version": __version__,
        "hostname": "n",
        "interval_s": 1.0,
    }


def test_hostile_text_in_a_hello_or_a_failure_is_made_safe():
    hello = read_line(hello_line("evil\x1b]0;owned\x07\n\u202ehost", 1).encode())
    assert isinstance(hello, StreamHello)
    assert hello.hostname.isprintable() and "\x1b" not in hello.hostname and "\u202e" not in hello.hostname
    failure = read_line(error_line("line one\nline two\x1b[2J " + "x" * 5000).encode())
    assert isinstance(failure, StreamFailure)
    assert failure.message.startswith("line one\\nline two\\e[2J") and len(failure.message) <= TEXT_LIMIT
    raw = b'{"nvtopy_stream":1,"error":"\\u001b[31mred\\u0007"}'  # escapes a far side wrote itself
    assert read_line(raw) == StreamFailure("\\e[31mred\\x07")


def test_an_error_line_is_one_line_whatever_the_message():
    line = error_line("no driver\r\nsecond line")
    assert line.count("\n") == 1 and line.endswith("\n")
    assert read_line(line.encode()) == StreamFailure("no driver\\r\\nsecond line")


def test_a_newer_stream_version_says_to_upgrade():
    raw = json.dumps({"nvtopy_stream": 2, "version": "9.0", "hostname": "h", "interval_s": 1}).encode()
    with pytest.raises(StreamError) as caught:
        read_line(raw)
    assert str(caught.value) == (
        "the far side (nvtopy 9.0) speaks stream version 2; this nvtopy reads 1: "
        "upgrade nvtopy here (or run the same version on both sides)"
    )


def test_a_failure_of_a_newer_far_side_is_still_read():
    assert read_line(b'{"nvtopy_stream":7,"error":"no GPU"}\n') == StreamFailure("no GPU")


HOSTILE = {
    "junk bytes": (b"\xff\xfe\x00garbage\x1b[2J\n", "not an nvtopy stream line: not JSON"),
    "empty": (b"\n", "not JSON"),
    "cut short": (b'{"nvtopy_stream":1,"version":"0.1', "not JSON"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    "a huge integer": (b'{"nvtopy_stream":' + b"9" * 5000 + b"}", "not an nvtopy stream line"),
    "a huge version": (b'{"nvtopy_stream":1e999,"version":"x","hostname":"h","interval_s":1}', "nvtopy_stream is inf"),
    "a list": (b"[1,2,3]", "a JSON list, not an object"),
    "a string": (b'"hello"', "a JSON string, not an object"),
    "null": (b"null", "a JSON null, not an object"),
    "an object that is no snapshot": (b'{"gpus":[]}', "an object that is no snapshot"),
    "version true": (b'{"nvtopy_stream":true,"interval_s":1}', "nvtopy_stream is True"),
    "version 0": (b'{"nvtopy_stream":0,"interval_s":1}', "nvtopy_stream is 0"),
    "version text": (b'{"nvtopy_stream":"1","interval_s":1}', "nvtopy_stream is '1'"),
    "version a list": (b'{"nvtopy_stream":[1],"interval_s":1}', "nvtopy_stream is a JSON list"),
    "interval text": (b'{"nvtopy_stream":1,"version":"1","hostname":"h","interval_s":"1"}', "interval_s is '1'"),
    "interval NaN": (b'{"nvtopy_stream":1,"version":"1","hostname":"h","interval_s":NaN}', "interval_s is nan"),
    "interval negative": (b'{"nvtopy_stream":1,"version":"1","hostname":"h","interval_s":-1}', "interval_s is -1"),
    "interval huge": (b'{"nvtopy_stream":1,"version":"1","hostname":"h","interval_s":1e308}', "interval_s is 1e+308"),
    "interval missing": (b'{"nvtopy_stream":1,"version":"1","hostname":"h"}', "interval_s is None"),
    "hostname a number": (b'{"nvtopy_stream":1,"version":"1","hostname":7,"interval_s":1}', "hostname is 7"),
    "version null": (b'{"nvtopy_stream":1,"version":null,"hostname":"h","interval_s":1}', "version is None"),
    "error a dict": (b'{"nvtopy_stream":1,"error":{"x":1}}', "error is a JSON object"),
}


@pytest.mark.parametrize("raw, reason", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_line_is_a_short_safe_stream_error(raw, reason):
    with pytest.raises(StreamError) as caught:
        read_line(raw)
    message = str(caught.value)
    assert reason in message
    assert message.isprintable() and len(message) < 200, message


def test_a_line_over_the_limit_is_refused_before_it_is_decoded():
    with pytest.raises(StreamError, match="longer than 16 MiB"):
        read_line(b" " * (MAX_LINE + 1))


def test_a_hostile_snapshot_line_is_the_decoders_to_refuse():
    """A snapshot's values are checked by the one decoder of the contract, as a recording's are."""
    data = read_line(b'{"timestamp":"2026-01-01T00:00:00+00:00","hostname":"h","gpus":"not a list"}')
    assert isinstance(data, dict)
    with pytest.raises(TypeError):
        snapshot_from_dict(data)


def test_absurd_figures_in_a_snapshot_line_read_back_as_unavailable(sim):
    """Huge, infinite and negative-huge readings: N/A with a reason (the contract decoder's rule), never a crash."""
    line = snapshot_line(Collector(sim(gpus=1, seed=1)).collect())
    data = json.loads(line)
    data["gpus"][0]["memory_used_bytes"] = 10**30
    data["gpus"][0]["power_draw_w"] = float("inf")
    data["gpus"][0]["temperature_c"] = -(10**40)
    raw = json.dumps(data).encode()  # inf as Infinity, as a careless far side would write it
    received = read_line(raw)
    assert isinstance(received, dict)
    sample = snapshot_from_dict(received).gpus[0].sample
    for name in ("memory_used_bytes", "power_draw_w", "temperature_c"):
        assert getattr(sample, name) is None and name in sample.unavailable, name
