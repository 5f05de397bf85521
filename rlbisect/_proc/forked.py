"""Independent pieces of work in forked children, results in order: ``--matrix`` rows.

Each item runs in a child forked for it alone from the caller (``maxtasksperchild=1``), so an
item sees the caller's state and nothing another item did: the same isolation as running them
one after another from that state, and the same numbers (tests/_proc/test_forked.py). Where fork is
not available, or ``jobs`` is 1, the items run here one after another.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_task: Callable | None = None      # what forked children run: inherited, never pickled


def _run(item):
    assert _task is not None   # set before the pool forks
    return _task(item)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def forked_map(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """``map(fn, items)``, up to ``jobs`` items at once, each in its own forked child."""
    global _task
    items = list(items)
    if jobs <= 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield from map(fn, items)
        return
    _task = fn
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(items)), maxtasksperchild=1) as pool:
            yield from pool.imap(_run, items)
    finally:
        _task = None
