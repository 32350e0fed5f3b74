"""Many hosts in one view (``--remote``, ``--prometheus``): the HOST column, host headers, read-only.

The snapshots here are hand-made fleets: simulated hosts whose GPUs are renumbered
one after the other (the global index), each GPU and process naming its host, as
the remote and Prometheus sources publish them. A host can be unreachable (one
line saying why) or stale (its newest reading older than three refreshes).
"""

from __future__ import annotations

import dataclasses
import io
import json
import time

import pytest
from textual.events import MouseScrollDown

from nvtopy.columns import COLUMN_IDS
from nvtopy.formats.contract import snapshot_to_dict
from nvtopy.formats.writers import JsonlWriter
from nvtopy.model import GpuSample, GpuState, GpuStatic, Snapshot
from nvtopy.render.processes import (
    ProcessFilter,
    SortOrder,
    build_groups,
    build_rows,
    group_host_cell,
    host_cell,
    host_labels,
    visible_columns,
)
from nvtopy.render.text import render_snapshot
from nvtopy.sources.collector import Collector
from nvtopy.sources.replay import load_recording
from nvtopy.tui import gpu_view as gpu_view_module
from nvtopy.tui.app import NvtopyApp
from nvtopy.tui.gpu_view import HostGroup, host_groups, host_header, host_state, plan_layout
from nvtopy.tui.screens import ConfirmSignalScreen

from ..builders import FixedSource, gpu_sample, gpu_state, gpu_static, host_info, host_line, snapshot_of
from ..tui_helpers import header_line, wait_until, widget_lines

REFUSAL = "read-only: processes on other hosts cannot be signalled from here"
DOWN_NOTE = "10.0.0.9:9400 unreachable: connection refused"


def fleet(sim, hosts: list[str], gpus: int = 2, *, down: tuple[str, ...] = (), stale: tuple[str, ...] = ()) -> Snapshot:
    """Simulated hosts as one snapshot: global indices, ``static.host``/``host_index`` and ``process.host`` set.

    A host in ``down`` is one lost line with a note (as an unreachable exporter is shown); one in
    ``stale`` has readings 120 s older than the snapshot.
    """
    states: list[GpuState] = []
    now = None
    for number, name in enumerate(hosts):
        if name in down:
            static, lost = gpu_static(len(states), bare=True, host=name), gpu_sample(now or 0.0, bare=True, lost=True)
            states.append(gpu_state(len(states), static=static, sample=lost, note=DOWN_NOTE))
            continue
        backend = sim(gpus=gpus, seed=number + 1, hostname=name, processes_per_gpu=2)
        snapshot = Collector(backend, history=4).collect()
        now = snapshot.timestamp
        for gpu in snapshot.gpus:
            index = len(states)
            static = dataclasses.replace(gpu.static, index=index, host=name, host_index=gpu.static.index)
            processes = tuple(dataclasses.replace(p, gpu_index=index, host=name) for p in gpu.processes)
            sample = gpu.sample
            if name in stale:
                sample = dataclasses.replace(sample, timestamp=sample.timestamp - 120.0)
            states.append(dataclasses.replace(gpu, static=static, sample=sample, processes=processes))
    assert now is not None
    states = [
        dataclasses.replace(g, sample=dataclasses.replace(g.sample, timestamp=now)) if g.note else g for g in states
    ]
    host = host_info(hostname=f"{len(hosts)} hosts", cuda_driver_version=None, backend="remote", user="alice")
    return snapshot_of(*states, timestamp=now, host=host, sequence=1, interval=1.0)


def local(sim) -> Snapshot:
    return Collector(sim(gpus=2, seed=1, processes_per_gpu=2), history=2).collect()


# --------------------------------------------------------------------------- the HOST column


def test_host_column_after_gpu_only_when_the_snapshot_spans_hosts():
    keys = [c.key for c in visible_columns(200, hosts=True)]
    assert keys[:3] == ["gpu", "host", "pid"]
    assert "host" not in [c.key for c in visible_columns(200)]
    assert [c.key for c in visible_columns(200, hosts=True, mig=True)][:3] == ["gpu", "host", "mig"]
    assert COLUMN_IDS[:3] == ("gpu", "host", "mig"), "the chooser and the config list it"


def test_chosen_columns_show_host_only_on_a_fleet_and_hide_it_when_left_out():
    chosen = ("host", "gpu", "pid", "command")
    assert [c.key for c in visible_columns(120, chosen=chosen, hosts=True)] == ["host", "gpu", "pid", "command"]
    assert [c.key for c in visible_columns(120, chosen=chosen)] == ["gpu", "pid", "command"]
    assert "host" not in [c.key for c in visible_columns(120, chosen=("gpu", "pid", "command"), hosts=True)]


