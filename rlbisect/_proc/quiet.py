"""A trainer's own output kept off stdout: fd-level redirection while it runs, so `--json` stays JSON.

Real trainers print (HF Trainer prints a dict per logged step; C extensions and subprocesses write
to file descriptor 1 directly), so redirecting `sys.stdout` alone is not enough: the descriptor is
pointed at stderr for the duration, and Python's own stream is flushed on both sides.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def stdout_to_stderr(enabled: bool = True) -> Iterator[None]:
    """Everything written to stdout (Python and file descriptor 1) goes to stderr inside."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved_fd = os.dup(1)
    saved_stream = sys.stdout
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = saved_stream
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
