"""The fleet's read answer decoded straight into rows (``nvtopy.jsondecode.TaggedRows``), or read as any JSON.

Why: at 4,096 GPUs the read answer is 210,000 rows, and decoding them into typed rows
(labels checked as text in C, read as attributes) is what keeps a refresh's CPU down. An
answer that does not fit the rows exactly (another label, a value given as a number) is
read as before, as any JSON checked item by item: the GPUs shown must be the same either
way, and the fast path must really be the one taken where the answer fits.
"""

# ruff: noqa: F811 -- the fixture fake is imported from the module that defines it

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from nvtopy.formats.prometheus.parse import parse_exposition
from nvtopy.sources.remote import fleet as fleet_module
from nvtopy.sources.remote import prometheus as prometheus_module
from nvtopy.sources.remote.hostscrape import HostGpus

from ...prometheus_fixtures import exposition_series, simulated_exposition
from .test_fleet import NOW, add_hosts, comparable, fake, fleet_of  # noqa: F401
from .test_prometheus_api import send


def _counting_json(monkeypatch) -> list[int]:
    """The size of each answer read as any JSON (decode_json) from now on."""
    sizes: list[int] = []
    real = prometheus_module.decode_json

    def counted(raw):
        sizes.append(len(raw))
        return real(raw)

    monkeypatch.setattr(prometheus_module, "decode_json", counted)
    return sizes


def _reading(fake, change) -> None:
    """The fake answers the read query (not the first, the list of hosts) with each row changed by ``change``."""

    def reply(handler, query: str) -> bool:
        if query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False  # the first query: the fake's own answer
        data = json.loads(fake.answer(query))
        for item in data["data"]["result"]:
            change(item)
        send(handler, 200, json.dumps(data).encode(), Content_Type="application/json")
        return True

    fake.reply = reply


def test_the_read_answer_is_decoded_straight_into_rows(fake, monkeypatch):
    """Only the short list of hosts goes through decode_json; the big answer, read twice, never does."""
    add_hosts(fake, 3)
    fleet = fleet_of(fake)
    sizes = _counting_json(monkeypatch)
    first = fleet.poll_once()
    assert len(first.gpus) == 6 and first.processes
    assert len(sizes) == 1, f"the read answer went through decode_json: {sizes}"
    fleet.read_once()
    assert len(sizes) == 2 and fleet.client.queries == 4


def _extra_label(item: dict) -> None:
    item["metric"]["job"] = "dcgm"  # a label no query keeps: the rows do not fit


def _value_as_number(item: dict) -> None:
    if item["value"][1] not in ("NaN", "+Inf", "-Inf"):
        item["value"][1] = float(item["value"][1])  # JSON allows it; float() reads it as it always did


def _label_outside_its_type(item: dict) -> None:
    if item["metric"].get("__name__", "").startswith("DCGM_FI_DEV_"):
        item["metric"]["xid"] = "13"  # a label the query keeps, but not of a GPU value's row type


def test_an_answer_the_rows_do_not_fit_shows_the_same_gpus(fake, monkeypatch):
    add_hosts(fake, 3)
    expected = [comparable(g) for g in fleet_of(fake).read_once().gpus]
    # A value given as a JSON number fits the rows (a row's value is read as a number either way): only the list
    # of hosts is read as any JSON.
    for change, as_any_json in ((_extra_label, 2), (_value_as_number, 1), (_label_outside_its_type, 2)):
        _reading(fake, change)
        sizes = _counting_json(monkeypatch)
        snapshot = fleet_of(fake).read_once()
        assert len(sizes) == as_any_json, f"{change.__name__}: {sizes}"
        assert [comparable(g) for g in snapshot.gpus] == expected, change.__name__