def test_host_outlasts_the_other_columns_on_a_narrow_terminal_and_is_as_wide_as_its_labels():
    narrow = [c.key for c in visible_columns(65, hosts=True)]
    assert "host" in narrow and "user" not in narrow

    def width(hosts: int) -> int:
        return {c.key: c.width for c in visible_columns(250, hosts=hosts)}["host"]

    assert (width(8), width(2), width(60)) == (8, 4, 24), "its widest label; the title; an FQDN is cut"


def test_host_cells_name_the_host_and_the_gpus_own_index(sim):
    snapshot = fleet(sim, ["node-a", "node-b"])
    labels = host_labels(snapshot.gpus)
    assert labels == {0: "node-a/0", 1: "node-a/1", 2: "node-b/0", 3: "node-b/1"}
    process = snapshot.gpus[3].processes[0]
    assert host_cell(process, labels) == ("node-b/1", "remote")
    assert host_cell(process, {}) == ("node-b", "remote"), "without its GPU's label: the process's own host"
    assert host_labels(local(sim).gpus) is None, "a local snapshot: no HOST column"


def test_a_hostile_host_name_is_escaped_in_the_column():
    static = GpuStatic(index=0, host="evil\x1b[2Jhost", host_index=0)
    labels = host_labels([GpuState(static, GpuSample(0.0))])
    assert labels is not None and "\x1b" not in labels[0] and labels[0].endswith("/0")


def test_the_filter_matches_a_host_name(sim):
    snapshot = fleet(sim, ["node-a", "node-b", "gpu-c"])
    rows = build_rows(snapshot.processes, SortOrder(), ProcessFilter(text="NODE-B"), "alice")
    assert rows and {p.host for p in rows} == {"node-b"}
    assert not build_rows(snapshot.processes, SortOrder(), ProcessFilter(text="node-z"), "alice")


def test_sorting_by_host_keeps_each_hosts_gpus_in_order(sim):
    snapshot = fleet(sim, ["node-b", "node-a"])
    rows = build_rows(snapshot.processes, SortOrder("host"), ProcessFilter(), "alice")
    assert [(p.host, p.gpu_index) for p in rows] == sorted((p.host, p.gpu_index) for p in rows)
    assert rows[0].host == "node-a"
    assert SortOrder().cycle(1, hosts=True).column == "host", "s steps from GPU to HOST on a fleet"
    assert SortOrder().cycle(1).column == "pid"


def test_a_group_names_its_one_host_or_counts_them(sim):
    snapshot = fleet(sim, ["node-a", "node-b"])
    labels = host_labels(snapshot.gpus) or {}
    rows = build_rows(snapshot.processes, SortOrder(), ProcessFilter(), "alice")
    by_gpu = build_groups(rows, "gpu", SortOrder())
    assert group_host_cell(by_gpu[0], labels)[0] == labels[by_gpu[0].gpus[0]]
    everything = build_groups([dataclasses.replace(p, user="x") for p in rows], "user", SortOrder())
    assert group_host_cell(everything[0], labels) == ("2 hosts", "dim")


def test_the_same_pid_on_two_hosts_is_two_processes_in_a_group(sim):
    snapshot = fleet(sim, ["node-a", "node-b"])
    a, b = snapshot.gpus[0].processes[0], snapshot.gpus[2].processes[0]
    twins = [a, dataclasses.replace(b, pid=a.pid, create_time=a.create_time, user=a.user)]
    (group,) = build_groups(twins, "user", SortOrder())
    assert group.processes == 2 and len(group.targets()) == 2


# --------------------------------------------------------------------------- --once and JSON


def test_once_text_has_a_host_column_on_a_fleet_only(sim):
    out = io.StringIO()
    render_snapshot(fleet(sim, ["node-a", "node-b"]), out, color=False)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["GPU", "Host", "PID"])
    hosts = {line.split()[1] for line in lines[start + 2 :] if line.split() and line.split()[0].isdigit()}
    assert hosts == {"node-a/0", "node-a/1", "node-b/0", "node-b/1"}
    out = io.StringIO()
    render_snapshot(local(sim), out, color=False)
    assert any(line.split()[:3] == ["GPU", "PID", "Type"] for line in out.getvalue().splitlines())


