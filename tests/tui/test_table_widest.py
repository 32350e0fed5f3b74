"""The widest USER and OWNER cells of a table of plain processes, each user and owner measured once
(ProcessTable._widest_processes): what measuring every row gives."""

from __future__ import annotations

import random

from nvtopy.model import OwnerKind, ProcessOwner
from nvtopy.tui.process_table import ProcessTable
from tests.builders import gpu_process


def _every_row(table: ProcessTable, rows: list) -> tuple[int | None, int | None, bool]:
    users = owners = 0
    for row in rows:
        users = max(users, 1 if row.foreign else table._user_width(row))
        owners = max(owners, table._owner_width(row))
    return (users or None, owners or None, False)


def test_plain_processes_measure_as_every_row_does():
    table = ProcessTable()
    rng = random.Random(5)
    owners = [None, ProcessOwner(OwnerKind.HOST), ProcessOwner(OwnerKind.DOCKER, name="web-1")]
    owners += [ProcessOwner(OwnerKind.CGROUP, cgroup=f"/a/{'b' * n}") for n in (3, 30, 90)]
    users = [None, "alice", "bob", "a-very-long-user-name", "日本語", "\x1b[2Jevil"]
    for _ in range(400):
        rows = [
            gpu_process(
                rng.randrange(4),
                pid,
                user=rng.choice(users),
                owner=ProcessOwner(**vars_of(rng.choice(owners))) if rng.random() < 0.3 else rng.choice(owners),
                foreign=rng.random() < 0.1,
            )
            for pid in range(1, rng.randint(0, 12) + 1)
        ]
        assert table._widest(rows) == _every_row(table, rows), rows


def vars_of(owner: ProcessOwner | None) -> dict:
    """An equal owner, another object (the table measures owners by object, then by value)."""
    if owner is None:
        return {"kind": OwnerKind.HOST}
    return {name: getattr(owner, name) for name in owner.__slots__}
