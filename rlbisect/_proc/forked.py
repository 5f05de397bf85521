"""Independent pieces of work in forked children: ``--matrix`` rows, the run-level checks.

Each item runs in a child forked for it alone from the caller, so an item sees the caller's state
and nothing another item did: the same isolation as running them one after another from that
state, and the same numbers (tests/_proc/test_forked.py); and code under test that ends its
process (``sys.exit``, ``os._exit``) ends the child, never the caller with an exit status nobody
chose (:class:`ChildEnded`). Where fork is not available, the items run here one after another.
:func:`started` runs one piece beside the caller: the run-level checks while the step-0 checks
run here; :func:`isolated` runs one piece in a child whatever the cores: ``rlbisect check``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import signal
import sys
import threading
from collections import deque
from functools import partial
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

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


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def forked_map(fn: Callable[[T], R], items: Iterable[T], jobs: int,
               ended: Callable[[T, "ChildEnded"], R] | None = None) -> Iterator[R]:
    """``map(fn, items)``, up to ``jobs`` items at once, each in its own forked child (one at a
    time when ``jobs`` is 1). An item whose child ends without its value (the code it runs called
    ``os._exit`` or ``sys.exit``, or a signal ended it) gives ``ended(item, error)``, or raises."""
    items, pending = list(items), deque[tuple[T, Started]]()

    def value(item: T, child: Started) -> R:
        try:
            return child()
        except ChildEnded as e:
            if ended is None:
                raise
            return ended(item, e)
    try:
        for item in items:
            pending.append((item, Started(partial(fn, item), always=True)))
            if len(pending) >= max(jobs, 1):
                yield value(*pending.popleft())
        while pending:
            yield value(*pending.popleft())
    finally:            # the consumer stopped early or raised: no child is left running
        for _, child in pending:
            child.cancel()


class ChildEnded(RuntimeError):
    """A forked child ended without sending its value (``os._exit``, a signal); ``how`` says how."""

    def __init__(self, message: str, how: str):
        super().__init__(message)
        self.how = how

    def __reduce__(self):      # from a grandchild through its parent: both arguments travel
        return ChildEnded, (str(self), self.how)


class Started:
    """``fn()`` begun in a forked child (:func:`started`): call it for the value, or ``cancel()``."""

    def __init__(self, fn: Callable[[], R], beside: bool = True, always: bool = False):
        self.fn, self.pid = fn, 0
        _reap()
        if not hasattr(os, "fork") or not always and (not beside or usable_cores() < 2):
            return                                  # run here when asked
        for stream in (sys.stdout, sys.stderr):     # nothing buffered before the fork is written twice
            stream.flush()
        self.read, write = os.pipe()
        parent, self.pid = os.getpid(), os.fork()
        if self.pid == 0:                           # the child: compute, send, leave without cleanup
            try:
                _die_with(parent)
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
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            raise ChildEnded(f"the forked child computing {getattr(self.fn, '__name__', self.fn)!r} "
                             f"ended without its value ({how})", how)
        ok, got = pickle.loads(data)   # from our own child, through a pipe: never from a file
        if ok:
            return got
        if isinstance(got, SystemExit):   # the code it ran ended it: no exit status of ours
            raise ChildEnded(f"the code {getattr(self.fn, '__name__', self.fn)!r} runs called sys.exit({got.code!r})",
                             f"sys.exit({got.code!r})")
        raise got

    def cancel(self) -> None:
        """The caller gave up (it raised, or was interrupted): end the child, leave nothing behind."""
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self.read)
            self.pid = 0


def _die_with(parent: int) -> None:
    """Linux: the child gets SIGKILL when its parent dies (a timeout's SIGTERM), not left running."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
    except (OSError, AttributeError):                    # not Linux: a parent's cancel() still ends it
        pass
    if os.getppid() != parent:                           # the parent died before the line above
        os._exit(1)


def _outcome(fn: Callable) -> bytes:
    try:
        value = fn()
    except BaseException as e:          # noqa: BLE001 - handed to the parent as it is
        _join_threads()
        return pickle.dumps((False, _portable(e)))
    _join_threads()
    return pickle.dumps((True, value))


def _join_threads() -> None:
    """Threads the work started and left running end before the child does, as they would at the
    caller's exit (what they print or write is not lost to the child's ``os._exit``): Python's own
    shutdown of them, which first tells a thread pool's idle workers to stop, then joins."""
    shutdown = getattr(threading, "_shutdown", None)      # CPython's, run at every interpreter exit
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()


def _portable(error: BaseException) -> BaseException:
    """``error`` as the parent can unpickle it: one whose class takes other arguments than its
    message (an adapter's ``CannotRun`` subclass) becomes the nearest rlbisect error, keeping
    its exit code and message, or a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:                   # noqa: BLE001 - any class may fail either way
        from rlbisect.errors import RlbisectError
        for cls in type(error).__mro__:
            if issubclass(cls, RlbisectError) and cls.__module__ == RlbisectError.__module__:
                try:
                    return cls(str(error))
                except Exception:       # noqa: BLE001 - one taking other arguments (Interrupted)
                    break
        return RuntimeError(f"{type(error).__name__}: {error}")


def started(fn: Callable[[], R], beside: bool = True) -> Started:
    """``fn()`` begun now in a forked child, beside the caller's own work on another core; calling
    the result waits for its value (or raises what it raised). Where fork is not available, one
    core is, or not ``beside``, ``fn`` runs when its value is asked for."""
    return Started(fn, beside)


def isolated(fn: Callable[[], R]) -> R:
    """``fn()`` in a forked child of its own, wherever fork exists, whatever the cores: code it runs
    that ends the process (``sys.exit``, ``os._exit``, a signal) raises :class:`ChildEnded` here
    instead of ending the caller with an exit status nobody chose."""
    return Started(fn, always=True)()