def test_json_carries_the_process_host_escaped(sim):
    snapshot = fleet(sim, ["node-a", "evil\x1b]0;x\x07"])
    data = snapshot_to_dict(snapshot)
    hosts = [p["host"] for g in data["gpus"] for p in g["processes"]]
    assert "node-a" in hosts and all("\x1b" not in h and "\x07" not in h for h in hosts)
    assert all(p["host"] is None for g in snapshot_to_dict(local(sim))["gpus"] for p in g["processes"])


def test_a_recording_of_a_fleet_replays_with_each_process_host(sim, tmp_path):
    snapshot = fleet(sim, ["node-a", "node-b"])
    path = tmp_path / "fleet.jsonl"
    with path.open("w", encoding="utf-8") as out:
        JsonlWriter(out, None, processes=True).write(snapshot)
    (replayed,) = load_recording(str(path)).snapshots
    assert [p.host for p in replayed.processes] == [p.host for p in snapshot.processes]


# --------------------------------------------------------------------------- host headers (render level)


def test_hosts_are_grouped_in_their_order_and_their_state_said(sim):
    snapshot = fleet(sim, ["node-a", "node-b", "node-c"], down=("node-b",), stale=("node-c",))
    groups = host_groups(snapshot.gpus)
    assert [(g.host, len(g.gpus)) for g in groups] == [("node-a", 2), ("node-b", 1), ("node-c", 2)]
    now = snapshot.timestamp
    assert [host_state(g, now, 3.0)[0] for g in groups] == ["reachable", "unreachable", "stale 2 min"]
    assert host_state(groups[2])[0] == "reachable", "without a threshold nothing is stale"
    line = host_header(groups[0], 60, now, 3.0)
    assert line.cells == 60 and line.plain.startswith("── node-a · 2 GPUs · reachable ─")
    hostile = host_header(HostGroup("x\x1b[31m", groups[0].gpus), 40).plain
    assert "\x1b" not in hostile


def test_a_host_its_source_calls_stale_or_only_remarks_on_is_said_so():
    """The fleet source draws a stale host as one note per GPU ("stale: newest sample 2 min old ...")."""
    stale = HostGroup(
        "node-x",
        tuple(
            GpuState(GpuStatic(index=i, host="node-x", host_index=i), GpuSample(0.0), note="stale: newest sample 2 min")
            for i in range(2)
        ),
    )
    assert host_state(stale) == ("stale", "warn")
    assert host_header(stale, 50).plain.startswith("── node-x · 2 GPUs · stale ─")
    remark = HostGroup("prom:9090", (GpuState(GpuStatic(index=0, host="prom:9090"), GpuSample(0.0), note="partial"),))
    assert host_state(remark) == ("see below", "warn")


def test_the_compact_plan_counts_a_header_per_host():
    plain = plan_layout(8, 120, 60, "compact")
    grouped = plan_layout(8, 120, 60, "compact", groups=[4, 4])
    assert grouped.lines == plain.lines + 2 and grouped.hosts and not plain.hosts
    assert not plan_layout(8, 120, 60, "compact", groups=[3, 3]).hosts, "groups that do not add up: ignored"


def test_a_plan_taller_than_its_share_scrolls():
    plan = plan_layout(512, 160, 50, "auto", groups=[8] * 64)
    assert plan.kind == "compact" and plan.scrolls and plan.lines == 30 and plan.content > 150
    assert not plan_layout(16, 80, 24, "auto").scrolls, "the layouts that fit are unchanged"


# --------------------------------------------------------------------------- the app


async def shown(pilot, app: NvtopyApp, snapshot: Snapshot) -> None:
    target = app.snapshots_applied + 1
    app.source._publish(snapshot)
    await wait_until(pilot, lambda: app.snapshots_applied >= target, message="the snapshot")
    await pilot.pause()


async def test_the_compact_view_groups_gpus_under_a_header_per_host(sim):
    snapshot = fleet(sim, ["node-a", "node-b", "node-c"], down=("node-b",), stale=("node-c",))
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), layout="compact", poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, app, snapshot)
        lines = widget_lines(app.query_one("#gpus"))
        headers = [line.strip() for line in lines if line.startswith("── ")]
        assert [h.split(" ─")[0] for h in headers] == [
            "── node-a · 2 GPUs · reachable",
            "── node-b · unreachable",
            "── node-c · 2 GPUs · stale 2 min",
        ]
        # Each header is followed by its own host's lines.
        first = lines.index(next(line for line in lines if line.startswith("── node-b")))
        assert "node-b" in lines[first + 1] and "unreachable: connection refused" in lines[first + 1]
        table = widget_lines(app.query_one("#processes"))
        assert table[0].split()[:3] == ["GPU▲", "HOST", "PID"]
        assert any(line.split()[1:2] == ["node-c/1"] for line in table[1:])


