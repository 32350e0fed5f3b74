"""GPU selection: ``--gpus`` lists and CUDA_VISIBLE_DEVICES, on four GPUs with known identities."""

from __future__ import annotations

import pytest

from nvtopy.errors import SelectionError, UsageError
from nvtopy.model import GpuStatic, MigInstance
from nvtopy.selection import (
    Selection,
    VisibleDevice,
    VisibleDevices,
    format_bus_id,
    parse_bus_id,
    parse_cuda_visible_devices,
    resolve_gpu_list,
    resolve_gpu_selection,
    select_gpus,
)

from ..builders import mig_instances

# GPUs 0 and 1 share the UUID prefix "5e3f" (and "5e3f0"/"5e3f9" tell them apart).
UUID0 = "GPU-5e3f0c1a-1111-2222-3333-444455556666"
UUID1 = "GPU-5e3f9abc-7777-8888-9999-aaaabbbbcccc"
UUID2 = "GPU-a1b2c3d4-0000-1111-2222-333344445555"
UUID3 = "GPU-deadbeef-4444-5555-6666-777788889999"
MIG2A = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG2B = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"

GPUS = (
    GpuStatic(index=0, uuid=UUID0, name=A100, bus_id="00000000:1B:00.0"),
    GpuStatic(index=1, uuid=UUID1, name=A100, bus_id="00000000:3B:00.0"),
    GpuStatic(
        index=2,
        uuid=UUID2,
        name=H100,
        bus_id="00000000:86:00.0",
        mig_mode=True,
        mig_instances=mig_instances(MIG2A, MIG2B),
    ),
    GpuStatic(index=3, uuid=UUID3, name=H100, bus_id="00000000:AF:00.0"),
)
SAME_MODEL = tuple(
    GpuStatic(index=g.index, uuid=g.uuid, name=A100, bus_id=g.bus_id, mig_instances=g.mig_instances) for g in GPUS
)


# --------------------------------------------------------------------------- bus ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3b:00.0", (0, 0x3B, 0, 0)),
        ("3B:00.0", (0, 0x3B, 0, 0)),
        ("0000:3b:00.0", (0, 0x3B, 0, 0)),
        ("00000000:3B:00.0", (0, 0x3B, 0, 0)),
        ("00000000:3b:00.0", (0, 0x3B, 0, 0)),
        ("3b:00", (0, 0x3B, 0, 0)),
        ("0001:af:1f.7", (1, 0xAF, 0x1F, 7)),
        ("ffffffff:ff:ff.7", (0xFFFFFFFF, 0xFF, 0xFF, 7)),
        ("  3b:00.1  ", (0, 0x3B, 0, 1)),
        ("1:2", (0, 1, 2, 0)),
    ],
)
def test_parse_bus_id_accepts_every_common_form(text, expected):
    assert parse_bus_id(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3b",
        "0",
        "12",
        "3b:00.8",  # function is 0..7
        "3b.00.0",
        "zz:00.0",
        "3b:0g.0",
        "13b:00.0",  # bus is at most two hex digits
        "3b:000.0",
        "000000000:3b:00.0",  # domain is at most eight hex digits
        "3b:00.0.0",
        "GPU-5e3f0c1a",
        "5e3f0c1a",
        "MIG-11111111",
    ],
)
def test_parse_bus_id_rejects_what_is_not_a_bus_id(text):
    assert parse_bus_id(text) is None


@pytest.mark.parametrize(
    ("bus_id", "text"),
    [
        ((0, 0x3B, 0, 0), "00000000:3B:00.0"),
        ((0, 0x1B, 0, 0), "00000000:1B:00.0"),
        ((1, 0xAF, 0x1F, 7), "00000001:AF:1F.7"),
        ((0xFFFFFFFF, 0xFF, 0xFF, 7), "FFFFFFFF:FF:FF.7"),
        ((0, 0, 0, 0), "00000000:00:00.0"),
    ],
)
def test_format_bus_id_round_trips(bus_id, text):
    assert format_bus_id(bus_id) == text
    assert parse_bus_id(text) == bus_id
    assert parse_bus_id(format_bus_id(bus_id)) == bus_id


@pytest.mark.parametrize("text", ["3b:00.0", "0000:3B:00", "00000000:3b:00.0", "3B:00"])
def test_parse_then_format_gives_nvml_form(text):
    assert format_bus_id(parse_bus_id(text)) == "00000000:3B:00.0"


# --------------------------------------------------------------------------- --gpus


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # indices, in the order given, duplicates removed
        ("0", [0]),
        ("3", [3]),
        ("2,0", [2, 0]),
        ("3,1,2,0", [3, 1, 2, 0]),
        (" 1 , 2 ", [1, 2]),
        ("1,1", [1]),
        ("2,0,2,0", [2, 0]),
        # bus ids in every form and case
        ("3b:00.0", [1]),
        ("3B:00.0", [1]),
        ("0000:3b:00.0", [1]),
        ("0000:3B:00.0", [1]),
        ("00000000:3B:00.0", [1]),
        ("00000000:3b:00.0", [1]),
        ("3b:00", [1]),
        ("af:00.0", [3]),
        ("1b:00.0,86:00", [0, 2]),
        # UUIDs with and without GPU-, any case, and unique prefixes
        (UUID2, [2]),
        (UUID2.lower(), [2]),
        (UUID2.upper(), [2]),
        (UUID2.removeprefix("GPU-"), [2]),
        ("GPU-a1b2", [2]),
        ("gpu-a1b2", [2]),
        ("a1b2", [2]),
        ("A1B2C3", [2]),
        ("dead", [3]),
        ("5e3f0", [0]),
        ("GPU-5e3f9", [1]),
        ("5E3F9ABC", [1]),
        # mixed kinds; one GPU named three ways is listed once
        ("dead,0,3b:00.0", [3, 0, 1]),
        (f"1,3b:00.0,{UUID1},5e3f9", [1]),
        (f"{UUID3},00000000:AF:00.0,3", [3]),
    ],
)
def test_resolve_gpu_list(spec, expected):
    assert resolve_gpu_list(spec, GPUS) == expected


