"""What an alert engine tells the channels: one rule's instance began or ended.

Why a transition and not a state: a channel (a desktop notification, a webhook, a line in
``nvtopy watch``'s log) says something once when an alert fires and once when it clears;
what is firing *now* is the engine's to know. Each :class:`AlertEvent` carries its words
already filled in (summary, description, action: the catalog's templates with this
instance's values), so every channel says the same thing and none of them needs the catalog.

The words hold text from outside (process command lines, user and host names, driver
strings): a view escapes them its own way (:mod:`nvtopy.textsafe` for a terminal); the
event keeps them as they were.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any

from .catalog import AlertSeverity

__all__ = ["AlertEvent", "Transition"]


class Transition(str, enum.Enum):
    """Which way an alert instance went."""

    FIRING = "firing"  # the condition held for the rule's for_s (and past its cooldown)
    CLEARED = "cleared"  # the condition has been clear for the rule's clear_s

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """One alert instance firing or clearing, in words every channel can send as they are.

    ``key`` names the instance (a rule fires at most once per key at a time): the rule id and
    its subject, such as ``gpu-free/host-a/GPU-1234`` or ``process-ended/host-a/GPU-1234/4242``.
    """

    rule_id: str  # the catalog's id: gpu-free, gpu-xid, ...
    alert: str  # the catalog's CamelCase name (Prometheus's alertname)
    title: str  # a few words: "GPU free"
    severity: AlertSeverity
    transition: Transition
    key: str
    at: float  # epoch seconds: when the engine saw the transition (the snapshot's time)
    host: str
    summary: str  # one line: what happened, where
    description: str = ""
    action: str = ""
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int | None = None
    user: str | None = None
    xid: int | None = None
    value: str | None = None  # the figure the rule compared, written for people ("87 °C", "31m")

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object (``nvtopy watch --json``, webhooks): stable keys, ``None`` as null."""
        return {
            "time": _iso(self.at),
            "transition": self.transition.value,
            "rule": self.rule_id,
            "alert": self.alert,
            "title": self.title,
            "severity": self.severity.value,
            "key": self.key,
            "host": self.host,
            "gpu": self.gpu_index,
            "uuid": self.gpu_uuid,
            "pid": self.pid,
            "user": self.user,
            "xid": self.xid,
            "value": self.value,
            "summary": self.summary,
            "description": self.description,
            "action": self.action,
        }

    @property
    def headline(self) -> str:
        """A notification's title: "FIRING warning: GPU free" / "cleared: GPU free"."""
        if self.transition is Transition.FIRING:
            return f"FIRING {self.severity.value}: {self.title}"
        return f"cleared: {self.title}"


def _iso(at: float) -> str:
    """Local time with its offset, to the second (what a person reading a log line wants)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(at))
