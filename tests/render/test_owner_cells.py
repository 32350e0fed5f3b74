"""An OWNER cell is made once per owner and kept (render/cells.py's owner_cell): the cell made fresh each time, for
any owner, and a bounded number of them kept."""

from __future__ import annotations

import random

from nvtopy.model import OwnerKind, ProcessOwner
from nvtopy.render import cells
from tests.builders import gpu_process


def _owner(rng: random.Random) -> ProcessOwner:
    kind = rng.choice(list(OwnerKind))
    word = rng.choice([None, "web-1", "ns", "pod-7f9", "x" * 70, "\x1b[31mred", "1234"])
    path = rng.choice([None, "/process_api/5f4ecd7718a91fb4c368cdf63d33c6e6", "/a/init.scope", "/kubepods/b/c"])
    return ProcessOwner(kind, id=word, name=rng.choice([None, word]), namespace=word, pod=word, job=word, cgroup=path)


def test_a_kept_cell_is_the_cell_made_fresh(monkeypatch):
    monkeypatch.setattr(cells, "_owner_cells", {})
    rng = random.Random(11)
    owners = [_owner(rng) for _ in range(300)]
    for _ in range(3):  # made, then read back: the same either way
        for owner in owners:
            assert cells.owner_cell(gpu_process(owner=owner)) == cells._owner_cell(owner), owner
    assert cells.owner_cell(gpu_process(owner=None)) == cells._MISSING


def test_the_kept_cells_are_bounded(monkeypatch):
    kept: dict[ProcessOwner, cells.Cell] = {}
    monkeypatch.setattr(cells, "_owner_cells", kept)
    monkeypatch.setattr(cells, "MOST_OWNER_CELLS", 10)
    for n in range(35):
        cells.owner_cell(gpu_process(owner=ProcessOwner(OwnerKind.DOCKER, name=f"c{n}")))
        assert len(kept) <= 10
