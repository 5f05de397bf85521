"""Long work in a terminal: a spinner, one line per probe, the predicate's output where it matters.

The output is shown under the first failing probe and under every skip and abort."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from rlbisect.bisect.report import Progress
from rlbisect.bisect.report import ProbeRecord, probe_line

#: Lines of a predicate's output shown under a probe line.
SHOWN = 8


def output_block(rec: ProbeRecord, lines: int = SHOWN) -> str:
    """The tail of a probe's output, indented under its line (empty when there is none)."""
    tail = rec.output.strip().splitlines()[-lines:]
    return "\n".join(f"      | {ln}" for ln in tail)


class LiveProgress(Progress):
    """A rich spinner on stderr while probes run; probe lines on stdout."""

    def __init__(self, spinner=None, task=None, same_tty: bool = False):
        self.spinner, self.task, self.same_tty = spinner, task, same_tty
        self.shown_failure = False

    def status(self, text: str) -> None:
        if self.spinner is not None:
            self.spinner.update(self.task, description=text)

    def _print(self, text: str) -> None:
        if self.same_tty and self.spinner is not None:
            self.spinner.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def probe(self, rec: ProbeRecord) -> None:
        if rec.role == "verify" and rec.verdict in ("good", "bad"):   # agreeing re-runs: the summary counts them
            return
        self._print(probe_line(rec))
        first_failure = rec.verdict == "bad" and not self.shown_failure
        if rec.output and (first_failure or rec.verdict in ("skip", "abort")):
            self.shown_failure |= first_failure
            self._print(output_block(rec))


@contextmanager
def live_progress(enabled: bool = True) -> Iterator[LiveProgress]:
    """A :class:`LiveProgress`; the spinner only when stderr is a terminal."""
    from rich.console import Console
    from rich.progress import Progress as Bar
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not (enabled and console.is_terminal):
        yield LiveProgress()
        return
    bar = Bar(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
              console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
    task = bar.add_task("starting", total=None)
    with bar:
        yield LiveProgress(bar, task, sys.stdout.isatty())