def test_each_row_type_reads_as_the_row_of_every_label(fake):
    """A row decoded into its name's type (a handful of labels) has the very labels, name and ``as_dict`` of the
    same item made a row of every label (the answers that do not fit): the row loop reads both alike. The
    identity rows, named by the query only for a type of their own, have no name either way."""
    from nvtopy.sources.remote.fleet import _ROWS, GPU_LOST, PROCESS_STARTED, read_query

    add_hosts(fake, 2)
    faulty = simulated_exposition("node9", 9, 3, faults=["mig=2@0"])
    fake.add_exposition(faulty, "10.0.9.9:9400", timestamp=NOW - 0.5)
    raw = fake.answer(read_query())
    typed = _ROWS.decode(raw)
    assert typed is not None
    items = json.loads(raw)["data"]["result"]
    assert len(typed.data.result) == len(items)
    kinds = set()
    for row, item in zip(typed.data.result, items, strict=True):
        generic = _ROWS.row(item["metric"], item["value"]).metric
        typed_metric = row.metric
        kinds.add(type(typed_metric).__struct_config__.tag)
        assert typed_metric.as_dict() == generic.as_dict(), item
        assert list(typed_metric.as_dict()) == list(generic.as_dict()), "in the same order"
        assert all(getattr(typed_metric, a) == getattr(generic, a) for a in _ROWS.attributes), item
        fields = len(type(typed_metric).__struct_fields__)
        assert fields <= len(_ROWS.attributes) // 2 or typed_metric.name in (None, GPU_LOST, PROCESS_STARTED)
    assert {GPU_LOST, PROCESS_STARTED} <= kinds
    assert any(k.startswith("nvtopy_mig_device") for k in kinds), kinds


def _process_lines(pid: int, values: dict[str, str], labels: str) -> str:
    return "".join(f'nvtopy_process_{name}{{{labels}pid="{pid}"}} {value}\n' for name, value in values.items())


def test_a_process_start_time_read_from_its_identity_row_is_what_the_exporter_says(fake):
    """A process's start time comes as the value of its identity row (no row of its own). Each process shows as
    ``--remote`` reads the same exposition: with a start time or without one (its identity then from its GPU
    memory series), a start time out of range, one that is the only series of its process, one whose labels are
    its pid's alone (the identity row's labels but ``__name__`` are then a value row's), one whose GPU label is
    ``00`` (read row by row, not as a run); in the one-type rows and the rows of any JSON; and with two hosts
    behind one instance (the host label kept)."""
    from nvtopy.sources.remote.fleet import PROCESS_STARTED

    named = 'Hostname="node-a",UUID="GPU-x",gpu="0",type="C",user="dana",command="train.py",'
    bare = 'Hostname="node-a",gpu="0",'
    extra = "".join(
        (
            _process_lines(101, {"start_time_seconds": "1794999000.5", "gpu_memory_bytes": "1e9"}, named),
            _process_lines(102, {"gpu_memory_bytes": "2e9", "cpu_percent": "50"}, named),  # no start time
            _process_lines(103, {"start_time_seconds": "NaN", "gpu_memory_bytes": "3e9"}, named),
            _process_lines(104, {"start_time_seconds": "-5", "sm_utilization_percent": "7"}, named),
            _process_lines(105, {"start_time_seconds": "1794999100"}, named),  # its only series
            _process_lines(106, {"start_time_seconds": "1794999200.25", "gpu_memory_bytes": "4e9"}, bare),
            _process_lines(107, {"start_time_seconds": "1794999300", "host_memory_bytes": "5e6"}, bare),
            _process_lines(108, {"start_time_seconds": "1794999400", "cpu_percent": "3"}, named.replace('"0"', '"00"')),
        )
    )
    text = simulated_exposition("node-a", 1, 1) + extra
    want_scrape = parse_exposition(text, "http://10.0.0.1:9400/metrics")
    want = [comparable(g) for g in HostGpus().gpus(want_scrape, 0, NOW)]
    pids = {p.pid for g in want for p in g[2]}
    assert {101, 102, 103, 104, 105, 106, 107, 108} <= pids
    assert {p.pid: p.create_time for g in want for p in g[2]}[106] == 1794999200.25
    _reads_as_remote(fake, text, want, PROCESS_STARTED, "nvtopy_process_start_time_seconds")


