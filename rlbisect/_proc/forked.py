"""Independent pieces of work in forked children: ``--matrix`` rows, the run-level checks.

Each item runs in a child forked for it alone from the caller (``maxtasksperchild=1``), so an
item sees the caller's state and nothing another item did: the same isolation as running them
one after another from that state, and the same numbers (tests/_proc/test_forked.py). Where fork is
not available, or ``jobs`` is 1, the items run here one after another. :func:`started` runs one
piece beside the caller: the run-level checks while the step-0 checks run here.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
import signal
import sys
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_task: Callable | None = None      # what forked children run: inherited, never pickled
# children that sent their value and are still exiting: unmapping a process the size of one holding
# torch takes ~15 ms, which the caller need not wait for. Reaped later, at the latest at exit
_exiting: list[int] = []


def _reap(block: bool = False) -> None:
    for pid in list(_exiting):
        try:
            done = os.waitpid(pid, 0 if block else os.WNOHANG)[0]
        except ChildProcessError:       # reaped elsewhere
            done = pid
        if done:
            _exiting.remove(pid)


atexit.register(_reap, True)


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


class Started:
    """``fn()`` begun in a forked child (:func:`started`): call it for the value, or ``cancel()``."""

    def __init__(self, fn: Callable[[], R], beside: bool = True):
        self.fn, self.pid = fn, 0
        _reap()
        if not beside or usable_cores() < 2 or not hasattr(os, "fork"):
            return                                  # run here when asked
        for stream in (sys.stdout, sys.stderr):     # nothing buffered before the fork is written twice
            stream.flush()
        self.read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:                           # the child: compute, send, leave without cleanup
            try:
                os.close(self.read)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(_outcome(fn))
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(0)
        os.close(write)

    def __call__(self):
        if not self.pid:
            return self.fn()
        with os.fdopen(self.read, "rb") as pipe:
            data = pipe.read()
        pid, self.pid = self.pid, 0
        if data:
            _exiting.append(pid)
            _reap()
        else:
            status = os.waitpid(pid, 0)[1]
            raise RuntimeError(f"the forked child computing {getattr(self.fn, '__name__', self.fn)!r} "
                               f"died (wait status {status})")
        ok, got = pickle.loads(data)   # from our own child, through a pipe: never from a file
        if ok:
            return got
        raise got

    def cancel(self) -> None:
        """The caller gave up (it raised, or was interrupted): end the child, leave nothing behind."""
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self.read)
            self.pid = 0


def _outcome(fn: Callable) -> bytes:
    try:
        return pickle.dumps((True, fn()))
    except BaseException as e:          # noqa: BLE001 - handed to the parent as it is
        try:
            return pickle.dumps((False, e))
        except Exception:               # noqa: BLE001 - an exception that does not pickle
            return pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}")))


def started(fn: Callable[[], R], beside: bool = True) -> Started:
    """``fn()`` begun now in a forked child, beside the caller's own work on another core; calling
    the result waits for its value (or raises what it raised). Where fork is not available, one
    core is, or not ``beside``, ``fn`` runs when its value is asked for."""
    return Started(fn, beside)
