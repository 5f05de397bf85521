"""Bisection with a predicate that fails at random: where does its failure rate step up?

Pure: no git, no I/O. Positions ``0..n`` are the commits oldest first, ``0`` = GOOD and ``n`` =
BAD as the user marked them (the caller passes the first-parent chain, so "after" is a line).
Every position can be run, the endpoints too: the user's marks are a prior, not evidence.

Model. The culprit ``k`` is one of ``0..n+1``; a run at position ``i`` fails with probability
``f0`` if ``i < k`` and ``f1`` if ``i >= k``, every run independent. ``k`` in ``1..n``: commit
``k`` is the first bad one; ``k = 0``: GOOD already behaves like the bad side; ``k = n + 1``: even
BAD behaves like the good side. Both rates are unknown: the posterior is over ``(k, f0, f1)`` on a
grid and the culprit's posterior is its marginal. A skip is no information; a commit is barred at
its second (:data:`SKIPS_TO_BAR`): one can be the machine's (a timeout, a busy device), not the code's.

Prior. ``k``: :data:`END_PRIOR` each for ``0`` and ``n + 1``, the rest even over ``1..n`` (or
``culprit_prior``); on a range shorter than 48 commits, each end as likely as one commit
(``1 / (n + 2)``), so the user's marks never answer alone (on one commit, a pass at GOOD and a
fail at BAD made 0.99). ``(f0, f1)``: :func:`~rlbisect.bisect.bayes_fit.rate_prior`, each rate
Jeffreys' Beta(1/2, 1/2) on its own (git-bayesect's prior) on a grid over all of [0, 1] with
``f1 - f0 >= 0.2``. The prior is U-shaped, so a clean predicate and one that flips rarely lead,
yet a rise from 0 to 0.3, from 0.05 to 0.5 or from 0.6 to 1 is a point of the same model
(docs/noisy.md tells why point masses on a clean and a symmetric predicate were given up).

Choice. The position whose next run tells most about ``k``: ``H2(z_i) - sum_k P(k) H2(m_ik)``
bits, ``m_ik`` the predicted failure rate of a run at ``i`` if the culprit is ``k`` (exact mutual
information). Repeats happen when they are the most informative run; ties go to the lower position.

Stop (:meth:`FlakySearch.decide`): ``found`` (``good_fails`` for ``k = 0``, ``no_regression`` for
``k = n + 1``) once the top posterior reaches ``1 - (1 - confidence) / MARGIN`` (0.975 for 0.95);
also the likelier of the two ends once they reach it together (nothing in the range changed).
The margin is there because the posterior is a model's, and its prior is not the world's: at the
nominal level 44 of 1600 bisects over 16 rate pairs named a wrong commit, 17 with the margin
(git-bayesect 41; docs/noisy.md). ``skipped``: a run of skipped commits can no longer be split;
``unknown``: the budget is spent.

Fit (:mod:`rlbisect.bisect.bayes_fit`). Before any answer, a posterior predictive check: does one
step explain the runs, or does a side hold a second step (a band, two regressions, a drift)?
Below :data:`FIT_ALPHA` the answer is ``misfit``, no culprit; every 16 runs a stricter check ends
early a search that will never fit.

Measured against git-bayesect on the same histories: ``benchmarks/bench_flaky.py``, docs/noisy.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from rlbisect.bisect.bayes_fit import (AFTER_GRID, BEFORE_GRID, describe_misfit, entropy_bits,
                                       fit_pvalue, grid_loglik, rate_prior, summary)
from rlbisect.errors import Verdict

END_PRIOR = 0.02        #: prior of k = 0 and of k = n + 1 each
MARGIN = 2.0            #: name a culprit at posterior 1 - (1 - confidence) / MARGIN
FIT_ALPHA = 0.01        #: misfit below this posterior predictive p-value
SKIPS_TO_BAR = 2        #: skipped runs at a commit before it is run no more
FIT_ALPHA_EARLY, FIT_EVERY = 0.001, 16   #: the stricter check every 16 runs, from run 32 on


@dataclass(frozen=True)
class Decision:
    """What to do next. ``p``: the posterior of ``first_bad``, of the ``candidates`` together, of
    k = n + 1 (no_regression) or of k = 0 (good_fails), or of both ends when only together they
    reach the stop; for misfit, the fit check's p-value."""

    status: Literal["probe", "found", "skipped", "unknown", "no_regression", "good_fails",
                    "misfit"]
    probe: int | None = None            # position 0..n to run next (status "probe")
    first_bad: int | None = None        # status "found": the culprit, 1..n
    candidates: tuple[int, ...] = ()    # "skipped": inseparable run; "unknown": credible set
    p: float = 0.0
    message: str = ""                   # misfit: what does not fit, in one line


