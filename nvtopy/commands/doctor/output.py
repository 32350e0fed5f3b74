"""Doctor's findings written out: a readable list for a terminal, or one JSON document.

Colour comes from the monitor's one severity -> colour map
(:data:`nvtopy.render.cells.FINDING_CATEGORY`, a skipped check dim) through the
ANSI codes ``--once`` writes (:data:`nvtopy.render.text.STYLES`): a FAIL is the
same red in doctor as in the monitor's findings. Colour only on a terminal, and
never with ``--no-color``, ``NO_COLOR`` or ``TERM=dumb``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import IO

from ..._version import __version__
from ...backends.diagnose import BackendFacts
from ...render.cells import DIM, FINDING_CATEGORY
from ...render.terminal import color_allowed
from ...render.text import RESET, STYLES
from ...textsafe import escape_text, safe_text
from .findings import DoctorFinding, Status, counts, exit_code

__all__ = ["SCHEMA_VERSION", "finding_to_dict", "render_json", "render_text", "use_color"]

SCHEMA_VERSION = 1


def _painted(text: str, status: Status) -> str:
    """``text`` in the colour of ``status``: a judged finding's severity colour, a skipped check's dim."""
    severity = status.severity
    category = DIM if severity is None else FINDING_CATEGORY[severity]
    return f"{STYLES[category]}{text}{RESET}"


def use_color(stream: IO[str], no_color: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, and neither with ``--no-color`` nor with NO_COLOR set (no-color.org) nor on a
    dumb terminal (``TERM=dumb``: :func:`~nvtopy.render.terminal.color_allowed`)."""
    if no_color or not color_allowed(os.environ if environ is None else environ):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def render_text(findings: Sequence[DoctorFinding], facts: BackendFacts, out: IO[str], *, color: bool = False) -> None:
    """The findings as a readable list: status, id and title; then the detail and the fix, indented.

    Every text goes through :func:`~nvtopy.textsafe.safe_text`: a GPU name or a
    driver message cannot move the cursor or retitle the terminal.
    """
    host = facts.host
    head = "nvtopy doctor"
    if host is not None:
        head += f"  {safe_text(host.hostname)}  driver {safe_text(host.driver_version or 'unknown')}"
    if facts.device_count is not None:
        head += f"  {facts.device_count} GPU{'s' if facts.device_count != 1 else ''}"
    if facts.kind != "nvml":
        head += f"  [{safe_text(facts.kind)}]"
    lines = [head, ""]
    width = max((len(f.id) for f in findings), default=0)
    for finding in findings:
        word = finding.status.value.upper()
        shown = _painted(f"{word:<4}", finding.status) if color else f"{word:<4}"
        lines.append(f"{shown}  {finding.id:<{width}}  {safe_text(finding.title)}")
        indent = " " * (6 + width + 2)
        if finding.detail:
            lines.append(f"{indent}{safe_text(finding.detail)}")
        if finding.fix and finding.status is not Status.SKIP:
            label = "tip" if finding.status is Status.OK else "fix"  # an OK finding's fix is advice
            lines.append(f"{indent}{label}: {safe_text(finding.fix)}")
    tally = counts(findings)
    verdict = "FAIL" if tally["fail"] else "WARN" if tally["warn"] else "OK"
    summary = (
        f"{verdict}: {tally['fail']} fail, {tally['warn']} warn, {tally['ok']} ok, {tally['skip']} skipped"
        f" (exit {exit_code(findings)})"
    )
    lines += ["", _painted(summary, Status(verdict.lower())) if color else summary]
    out.write("\n".join(lines) + "\n")


def finding_to_dict(finding: DoctorFinding) -> dict[str, str | list[int] | None]:
    """One finding in JSON: every text escaped once (:func:`~nvtopy.textsafe.escape_text`), as the contract does."""
    return {
        "id": finding.id,
        "status": finding.status.value,
        "title": escape_text(finding.title),
        "detail": escape_text(finding.detail),
        "fix": escape_text(finding.fix),
        "gpus": list(finding.gpus),
    }


def render_json(findings: Sequence[DoctorFinding], facts: BackendFacts) -> str:
    """The findings as one JSON document (UTF-8 text, every outside string escaped)."""
    import json

    host = facts.host
    tally = counts(findings)
    data = {
        "nvtopy_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "hostname": escape_text(host.hostname) if host is not None else None,
        "backend": facts.kind,
        "driver_version": escape_text(host.driver_version) if host is not None else None,
        "gpu_count": facts.device_count,
        "status": "fail" if tally["fail"] else "warn" if tally["warn"] else "ok",
        "exit_code": exit_code(findings),
        "counts": tally,
        "findings": [finding_to_dict(f) for f in findings],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)
