"""``rlbisect demo``: a simulated TinyAgent history with one faulty commit, bisected.

It shows the culprit, its diff and what moved. The only rlbisect module that imports
``history_fixtures``."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

from rlbisect._proc.tempdirs import owned_tempdir
from rlbisect.bisect import BisectOptions, BisectResult, Progress, bisect, make_predicate
from rlbisect.errors import InputError, Interrupted
from rlbisect.git.repo import Repo


@dataclass
class DemoOutcome:
    history: Any              # history_fixtures.History
    result: BisectResult
    hit: bool                 # the bisect named the commit that injected the fault
    diff: str                 # the named culprit's patch
    kept: bool = False        # the history stays on disk (--keep)

    def to_json(self) -> dict:
        return dict(self.result.to_json(), fault=self.history.fault,
                    fault_commit=self.history.fault_commit, history=self.history.commits,
                    repo=self.history.path if self.kept else None)


def fault_names() -> list[str]:
    """The faults a simulated history can introduce (``history_fixtures`` imports nothing heavy)."""
    from history_fixtures import FAULTS
    return list(FAULTS)


def _history(keep: Path | None, fault: str, commits: int, bad_at: int):
    """Build the history (in ``keep``, or a temporary dir); reuse ``keep`` if it holds the same."""
    from history_fixtures import FAULTS, build_history, load_history
    if fault not in FAULTS:
        raise InputError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
    if not 1 <= bad_at <= commits:
        raise InputError(f"--bad-at must be between 1 and --commits ({commits}), not {bad_at}")
    if keep is not None and keep.exists() and any(keep.iterdir()):
        found = load_history(keep)
        same = found is not None and found.fault == fault and len(found.commits) == commits and \
            [s for s, _ in found.commits].index(found.fault_commit) + 1 == bad_at
        if not same:
            raise InputError(f"--keep {keep} is not empty and does not hold this demo's history")
        return found, True
    where = keep or owned_tempdir("demo") / "tinyagent"
    try:
        history = build_history(where, fault, commits, bad_at)
    except ValueError as e:
        raise InputError(str(e)) from None
    return history, False


def run_demo(fault: str = "sign_flip", commits: int = 8, bad_at: int | None = None,
             keep: Path | None = None, predicate: str | None = None,
             predicate_options: dict | None = None, options: BisectOptions | None = None,
             say: Callable[[str], None] = print, progress: Progress | None = None) -> DemoOutcome:
    """Build the history, bisect it, and say what happened. A temporary history is removed on
    every exit path; ``keep`` keeps it (and its bisect cache) for the next run."""
    bad_at = bad_at if bad_at is not None else min(3, commits)
    history, reused = _history(keep, fault, commits, bad_at)
    root = Path(history.path)
    try:
        where = f"in {root}" if keep is not None else "in a temporary folder (removed at the end; --keep DIR keeps it)"
        say(f"{'reusing' if reused else 'built'} a TinyAgent history {where}: {commits} "
            f"commits after the initial import, one of which introduces '{fault}' as a real code change")
        for sha, subject in history.commits:
            say(f"  {sha[:10]}  {subject}")
        say(f"bisecting {history.good[:10]}..{history.bad[:10]} with the "
            f"'{predicate or 'invariants'}' predicate\n")
        pred = make_predicate(predicate, options=predicate_options)
        try:
            result = bisect(root, f"{history.good}..{history.bad}", pred, options,
                            progress=progress)
        except Interrupted as e:
            e.partial = DemoOutcome(history, cast(BisectResult, e.partial), False, "", keep is not None)
            raise
        diff = Repo.open(root).show(result.first_bad) if result.first_bad else ""
        return DemoOutcome(history, result, result.first_bad == history.fault_commit, diff,
                           keep is not None)
    finally:
        if keep is None:
            shutil.rmtree(root.parent, ignore_errors=True)