def _assert_lists_available(message: str) -> None:
    assert "available:" in message
    for gpu in GPUS:
        assert f"{gpu.index} {gpu.short_bus_id}" in message
        assert gpu.uuid[:12] in message


@pytest.mark.parametrize(
    ("spec", "entry"),
    [
        ("4", "4"),
        ("0,17", "17"),
        ("-1", "-1"),
        ("3c:00.0", "3c:00.0"),
        ("0000:1b:01.0", "0000:1b:01.0"),
        ("1b:00.1", "1b:00.1"),  # right bus, wrong function
        ("0001:1b:00.0", "0001:1b:00.0"),  # right bus, wrong domain
        ("GPU-ffff", "GPU-ffff"),
        ("ffff", "ffff"),
        ("GPU-00000000-1111-2222-3333-444455556666", "GPU-00000000-1111-2222-3333-444455556666"),
        ("GPU-", "GPU-"),
        ("nvidia0", "nvidia0"),
        ("1,banana", "banana"),
    ],
)
def test_resolve_gpu_list_unknown_entry_names_it_and_lists_gpus(spec, entry):
    with pytest.raises(SelectionError) as info:
        resolve_gpu_list(spec, GPUS)
    message = str(info.value)
    assert repr(entry) in message
    assert "no GPU matches" in message
    _assert_lists_available(message)
    assert "\n" not in message


@pytest.mark.parametrize(("spec", "entry"), [("5e3f", "5e3f"), ("GPU-5e3f", "GPU-5e3f"), ("2,5E3F", "5E3F")])
def test_resolve_gpu_list_ambiguous_prefix_names_entry_and_matches(spec, entry):
    with pytest.raises(SelectionError) as info:
        resolve_gpu_list(spec, GPUS)
    message = str(info.value)
    assert repr(entry) in message
    assert "matches GPUs 0, 1" in message


@pytest.mark.parametrize("spec", ["", " ", "0,,1", "0,", ",0", "0, ,1"])
def test_resolve_gpu_list_empty_entry(spec):
    with pytest.raises(SelectionError, match="empty entry") as info:
        resolve_gpu_list(spec, GPUS)
    _assert_lists_available(str(info.value))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (MIG2A, [0, 2]),
        (MIG2A.lower(), [0, 2]),
        ("MIG-1111", [0, 2]),
        ("MIG-GPU-a1b2c3d4-0000-1111-2222-333344445555/1/0", [0, 2]),
        ("MIG-GPU-a1b2/2/0", [0, 2]),
    ],
)
def test_resolve_gpu_list_counts_a_mig_device_as_its_parent(entry, expected):
    assert resolve_gpu_list(f"0,{entry}", GPUS) == expected


def test_selection_error_is_a_usage_error():
    with pytest.raises(UsageError) as info:
        resolve_gpu_list("9", GPUS)
    assert info.value.exit_code == 2


def test_resolve_gpu_list_without_gpus_says_so():
    with pytest.raises(SelectionError, match="no GPUs are present"):
        resolve_gpu_list("0", [])


def test_resolve_gpu_list_gpus_in_any_order_and_without_bus_or_uuid():
    gpus = [GpuStatic(index=1), GpuStatic(index=0, bus_id="00000000:1B:00.0")]
    assert resolve_gpu_list("1,1b:00,0", gpus) == [1, 0]
    with pytest.raises(SelectionError) as info:
        resolve_gpu_list("5e3f", gpus)
    assert "available: 1, 0 1B:00.0" in str(info.value)


