"""Bisection with a predicate that lies sometimes: a posterior over the culprit.

Pure: no git, no I/O. Commits are positions on a line, ``0`` = GOOD (known good), ``n`` = BAD
(known bad), ``1..n-1`` the commits between, oldest first. (On a history with merges the caller
passes the first-parent chain, so that "after the culprit" is a line.)

Model. The culprit ``k`` (the first bad commit) is one of ``1..n``; commit ``i`` is truly bad
iff ``i >= k``. Each run of the predicate reports the truth, except that it flips it with a
probability ``eps`` that is the same for every run and every commit and is *not known*: the
posterior is over ``(k, eps)`` with ``eps`` on a grid over ``[0, 0.45]`` (a predicate that is
wrong half the time says nothing), and the culprit's posterior is the marginal over ``eps``.
The prior on ``eps`` (:func:`eps_prior`) favours small rates, with some mass exactly at 0 so a
deterministic predicate is not charged for noise it does not have. A skip is no information.

Choice of probe: the commit whose next run has the largest expected information gain about
``k`` (:meth:`FlakySearch.information_gain`). For this symmetric model the gain is a constant
plus the binary entropy of the predicted verdict, so the rule is "probe where the predicted
verdict is closest to a coin flip", i.e. the posterior median (Horstein's probabilistic
bisection); with no flips so far it is ordinary binary search. Repeating a commit is allowed
and happens when it is the most informative probe (typically the two commits either side of a
likely culprit). Ties go to the lower position, so the search is a function of its observations.

Stop (:meth:`FlakySearch.decide`): ``found`` when the top culprit's posterior reaches the
confidence; ``skipped`` when a run of skipped commits can no longer be split (git's "only
skipped commits left"); ``unknown`` when the run budget is spent.

The confidence is a posterior probability under this prior, so it is exact on average over
the prior, not for every flip rate: the prior's lean towards small rates buys short bisects
of reliable predicates at the price of some overconfidence for very noisy ones. Measured on
64-commit histories (``benchmarks/bench_flaky.py``, 400 bisects per rate, confidence 0.95):
rate 0: 100% right, 8.8 runs; 0.05: 99.5%, 11.5; 0.1: 98.2%, 15.0; 0.2: 93.2% (5.8% wrong,
the rest unsure), 27.2 runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

Verdict = Literal["good", "bad", "skip"]
#: Flip rates the posterior ranges over: 0 to 0.45 in steps of 0.01.
EPS_GRID = np.round(np.linspace(0.0, 0.45, 46), 6)
#: Prior probability that the predicate never lies (eps == 0 exactly).
P_EXACT = 0.4
#: Shape of the prior over eps > 0: density proportional to (1 - eps) ** EPS_SHAPE.
EPS_SHAPE = 4.0


def eps_prior(grid: Sequence[float] = EPS_GRID, p_exact: float = P_EXACT,
              shape: float = EPS_SHAPE) -> np.ndarray:
    """Prior weights over ``grid``: ``p_exact`` at 0, the rest ~ Beta(1, shape+1) on the grid."""
    g = np.asarray(grid, dtype=float)
    w = (1.0 - g) ** shape
    w[g == 0] = 0.0
    w = (1.0 - p_exact) * w / w.sum() if w.sum() > 0 else w
    w[g == 0] = p_exact if (g == 0).any() else 0.0
    return w / w.sum()


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def _h2(z: np.ndarray) -> np.ndarray:
    """Binary entropy in bits, elementwise, with 0 log 0 = 0."""
    z = np.clip(z, 0.0, 1.0)
    out = np.zeros_like(z)
    inner = (z > 0) & (z < 1)
    zi = z[inner]
    out[inner] = -(zi * np.log2(zi) + (1 - zi) * np.log2(1 - zi))
    return out


@dataclass(frozen=True)
class Decision:
    """What to do next. ``status``: probe (run ``probe``), found, skipped or unknown."""

    status: Literal["probe", "found", "skipped", "unknown"]
    probe: int | None = None            # position to run next (status "probe")
    first_bad: int | None = None        # the culprit (status "found")
    candidates: tuple[int, ...] = ()    # "skipped": the inseparable run; "unknown": credible set
    p: float = 0.0                      # posterior of first_bad, or of the candidates together


class FlakySearch:
    """Posterior over the culprit among positions ``1..n`` given noisy good/bad runs.

    ``culprit_prior`` (length ``n``, for positions ``1..n``) defaults to uniform; ``eps_grid``
    and ``eps_weights`` set the flip-rate prior (default :data:`EPS_GRID`, :func:`eps_prior`).
    """

    def __init__(self, n: int, culprit_prior: Sequence[float] | None = None,
                 eps_grid: Sequence[float] | None = None,
                 eps_weights: Sequence[float] | None = None):
        if n < 1:
            raise ValueError("need at least one commit after GOOD (n >= 1)")
        self.n = n
        self.grid = np.asarray(EPS_GRID if eps_grid is None else eps_grid, dtype=float)
        if self.grid.min() < 0 or self.grid.max() >= 0.5:
            raise ValueError("flip rates must lie in [0, 0.5)")
        w = eps_prior(self.grid) if eps_weights is None else np.asarray(eps_weights, float)
        prior = np.ones(n) if culprit_prior is None else np.asarray(culprit_prior, float)
        if len(prior) != n or len(w) != len(self.grid) or (prior < 0).any() or (w < 0).any():
            raise ValueError("prior lengths must match n and the eps grid; weights >= 0")
        with np.errstate(divide="ignore"):
            self._log_prior = np.log(prior / prior.sum())[:, None] + np.log(w / w.sum())[None, :]
            self._log_eps, self._log_1m = np.log(self.grid), np.log1p(-self.grid)
        self.goods = np.zeros(n + 1, dtype=int)   # runs that said good, per position 0..n
        self.bads = np.zeros(n + 1, dtype=int)
        self.skipped: set[int] = set()
        self.history: list[tuple[int, Verdict]] = []
        self._joint: np.ndarray | None = None

    # -- evidence ---------------------------------------------------------------------------

    def observe(self, position: int, verdict: Verdict) -> None:
        """Add one run's verdict at ``position`` (0..n). A skip only bars the commit from
        further probes (like git, an untestable commit is not tried again)."""
        if not 0 <= position <= self.n:
            raise ValueError(f"position {position} outside 0..{self.n}")
        if verdict == "good":
            self.goods[position] += 1
        elif verdict == "bad":
            self.bads[position] += 1
        elif verdict == "skip":
            self.skipped.add(position)
        else:
            raise ValueError(f"verdict must be good, bad or skip, not {verdict!r}")
        self.history.append((position, verdict))
        self._joint = None

    @property
    def n_obs(self) -> int:
        """Every observation so far, skips included."""
        return len(self.history)

    def _errors(self) -> np.ndarray:
        """errors[k-1] = runs that disagree with culprit k: bad before k, good at/after k."""
        bad_before = np.cumsum(self.bads)[:-1]                 # positions 0..k-1
        good_from = np.cumsum(self.goods[::-1])[::-1][1:]      # positions k..n
        return bad_before + good_from

    def joint(self) -> np.ndarray:
        """Posterior P(k, eps), shape (n, len(grid)); row ``k-1`` is culprit ``k``."""
        if self._joint is None:
            e = self._errors()[:, None].astype(float)
            total = float(self.goods.sum() + self.bads.sum())
            # 0 * log(0) must be 0 (no error is possible at eps = 0), not nan
            with np.errstate(invalid="ignore"):
                ll = np.where(e > 0, e * self._log_eps, 0.0) + \
                    np.where(total - e > 0, (total - e) * self._log_1m, 0.0)
            logp = self._log_prior + ll
            logp -= logp.max()
            p = np.exp(logp)
            self._joint = p / p.sum()
        return self._joint

    def culprit_posterior(self) -> np.ndarray:
        """P(culprit = k) for k = 0..n (entry 0, GOOD, is always 0)."""
        return np.concatenate([[0.0], self.joint().sum(axis=1)])

    def eps_posterior(self) -> np.ndarray:
        """P(eps = grid[j] | runs so far)."""
        return self.joint().sum(axis=0)

    def p_bad(self) -> np.ndarray:
        """P(commit i is truly bad) = P(culprit <= i), for i = 0..n."""
        return np.minimum(np.cumsum(self.culprit_posterior()), 1.0)

    # -- choice -----------------------------------------------------------------------------

    def information_gain(self) -> np.ndarray:
        """Expected bits learned about the culprit from one more run at each position 0..n.

        With a_k = sum_eps P(k, eps) eps and b_k = P(k) - a_k, a run at i says bad with
        probability z_i = sum_{k<=i} b_k + sum_{k>i} a_k, and the gain is
        H2(z_i) - sum_k P(k) H2(a_k / P(k)) (exact; derivation in the module docstring).
        Untestable positions (GOOD, BAD, skipped commits) get 0.
        """
        joint = self.joint()
        pk = joint.sum(axis=1)
        a = joint @ self.grid
        b = pk - a
        z = np.cumsum(b) + (a.sum() - np.cumsum(a))              # i = 1..n
        with np.errstate(invalid="ignore", divide="ignore"):
            noise = float((pk * _h2(np.where(pk > 0, a / pk, 0.0))).sum())
        gain = np.concatenate([[0.0], np.maximum(_h2(z) - noise, 0.0)])
        gain[self.n] = 0.0
        gain[sorted(self.skipped)] = 0.0
        return gain

    def next_probe(self) -> int | None:
        """The most informative position to run next (lowest on ties), None if none is left."""
        testable = [i for i in range(1, self.n) if i not in self.skipped]
        if not testable:
            return None
        gain = self.information_gain()
        best = max(gain[i] for i in testable)
        return next(i for i in testable if gain[i] >= best - 1e-12)

    # -- stopping ---------------------------------------------------------------------------

    def blocks(self) -> list[tuple[int, ...]]:
        """Culprits that no further run can tell apart: runs of positions cut only after a
        testable commit (a run at i separates culprit i from i + 1)."""
        out, cur = [], []
        for k in range(1, self.n + 1):
            cur.append(k)
            if k == self.n or k not in self.skipped:
                out.append(tuple(cur))
                cur = []
        return out

    def credible_set(self, confidence: float) -> tuple[int, ...]:
        """Fewest culprits whose posterior adds up to ``confidence`` (oldest first)."""
        post = self.culprit_posterior()
        order = sorted(range(1, self.n + 1), key=lambda k: (-post[k], k))
        chosen, mass = [], 0.0
        for k in order:
            chosen.append(k)
            mass += post[k]
            if mass >= confidence - 1e-12:
                break
        return tuple(sorted(chosen))

    def top(self, count: int = 10) -> list[tuple[int, float]]:
        """The ``count`` likeliest culprits with their posterior, likeliest first."""
        post = self.culprit_posterior()
        order = sorted(range(1, self.n + 1), key=lambda k: (-post[k], k))
        return [(k, float(post[k])) for k in order[:count]]

    def decide(self, confidence: float = 0.95, max_runs: int | None = None,
               runs: int | None = None) -> Decision:
        """Stop (found / skipped / unknown) or name the next probe. ``runs`` counts against
        ``max_runs`` (default: every observation so far)."""
        if not 0.5 < confidence < 1:
            raise ValueError("confidence must be between 0.5 and 1 (exclusive)")
        post = self.culprit_posterior()
        best = int(np.argmax(post))  # argmax returns the first maximum: lowest on ties
        if post[best] >= confidence:
            return Decision("found", first_bad=best, candidates=(best,), p=float(post[best]))
        mass = {blk: float(post[list(blk)].sum()) for blk in self.blocks()}
        blk = max(mass, key=lambda b: (mass[b], -b[0]))
        nxt = self.next_probe()
        # with nothing testable left, every culprit is one block of mass 1
        if nxt is None or (len(blk) > 1 and mass[blk] >= confidence):
            return Decision("skipped", candidates=blk, p=mass[blk])
        if max_runs is not None and (self.n_obs if runs is None else runs) >= max_runs:
            cs = self.credible_set(confidence)
            return Decision("unknown", candidates=cs, p=float(post[list(cs)].sum()))
        return Decision("probe", probe=nxt)

    def sure_marks(self, confidence: float) -> tuple[int | None, int | None]:
        """(latest position good with posterior >= confidence, earliest bad with posterior >=
        confidence); None where no commit between GOOD and BAD qualifies."""
        pb = self.p_bad()
        goods = [i for i in range(1, self.n) if 1 - pb[i] >= confidence - 1e-12]
        bads = [i for i in range(1, self.n) if pb[i] >= confidence - 1e-12]
        return (goods[-1] if goods else None), (bads[0] if bads else None)


def default_max_runs(n: int) -> int:
    """Run budget when the user sets none: generous enough for flip rates up to ~0.25."""
    return max(20, 12 * math.ceil(math.log2(n + 1)))


@dataclass
class Outcome:
    """A simulated search: its decision and the positions run, in order."""

    decision: Decision
    runs: list[int]


def simulate(n: int, oracle: Callable[[int], Verdict], confidence: float = 0.95,
             max_runs: int | None = None, **kwargs) -> Outcome:
    """Run a whole search against ``oracle`` (position -> verdict); extra args go to
    :class:`FlakySearch`. ``max_runs`` defaults to :func:`default_max_runs`."""
    search = FlakySearch(n, **kwargs)
    cap = default_max_runs(n) if max_runs is None else max_runs
    runs: list[int] = []
    while (d := search.decide(confidence, cap)).status == "probe":
        assert d.probe is not None
        runs.append(d.probe)
        search.observe(d.probe, oracle(d.probe))
    return Outcome(d, runs)