class FlakySearch:
    """Posterior over the culprit ``k`` in ``0..n+1`` given noisy runs at positions ``0..n``.

    ``culprit_prior`` (length ``n``, positions ``1..n``) defaults to uniform; ``before_grid``,
    ``after_grid`` and ``rate_weights`` replace the rate prior (:func:`rate_prior`).
    """

    def __init__(self, n: int, culprit_prior: Sequence[float] | None = None,
                 before_grid: Sequence[float] | None = None,
                 after_grid: Sequence[float] | None = None,
                 rate_weights: np.ndarray | None = None, end_prior: float | None = None):
        if n < 1:
            raise ValueError("need at least one commit after GOOD (n >= 1)")
        self.n = n
        self.before, self.after = (np.asarray(d if g is None else g, float) for g, d in
                                   ((before_grid, BEFORE_GRID), (after_grid, AFTER_GRID)))
        if not all(0 <= g.min() and g.max() <= 1 for g in (self.before, self.after)):
            raise ValueError("failure rates must lie in [0, 1]")
        w = np.asarray(rate_prior(self.before, self.after) if rate_weights is None
                       else rate_weights, float)
        prior = np.asarray(np.ones(n) if culprit_prior is None else culprit_prior, float)
        end_prior = max(END_PRIOR, 1 / (n + 2)) if end_prior is None else end_prior
        if len(prior) != n or w.shape != (len(self.before), len(self.after)) \
                or (prior < 0).any() or (w < 0).any() or not 0 <= end_prior < 0.5:
            raise ValueError("prior lengths must match n and the rate grids; weights >= 0")
        with np.errstate(divide="ignore"):
            self._log_pk = np.log(np.concatenate(
                [[end_prior], (1 - 2 * end_prior) * prior / prior.sum(), [end_prior]]))
        self.weights = w / w.sum()
        # runs per position 0..n by verdict
        self.goods, self.bads, self.skips = (np.zeros(n + 1, dtype=int) for _ in range(3))
        self.skipped: set[int] = set()
        self.history: list[tuple[int, Verdict]] = []
        self._cache: dict = {}

    def observe(self, position: int, verdict: Verdict) -> None:
        """Add one run's verdict at ``position`` (0..n). A commit's second skip bars it from
        further runs (like git, an untestable commit is not tried again)."""
        if not 0 <= position <= self.n:
            raise ValueError(f"position {position} outside 0..{self.n}")
        if verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.SKIP):
            raise ValueError(f"verdict must be good, bad or skip, not {verdict!r}")
        {Verdict.GOOD: self.goods, Verdict.BAD: self.bads, Verdict.SKIP: self.skips}[Verdict(verdict)][position] += 1
        if verdict == Verdict.SKIP and self.skips[position] >= SKIPS_TO_BAR:
            self.skipped.add(position)
        self.history.append((position, verdict))
        self._cache = {}

    @property
    def n_obs(self) -> int:   # every observation so far, skips included
        return len(self.history)

    def _update(self) -> dict:
        if not self._cache:
            cb, cg = (np.concatenate([[0], np.cumsum(x)]) for x in (self.bads, self.goods))
            l0 = grid_loglik(cb, cg, self.before)                        # [k, f0]: positions < k
            l1 = grid_loglik(cb[-1] - cb, cg[-1] - cg, self.after)       # [k, f1]: positions >= k
            m0, m1 = (np.nan_to_num(x.max(axis=1), neginf=0.0) for x in (l0, l1))
            e0, e1 = np.exp(l0 - m0[:, None]), np.exp(l1 - m1[:, None])

            cond = e0[:, :, None] * self.weights[None] * e1[:, None, :]      # [k, f0, f1]
            ev = cond.sum(axis=(1, 2))
            with np.errstate(divide="ignore", invalid="ignore"):
                post = _normalized(self._log_pk + np.log(ev) + m0 + m1)
                cond = np.where(ev[:, None, None] > 0, cond / ev[:, None, None], 0.0)
            self._cache = {"post": post, "cond": cond,
                           "f0": cond.sum(axis=2) @ self.before,      # E[f0 | k]
                           "f1": cond.sum(axis=1) @ self.after}       # E[f1 | k]
        return self._cache

    def culprit_posterior(self) -> np.ndarray:   # P(culprit = k) for k = 0..n+1
        return self._update()["post"]

    def joint(self) -> np.ndarray:
        """P(k, f0, f1), shape ``(n + 2, len(before_grid), len(after_grid))``."""
        c = self._update()
        return c["post"][:, None, None] * c["cond"]

    def p_bad(self) -> np.ndarray:
        """P(position i is on the bad side) = P(culprit <= i), for i = 0..n."""
        return np.minimum(np.cumsum(self.culprit_posterior())[:-1], 1.0)

    def rates(self) -> dict:
        """Posterior mean and 90% interval of the failure rate before and after the culprit."""
        j = self.joint()
        return {"before": summary(self.before, j.sum(axis=(0, 2))),
                "after": summary(self.after, j.sum(axis=(0, 1)))}

    def runs_per_position(self) -> dict[int, dict[str, int]]:
        """``{position: {"good": g, "bad": b, "skip": s}}`` for every position with a run."""
        return {i: {"good": int(g), "bad": int(b), "skip": int(s)} for i, (g, b, s) in
                enumerate(zip(self.goods, self.bads, self.skips)) if g + b + s}

    def information_gain(self) -> np.ndarray:
        """Expected bits learned about the culprit from one more run at each position 0..n
        (0 for skipped positions)."""
        c = self._update()
        p, a, b, n = c["post"], c["f0"], c["f1"], self.n
        # a run at i is on the bad side exactly for the culprits k <= i
        z = np.cumsum(p * b)[:n + 1] + (p @ a - np.cumsum(p * a)[:n + 1])
        hb, ha = entropy_bits(b), entropy_bits(a)
        noise = np.cumsum(p * hb)[:n + 1] + (p @ ha - np.cumsum(p * ha)[:n + 1])
        gain = np.maximum(entropy_bits(z) - noise, 0.0)
        gain[sorted(self.skipped)] = 0.0
        return gain

    def next_probe(self) -> int | None:
        """The most informative position to run next (lowest on ties), or None."""
        testable = [i for i in range(self.n + 1) if i not in self.skipped]
        if not testable:
            return None
        gain = self.information_gain()
        best = max(gain[i] for i in testable)
        return next(i for i in testable if gain[i] >= best - 1e-12)

    def blocks(self) -> list[tuple[int, ...]]:
        """Culprits no further run can tell apart: a run at position i separates k = i from
        k = i + 1, so a skipped position glues its two culprits together."""
        out, cur = [], []
        for k in range(self.n + 2):
            cur.append(k)
            if k > self.n or k not in self.skipped:
                out.append(tuple(cur))
                cur = []
        return out

    def credible_set(self, confidence: float) -> tuple[int, ...]:
        """Fewest culprits (0..n+1) whose posterior adds up to ``confidence``, oldest first."""
        post = self.culprit_posterior()
        chosen, mass = [], 0.0
        for k in sorted(range(self.n + 2), key=lambda k: (-post[k], k)):
            chosen.append(k)
            mass += post[k]
            if mass >= confidence - 1e-12:
                break
        return tuple(sorted(chosen))

    def top(self, count: int = 10) -> list[tuple[int, float]]:
        """The likeliest culprits (0..n+1) with their posterior."""
        post = self.culprit_posterior()
        order = sorted(range(self.n + 2), key=lambda k: (-post[k], k))
        return [(k, float(post[k])) for k in order[:count]]

    def fit(self) -> float:
        """Posterior predictive p-value that one step explains the runs (:mod:`bayes_fit`)."""
        if "fit" not in self._cache:
            self._update()["fit"] = fit_pvalue(self.goods, self.bads, self.joint(),
                                               self.before, self.after)
        return self._cache["fit"]

    def _answer(self, k: int, p: float) -> Decision:
        """A named answer, unless the runs do not fit one step (then misfit, no culprit)."""
        if (fit := self.fit()) < FIT_ALPHA:
            return self._misfit(fit, FIT_ALPHA)
        if k == 0:
            return Decision("good_fails", p=p)
        if k == self.n + 1:
            return Decision("no_regression", p=p)
        return Decision("found", first_bad=k, candidates=(k,), p=p)

    def _misfit(self, p: float, alpha: float) -> Decision:
        k = int(np.argmax(self.culprit_posterior()))
        return Decision("misfit", p=p, message=(
            f"the runs do not fit one step up in the failure rate (fit p={p:.4f} < {alpha}): "
            + describe_misfit(self.goods, self.bads, k)))

    def decide(self, confidence: float = 0.95, max_runs: int | None = None,
               runs: int | None = None, since: int = 1) -> Decision:
        """Stop (found / no_regression / good_fails / misfit / skipped / unknown) or name the
        next probe. ``runs`` counts against ``max_runs`` (default: every observation so far);
        ``since``: runs since the last decision (a round of ``--jobs``), for the periodic check."""
        if not 0.5 < confidence < 1:
            raise ValueError("confidence must be between 0.5 and 1 (exclusive)")
        post, n = self.culprit_posterior(), self.n
        need = needed(confidence)
        best = int(np.argmax(post))  # argmax returns the first maximum: lowest on ties
        if post[best] >= need:
            return self._answer(best, float(post[best]))
        # both ends say "no commit in the range changed the rate": which side's rate GOOD and BAD
        # share is all that tells them apart, and on a constant rate in the middle it never will
        if (ends := float(post[0] + post[n + 1])) >= need:
            return self._answer(0 if post[0] > post[n + 1] else n + 1, ends)
        mass = {blk: float(post[list(blk)].sum()) for blk in self.blocks()}
        blk = max(mass, key=lambda b: (mass[b], -b[0]))
        nxt = self.next_probe()
        # with nothing testable left, every culprit is one block of mass 1
        if nxt is None or (len(blk) > 1 and mass[blk] >= need):
            return Decision("skipped", candidates=tuple(k for k in blk if 1 <= k <= n),
                            p=mass[blk])
        used = self.n_obs if runs is None else runs
        spent = max_runs is not None and used >= max_runs
        # a strict check now and then ends early a search whose runs will never fit
        periodic = self.n_obs >= 2 * FIT_EVERY and any(
            j % FIT_EVERY == 0 for j in range(self.n_obs - max(since, 1) + 1, self.n_obs + 1))
        if (spent or periodic) and (p := self.fit()) < (FIT_ALPHA if spent else FIT_ALPHA_EARLY):
            return self._misfit(p, FIT_ALPHA if spent else FIT_ALPHA_EARLY)
        if spent:
            inner = tuple(k for k in self.credible_set(confidence) if 1 <= k <= n)
            return Decision("unknown", candidates=inner, p=float(post[list(inner)].sum()))
        return Decision("probe", probe=nxt)

    def sure_marks(self, confidence: float) -> tuple[int | None, int | None]:
        """(latest position surely good, earliest surely bad) among 0..n, or None each."""
        pb = self.p_bad()
        goods = [i for i in range(self.n + 1) if 1 - pb[i] >= confidence - 1e-12]
        bads = [i for i in range(self.n + 1) if pb[i] >= confidence - 1e-12]
        return (goods[-1] if goods else None), (bads[0] if bads else None)


def needed(confidence: float) -> float:
    """The posterior a culprit needs before it is named: ``1 - (1 - confidence) / MARGIN``."""
    return 1 - (1 - confidence) / MARGIN


def _normalized(logp: np.ndarray) -> np.ndarray:
    p = np.exp(logp - logp.max())
    return p / p.sum()


def default_max_runs(n: int) -> int:
    """Run budget when the user sets none: on 64 commits a rise from 0.2 to 0.6 takes 130 runs on
    average and 95% of bisects end within 265 (bench_flaky.py), so 420 rarely cuts one short."""
    return max(120, 60 * math.ceil(math.log2(n + 2)))
