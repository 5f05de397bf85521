"""Short runs for the measured search (``--flaky`` with ``--predicate short-run --metric M``).

The short-run predicate on its own decides each commit against GOOD with 3-9 seeds. The measured
search (:mod:`rlbisect.bisect.measured`) pools every run across commits instead, so each probe is
one training run: :class:`MeasuredRuns` wraps the short-run predicate, the driver binds each run to
its seed (:meth:`MeasuredRuns.bind`: :func:`run_seed`, a seed of the commit's own), and
:class:`SeededRun` trains it and returns the metric's score as a number, with no verdict of its own
(:attr:`~rlbisect.errors.Cause.MEASURED`):

    trained, metric logged (NaN/Inf too)      good   measured   values {metric, seed}
    the code under test failed                bad    (its cause)   the worst outcome
    cannot run, timeout, metric not logged    skip   (its cause)   no information

Why not seed n at every commit: on a deterministic trainer, a commit that leaves the random stream
alone (a comment, a rename) would repeat its parent's runs exactly, and the search, which pools
runs as independent draws, would count one draw many times. Simulated in
``benchmarks/bench_measured.py --matched 0.9`` (docs/noisy.md): more runs and wrong answers.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rlbisect.bisect.predicates import Probe
from rlbisect.errors import Cause, Verdict
from rlbisect.runs.judge import score

if TYPE_CHECKING:
    from rlbisect.bisect.predicates.short_run import ShortRunPredicate


class MeasuredRuns:
    """The short-run predicate as one run per probe (see the module)."""

    def __init__(self, inner: ShortRunPredicate):
        if inner.measures is None:
            raise ValueError("the measured search needs a --metric")
        self.inner = inner
        self.metric, self.direction = inner.measures

    def preflight(self, repo: Any, commit: str) -> None:
        self.inner.preflight(repo, commit)

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        self.inner.setup(good, checkout)

    def identity(self) -> str:
        # apart from the per-commit verdicts: these rows are numbers, never verdicts
        # "seeds": runs recorded when a commit's n-th run had seed n are other draws
        return json.dumps({"measured": self.metric, "short_run": json.loads(self.inner.identity()),
                           "seeds": "per commit"}, sort_keys=True)

    def bind(self, commit: str, index: int) -> SeededRun:
        return SeededRun(self.inner, run_seed(commit, index))

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        return self.bind(commit, 0).probe(worktree, commit, timeout)


def run_seed(commit: str, index: int) -> int:
    """The seed of ``commit``'s ``index``-th run: its own, so no two commits share a run (the
    module says why); below 2**31 for trainers that take only 32-bit seeds."""
    return int(hashlib.sha256(commit.encode()).hexdigest()[:5], 16) * 1000 + index


@dataclass
class SeededRun:
    """One training run of the probe's checkout with one seed, scored on the metric."""

    inner: ShortRunPredicate
    seed: int

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        metric, window = self.inner.options.metric or "", self.inner.options.window
        rows, failed, seconds = self.inner._train(worktree, [self.seed], timeout)
        if failed is not None:
            failed.values = {**failed.values, "seed": float(self.seed)}
            return failed
        runs = rows[self.seed]
        try:
            value = score(runs, metric, window)
        except KeyError as e:
            return Probe(Verdict.SKIP, {"seed": float(self.seed)}, f"with seed {self.seed}: {e.args[0]}",
                         seconds, Cause.CANNOT_RUN)
        shown = f"{value:.4g}" if math.isfinite(value) else f"{value} (the worst outcome)"
        return Probe(Verdict.GOOD, {metric: value, "seed": float(self.seed)},
                     f"{metric} = {shown} with seed {self.seed}", seconds, Cause.MEASURED)
