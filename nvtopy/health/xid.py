"""NVIDIA's Xid catalogue: what each Xid means and what to do about it.

Source: NVIDIA's "Xid Catalog" (Ampere and later), as summarised in
``shared/docs/cluster-notes.md`` section 3, and NVIDIA's k8s-device-plugin,
which treats 13, 31, 43, 45, 68 and 109 as errors of the application rather
than of the GPU. Legacy meanings (Volta and older) of 56-58 and 61 come from
NVIDIA's older table. An Xid not listed is still shown, by number, as
"unknown Xid" with the advice to look it up.

Severity: an Xid that the application caused (restart the application) is a
warning; one that needs a GPU reset, a reboot or a support case is a failure.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model import Severity

__all__ = ["MAX_XIDS_PER_GPU", "XID_CATALOGUE", "XidInfo", "describe_xid"]

MAX_XIDS_PER_GPU = 256
"""Distinct Xid numbers counted apart per GPU (NVIDIA's catalogue has fewer than 200): what a GPU, a driver
or a peer claims past that is bounded, never grown without end."""


class XidInfo(NamedTuple):
    """One catalogue entry: the meaning, the usual action, and how bad it is."""

    xid: int
    meaning: str
    action: str
    severity: Severity


def _entry(xid: int, meaning: str, action: str, severity: Severity) -> tuple[int, XidInfo]:
    return xid, XidInfo(xid, meaning, action, severity)


_W, _F = Severity.WARN, Severity.FAIL

XID_CATALOGUE: dict[int, XidInfo] = dict(
    (
        _entry(13, "graphics engine exception", "restart the application; check its CUDA code", _W),
        _entry(31, "GPU memory page fault", "restart the application; usually an illegal address in its code", _W),
        _entry(32, "invalid or corrupted push buffer stream", "restart the application; check the CUDA stack", _W),
        _entry(38, "driver firmware error", "contact support if it repeats", _W),
        _entry(43, "GPU stopped processing", "restart the application; the GPU itself is fine", _W),
        _entry(45, "preemptive cleanup after earlier errors", "follow the Xid before it; alone: restart the app", _W),
        _entry(46, "GPU stopped processing", "reset the GPU; contact support if it repeats", _F),
        _entry(48, "double-bit ECC error", "reset the GPU; drain the node if it repeats", _F),
        _entry(56, "display engine error (legacy)", "contact support", _W),
        _entry(57, "error programming video memory interface (legacy)", "contact support", _W),
        _entry(58, "unstable video memory interface (legacy)", "contact support", _W),
        _entry(61, "internal micro-controller breakpoint or warning", "contact support if it repeats", _W),
        _entry(62, "internal micro-controller halt", "reset the GPU; contact support", _F),
        _entry(63, "GPU memory remapping event (page retirement)", "none now; reset the GPU when idle to apply it", _W),
        _entry(64, "GPU memory remapping failure", "reset the GPU; contact support: the board may need replacing", _F),
        _entry(68, "video decoder (NVDEC) exception", "restart the application", _W),
        _entry(69, "graphics engine class error", "restart the application; check its CUDA code", _W),
        _entry(74, "NVLink error", "check the NVLink readings; reset the GPU; contact support if it repeats", _F),
        _entry(79, "GPU has fallen off the bus", "reboot the node; check power, cooling and the slot", _F),
        _entry(92, "high single-bit ECC error rate", "watch the remapped rows; contact support if it grows", _W),
        _entry(94, "contained memory error", "restart the application that was hit", _W),
        _entry(95, "uncontained memory error", "reset the GPU", _F),
        _entry(109, "context switch timeout", "reset the GPU; contact support if it repeats", _F),
        _entry(119, "GSP RPC timeout", "reset the GPU; update the driver if it repeats", _F),
        _entry(120, "GSP error", "reset the GPU; update the driver if it repeats", _F),
        _entry(121, "C2C link error", "contact support if it repeats", _W),
        _entry(140, "ECC unrecovered error", "reset the GPU; contact support", _F),
        _entry(143, "GPU initialisation error", "reset the GPU; contact support", _F),
        _entry(154, "GPU recovery action changed", "act on the recovery action the driver names", _W),
    )
)


def describe_xid(xid: int) -> XidInfo:
    """The catalogue entry of ``xid``; an unknown number still gets a sentence (and is a warning)."""
    info = XID_CATALOGUE.get(xid)
    if info is not None:
        return info
    return XidInfo(xid, "unknown Xid", "look it up in NVIDIA's Xid catalogue", Severity.WARN)
