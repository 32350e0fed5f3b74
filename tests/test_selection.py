"""GPU selection: ``--gpus`` lists and CUDA_VISIBLE_DEVICES, on four GPUs with known identities."""

from __future__ import annotations

import pytest

from nvtopy.errors import SelectionError, UsageError
from nvtopy.model import GpuStatic
from nvtopy.selection import (
    VisibleDevice,
    VisibleDevices,
    format_bus_id,
    parse_bus_id,
    parse_cuda_visible_devices,
    resolve_gpu_list,
    select_gpus,
)

from .conftest import mig_instances

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
    "entry", [MIG2A, MIG2A.lower(), "MIG-1111", "MIG-GPU-a1b2c3d4-0000-1111-2222-333344445555/1/0"]
)
def test_resolve_gpu_list_rejects_mig_uuids(entry):
    with pytest.raises(SelectionError, match="MIG device") as info:
        resolve_gpu_list(f"0,{entry}", GPUS)
    assert repr(entry) in str(info.value)


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
        (f"MIG-{UUID2}/1/0", (VisibleDevice(0, 2, f"MIG-{UUID2}/1/0"),)),
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
    assert len(result.warnings) == len(warned)
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
    ("gpus", "only_visible", "cvd", "expected"),
    [
        (None, False, "2,0", (0, 1, 2, 3)),  # neither: every GPU, NVML order, CUDA_VISIBLE_DEVICES ignored
        ("3,1", False, "2,0", (3, 1)),  # --gpus: its order
        ([3, "3b:00.0"], False, None, (3, 1)),  # a list, as the Python API takes it
        (None, True, "2,0", (2, 0)),  # --only-visible: CUDA order
        (None, True, None, (0, 1, 2, 3)),
        (None, True, "", ()),
        ("3,2,0", True, "2,0", (2, 0)),  # both: --gpus order, only what CUDA exposes
        ("1", True, "2,0", ()),
    ],
)
def test_select_gpus(gpus, only_visible, cvd, expected):
    environ = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if cvd is not None:
        environ["CUDA_VISIBLE_DEVICES"] = cvd
    selection = select_gpus(GPUS, gpus, only_visible, environ)
    assert selection.indices == expected
    assert selection.warnings == ()


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
