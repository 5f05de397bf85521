"""Drive the peer tool, git-bayesect (PyPI ``git-bayesect==1.2``), in-process or through git.

git-bayesect keeps a posterior over the index of the change with a Beta(0.5, 0.5) (Jeffreys)
prior on each side's failure rate, picks the commit whose run most lowers the expected entropy
of that posterior, and ``git bayesect run`` stops when the top commit reaches ``--confidence``
(default 0.95). It has no run budget. Its ``Bisector`` class is the pure part of that CLI:
index 0 is the NEWEST commit, ``record(index, failed)`` adds a run, ``select()`` names the next
index, ``distribution`` is the posterior over "the change is at this index or older than it
came in" (index ``B`` means indices ``0..B`` behave like the new side). :func:`simulate` drives
exactly that class with the loop of ``cli_run``; :func:`run_real` runs the CLI in a clone.

Positions here are rlbisect's: ``0`` = GOOD (git-bayesect's ``--old``), ``n`` = BAD (``--new``).
git-bayesect's index ``B`` is culprit position ``n - B``; ``B = n`` names GOOD itself, which the
benchmark counts as a wrong culprit (it is what the tool prints as converged).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

#: The exact release measured in the issue; the benchmark refuses to run another one.
VERSION = "1.2"


def available() -> str | None:
    """None if git-bayesect 1.2 is importable, else why not."""
    try:
        from importlib.metadata import version
        import git_bayesect  # noqa: F401
    except ImportError:
        return "git-bayesect is not installed: pip install 'git-bayesect==1.2'"
    if version("git-bayesect") != VERSION:
        return f"git-bayesect {version('git-bayesect')} is installed, the benchmark needs {VERSION}"
    return None


@dataclass
class PeerOutcome:
    """``culprit``: the position named (None: no answer within the cap); ``runs``: runs made."""

    culprit: int | None
    runs: int


def simulate(n: int, oracle: Callable[[int], bool], confidence: float = 0.95,
             max_runs: int = 2000) -> PeerOutcome:
    """``git bayesect run --confidence C`` against ``oracle`` (position -> the run failed).

    The loop of ``cli_run``: select, run, record, stop once the top index reaches the
    confidence. ``max_runs`` only guards the benchmark (the CLI itself never gives up).
    """
    from git_bayesect import Bisector

    bisector = Bisector(np.ones(n + 1))
    runs = 0
    while runs < max_runs:
        index = bisector.select()
        bisector.record(index, bool(oracle(n - index)))
        runs += 1
        if bisector.distribution.max() >= confidence:
            return PeerOutcome(n - int(np.argmax(bisector.distribution)), runs)
    return PeerOutcome(None, runs)


def run_real(repo: Path, good: str, bad: str, command: list[str], confidence: float = 0.95,
             timeout: float = 1800.0) -> tuple[PeerOutcome, str | None, int]:
    """``git bayesect start --old GOOD --new BAD`` then ``git bayesect run`` in ``repo`` (a clone:
    git-bayesect checks commits out in its working tree). Returns the outcome read back from
    its state file, the full sha it converged to (None if it did not) and the CLI's exit code
    (-1 on timeout, which counts as no answer)."""
    from git_bayesect import State, get_bisector

    cli = [sys.executable, "-c", "import git_bayesect; git_bayesect.main()"]
    subprocess.run(cli + ["start", "--old", good, "--new", bad], cwd=repo, check=True,
                   capture_output=True)
    try:
        proc = subprocess.run(cli + ["run", "--confidence", str(confidence), *command], cwd=repo,
                              capture_output=True, text=True, timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = -1
    here = os.getcwd()
    try:  # git-bayesect finds its state file relative to the working directory
        os.chdir(repo)
        state = State.from_git_state(Path(repo))
    finally:
        os.chdir(here)
    runs = sum(1 for _, result in state.results if result.value in ("pass", "fail"))
    dist = get_bisector(state).distribution
    new_index = state.commit_indices[state.new_sha]
    order = {i: sha for sha, i in state.commit_indices.items()}
    if code != 0 or dist.max() < confidence:
        return PeerOutcome(None, runs), None, code
    sha = order[new_index - int(np.argmax(dist))].decode()
    old_index = state.commit_indices[state.old_sha]
    return PeerOutcome(new_index - int(np.argmax(dist)) - old_index, runs), sha, code