def test_a_pid_with_two_identities_shows_its_latest_start_time(fake):
    """Two label sets of one pid (two exporters' series of it): two identity rows, each with a start time; the
    process shows the larger, as ``max by`` its host, GPU and pid gave when the start time was a row of its own,
    whichever of the two rows comes first and whichever is out of range."""
    for first, second in (("1794999000", "1794999500"), ("1794999500", "1794999000"), ("NaN", "1794999500")):
        labels = 'Hostname="node-a",gpu="0",type="C",user="dana",command="{}",'
        text = (
            simulated_exposition("node-a", 1, 1)
            + _process_lines(109, {"start_time_seconds": first, "gpu_memory_bytes": "1e9"}, labels.format("a"))
            + _process_lines(109, {"start_time_seconds": second}, labels.format("b"))
        )
        fake.set_series(exposition_series(text, "10.0.0.1:9400", NOW - 0.5))
        snapshot = fleet_of(fake).read_once()
        shown = [p for p in snapshot.processes if p.pid == 109]
        assert len(shown) == 1 and shown[0].create_time == 1794999500.0, (first, second)
        assert shown[0].gpu_memory_bytes == 1e9


def test_whether_a_gpu_is_lost_read_from_its_identity_row_is_what_the_exporter_says(fake):
    """Whether a GPU is lost comes as the value of its identity row (no ``nvtopy_gpu_lost`` row of its own): a lost
    GPU, one that is not, one whose labels are its index's alone (its identity row's labels but ``__name__`` are
    then a value row's), one whose GPU label is ``06`` (read row by row) show as ``--remote`` reads the same
    exposition, in the one-type rows and the rows of any JSON, with one and two hosts behind the instance; a GPU
    with two identities, one lost, is lost (as ``max by`` the GPU gave); a GPU instance's series says nothing of
    its GPU (as the fleet read it before)."""
    from nvtopy.sources.remote.fleet import GPU_LOST

    lines = simulated_exposition("node-a", 1, 3).splitlines(keepends=True)
    lost_of_1 = next(n for n, line in enumerate(lines) if line.startswith("nvtopy_gpu_lost") and 'gpu="1"' in line)
    lines[lost_of_1] = lines[lost_of_1].replace("} 0.0", "} 1.0")
    text = "".join(lines) + "".join(
        (
            'nvtopy_gpu_lost{Hostname="node-a",gpu="5"} 1\n',
            'DCGM_FI_DEV_GPU_UTIL{Hostname="node-a",gpu="5"} 50\n',
            'nvtopy_gpu_lost{Hostname="node-a",gpu="06",UUID="GPU-six"} 1\n',
            'DCGM_FI_DEV_GPU_UTIL{Hostname="node-a",gpu="06",UUID="GPU-six"} 60\n',
        )
    )
    want = [comparable(g) for g in HostGpus().gpus(parse_exposition(text, "http://10.0.0.1:9400/metrics"), 0, NOW)]
    assert [g[1].lost for g in want] == [False, True, False, True, True]
    _reads_as_remote(fake, text, want, GPU_LOST, "nvtopy_gpu_lost")
    # Two identities of GPU 2 (a pod label on one series): lost if either says so, whichever comes first.
    lost_of_2 = next(n for n, line in enumerate(lines) if line.startswith("nvtopy_gpu_lost") and 'gpu="2"' in line)
    for own, other in (("1", "0"), ("0", "1"), ("0", "0")):
        lines[lost_of_2] = lines[lost_of_2].replace("} 0.0", "} 1.0") if own == "1" else lines[lost_of_2]
        pod = f'nvtopy_gpu_lost{{Hostname="node-a",gpu="2",pod="p"}} {other}\n'
        fake.set_series(exposition_series("".join(lines) + pod, "10.0.0.1:9400", NOW))
        shown = {g.static.host_index: g.sample.lost for g in fleet_of(fake).read_once().gpus}
        assert shown == {0: False, 1: True, 2: "1" in (own, other)}, (own, other)
        lines[lost_of_2] = lines[lost_of_2].replace("} 1.0", "} 0.0")
    instance = 'nvtopy_gpu_lost{Hostname="node-a",gpu="0",GPU_I_ID="1",UUID="GPU-mig"} 1\n'
    fake.set_series(exposition_series(text + instance, "10.0.0.1:9400", NOW))
    assert [g.sample.lost for g in fleet_of(fake).read_once().gpus] == [False, True, False, True, True]