def test_resolve_gpu_list_nonzero_domain_needs_its_domain():
    gpus = [GpuStatic(index=0, bus_id="00000001:1B:00.0")]
    assert resolve_gpu_list("0001:1b:00.0", gpus) == [0]
    assert resolve_gpu_list("00000001:1B:00", gpus) == [0]
    with pytest.raises(SelectionError):
        resolve_gpu_list("1b:00.0", gpus)


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def _nvml(value, gpus=GPUS, environ=None):
    return parse_cuda_visible_devices(value, gpus, environ).nvml_indices


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("   ", []),
        ("0", [0]),
        ("2,0", [2, 0]),
        ("3,1,2,0", [3, 1, 2, 0]),
        ("0,2,-1,1", [0, 2]),
        ("-1", []),
        ("-1,0", []),
        ("0,0", []),
        ("1,2,1", []),
        ("1abc", [1]),
        ("1gpu2,2ampere", [1, 2]),
        ("one,two,3", []),
        ("2,x,3", [2]),
        ("4,3,two", []),  # 4 GPUs: ordinal 4 is out of range and ends the list
        ("3,9,1", [3]),
        ("3,4", [3]),
        ("99999999999999999999", []),
        ("+1", [1]),
        ("+1,+2", [1, 2]),
        ("-0", [0]),
        ("-0,+0", []),  # both are ordinal 0: a duplicate
        ("+-1", []),
        ("-", []),
        ("+", []),
        (" 1 , 2 ", [1, 2]),
        ("\t3,\n0 ", [3, 0]),
        ("0,,1", [0]),
        ("1,", [1]),
        (",1", []),
        ("0,-1,0", [0]),  # the list ends before the repeat
        # integers first: a UUID ends the list
        (f"0,{UUID2}", [0]),
        (f"1,{MIG2A}", [1]),
        # UUIDs and unique prefixes
        (UUID2, [2]),
        (f"{UUID3},{UUID0}", [3, 0]),
        ("GPU-a1b2", [2]),
        ("GPU-5e3f0,GPU-5e3f9", [0, 1]),
        (UUID2.lower(), [2]),
        (f" {UUID1} , {UUID2} ", [1, 2]),
        ("GPU-5e3f", []),  # ambiguous prefix ends the list
        ("GPU-a1b2,GPU-5e3f,GPU-dead", [2]),
        ("GPU-ffffffff", []),
        (f"{UUID3},GPU-ffffffff,{UUID0}", [3]),  # unknown UUID ends the list
        (f"{UUID2},{UUID2}", []),
        (f"{UUID2},GPU-a1b2", []),  # the same GPU by UUID and by prefix
        (f"{UUID1},{UUID3},GPU-5e3f9", []),
        # UUIDs first: an integer or a bare UUID ends the list
        (f"{UUID2},0", [2]),
        (f"{UUID2},1,{UUID3}", [2]),
        (f"{UUID2},deadbeef", [2]),
        ("a1b2c3d4", []),  # no GPU- prefix: not a UUID, and no leading digits
        # MIG devices resolve to their parent GPU
        (MIG2A, [2]),
        ("MIG-2222", [2]),
        (f"{MIG2A},{MIG2B}", [2]),
        (f"{MIG2B},{UUID0}", [2, 0]),
        (f"{UUID0},{MIG2A}", [0, 2]),
        ("MIG-33333333", []),
        ("MIG-", []),  # a prefix of both MIG devices is ambiguous
        (f"{MIG2A},MIG-33333333,{MIG2B}", [2]),
        (f"{MIG2A},{MIG2A}", []),
        (f"{MIG2A},MIG-1111", []),  # the same MIG device by UUID and by prefix
        (f"MIG-{UUID2}/1/0", [2]),
        (f"MIG-{UUID2}/1/0,MIG-{UUID2}/2/0", [2]),
        ("MIG-GPU-a1b2/1/0", [2]),
        ("MIG-GPU-5e3f/1/0", []),  # ambiguous parent
        ("MIG-GPU-ffff/1/0", []),
        (f"MIG-{UUID2}/1/0,MIG-{UUID2}/1/0", []),
    ],
)
def test_cuda_visible_devices_nvml_indices(value, expected):
    assert _nvml(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (VisibleDevice(0, 0), VisibleDevice(1, 1), VisibleDevice(2, 2), VisibleDevice(3, 3))),
        ("", ()),
        ("2,0", (VisibleDevice(0, 2), VisibleDevice(1, 0))),
        ("0,2,-1,1", (VisibleDevice(0, 0), VisibleDevice(1, 2))),
        ("3,9,1", (VisibleDevice(0, 3),)),
        (f"{UUID3},GPU-5e3f9", (VisibleDevice(0, 3), VisibleDevice(1, 1))),
        (
            f"{MIG2B},{UUID0},MIG-1111",
            (VisibleDevice(0, 2, MIG2B), VisibleDevice(1, 0), VisibleDevice(2, 2, MIG2A)),
        ),
        (f"MIG-{UUID2}/1/0", (VisibleDevice(0, 2, MIG2A),)),  # the legacy form resolves to the instance's UUID
        ("mig-gpu-A1B2/2/0", (VisibleDevice(0, 2, MIG2B),)),
    ],
)
def test_cuda_visible_devices_cuda_order(value, expected):
    result = parse_cuda_visible_devices(value, GPUS)
    assert result.devices == expected
    assert [d.cuda_index for d in result.devices] == list(range(len(expected)))


def test_cuda_visible_devices_unordered_gpu_list_uses_nvml_order():
    shuffled = [GPUS[3], GPUS[1], GPUS[0], GPUS[2]]
    assert _nvml(None, shuffled) == [0, 1, 2, 3]
    assert _nvml("0,3", shuffled) == [0, 3]
    assert _nvml("4", shuffled) == []