async def test_a_local_snapshot_has_no_header_and_no_host_column(sim):
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), layout="compact", poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, app, local(sim))
        assert not any(line.startswith("── ") for line in widget_lines(app.query_one("#gpus")))
        assert "HOST" not in widget_lines(app.query_one("#processes"))[0].split()


async def test_typing_a_host_name_filters_to_its_processes(sim):
    snapshot = fleet(sim, ["node-a", "node-b", "node-c"])
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, app, snapshot)
        await pilot.press("slash", *"node-b", "enter")
        await pilot.pause()
        rows = app.query_one("#processes").rows
        assert rows and {p.host for p in rows} == {"node-b"}


async def test_b_groups_a_fleet_by_host_and_skips_it_on_one_host(sim):
    snapshot = fleet(sim, ["node-a", "node-b", "node-c"])
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), poll=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await shown(pilot, app, snapshot)
        seen = []
        for _ in range(5):
            await pilot.press("b")
            await pilot.pause()
            seen.append(app.group_by)
        assert seen == ["user", "owner", "gpu", "host", None], "b cycles through host on a fleet"
        await pilot.press("b", "b", "b", "b")
        await pilot.pause()
        rows = app.query_one("#processes").rows
        assert [(g.value, g.processes, len(g.gpus)) for g in sorted(rows, key=lambda g: g.value)] == [
            (host, len([p for p in snapshot.processes if p.host == host]), 2) for host in ("node-a", "node-b", "node-c")
        ]
        table = "\n".join(widget_lines(app.query_one("#processes")))
        assert "▸ node-b: " in table and "grouped by host" in header_line(app)
        await shown(pilot, app, local(sim))  # one machine: the group is "this host", and b no longer offers it
        assert "▸ this host: " in "\n".join(widget_lines(app.query_one("#processes")))
        await pilot.press("b")
        await pilot.pause()
        assert app.group_by is None
        seen = []
        for _ in range(4):
            await pilot.press("b")
            await pilot.pause()
            seen.append(app.group_by)
        assert seen == ["user", "owner", "gpu", None]


@pytest.mark.parametrize("key", ["K", "T", "I"])
async def test_signal_keys_on_a_fleet_say_it_is_read_only(sim, key):
    snapshot = fleet(sim, ["node-a", "node-b"])
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), poll=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await shown(pilot, app, snapshot)
        assert app.query_one("#processes").selected is not None
        await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen), "no dialog: nothing can be sent"
        assert [n.message for n in app._notifications][-1:] == [REFUSAL]
        assert "read-only" in header_line(app)


async def test_512_gpus_build_only_the_lines_in_view_and_scroll(sim, monkeypatch):
    snapshot = fleet(sim, [f"node{i:02d}" for i in range(64)], gpus=8)
    assert len(snapshot.gpus) == 512
    drawn: list[int] = []
    compact_lines = gpu_view_module.compact_lines

    def counting(gpu, width):
        drawn.append(gpu.index)
        return compact_lines(gpu, width)

    monkeypatch.setattr(gpu_view_module, "compact_lines", counting)
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), poll=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(pilot, app, snapshot)
        view = app.query_one("#gpus")
        assert view.size.height == 30 and app.query_one("#processes").size.height > 10, "the table keeps room"
        drawn.clear()
        started = time.perf_counter()
        app.refresh_view()
        took = time.perf_counter() - started
        assert 0 < len(drawn) <= 30 * 4, f"{len(drawn)} compact lines built for one refresh, not 512"
        print(f"refresh of 512 GPUs: {took * 1000:.1f} ms, {len(drawn)} compact lines built")
        lines = widget_lines(view)
        assert lines[0].startswith("GPU ") and "MEM" in lines[0], "the column labels stay at the top"
        assert lines[1].startswith("── node00 · 8 GPUs") and "GPUs 0-" in lines[-1] and "of 512" in lines[-1]
        await pilot.hover("#gpus")
        for _ in range(20):
            await pilot._post_mouse_events([MouseScrollDown], "#gpus")  # the wheel, over the GPU view
        await pilot.pause()
        assert view.top > 0
        scrolled = widget_lines(view)
        assert scrolled[0] == lines[0], "the column labels do not scroll"
        assert scrolled[1] != lines[1] and "↑" in scrolled[-1]
        assert not any("node00/0" in line for line in scrolled[:-1]), "the first host scrolled out of view"