def test_a_gpu_with_two_identities_shows_the_first_rows_refresh_after_refresh(fake):
    """Two identity rows of one GPU that say different things (nvtopy_gpu_lost's UUID is not the memory series'):
    the first row read gives its identity, and the identity as cached shows the same at every later refresh."""
    text = (
        'nvtopy_gpu_lost{Hostname="node-a",gpu="0",UUID="GPU-a",modelName="A"} 0\n'
        'DCGM_FI_DEV_FB_USED{Hostname="node-a",gpu="0",UUID="GPU-b",modelName="B"} 10\n'
    )
    fake.set_series(exposition_series(text, "10.0.0.1:9400", NOW - 0.5))
    answer = json.loads(fake.answer(fleet_module.read_query(hostname=False)))
    order = [item["metric"].get("UUID") for item in answer["data"]["result"] if "UUID" in item["metric"]]
    assert order == ["GPU-a", "GPU-b"], "the lost series' identity row comes first"
    fleet = fleet_of(fake)
    for refresh in range(3):
        fake.now = NOW + refresh
        fake.set_series(exposition_series(text, "10.0.0.1:9400", NOW + refresh - 0.5))
        (gpu,) = fleet.poll_once().gpus
        assert (gpu.static.uuid, gpu.static.name) == ("GPU-a", "A"), refresh


def _reads_as_remote(fake, text: str, want: list, carried: str, not_asked: str) -> None:
    """The fleet's read of ``text`` (node-a at 10.0.0.1:9400) shows node-a's GPUs as ``want`` (``--remote``'s), with
    one and two host names behind the instance (a second one makes the host label asked), in the one-type rows
    and in the rows of any JSON (:func:`_extra_label`); the answer names ``carried`` and no ``not_asked`` row."""
    for hosts_behind_one_instance in (False, True):
        fake.set_series(exposition_series(text, "10.0.0.1:9400", NOW - 0.5))
        if hosts_behind_one_instance:
            fake.add_exposition(simulated_exposition("node-b", 2, 1), "10.0.0.1:9400", timestamp=NOW - 0.5)
        answer = json.loads(fake.answer(fleet_module.read_query(hostname=hosts_behind_one_instance)))
        names = {item["metric"].get("__name__") for item in answer["data"]["result"]}
        assert carried in names and not_asked not in names
        for change in (None, _extra_label):
            if change is not None:
                _reading(fake, change)
            snapshot = fleet_of(fake).read_once()
            got = [comparable(g) for g in snapshot.gpus if g.static.host == "node-a"]
            assert got == want, (hosts_behind_one_instance, change)
            fake.reply = None


# ----------------------------------------------------------------- the read answer decoded a chunk at a time


def _compact(fake, change=None, warnings=None) -> None:
    """The fake answers the read query as Prometheus writes JSON (no spaces: ``},{"metric":`` between rows), each
    row changed by ``change``, with ``warnings`` after the data."""

    def reply(handler, query: str) -> bool:
        if query.startswith("max by (instance, hostname, Hostname) (timestamp("):
            return False
        data = json.loads(fake.answer(query))
        for n, item in enumerate(data["data"]["result"]):
            if change is not None:
                change(n, item)
        if warnings is not None:
            data["warnings"] = warnings
        send(handler, 200, json.dumps(data, separators=(",", ":")).encode(), Content_Type="application/json")
        return True

    fake.reply = reply


def _processes(snapshot) -> list[str]:
    """The snapshot's processes, but how long each has run (a function of when it was read)."""
    return sorted(repr(dataclasses.replace(p, running_seconds=None)) for p in snapshot.processes)