@pytest.mark.parametrize(
    "value", ["0,0", "1,2,1", "-0,+0", f"{UUID2},{UUID2}", f"{MIG2A},{MIG2A}", f"{UUID2},GPU-a1b2"]
)
def test_cuda_visible_devices_duplicate_exposes_nothing_and_says_why(value):
    result = parse_cuda_visible_devices(value, GPUS, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert result.devices == ()
    assert result.nvml_indices == []
    assert len(result.warnings) == 1
    assert "twice" in result.warnings[0]


# --------------------------------------------------------------------------- CUDA_DEVICE_ORDER warning

ORDER_WARNING = "CUDA_DEVICE_ORDER is FASTEST_FIRST"


@pytest.mark.parametrize(
    ("value", "gpus", "environ", "warns"),
    [
        ("0,1", GPUS, None, True),
        ("0,1", GPUS, {}, True),
        ("2", GPUS, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, True),
        ("2", GPUS, {"CUDA_DEVICE_ORDER": "fastest_first"}, True),
        ("2", GPUS, {"CUDA_DEVICE_ORDER": ""}, True),
        ("1abc", GPUS, {}, True),
        ("0,1", GPUS, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, False),
        ("0,1", SAME_MODEL, {}, False),
        ("0,1", SAME_MODEL, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, False),
        ("0,1", GPUS[:2], {}, False),  # only A100s present
        (UUID2, GPUS, {}, False),
        (MIG2A, GPUS, {}, False),
        (None, GPUS, {}, False),
        ("", GPUS, {}, False),
        ("-1", GPUS, {}, False),  # no integer was used
        ("x", GPUS, {}, False),
    ],
)
def test_cuda_device_order_warning(value, gpus, environ, warns):
    result = parse_cuda_visible_devices(value, gpus, environ)
    warned = [w for w in result.warnings if ORDER_WARNING in w]
    assert bool(warned) is warns
    others = [w for w in result.warnings if ORDER_WARNING not in w]
    assert all("MIG devices" in w for w in others), "GPU 2 has two MIG devices: only the MIG rule may add one"
    if warns:
        assert "PCI_BUS_ID" in warned[0]


def test_cuda_device_order_warning_does_not_change_the_mapping():
    fastest = parse_cuda_visible_devices("3,0", GPUS, {})
    pci = parse_cuda_visible_devices("3,0", GPUS, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert fastest.devices == pci.devices == (VisibleDevice(0, 3), VisibleDevice(1, 0))
    assert fastest.warnings and not pci.warnings


def test_cuda_visible_devices_does_not_read_process_environment(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert parse_cuda_visible_devices("0", GPUS).warnings != ()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert parse_cuda_visible_devices(None, GPUS).nvml_indices == [0, 1, 2, 3]


# --------------------------------------------------------------------------- nvml_indices


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ((), []),
        ((VisibleDevice(0, 2), VisibleDevice(1, 0)), [2, 0]),
        ((VisibleDevice(0, 2, MIG2A), VisibleDevice(1, 2, MIG2B)), [2]),
        ((VisibleDevice(0, 2, MIG2A), VisibleDevice(1, 0), VisibleDevice(2, 2, MIG2B)), [2, 0]),
        ((VisibleDevice(0, 3), VisibleDevice(1, 2, MIG2A), VisibleDevice(2, 2)), [3, 2]),
    ],
)
def test_nvml_indices_deduplicates_parents_in_cuda_order(devices, expected):
    assert VisibleDevices(devices).nvml_indices == expected


def test_nvml_indices_of_two_mig_devices_on_one_gpu():
    result = parse_cuda_visible_devices(f"{MIG2A},{MIG2B}", GPUS)
    assert len(result.devices) == 2
    assert {d.mig_uuid for d in result.devices} == {MIG2A, MIG2B}
    assert result.nvml_indices == [2]


# --------------------------------------------------------------------------- absurd numbers

HUGE = "9" * 5000  # more digits than Python's int() reads (4,300): ValueError, were it asked


@pytest.mark.parametrize(
    "spec",
    [
        HUGE,
        "-" + HUGE,
        "+" + HUGE,
        "1," + HUGE,
        "0" * 4000 + "4",  # index 4, and there are four GPUs
        "1" + "0" * 20,
        "²",  # str.isdigit() is true, int() refuses it
        "0,\u0663",  # an Arabic-Indic three: int() reads it, nobody writes an index so
    ],
    ids=lambda v: f"{v[:10]!r}...({len(v)})",
)
def test_resolve_gpu_list_absurd_numbers_match_nothing_in_one_short_line(spec):
    with pytest.raises(SelectionError, match="no GPU matches") as info:
        resolve_gpu_list(spec, GPUS)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400
    _assert_lists_available(message)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("0" * 4999 + "3", [3]), ("0" * 5000, [0]), ("00002,1", [2, 1])],
    ids=["4999-zeros-then-3", "5000-zeros", "00002,1"],
)
def test_resolve_gpu_list_leading_zeros_are_the_index(spec, expected):
    assert resolve_gpu_list(spec, GPUS) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # strtol would say ERANGE: out of range, which ends the list
        (HUGE, []),
        ("0," + HUGE, [0]),
        ("3," + HUGE + ",1", [3]),
        ("-" + HUGE, []),
        ("+" + HUGE, []),
        (HUGE + "abc", []),
        ("1" + "0" * 18, []),
        # leading zeros and signs are still the ordinal
        ("0" * 5000 + "2", [2]),
        ("-" + "0" * 5000, [0]),
        ("2," + "0" * 4999 + "1", [2, 1]),
        ("-0", [0]),
        ("+1", [1]),
        (" 1", [1]),
        ("1 2", [1]),  # strtol stops at the space
        # only ASCII digits, as strtol in the C locale
        ("²", []),
        ("1,²", [1]),
        ("\u0661", []),
    ],
    ids=lambda v: f"{v[:10]!r}...({len(v)})" if isinstance(v, str) else str(v),
)
def test_cuda_visible_devices_absurd_numbers(value, expected):
    assert _nvml(value) == expected


# --------------------------------------------------------------------------- select_gpus: both options


@pytest.mark.parametrize(
    ("gpus", "only_visible", "cvd", "expected", "mig_warning"),
    [
        (None, False, "2,0", (0, 1, 2, 3), False),  # neither: every GPU, NVML order, CUDA_VISIBLE_DEVICES ignored
        ("3,1", False, "2,0", (3, 1), False),  # --gpus: its order
        ([3, "3b:00.0"], False, None, (3, 1), False),  # a list, as the Python API takes it
        (None, True, "3,0", (3, 0), False),  # --only-visible: CUDA order
        (None, True, "2,0", (2, 0), True),  # GPU 2 has MIG: CUDA exposes its two MIG devices, a process uses one
        (None, True, None, (0, 1, 2, 3), True),
        (None, True, "", (), "CUDA_VISIBLE_DEVICES is set but empty: CUDA exposes no GPU"),  # nothing, and why
        ("3,2,0", True, "2,0", (2, 0), True),  # both: --gpus order, only what CUDA exposes
        # GPU 2's MIG device is not shown anyway: no word about it; a word about why nothing is
        (
            "1",
            True,
            "2,0",
            (),
            "--gpus '1' and --only-visible have nothing in common: CUDA_VISIBLE_DEVICES='2,0' exposes "
            f"GPU 2 ({MIG2A}), GPU 0 only",
        ),
    ],
)
def test_select_gpus(gpus, only_visible, cvd, expected, mig_warning):
    environ = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if cvd is not None:
        environ["CUDA_VISIBLE_DEVICES"] = cvd
    selection = select_gpus(GPUS, gpus, only_visible, environ)
    assert selection.indices == expected
    if isinstance(mig_warning, str):  # an empty selection: why, in one warning
        assert selection.warnings == (mig_warning,)
    elif mig_warning:
        (warning,) = selection.warnings
        assert "2 MIG devices" in warning and f"({MIG2A}, GPU 2/1/0)" in warning
        assert dict(selection.instances) == {2: (MIG2A,)}
    else:
        assert selection.warnings == ()
        assert dict(selection.instances) == {}


