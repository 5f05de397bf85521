"""Running a child: its own process group, a timeout, Ctrl-C, a watchdog, bounded output.

Every process rlbisect starts for a probe goes through here, whether it is a user's command
(:func:`run`) or a child a fork server made for us (:func:`supervise` on its process group):

* the child leads its own process group, and the whole group is killed (SIGTERM, then SIGKILL
  after :data:`KILL_GRACE`) on timeout, when :data:`STOP` is set (a signal reached rlbisect),
  and after the child exits (stragglers it left behind);
* a watchdog process, one per rlbisect process, kills every group still registered when
  rlbisect dies, SIGKILL included: a probe never outlives the run that started it;
* stdout and stderr go to files and only their last :data:`KEPT` bytes are read back, so a
  predicate that prints gigabytes costs disk, never memory.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Sequence

#: Set (by the bisect's signal trap) to make every running child stop now.
STOP = threading.Event()
#: Seconds between SIGTERM and SIGKILL when a child's process group must go.
KILL_GRACE = 2.0
#: Bytes of a child's stdout and of its stderr that are kept (the tail).
KEPT = 1 << 20

_WATCHDOG = r"""
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
live = set()
for line in sys.stdin:
    g = int(line)
    live.discard(-g) if g < 0 else live.add(g)
for g in live:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


class Watchdog:
    """One helper process per rlbisect process. It reads process-group ids from a pipe only we
    write to; when the pipe closes (we exited or died) it kills the groups still listed."""

    _lock = threading.Lock()
    _pipe: int | None = None
    _owner: int | None = None

    @classmethod
    def _send(cls, line: str) -> None:
        with cls._lock:
            if cls._pipe is None or cls._owner != os.getpid():   # first use, or a forked child
                read, cls._pipe = os.pipe()
                subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=read,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
                os.close(read)
                cls._owner = os.getpid()
                atexit.register(os.close, cls._pipe)
            try:
                os.write(cls._pipe, line.encode())
            except OSError:
                pass

    @classmethod
    def watch(cls, pgid: int) -> None:
        cls._send(f"{pgid}\n")

    @classmethod
    def release(cls, pgid: int) -> None:
        cls._send(f"-{pgid}\n")


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to a process group that may already be gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def supervise(pgid: int, finished: Callable[[float | None], bool], deadline: float | None) -> tuple[bool, bool]:
    """Wait until ``finished(poll_seconds)`` says the child is done, killing its group on
    :data:`STOP` or at ``deadline`` (``time.perf_counter()``) -> (timed_out, interrupted)."""
    while not finished(0.05):
        stop, late = STOP.is_set(), deadline is not None and time.perf_counter() > deadline
        if stop or late:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                signal_group(pgid, sig)
                end = time.perf_counter() + KILL_GRACE
                while time.perf_counter() < end:
                    if finished(0.05):
                        return not stop, stop
            finished(None)   # SIGKILL cannot be refused: wait for it
            return not stop, stop
    return False, False


@dataclass
class Completed:
    """What a child did: its exit status and the tails of its output."""

    returncode: int | None      # exit status; 128+N when killed by signal N; None if not run
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    stdout: str = ""
    stderr: str = ""

    @property
    def stopped(self) -> bool:
        """Our timeout or a signal ended it: its exit status says nothing about the code."""
        return self.timed_out or self.interrupted


def tail_of(f: IO[bytes], kept: int = KEPT) -> str:
    """The last ``kept`` bytes written to ``f``, decoded (a cut first line is marked)."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - kept))
    text = f.read().decode(errors="replace")
    return text if size <= kept else "[... earlier output not kept]\n" + text.split("\n", 1)[-1]


def exit_status(code: int) -> int:
    """A wait status as a shell reports it: death by signal N is 128+N."""
    return code if code >= 0 else 128 - code


def output_files() -> tuple[IO[bytes], IO[bytes]]:
    """Two anonymous files for a child's stdout and stderr."""
    return tempfile.TemporaryFile(), tempfile.TemporaryFile()


def run(argv: Sequence[str], cwd: Path | str, timeout: float | None = None,
        env: dict[str, str] | None = None) -> Completed:
    """Run ``argv`` in ``cwd`` in its own process group, stdin /dev/null -> :class:`Completed`.

    Codes are git's and a shell's: a command that cannot be found gives 127, one that cannot be
    executed 126, death by signal N 128+N.
    """
    t0 = time.perf_counter()
    out, err = output_files()
    with out, err:
        try:
            proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        except FileNotFoundError as e:
            return Completed(127, time.perf_counter() - t0, stderr=str(e))
        except PermissionError as e:
            return Completed(126, time.perf_counter() - t0, stderr=str(e))
        Watchdog.watch(proc.pid)

        def finished(wait: float | None) -> bool:
            try:
                proc.wait(timeout=wait)
                return True
            except subprocess.TimeoutExpired:
                return False
        try:
            timed_out, interrupted = supervise(proc.pid, finished,
                                               None if timeout is None else t0 + timeout)
        finally:
            signal_group(proc.pid, signal.SIGKILL)      # stragglers in the group
            Watchdog.release(proc.pid)
        code = None if proc.returncode is None else exit_status(proc.returncode)
        return Completed(code, time.perf_counter() - t0, timed_out, interrupted,
                         tail_of(out), tail_of(err))