def _chunked(monkeypatch, size: int) -> list[int]:
    """Chunks of ``size`` bytes from now on; the rows of each chunk decoded, as a list."""
    from nvtopy import jsondecode

    monkeypatch.setattr(jsondecode, "CHUNK_BYTES", size)
    counts: list[int] = []
    real = jsondecode.ChunkedRows._rows

    def rows(self, chunk):
        made = real(self, chunk)
        counts.append(len(made))
        return made

    monkeypatch.setattr(jsondecode.ChunkedRows, "_rows", rows)
    return counts


@pytest.mark.parametrize("compact", [True, False], ids=["prometheus-json", "spaced-json"])
def test_the_read_answer_in_chunks_reads_as_the_whole_answer(fake, monkeypatch, compact):
    """Hostile hosts (values out of range, a MIG GPU, hosts behind one instance) read with the answer cut into chunks
    of a row each, of a few rows, and whole: the same GPUs and processes; every row counted once as read."""
    from .test_fleet_runs import _hostile_fleet, _shown

    _hostile_fleet(fake, shared=True)
    if compact:
        _compact(fake)
    expected = fleet_of(fake).read_once()
    want = ([_shown(g) for g in expected.gpus], _processes(expected))
    total = None
    for size in (1 << 30, 1, 300):
        counts = _chunked(monkeypatch, size)
        fleet = fleet_of(fake)
        snapshot = fleet.read_once()
        assert ([_shown(g) for g in snapshot.gpus], _processes(snapshot)) == want, size
        total = total or sum(counts)
        assert sum(counts) == total, "each row decoded once"
        assert total == fleet.client.rows_received - len(fleet._known), "each row counted once, as read"
        if size == 1 and compact:
            assert set(counts) == {1}, "a chunk a row"
        elif size == 1:
            assert len(counts) > 50, "spaced JSON is cut too"
        if size == 1 << 30:  # one chunk; Prometheus's compact answer is read from its end: its last row on its own
            assert len(counts) == (2 if compact else 1) and (counts[-1] == 1 or not compact)


def test_a_chunk_the_rows_do_not_fit_is_read_as_any_json_and_the_others_as_rows(fake, monkeypatch):
    """One row in the middle with a label no row type has: its chunk is read as any JSON (checked item by item), the
    chunks before and after it straight into rows; the same GPUs as the whole answer read as any JSON."""
    add_hosts(fake, 3)

    def one_extra_label(n: int, item: dict) -> None:
        if n == 100:
            item["metric"]["job"] = "dcgm"

    _compact(fake, one_extra_label)
    expected = [comparable(g) for g in fleet_of(fake).read_once().gpus]
    _chunked(monkeypatch, 2000)
    sizes = _counting_json(monkeypatch)
    snapshot = fleet_of(fake).read_once()
    assert [comparable(g) for g in snapshot.gpus] == expected
    assert len(sizes) == 2 and sizes[1] < 2100, f"one chunk read as any JSON (and the list of hosts): {sizes}"


def test_a_malformed_row_in_a_later_chunk_fails_the_refresh_in_one_line(fake, monkeypatch):
    add_hosts(fake, 3)

    def broken(n: int, item: dict) -> None:
        if n == 60:
            item["value"] = [item["value"][0]]  # not a [time, "value"] pair

    _compact(fake, broken)
    _chunked(monkeypatch, 500)
    fleet = fleet_of(fake)
    snapshot = fleet.poll_once()
    assert "answered a malformed vector" in str(fleet._failure), fleet._failure
    assert [g.note for g in snapshot.gpus if g.note] and not [g for g in snapshot.gpus if not g.note]
    with pytest.raises(prometheus_module.PrometheusError, match="answered a malformed vector"):
        fleet.read_once()