def test_select_gpus_returns_warnings_and_never_prints(capsys):
    selection = select_gpus(GPUS, None, True, {"CUDA_VISIBLE_DEVICES": "1,0"})
    assert selection.indices == (1, 0)
    (warning,) = selection.warnings
    assert ORDER_WARNING in warning
    assert capsys.readouterr() == ("", "")
    assert select_gpus(GPUS, "1,0", False, {"CUDA_VISIBLE_DEVICES": "1,0"}).warnings == ()  # not asked: not read


def test_select_gpus_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert select_gpus(GPUS, None, True) == select_gpus(
        GPUS, None, True, {"CUDA_VISIBLE_DEVICES": "3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    )


def test_select_gpus_errors_name_the_entry():
    with pytest.raises(SelectionError, match="'7'"):
        select_gpus(GPUS, [0, 7])


# --------------------------------------------------------------------------- MIG devices
#
# GPUs 1 and 3 have MIG. GPU 1: two GPU instances, the second split into two compute
# instances (1/2/0 and 1/2/1). "MIG-aaaa" is a prefix of MIG devices on both GPUs.

MIG1A = "MIG-aaaa1111-0000-4000-8000-000000000001"
MIG1B = "MIG-aaaa2222-0000-4000-8000-000000000002"
MIG1C = "MIG-bbbb3333-0000-4000-8000-000000000003"
MIG3A = "MIG-aaaa9999-0000-4000-8000-000000000004"


def _instance(index: int, uuid: str | None, gi: int, ci: int, profile: str) -> MigInstance:
    return MigInstance(index=index, uuid=uuid, gpu_instance_id=gi, compute_instance_id=ci, profile=profile)


MIG_GPUS = (
    GpuStatic(index=0, uuid=UUID0, name=H100, bus_id="00000000:1B:00.0"),
    GpuStatic(
        index=1,
        uuid=UUID1,
        name=H100,
        bus_id="00000000:3B:00.0",
        mig_mode=True,
        mig_instances=(
            _instance(0, MIG1A, 1, 0, "4g.40gb"),
            _instance(1, MIG1B, 2, 0, "1c.3g.40gb"),
            _instance(2, MIG1C, 2, 1, "2c.3g.40gb"),
        ),
    ),
    GpuStatic(index=2, uuid=UUID2, name=H100, bus_id="00000000:86:00.0"),
    GpuStatic(
        index=3,
        uuid=UUID3,
        name=H100,
        bus_id="00000000:AF:00.0",
        mig_mode=True,
        mig_instances=(_instance(0, MIG3A, 1, 0, "7g.80gb"),),
    ),
)
PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _resolved(spec: str) -> tuple[tuple[int, ...], dict[int, tuple[str, ...]]]:
    selection = resolve_gpu_selection(spec, MIG_GPUS)
    return selection.indices, dict(selection.instances)


@pytest.mark.parametrize(
    ("spec", "indices", "instances"),
    [
        # MIG UUIDs, any case, and unique prefixes (MIG- required)
        (MIG1A, (1,), {1: (MIG1A,)}),
        (MIG1A.lower(), (1,), {1: (MIG1A,)}),
        (MIG1A.upper(), (1,), {1: (MIG1A,)}),
        ("MIG-aaaa1", (1,), {1: (MIG1A,)}),
        ("mig-AAAA2", (1,), {1: (MIG1B,)}),
        ("MIG-b", (1,), {1: (MIG1C,)}),
        ("MIG-aaaa9", (3,), {3: (MIG3A,)}),
        # the legacy form: GPU UUID (or a unique prefix of it) / GPU instance / compute instance
        (f"MIG-{UUID1}/1/0", (1,), {1: (MIG1A,)}),
        (f"MIG-{UUID1}/2/1", (1,), {1: (MIG1C,)}),
        ("MIG-GPU-5e3f9/2/0", (1,), {1: (MIG1B,)}),
        ("mig-gpu-5E3F9ABC/2/1", (1,), {1: (MIG1C,)}),
        ("MIG-GPU-dead/001/000", (3,), {3: (MIG3A,)}),
        # several MIG devices of one GPU: in the order given, each once
        ("MIG-aaaa1,MIG-aaaa2", (1,), {1: (MIG1A, MIG1B)}),
        ("MIG-aaaa2,MIG-aaaa1", (1,), {1: (MIG1B, MIG1A)}),
        (f"MIG-aaaa1,{MIG1A},MIG-GPU-5e3f9/1/0", (1,), {1: (MIG1A,)}),
        # a GPU named whole as well is shown whole, wherever it is named
        ("MIG-aaaa1,1", (1,), {}),
        ("1,MIG-aaaa1", (1,), {}),
        ("3b:00.0,MIG-aaaa2", (1,), {}),
        (f"MIG-aaaa1,{UUID1}", (1,), {}),
        # mixed with other GPUs: a GPU's place is where it is first named
        ("MIG-aaaa9,0,MIG-aaaa1", (3, 0, 1), {3: (MIG3A,), 1: (MIG1A,)}),
        ("3,MIG-aaaa1,0", (3, 1, 0), {1: (MIG1A,)}),
        ("MIG-aaaa2,3,MIG-bbbb", (1, 3), {1: (MIG1B, MIG1C)}),
        # a MIG-enabled GPU named by index, bus id or UUID: the whole GPU
        ("1", (1,), {}),
        ("5e3f9", (1,), {}),
    ],
)
def test_gpus_mig_devices(spec, indices, instances):
    assert _resolved(spec) == (indices, instances)
    assert resolve_gpu_list(spec, MIG_GPUS) == list(indices)


@pytest.mark.parametrize(
    ("spec", "entry", "says"),
    [
        ("MIG-aaaa", "MIG-aaaa", "matches MIG devices 1/1/0, 1/2/0, 3/1/0; give more of the UUID"),
        ("0,mig-AAAA", "mig-AAAA", "matches MIG devices 1/1/0, 1/2/0, 3/1/0"),
        ("MIG-", "MIG-", "no MIG device matches"),
        ("MIG-ffff", "MIG-ffff", "no MIG device matches"),
        ("MIG-zz", "MIG-zz", "no MIG device matches"),
        ("MIG-aaaa1111-0000-4000-8000-000000000001-00", "MIG-aaaa1111-0000-4000-8000-000000000001-00", "no MIG"),
        (f"MIG-{UUID1}/5/0", f"MIG-{UUID1}/5/0", "GPU 1 has no GPU instance/compute instance '5/0'"),
        (f"MIG-{UUID1}/1/1", f"MIG-{UUID1}/1/1", "GPU 1 has no GPU instance/compute instance '1/1'"),
        ("MIG-GPU-a1b2/1/0", "MIG-GPU-a1b2/1/0", "GPU 2 has no GPU instance/compute instance '1/0'"),
        ("MIG-GPU-5e3f/1/0", "MIG-GPU-5e3f/1/0", "the parent of 'MIG-GPU-5e3f/1/0' matches GPUs 0, 1"),
        ("MIG-GPU-ffff/1/0", "MIG-GPU-ffff/1/0", "no GPU matches the parent"),
        ("MIG-GPU-5e3f9/1", "MIG-GPU-5e3f9/1", "is not a MIG device: give MIG-<uuid> or MIG-GPU-<gpu-uuid>/<gi>/<ci>"),
        ("MIG-GPU-5e3f9/x/0", "MIG-GPU-5e3f9/x/0", "is not a MIG device"),
        (f"MIG-{UUID1}", f"MIG-{UUID1}", "is not a MIG device"),
        ("MIG-GPU-5e3f9/1/0/0", "MIG-GPU-5e3f9/1/0/0", "is not a MIG device"),
    ],
)
def test_gpus_mig_errors_are_one_line_naming_the_entry(spec, entry, says):
    with pytest.raises(SelectionError) as info:
        resolve_gpu_selection(spec, MIG_GPUS)
    message = str(info.value)
    assert message.startswith("--gpus: ") and "\n" not in message
    assert repr(entry) in message
    assert says in message


@pytest.mark.parametrize("spec", ["MIG-ffff", "MIG-GPU-5e3f9/1", f"MIG-{UUID1}/9/9"])
def test_gpus_mig_errors_list_the_mig_devices(spec):
    with pytest.raises(SelectionError) as info:
        resolve_gpu_selection(spec, MIG_GPUS)
    message = str(info.value)
    assert "1/1/0 MIG-aaaa1111 4g.40gb" in message and "1/2/1 MIG-bbbb3333 2c.3g.40gb" in message
    if spec != f"MIG-{UUID1}/9/9":  # the legacy form lists its GPU's MIG devices only
        assert "3/1/0 MIG-aaaa9999 7g.80gb" in message


def test_gpus_mig_errors_without_any_mig():
    with pytest.raises(SelectionError, match="no GPU here has MIG devices"):
        resolve_gpu_selection("MIG-1111", SAME_MODEL[:2])
    with pytest.raises(SelectionError, match="GPU 0 has no MIG devices"):
        resolve_gpu_selection("MIG-GPU-5e3f0/1/0", SAME_MODEL)


def test_gpus_mig_error_lists_at_most_a_dozen_devices():
    instances = tuple(_instance(k, f"MIG-{k:08x}-0000-4000-8000-000000000000", k + 1, 0, "1g.10gb") for k in range(7))
    gpus = [GpuStatic(index=i, uuid=f"GPU-{i:08x}-1", mig_mode=True, mig_instances=instances) for i in range(8)]
    with pytest.raises(SelectionError) as info:
        resolve_gpu_selection("MIG-ffff", gpus)
    message = str(info.value)
    assert message.count("1g.10gb") == 12 and "and 44 more" in message and len(message) < 500


def test_gpus_mig_absurd_ids_are_one_short_line():
    entry = "MIG-GPU-5e3f9/" + "9" * 5000 + "/0"
    with pytest.raises(SelectionError, match="has no GPU instance") as info:
        resolve_gpu_selection(entry, MIG_GPUS)
    assert "\n" not in str(info.value) and len(str(info.value)) < 500
    assert _resolved("MIG-GPU-5e3f9/" + "0" * 5000 + "1/0") == ((1,), {1: (MIG1A,)})


def test_gpus_mig_device_without_uuid_cannot_be_shown_alone():
    gpus = [GpuStatic(index=0, uuid=UUID0, mig_mode=True, mig_instances=(_instance(0, None, 1, 0, "7g.80gb"),))]
    with pytest.raises(SelectionError, match="name GPU 0 instead"):
        resolve_gpu_selection("MIG-GPU-5e3f0/1/0", gpus)


# --------------------------------------------------------------------------- MIG in CUDA_VISIBLE_DEVICES


def _visible(cvd: str | None, gpus: str | None = None) -> Selection:
    environ = dict(PCI) if cvd is None else {**PCI, "CUDA_VISIBLE_DEVICES": cvd}
    return select_gpus(MIG_GPUS, gpus, True, environ)


@pytest.mark.parametrize(
    ("cvd", "indices", "instances"),
    [
        # one MIG device: exactly it
        (MIG1B, (1,), {1: (MIG1B,)}),
        (MIG1B.lower(), (1,), {1: (MIG1B,)}),
        ("MIG-aaaa2", (1,), {1: (MIG1B,)}),
        (f"MIG-{UUID1}/2/1", (1,), {1: (MIG1C,)}),
        ("MIG-GPU-5e3f9/1/0", (1,), {1: (MIG1A,)}),
        (MIG3A, (3,), {3: (MIG3A,)}),
        # GPUs without MIG beside it stay, in CUDA order
        (f"{UUID0},{MIG1B},{UUID2}", (0, 1, 2), {1: (MIG1B,)}),
        (f"{MIG3A},{UUID0}", (3, 0), {3: (MIG3A,)}),
        # a MIG-enabled GPU with one MIG device, named whole: that device
        ("0,3", (0, 3), {3: (MIG3A,)}),
        (UUID3, (3,), {3: (MIG3A,)}),
        # an invalid entry still ends the list; a repeat still exposes nothing
        (f"MIG-{UUID1}/9/9", (), {}),
        (f"{MIG1B},MIG-ffff,{UUID0}", (1,), {1: (MIG1B,)}),
        (f"MIG-{UUID1}/1/0,{MIG1A}", (), {}),
        ("MIG-aaaa", (), {}),  # an ambiguous prefix ends the list
    ],
)
def test_only_visible_mig_device(cvd, indices, instances):
    selection = _visible(cvd)
    assert (selection.indices, dict(selection.instances)) == (indices, instances)
    assert not any("MIG devices" in w for w in selection.warnings)


@pytest.mark.parametrize(
    ("cvd", "indices", "instances", "warning"),
    [
        (
            f"{MIG1B},{MIG1A},{MIG3A}",
            (1,),
            {1: (MIG1B,)},
            f"CUDA_VISIBLE_DEVICES lists 3 MIG devices: a CUDA process uses only the first ({MIG1B}, GPU 1/2/0); "
            "showing it",
        ),
        (
            f"{UUID0},{MIG3A},{MIG1C}",
            (0, 3),
            {3: (MIG3A,)},
            f"CUDA_VISIBLE_DEVICES lists 2 MIG devices: a CUDA process uses only the first ({MIG3A}, GPU 3/1/0); "
            "showing it",
        ),
        (
            f"MIG-GPU-5e3f9/2/1,{MIG1A}",
            (1,),
            {1: (MIG1C,)},
            f"CUDA_VISIBLE_DEVICES lists 2 MIG devices: a CUDA process uses only the first ({MIG1C}, GPU 1/2/1); "
            "showing it",
        ),
        (
            "1",  # a MIG-enabled GPU by index: CUDA enumerates its MIG devices, a process uses the first
            (1,),
            {1: (MIG1A,)},
            "CUDA_VISIBLE_DEVICES exposes 3 MIG devices (a MIG-enabled GPU counts as its MIG devices): "
            f"a CUDA process uses only the first ({MIG1A}, GPU 1/1/0); showing it",
        ),
        (
            "2,3,1,0",
            (2, 3, 0),
            {3: (MIG3A,)},
            "CUDA_VISIBLE_DEVICES exposes 4 MIG devices (a MIG-enabled GPU counts as its MIG devices): "
            f"a CUDA process uses only the first ({MIG3A}, GPU 3/1/0); showing it",
        ),
        (
            f"{UUID3},{MIG1B}",
            (3,),
            {3: (MIG3A,)},
            "CUDA_VISIBLE_DEVICES exposes 2 MIG devices (a MIG-enabled GPU counts as its MIG devices): "
            f"a CUDA process uses only the first ({MIG3A}, GPU 3/1/0); showing it",
        ),
        (
            None,
            (0, 1, 2),
            {1: (MIG1A,)},
            "CUDA_VISIBLE_DEVICES is unset and the GPUs have 4 MIG devices: "
            f"a CUDA process uses only the first ({MIG1A}, GPU 1/1/0); showing it",
        ),
    ],
)
def test_only_visible_several_mig_devices_shows_the_first_and_says_so(cvd, indices, instances, warning):
    selection = _visible(cvd)
    assert (selection.indices, dict(selection.instances)) == (indices, instances)
    assert selection.warnings == (warning,)


def test_cuda_visible_devices_mig_rule_keeps_the_literal_list():
    """``devices`` is what the variable names (doctor counts it); ``usable`` is what a process uses."""
    result = parse_cuda_visible_devices(f"{UUID0},{MIG1B},{MIG1A}", MIG_GPUS, PCI)
    assert result.devices == (VisibleDevice(0, 0), VisibleDevice(1, 1, MIG1B), VisibleDevice(2, 1, MIG1A))
    assert result.process_devices == (VisibleDevice(0, 0), VisibleDevice(1, 1, MIG1B))
    assert result.nvml_indices == [0, 1]
    assert dict(result.instances) == {1: (MIG1B,)}
    unset = parse_cuda_visible_devices(None, MIG_GPUS)
    assert len(unset.devices) == 4 and unset.process_devices == (
        VisibleDevice(0, 0),
        VisibleDevice(1, 1, MIG1A),
        VisibleDevice(2, 2),
    )


def test_legacy_mig_entry_on_a_gpu_whose_instances_are_unknown_shows_the_gpu():
    gpus = [GpuStatic(index=0, uuid=UUID0, mig_mode=True)]  # MIG on, instances not read
    result = parse_cuda_visible_devices("MIG-GPU-5e3f0/1/0", gpus)
    assert result.devices == (VisibleDevice(0, 0, "MIG-GPU-5e3f0/1/0"),)
    assert result.nvml_indices == [0] and dict(result.instances) == {}
    without_mig = [GpuStatic(index=0, uuid=UUID0, mig_mode=False)]
    assert parse_cuda_visible_devices("MIG-GPU-5e3f0/1/0", without_mig).devices == ()


@pytest.mark.parametrize(
    ("gpus", "cvd", "indices", "instances", "warns"),
    [
        ("1", MIG1B, (1,), {1: (MIG1B,)}, False),  # the GPU, limited to what CUDA exposes of it
        (MIG1B, MIG1B, (1,), {1: (MIG1B,)}, False),
        ("MIG-aaaa1,MIG-aaaa2", MIG1B, (1,), {1: (MIG1B,)}, False),
        (MIG1A, MIG1B, (), {}, True),  # different MIG devices of one GPU: nothing in common, and why
        (MIG1A, f"{MIG1B},{MIG1A}", (), {}, True),  # the process uses MIG1B, not shown: why nothing is
        ("MIG-aaaa1,MIG-aaaa2", f"{MIG1B},{MIG1A}", (1,), {1: (MIG1B,)}, True),
        ("0,1", None, (0, 1), {1: (MIG1A,)}, True),
        ("0", None, (0,), {}, False),
        ("3,0", f"{UUID0},{MIG1B}", (0,), {}, False),
        ("3,MIG-aaaa1,0", f"{UUID0},{MIG1A}", (1, 0), {1: (MIG1A,)}, False),
    ],
)
def test_gpus_and_only_visible_intersect_mig_devices(gpus, cvd, indices, instances, warns):
    selection = _visible(cvd, gpus)
    assert (selection.indices, dict(selection.instances)) == (indices, instances)
    assert bool(selection.warnings) is warns
    if not indices:  # only why nothing is shown, not the MIG rule's "showing it" about a device left out
        (why,) = selection.warnings
        assert why.startswith(f"--gpus '{gpus}' and --only-visible have nothing in common: ")
        assert why.endswith(f"exposes GPU 1 ({MIG1B}) only")


# --------------------------------------------------------------------------- MIG on, no MIG device; a view of nothing

# GPU 1: MIG enabled and no MIG device configured. CUDA enumerates a MIG-enabled GPU as its MIG devices only,
# so it exposes nothing there: named whole or not, the GPU is no CUDA device.
EMPTY_MIG = (
    GpuStatic(index=0, uuid=UUID0, name=H100, bus_id="00000000:1B:00.0"),
    GpuStatic(index=1, uuid=UUID1, name=H100, bus_id="00000000:3B:00.0", mig_mode=True),
)
NO_DEVICE = "GPU 1 has MIG enabled and no MIG device configured: CUDA exposes nothing there"


@pytest.mark.parametrize(
    ("cvd", "indices", "warnings"),
    [
        (None, (0,), (NO_DEVICE,)),
        ("1", (), (NO_DEVICE,)),
        (UUID1, (), (NO_DEVICE,)),
        ("1,0", (0,), (NO_DEVICE,)),
        ("0", (0,), ()),
    ],
)
def test_a_mig_enabled_gpu_without_mig_devices_is_no_cuda_device(cvd, indices, warnings):
    environ = dict(PCI) if cvd is None else {**PCI, "CUDA_VISIBLE_DEVICES": cvd}
    selection = select_gpus(EMPTY_MIG, None, True, environ)
    assert (selection.indices, selection.warnings) == (indices, warnings)
    assert selection.instances == {}
    assert select_gpus(EMPTY_MIG, "1").indices == (1,), "--gpus alone shows it: nvtopy can read it, CUDA cannot use it"


def test_a_mig_enabled_gpu_whose_devices_have_no_uuid_is_still_shown_whole():
    """Instances whose UUIDs the driver did not give are not "no instance": the GPU stays, as CUDA names it."""
    gpus = (GpuStatic(index=0, uuid=UUID0, mig_mode=True, mig_instances=(_instance(0, None, 1, 0, "7g.80gb"),)),)
    selection = select_gpus(gpus, None, True, {"CUDA_VISIBLE_DEVICES": "0"})
    assert (selection.indices, selection.warnings) == ((0,), ())


@pytest.mark.parametrize(
    ("gpus", "cvd", "why"),
    [
        ("0", "1", "--gpus '0' and --only-visible have nothing in common: CUDA_VISIBLE_DEVICES='1' exposes GPU 1 only"),
        ("0,1", "", "--gpus '0,1' and --only-visible have nothing in common: CUDA_VISIBLE_DEVICES='' exposes no GPU"),
        (None, "7", "CUDA_VISIBLE_DEVICES='7' names no GPU here: CUDA stops at its first entry that names none"),
        (None, "-1,0", "CUDA_VISIBLE_DEVICES='-1,0' names no GPU here"),
        (None, " ", "CUDA_VISIBLE_DEVICES is set but empty: CUDA exposes no GPU"),
    ],
)
def test_a_selection_of_nothing_says_why(gpus, cvd, why):
    selection = select_gpus(GPUS, gpus, True, {**PCI, "CUDA_VISIBLE_DEVICES": cvd})
    assert selection.indices == ()
    (warning,) = selection.warnings
    assert warning.startswith(why), warning


def test_why_nothing_is_selected_quotes_the_variable_safely_and_briefly():
    selection = select_gpus(GPUS, "0", True, {"CUDA_VISIBLE_DEVICES": "\x1b]0;pwned\x07" + "9" * 5000})
    (warning,) = selection.warnings
    assert "\x1b" not in warning and "\x07" not in warning and len(warning) < 200, warning


# --------------------------------------------------------------------------- the Selection value


def test_selection_instances_is_a_read_only_mapping_and_the_selection_hashable():
    selection = Selection((3, 1), instance_pairs={1: [MIG1A], 3: (MIG3A,), 9: (MIG1B,), 0: ()})
    assert selection.instance_pairs == ((3, (MIG3A,)), (1, (MIG1A,))), "in the GPUs' order; unshown GPUs dropped"
    assert dict(selection.instances) == {3: (MIG3A,), 1: (MIG1A,)}
    with pytest.raises(TypeError):
        selection.instances[1] = ()  # type: ignore[index]
    assert hash(selection) == hash(Selection((3, 1), instance_pairs=((3, (MIG3A,)), (1, (MIG1A,)))))
    assert Selection((0,)).instances == {} and Selection((0,)) == Selection((0,), (), ())


def test_select_gpus_without_mig_limits_nothing():
    assert dict(select_gpus(MIG_GPUS).instances) == {}
    assert dict(select_gpus(MIG_GPUS, "0,1,3").instances) == {}