def test_json_of_the_fleet_round_trips_through_the_contract(sim):
    data = json.loads(json.dumps(snapshot_to_dict(fleet(sim, ["node-a", "node-b"]))))
    assert {p["host"] for g in data["gpus"] for p in g["processes"]} == {"node-a", "node-b"}


# --------------------------------------------------------------------------- the picture


def test_compact_view_of_three_hosts(snap_compare, sim, utc):
    """Three hosts, one unreachable and one stale, in compact lines under their headers; HOST in the table.

    A layout change fails here; when intended: ``pytest tests/tui/test_tui_hosts.py --snapshot-update``.
    """
    snapshot = fleet(sim, ["node-a", "node-b", "node-c"], gpus=3, down=("node-b",), stale=("node-c",))
    app = NvtopyApp(FixedSource(signal_refusal=REFUSAL, status="REMOTE 2/3 hosts"), layout="compact", poll=False)

    async def prepare(pilot) -> None:
        await shown(pilot, app, snapshot)

    assert snap_compare(app, terminal_size=(120, 30), run_before=prepare)


def test_a_compact_line_shows_sm_active_whole_or_not_at_all():
    """A remote GPU's longer label leaves less room: its SM active goes whole, never as ``SM 8…`` at the cut."""
    from nvtopy.render.gpu import compact_line

    base = gpu_state(0, sample=gpu_sample(utilization_gpu_percent=96, sm_active_percent=82.0))
    for host in ("n", "node00", "gpu-node-1234"):
        gpu = dataclasses.replace(base, static=dataclasses.replace(base.static, host=host, host_index=0))
        for width in range(24, 61):
            text = compact_line(gpu, width).plain
            assert len(text) <= width
            assert "SM" not in text or text.rstrip().endswith(("SM  82%", "82%", "°C", "W", "P0")), (host, width, text)
            assert "SM" not in text or "SM  82%" in text, (host, width, text)
        assert "SM  82%" in compact_line(gpu, 80).plain


def test_the_health_overview_names_each_remote_gpus_host_and_never_calls_an_unread_host_ok():
    from nvtopy.model import Severity
    from nvtopy.render.cells import verdict_cell
    from nvtopy.render.health import health_counts, overview_line

    base = gpu_state(9)
    remote = dataclasses.replace(base, static=dataclasses.replace(base.static, host="node01", host_index=1))
    gone = host_line(12, "deadbox", "lost: x")
    stale = dataclasses.replace(remote, note="stale: no snapshot for 9 s")
    assert overview_line(remote).plain.split()[:4] == ["GPU", "9", "OK", "node01/1"]
    assert overview_line(gone).plain.split()[:4] == ["host", "N/A", "deadbox", "lost:"]  # no GPU index: none
    assert verdict_cell(gone)[0] == verdict_cell(stale)[0] == "N/A"
    assert health_counts([remote, gone, stale]) == {Severity.OK: 1, Severity.WARN: 0, Severity.FAIL: 0}
    assert overview_line(gpu_state(0)).plain.split()[:3] == ["GPU", "0", "OK"]  # a local GPU: no host


def test_a_hosts_line_is_named_by_its_host_alone_in_every_view_never_by_an_index():
    """A fleet's line for a host it cannot read (or not yet) is no GPU: its place in the list is not shown as one."""
    from nvtopy.render.gpu import compact_line, panel_title
    from nvtopy.render.health import overview_line

    gone = host_line(12, "deadbox", "lost: x")
    connecting = host_line(3, "node7", "connecting (4 s)", lost=False)
    for line in (gone, connecting):
        host = line.static.host
        assert panel_title(line, 60).plain.split()[0] == host
        assert compact_line(line, 80).plain.split()[0] == host
        assert overview_line(line).plain.split()[0] == "host"
    remote = gpu_state(9)
    remote = dataclasses.replace(remote, static=dataclasses.replace(remote.static, host="node01", host_index=1))
    stale = dataclasses.replace(remote, note="stale: no snapshot for 9 s")  # a GPU of a stale host: still a GPU
    for gpu in (remote, stale):
        assert panel_title(gpu, 60).plain.split()[:2] == ["9", "node01/1"]
        assert compact_line(gpu, 80).plain.split()[:2] == ["9", "node01/1"]
