"""rlbisect._proc.forked: items in forked children come back in order, each sees the caller's state and
none of another item's; the check matrix is the same table with rows in parallel as in sequence."""

from __future__ import annotations

import os

import torch

from rlbisect.check import check_matrix
from rlbisect.check.invariants import as_json
from rlbisect._proc.forked import forked_map
from reference_trainer.adapter import make_adapter

SEEN: list = []


def _remember(item: int) -> tuple[int, list, int]:
    SEEN.append(item)                      # a change no other item may see
    return item * item, list(SEEN), os.getpid()


def test_forked_items_come_back_in_order_and_isolated():
    SEEN[:] = ["caller"]
    out = list(forked_map(_remember, range(6), jobs=2))
    assert [square for square, _, _ in out] == [0, 1, 4, 9, 16, 25]
    assert [seen for _, seen, _ in out] == [["caller", i] for i in range(6)]
    assert len({pid for _, _, pid in out}) == 6 and os.getpid() not in {pid for _, _, pid in out}
    assert SEEN == ["caller"]
    assert [seen for _, seen, _ in forked_map(_remember, range(2), jobs=1)] == [["caller", 0], ["caller", 0, 1]]


def test_matrix_rows_in_parallel_give_the_sequential_table():
    def make(bug, seed):
        adapter = make_adapter(bug=bug, seed=seed)
        adapter.faults = ["mask_shift", "sign_flip"]
        return adapter
    torch.manual_seed(0)
    parallel = {row: as_json(r) for row, r in check_matrix(make, [1], jobs=2).items()}
    torch.manual_seed(0)
    sequential = {row: as_json(r) for row, r in check_matrix(make, [1], jobs=1).items()}
    assert list(parallel) == ["none", "mask_shift", "sign_flip"]
    assert parallel == sequential
    assert not parallel["mask_shift"]["mask = policy tokens"]["passed"]
