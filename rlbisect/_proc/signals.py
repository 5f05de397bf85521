"""Signals during a bisect: SIGINT, SIGTERM and SIGHUP set a flag instead of raising mid-command.

While a :class:`SignalTrap` is active, a signal sets :data:`~rlbisect.bisect.predicates.STOP`:
running probes see it and kill their process groups, and the driver, at its next
:meth:`SignalTrap.check`, stops (:class:`Stopped`), cleans up, and reports the signal.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

from rlbisect._proc.runner import STOP


class Stopped(Exception):
    pass


class SignalTrap:
    """While active, SIGINT/SIGTERM/SIGHUP set :data:`STOP` instead of raising mid-command."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}

    def _handler(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        STOP.set()

    def __enter__(self) -> "SignalTrap":
        STOP.clear()
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._saved[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._saved.items():
            if h is not None:   # None: a handler installed from C, which Python cannot put back
                signal.signal(s, h)
        STOP.clear()

    def check(self) -> None:
        if self.signum is not None or STOP.is_set():
            raise Stopped
