"""rlbisect._proc.forked: items in forked children come back in order, each sees the caller's state and
none of another item's; the check matrix is the same table with rows in parallel as in sequence;
one piece started beside the caller gives back its value or what it raised, and the checks with
their run-level part beside the step-0 part give the same results as one after the other."""

from __future__ import annotations

import os

import pytest
import torch

from rlbisect.check import check_matrix
from rlbisect.check.invariants import as_json, check_seeds
from rlbisect._proc import forked
from rlbisect._proc.forked import forked_map, started
from rlbisect.errors import CannotRun
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
    # one at a time, still each in a child of its own
    assert [seen for _, seen, _ in forked_map(_remember, range(2), jobs=1)] == [["caller", 0], ["caller", 1]]


def _ends(item: int):
    if item == 1:
        os._exit(0)
    if item == 2:
        raise SystemExit(3)
    return item


def test_an_item_whose_code_ends_its_process_is_said_not_the_callers_exit():
    """A matrix row whose code called os._exit(0) ended the command with exit 0, or hung the pool."""
    got = list(forked_map(_ends, range(4), jobs=2, ended=lambda item, e: (item, e.how)))
    assert got == [0, (1, "exit status 0"), (2, "sys.exit(3)"), 3]
    with pytest.raises(forked.ChildEnded, match="exit status 0"):
        list(forked_map(_ends, range(2), jobs=1))
    with pytest.raises(forked.ChildEnded, match=r"sys.exit\(3\)"):
        forked.isolated(lambda: _ends(2))
    assert forked.isolated(os.getpid) != os.getpid()


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


def test_a_piece_started_beside_gives_its_value_or_raises_what_it_raised(monkeypatch):
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    SEEN.clear()
    value = started(lambda: (_remember(3), os.getpid()))
    SEEN.append("here")                    # the caller goes on; the child saw the state at the start
    (square, seen, child), pid = value()
    assert square == 9 and seen == [3] and child == pid != os.getpid() and SEEN == ["here"]

    def fails():
        raise ValueError("from the child")
    with pytest.raises(ValueError, match="from the child"):
        started(fails)()


def test_a_child_that_answered_is_reaped_without_holding_up_the_answer(monkeypatch):
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    piece = started(lambda: 3)
    pid = piece.pid
    assert piece() == 3                    # the answer, without waiting for the child's exit
    forked._reap(block=True)               # what the caller's exit does
    assert pid not in forked._exiting and _gone(pid)


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_on_one_core_the_piece_runs_when_asked(monkeypatch):
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    assert started(os.getpid)() == os.getpid()


def test_run_level_checks_beside_the_step_0_checks_give_the_same_results(monkeypatch):
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    beside = check_seeds(lambda seed: make_adapter(seed=seed), [1], runs=True)
    alone = check_seeds(lambda seed: make_adapter(seed=seed), [1], runs=True, beside=False)
    assert as_json(beside) == as_json(alone) and len(beside) > 30


def test_a_piece_the_caller_gives_up_on_leaves_no_child(monkeypatch):
    import time
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    piece = started(lambda: time.sleep(60))
    pid = piece.pid
    piece.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)                       # reaped: nothing left behind


class _Missing(CannotRun):
    """An adapter's own CannotRun, built from other arguments than its message."""

    def __init__(self, feature: str, release: str):
        super().__init__(f"{release} has no {feature}")


def _raise_missing():
    raise _Missing("fused_head", "TRL 1.2")


def test_what_crosses_from_a_child_keeps_its_meaning():
    """A ChildEnded from a grandchild, and an exception whose class takes other arguments, failed
    to unpickle here: a TypeError traceback and exit 1 (a bad commit) instead of exit 125."""
    with pytest.raises(forked.ChildEnded, match="exit status 0") as ended:
        forked.isolated(lambda: forked.isolated(lambda: os._exit(0)))
    assert ended.value.how == "exit status 0"
    with pytest.raises(CannotRun, match="TRL 1.2 has no fused_head") as refused:
        forked.isolated(_raise_missing)
    assert refused.value.exit_code == 125


def test_threads_the_work_left_running_finish_before_the_child_ends(tmp_path):
    """A trainer's non-daemon thread (a log writer) was cut off by the child's os._exit."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    def work():
        def late():
            time.sleep(0.2)
            (tmp_path / "written").write_text("done")
        threading.Thread(target=late).start()
        pool = ThreadPoolExecutor(2)          # idle workers left behind: told to stop, not waited on forever
        return list(pool.map(abs, [-1, -2]))
    assert forked.isolated(work) == [1, 2] and (tmp_path / "written").read_text() == "done"