def test_a_label_with_a_rows_start_in_it_and_warnings_after_the_result(fake, monkeypatch):
    """A process whose command is ``x},{"metric":{`` (a row's start, as text: JSON escapes its quotes, so no chunk
    is cut there) and warnings after the data (the end of the result is where msgspec says, not a search's)."""
    hostile = 'python x},{"metric":{"__name__":"DCGM_FI_DEV_GPU_UTIL"},"value":[1,"99"]},{"metric":'
    add_hosts(fake, 2)
    escaped = hostile.replace("\\", "\\\\").replace('"', '\\"')
    line = f'nvtopy_process_start_time_seconds{{Hostname="node0",gpu="0",pid="4242",type="C",command="{escaped}"}} 1\n'
    fake.add_exposition(line, "10.0.0.0:9400", timestamp=NOW - 0.5)
    _compact(fake, warnings=["a partial answer, say"])
    counts = _chunked(monkeypatch, 1)
    fleet = fleet_of(fake)
    snapshot = fleet.poll_once()
    assert len(counts) > 50 and set(counts) == {1}
    assert [p.command for p in snapshot.processes if p.pid == 4242] == [hostile]
    assert [g.sample.utilization_gpu_percent for g in snapshot.gpus] == [
        g.sample.utilization_gpu_percent for g in fleet_of(fake).read_once().gpus
    ]
    assert fleet.client.warnings == ["a partial answer, say"]


def _power_texts(texts_of: dict[str, str]):
    """Each host's GPUs' DCGM_FI_DEV_POWER_USAGE said as ``texts_of[instance]`` (the others as they are)."""

    def change(item: dict) -> None:
        said = texts_of.get(item["metric"].get("instance", ""))
        if said is not None and item["metric"].get("__name__") == "DCGM_FI_DEV_POWER_USAGE":
            item["value"][1] = said

    return change


@pytest.mark.parametrize("first", ["-0", "-0.0", "0"])
def test_a_zero_reads_as_zero_whatever_its_sign_or_which_came_first(fake, first):
    """A value's reading is kept by the value (-0.0 == 0.0): were -0.0's kept, every GPU saying 0 after it would
    read as -0.0 (shown "-0"). Each zero reads as 0.0."""
    texts = add_hosts(fake, 2)
    second = "0" if first != "0" else "-0.0"
    instances = sorted(texts)
    _reading(fake, _power_texts({instances[0]: first, instances[1]: second}))
    snapshot = fleet_of(fake).read_once()
    powers = [g.sample.power_draw_w for g in snapshot.gpus]
    assert len(powers) == 4 and all(p == 0.0 and math.copysign(1.0, p) > 0 for p in powers), powers


def test_a_nan_never_takes_a_place_among_the_kept_readings(fake):
    """No two NaNs are equal: each kept would take a place of the MEMO_VALUES a series has, and none be found."""
    texts = add_hosts(fake, 3)
    _reading(fake, _power_texts(dict.fromkeys(texts, "NaN")))
    fleet = fleet_of(fake)
    snapshot = fleet.read_once()
    assert all(g.sample.power_draw_w is None for g in snapshot.gpus)  # not finite: N/A (out of range)
    memo = fleet._routes["DCGM_FI_DEV_POWER_USAGE"][4]
    assert not any(math.isnan(value) for value in memo), memo


def test_the_pids_read_are_kept_between_reads_and_bounded(fake, monkeypatch):
    """A pid's text is read as a number once, not at every read (8,239 processes a refresh at 4,096 GPUs); the texts
    kept are bounded (processes that come and go by the million): past the bound they are forgotten at the next read."""
    add_hosts(fake, 3)
    fleet = fleet_of(fake)
    shown = _processes(fleet.read_once())
    kept = dict(fleet._pids)
    assert kept and all(type(n) is int for n in kept.values())
    monkeypatch.setattr(fleet_module, "MAX_PID_TEXTS", len(kept) + 10)
    fleet._pids.update({str(4_000_000 + n): 0 for n in range(20)})  # gone processes' texts, past the bound
    assert _processes(fleet.read_once()) == shown
    assert fleet._pids == kept, "forgotten past the bound, then the read's own pids again"
