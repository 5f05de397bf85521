"""Short runs for the measured search (``--flaky`` with ``--predicate short-run --metric M``).

The short-run predicate on its own decides each commit against GOOD with 3-9 seeds. The measured
search (:mod:`rlbisect.bisect.measured`) pools every run across commits instead, so each probe is
one training run: :class:`MeasuredRuns` wraps the short-run predicate, the driver binds each run to
its seed (:meth:`MeasuredRuns.bind`: the search's ``seed_for``, the smallest seed the commit has not
run yet, so a commit's n-th run is on seed n at every commit), and :class:`SeededRun` trains it and
returns the metric's score as a number, with no verdict of its own (:attr:`~rlbisect.errors.Cause.MEASURED`):

    trained, metric logged (NaN/Inf too)      good   measured   values {metric, seed}
    the code under test failed                bad    (its cause)   the worst outcome
    cannot run, timeout, metric not logged    skip   (its cause)   no information

Why the same seeds at every commit: on a deterministic trainer a commit that leaves the random
stream alone repeats its parent's runs bit for bit, and a repeat says that nothing between the two
commits changed that run (:mod:`rlbisect.bisect.measured_pairs` reads it; a repeat is not counted
as a new draw). Where runs never repeat (seeds that do not match, a stream reseeded every commit)
the seeds change nothing. ``benchmarks/bench_measured_matched.py`` measures both (docs/noisy.md).
A run's ``fingerprint`` (of all it logged) tells a repeat from two runs that only score alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rlbisect.bisect.predicates import Probe
from rlbisect.errors import Cause, Verdict
from rlbisect.runs.judge import fingerprint, score
from rlbisect.runs.read import Odd

if TYPE_CHECKING:
    from rlbisect.bisect.predicates.short_run import ShortRunPredicate


#: Short-run options that judge runs, never change one: out of a measured run's identity.
JUDGING = frozenset({"good", "direction", "metrics", "seeds", "max_seeds", "alpha"})


class MeasuredRuns:
    """The short-run predicate as one run per probe (see the module)."""

    def __init__(self, inner: ShortRunPredicate):
        if inner.measures is None:
            raise ValueError("the measured search needs a --metric")
        self.inner = inner
        self.seed_for: Callable[[str], int] | None = None   # the search's choice; else the n-th run, seed n
        self.metric, self.direction = inner.measures

    def preflight(self, repo: Any, commit: str) -> None:
        self.inner.preflight(repo, commit)

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        self.inner.setup(good, checkout)

    def identity(self) -> str:
        # apart from the per-commit verdicts: these rows are numbers, never verdicts. One run's
        # number does not depend on how runs are judged (GOOD, the direction, seeds per look, the
        # bar): without those, a later bisect from another GOOD starts from these runs too
        inner = {k: v for k, v in json.loads(self.inner.identity()).items() if k not in JUDGING}
        return json.dumps({"measured": self.metric, "short_run": inner, "seeds": "paired"}, sort_keys=True)

    def bind(self, commit: str, index: int) -> SeededRun:
        return SeededRun(self.inner, self.seed_for(commit) if self.seed_for else index)

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        return self.bind(commit, 0).probe(worktree, commit, timeout)


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
            # the reason names no seed: one reason at every run is how a bisect sees it cannot run here
            return Probe(Verdict.SKIP, {"seed": float(self.seed)}, e.args[0], seconds, Cause.CANNOT_RUN)
        # a value that is not a number is said as what it was ("a string ('n/a')"), not as nan
        odd = next((v.what for r in runs if isinstance(v := r.get(metric), Odd)), None)
        shown = f"{value:.4g}" if math.isfinite(value) else f"{odd or value} (the worst outcome)"
        return Probe(Verdict.GOOD, {metric: value, "seed": float(self.seed)},
                     f"{metric} = {shown} with seed {self.seed}", seconds, Cause.MEASURED,
                     detail={"fingerprint": fingerprint(runs)})
