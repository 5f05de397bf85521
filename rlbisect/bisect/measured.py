"""Bisection on measured outcomes: where does the distribution of a metric change?

Pure: numpy only, no git, no I/O. Positions ``0..n`` are the commits oldest first (``0`` = GOOD,
``n`` = BAD). Each run at a position gives one number (a short run's reward, on a seed); runs
of every commit are pooled, so a commit's run also teaches what its whole side looks like. A run a
deterministic trainer repeats on the same seed is evidence, not a draw (:mod:`.measured_pairs`).

Model. The culprit ``k`` in ``1..n`` splits the positions into ``< k`` and ``>= k``; the runs of
each side are draws from one distribution of that side, any shape. ``k = NONE`` (index 0 of the
posterior): one distribution throughout, nothing in the range changed it. To be robust to heavy
tails, outliers and scale, the runs are used only through their pooled ranks: each run becomes
its normal score (Blom's ``(r - 3/8) / (N + 1/4)`` quantile, ties averaged), and each side's scores
are normal with their own unknown mean *and* variance (a Normal-Inverse-Gamma prior, so a shift in
the mean or only in the spread both count). A run that crashed or gave NaN/Inf ranks below every
number (``direction="higher"``: above). The posterior of ``k`` is exact under this model: each
side's marginal likelihood in closed form, from prefix sums over positions.

Choice. The position whose next run tells most about ``k``: the mutual information between ``k``
and the run's score, with each hypothesis's predictive (a Student t per side) on a grid of
scores, exact up to the grid and computed for every position at once; the ends first
(:data:`START_RUNS` each). A round of ``J`` runs (``--jobs``) takes that pick first, then the
positions that split the culprit's posterior at its ``j / J`` quantiles: k-ary splits while it is
broad, repeats at the boundary once it is sharp.

Stop: as :mod:`rlbisect.bisect.bayes` (the same :class:`~rlbisect.bisect.bayes.Decision`):
``found`` once the top culprit reaches ``1 - (1 - confidence) / MARGIN``, or once the values in seed
spreads (:func:`~rlbisect.bisect.measured_fit.values_posterior`, which sees how far apart the sides
are) put it at :data:`VALUES_STOP` and its ranks at :data:`RANKS_AGREE`; ``no_regression`` when
``NONE`` does, or with ``min_effect`` when no move that large the way asked is left (``negligible``,
after ``16 / min_effect^2`` runs: two standard errors of a half-and-half split); ``skipped`` when
only skipped commits separate the likeliest culprits; ``unknown`` at the budget. Before a culprit
is named, each side is searched for a change of its own; one found there (posterior >=
:data:`SECOND_CHANGE`) is ``misfit``: two changes, a band or a drift, and no single culprit.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np

from rlbisect.bisect.bayes import SKIPS_TO_BAR, Decision, needed
from rlbisect.bisect.measured_fit import (information_gain, normal_scores, position_sums, side_loglik,
                                          skipped_block, small_move, values_posterior)
from rlbisect.bisect.measured_pairs import distinct, fresh_seed, pair_loglik, seed_blind

NONE_PRIOR = 0.04                #: prior that nothing in the range changed the metric (1 / (n + 1) if more)
START_RUNS = 2                   #: runs at GOOD and at BAD before any other
SECOND_CHANGE = 0.99             #: a side's own change at this posterior makes the answer misfit
VALUES_STOP, RANKS_AGREE = 0.999, 0.8   #: to name on the values: theirs and the ranks' posterior (lower: more wrong)

Direction = Literal["lower", "higher", "change"]


class MeasuredSearch:
    """Posterior over the culprit given measured runs at positions ``0..n`` (see the module):
    index 0 is ``NONE`` (nothing changed), index ``k`` in ``1..n`` the culprit."""

    def __init__(self, n: int, direction: Direction = "change", none_prior: float | None = None,
                 min_effect: float | None = None):
        if n < 1:
            raise ValueError("need at least one commit after GOOD (n >= 1)")
        if direction not in ("lower", "higher", "change"):
            raise ValueError(f"direction must be lower, higher or change, not {direction!r}")
        none_prior = max(NONE_PRIOR, 1 / (n + 1)) if none_prior is None else none_prior   # marks never answer alone
        if not 0 < none_prior < 1:
            raise ValueError("none_prior must lie in (0, 1)")
        if min_effect is not None and (direction == "change" or not min_effect > 0):
            raise ValueError("min_effect needs direction lower or higher and a size above 0")
        self.n, self.direction, self.min_effect = n, direction, min_effect
        self._log_prior = np.log(np.r_[none_prior, np.full(n, (1 - none_prior) / n)])
        self.positions: list[int] = []
        self.values: list[float] = []
        self.seeds: list[int | None] = []
        self.prints: list[str | None] = []
        self.skipped: set[int] = set()
        self.skip_runs: dict[int, int] = {}
        self._cache: dict = {}

    # -- data ------------------------------------------------------------------------------

    def observe(self, position: int, value: float | None, seed: int | None = None,
                fingerprint: str | None = None) -> None:
        """One run at ``position`` on ``seed`` (None: never paired) with the ``fingerprint`` of its record
        (measured_pairs): its value (NaN/Inf, a crash: the worst), or None for a skip (the second bars the commit)."""
        if not 0 <= position <= self.n:
            raise ValueError(f"position {position} outside 0..{self.n}")
        if value is None:
            self.skip_runs[position] = self.skip_runs.get(position, 0) + 1
            if self.skip_runs[position] >= SKIPS_TO_BAR:
                self.skipped.add(position)
        else:
            value = float(value)
            if not math.isfinite(value):   # a failed run ranks as the worst outcome asked about
                value = math.inf if self.direction == "higher" else -math.inf
            self.positions.append(position)
            self.values.append(value)
            self.seeds.append(seed)
            self.prints.append(fingerprint)
        self._cache = {}

    n_obs = property(lambda self: len(self.values) + sum(self.skip_runs.values()), doc="runs so far, skips included")

    def next_seed(self, position: int, pending: Sequence[tuple[int, int]] = ()) -> int:
        """The next run's seed at ``position``, past ``pending`` (position, seed) runs (measured_pairs)."""
        runs = list(zip(self.positions, self.seeds, self.values)) + [(p, s, math.nan) for p, s in pending]
        return fresh_seed(runs, self.n, position)

    def runs_per_position(self) -> dict[int, int]:
        counts = np.bincount(np.asarray(self.positions, int), minlength=self.n + 1)
        return {i: int(c) for i, c in enumerate(counts) if c}

    def _update(self) -> dict:
        if not self._cache:   # repeats on a seed are not new draws: they count in the pairs only
            runs = list(zip(self.positions, self.seeds, self.values))
            new = distinct(runs)
            pos, vals = np.asarray(self.positions, int)[new], np.asarray(self.values, float)[new]
            z = normal_scores(vals)
            m, s, q = position_sums(z, pos, self.n)
            k = np.arange(1, self.n + 1)
            ll = np.r_[side_loglik(m[-1], s[-1], q[-1]),
                       side_loglik(m[k], s[k], q[k]) + side_loglik(m[-1] - m[k], s[-1] - s[k], q[-1] - q[k])]
            prior = self._log_prior + pair_loglik(runs, self.n, self.prints)   # the repeats, before the draws
            post = np.exp((lp := prior + ll) - lp.max())
            self._cache = {"post": post / post.sum(), "m": m, "s": s, "q": q, "pos": pos, "vals": vals,
                           "prior": prior}
        return self._cache

    def culprit_posterior(self) -> np.ndarray:
        """``P(NONE)`` at index 0, then ``P(culprit = k)`` for k = 1..n."""
        return self._update()["post"]

    # -- what to run next ------------------------------------------------------------------

    def information_gain(self) -> np.ndarray:
        """Expected nats learned about ``k`` from one more run at each position 0..n."""
        c = self._update()
        gain = information_gain(c["post"], c["m"], c["s"], c["q"])
        gain[sorted(self.skipped)] = 0.0
        return gain

    def _testable(self) -> list[int]:
        return [i for i in range(self.n + 1) if i not in self.skipped]

    def next_probe(self) -> int | None:
        """The next run's position: the ends first, then the most informative (lowest on ties)."""
        testable = self._testable()
        if not testable:
            return None
        counts = self.runs_per_position()
        for end in (0, self.n):
            if end in testable and counts.get(end, 0) < START_RUNS:
                return end
        gain = self.information_gain()
        best = max(gain[i] for i in testable)
        return next(i for i in testable if gain[i] >= best - 1e-12)

    def propose(self, jobs: int, first: int | None = None) -> list[int]:
        """Up to ``jobs`` positions, ``first`` (None: the next probe) first; see the module."""
        first = self.next_probe() if first is None else first
        if first is None:
            return []
        picks, testable = [first], self._testable()
        counts = self.runs_per_position()
        starts = [e for e in (0, self.n) if e in testable for _ in range(START_RUNS - counts.get(e, 0))]
        picks += [e for e in starts if e != first or starts.count(e) > 1][:max(jobs - 1, 0)]
        cdf = np.cumsum(self.culprit_posterior()[1:])   # P(k <= i) for i = 1..n
        cdf = np.r_[0.0, cdf / max(cdf[-1], 1e-300)]
        j = 1
        while len(picks) < jobs:
            target = j / jobs if j < jobs else 0.5
            picks.append(min(testable, key=lambda i: (abs(cdf[i] - target), i)))
            j += 1
        return picks[:jobs]

    # -- answers ---------------------------------------------------------------------------

    def top(self, count: int = 10) -> list[tuple[int, float]]:
        post = self.culprit_posterior()
        order = sorted(range(self.n + 1), key=lambda k: (-post[k], k))
        return [(k, float(post[k])) for k in order[:count]]

    def credible_set(self, confidence: float) -> tuple[int, ...]:
        ranked = self.top(self.n + 1)       # the fewest likeliest that hold ``confidence`` together
        upto = int(np.searchsorted(np.cumsum([p for _, p in ranked]), confidence - 1e-12)) + 1
        return tuple(sorted(k for k, _ in ranked[:upto]))

    def negligible(self) -> float:
        """Posterior that no commit moved the mean by ``min_effect`` (in normal scores: about seed
        spreads) or more the way asked: ``NONE`` plus each culprit times the chance its sides' means
        differ by less (the difference's t taken as a normal)."""
        c, k = self._update(), np.arange(1, self.n + 1)
        m, s, q = c["m"], c["s"], c["q"]
        below = small_move((m[k], s[k], q[k]), (m[-1] - m[k], s[-1] - s[k], q[-1] - q[k]),
                           float(self.min_effect or 0.0), self.direction == "higher")
        return float(c["post"][0] + (c["post"][1:] * below).sum())

    def sides(self, k: int) -> dict:
        """Median, quartiles and runs of the measured values before and after culprit ``k``."""
        pos, v = (self._update()[x] for x in ("pos", "vals"))

        def describe(x: np.ndarray) -> dict:
            if not len(x):
                return {"runs": 0}
            q = np.quantile(x, [0.25, 0.5, 0.75], method="nearest")   # crashes are -inf: no interpolation
            return {"runs": int(len(x)), "median": float(q[1]), "q25": float(q[0]), "q75": float(q[2])}
        return {"before": describe(v[pos < k]), "after": describe(v[pos >= k])}

    def second_change(self, lo: int, hi: int) -> float:
        """Posterior that the runs at positions ``lo..hi`` hold a change of their own, from even
        odds: the search's own prior expects a change, this check must not."""
        if hi <= lo:
            return 0.0
        inner = MeasuredSearch(hi - lo, self.direction, none_prior=0.5)
        for p, v in zip(self._update()["pos"], self._update()["vals"]):
            if lo <= p <= hi:
                inner.observe(int(p) - lo, float(v))
        return 1.0 - float(inner.culprit_posterior()[0]) if inner.values else 0.0

    def _answer(self, k: int, p: float, need: float, room: bool, why: str = "") -> Decision:
        if k == 0:
            return Decision("no_regression", p=p)
        for lo, hi, name in ((0, k - 1, "before"), (k, self.n, "after")):
            if (p2 := self.second_change(lo, hi)) >= SECOND_CHANGE:
                return Decision("misfit", p=p2, message=(
                    f"the runs {name} the likeliest change (position {k}) change again themselves "
                    f"(posterior {p2:.3f}): two changes, a band or a drift, not one culprit"))
        m, s, q = (self._update()[x] for x in "msq")
        # which way it moved, from the draws (paired repeats can place a change on a few of them)
        other = 0.0 if self.direction == "change" else float(small_move(
            (m[k], s[k], q[k]), (m[-1] - m[k], s[-1] - s[k], q[-1] - q[k]), 0.0, self.direction == "higher"))
        if other >= need:
            before, after = (self.sides(k)[x]["median"] for x in ("before", "after"))
            return Decision("no_regression", first_bad=k, p=p, message=(
                f"the metric changed at position {k}, but {'rose' if after > before else 'fell'} "
                f"(median {before:.4g} -> {after:.4g}): not a regression in the direction asked"))
        if other > 1 - need:   # the way it moved is not yet sure: a fresh draw on the thinner side
            ends = [e for e in (0, self.n) if e not in self.skipped]
            return Decision("probe", probe=min(ends, key=lambda e: m[k] if e == 0 else m[-1] - m[k])) \
                if room and ends else Decision("unknown", candidates=(k,), p=p)
        return Decision("found", first_bad=k, candidates=(k,), p=p, message=why)

    def decide(self, confidence: float = 0.95, max_runs: int | None = None,
               runs: int | None = None, since: int = 1) -> Decision:
        """Stop (found / no_regression / misfit / skipped / unknown) or name the next probe. No
        answer where the seed does not reach the run (:func:`~.measured_pairs.seed_blind`)."""
        d = self._decide(confidence, max_runs, runs)
        # before any other answer: seed-blind runs also look like two changes or a drift (misfit)
        if d.status != "probe" and (count := self.blind()) is not None:
            return Decision("misfit", p=d.p, message=f"each of the {count} commits run on two seeds or more "
                            "gave one value for all its seeds: the seed does not reach the training run (or the "
                            "metric does not vary with it), so its runs are not draws of a seed spread")
        return d

    def blind(self) -> int | None:
        """The commits run on two seeds or more, when each gave one run for all (seed_blind)."""
        return seed_blind(self.positions, self.seeds, self.prints, self.values)

    def _decide(self, confidence: float, max_runs: int | None, runs: int | None) -> Decision:
        if not 0.5 < confidence < 1:
            raise ValueError("confidence must be between 0.5 and 1 (exclusive)")
        post, need = self.culprit_posterior(), needed(confidence)
        counts = self.runs_per_position()
        started = all(counts.get(e, 0) >= START_RUNS or e in self.skipped for e in (0, self.n))
        best = int(np.argmax(post))
        used = self.n_obs if runs is None else runs
        room = max_runs is None or used < max_runs
        if started and post[best] >= need:
            return self._answer(best, float(post[best]), need, room)
        c = self._update()
        if started and best and post[best] >= RANKS_AGREE and (values := values_posterior(
                c["vals"], c["pos"], c["prior"])) is not None \
                and int(np.argmax(values)) == best and values[best] >= VALUES_STOP:
            return self._answer(best, float(values[best]), need, room, f"posterior {values[best]:.4f} on the runs' values "
                                f"in seed spreads, {post[best]:.3f} on their ranks")
        if started and self.min_effect is not None and self.n_obs >= 16 / self.min_effect ** 2 \
                and (small := self.negligible()) >= need:
            return Decision("no_regression", p=small, message=(
                f"no {'drop' if self.direction == 'lower' else 'rise'} of {self.min_effect:g} seed spreads or "
                f"more anywhere in the range (posterior {small:.3f})"))
        nxt = self.next_probe()
        block = skipped_block(post, self.skipped, need)
        if nxt is None or block is not None:
            cands = block or tuple(k for k in self.credible_set(confidence) if k)
            return Decision("skipped", candidates=cands, p=float(post[list(cands)].sum()) if cands else 0.0)
        if not room:
            inner = tuple(k for k in self.credible_set(confidence) if k)
            return Decision("unknown", candidates=inner, p=float(post[list(inner)].sum()))
        return Decision("probe", probe=nxt)

    def sure_marks(self, confidence: float) -> tuple[int | None, int | None]:
        """(latest position surely before the change, earliest surely after), or None each."""
        post = self.culprit_posterior()
        changed = 1 - post[0]
        cdf = np.r_[0.0, np.cumsum(post[1:])]       # P(k <= i), i = 0..n
        goods = [i for i in range(self.n + 1) if changed - cdf[i] >= confidence - 1e-12]
        bads = [i for i in range(self.n + 1) if cdf[i] >= confidence - 1e-12]
        return (goods[-1] if goods else None), (bads[0] if bads else None)
