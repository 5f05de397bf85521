"""The numbers behind bayes.py: its rate prior, and the check that one step explains the runs.

Pure: numpy only. :func:`rate_prior` is the prior over (failure rate before the culprit, rate
from it on) that ``bayes`` documents; :func:`grid_loglik`, :func:`entropy_bits` and
:func:`summary` are the arithmetic of its posterior.

Fit. The model says every commit before the culprit fails at one rate and every commit from it on
at another. A history can break that: the predicate is bad only in a band of commits, it got
worse twice in the range, it drifts, or the rate rises by less than the model's smallest step.
The posterior cannot tell (it still ranks the culprits it has); a posterior predictive check can.

Discrepancy of a draw ``(k, f0, f1)``: :func:`split_statistic`, the largest likelihood-ratio
statistic of "this side is two runs of commits, each with its own rate" against "one rate" over
every place either side of ``k`` could be cut (a second step hidden inside a side), plus each
side's deviance from its drawn rate. :func:`fit_pvalue` draws ``(k, f0, f1)`` from the posterior,
replays the same number of runs at every position under the draw, and returns the share of
replays at least as discrepant as the runs themselves. The generator is seeded by the counts:
the same runs give the same answer. Posterior predictive p-values lean conservative (the posterior
has already seen the data), which is the side to err on, since a false alarm costs a bisect its
answer; the price is power: a drift spread thinly over many commits is seldom caught, and such a
search usually ends without a culprit anyway, at the run budget.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


STEP = 0.025            #: spacing of both rate grids
MIN_GAP = 0.2           #: the smallest rise of the failure rate the model holds
BEFORE_GRID = np.round(np.arange(0.0, 1.0 - MIN_GAP + 1e-9, STEP), 4)  #: rates before the culprit
AFTER_GRID = np.round(np.arange(MIN_GAP, 1.0 + 1e-9, STEP), 4)        #: rates from it on
CLEAN_PRIOR = 0.0       #: prior weight of a clean predicate (never fails before, always after): off, see docs/noisy.md


def rate_prior(before: Sequence[float] | np.ndarray = BEFORE_GRID,
               after: Sequence[float] | np.ndarray = AFTER_GRID,
               clean: float | None = None) -> np.ndarray:
    """Prior weights of ``(f0, f1)`` on the grid, shape ``(len(before), len(after))``: a mixture
    of a clean predicate, ``(0, 1)``, with weight ``clean`` (default :data:`CLEAN_PRIOR`; none
    if the grids lack 0 or 1) and of each rate Jeffreys' Beta(1/2, 1/2) on its own
    (git-bayesect's prior), kept where ``f1 - f0 >= MIN_GAP`` (every pair if none is: a caller's
    own grid, such as the true rates)."""
    f0, f1 = np.asarray(before, float), np.asarray(after, float)
    ok = np.subtract.outer(f1, f0).T >= MIN_GAP - 1e-9
    w = np.outer(jeffreys_mass(f0), jeffreys_mass(f1)) * (ok if ok.any() else 1.0)
    w = w / w.sum()
    corner = np.outer(f0 == 0, f1 == 1)
    if corner.any():
        c = CLEAN_PRIOR if clean is None else clean
        w = (1 - c) * w + c * corner
    return w


def jeffreys_mass(grid: Sequence[float] | np.ndarray, step: float = STEP) -> np.ndarray:
    """Mass of Beta(1/2, 1/2) on each grid point's cell ``[g - step/2, g + step/2]`` (clipped
    to [0, 1]): U-shaped, so a clean predicate leads without a point mass of its own."""
    g = np.asarray(grid, float)

    def cdf(x: np.ndarray) -> np.ndarray:
        return 2 / np.pi * np.arcsin(np.sqrt(np.clip(x, 0.0, 1.0)))
    return cdf(g + step / 2) - cdf(g - step / 2)


def entropy_bits(z: np.ndarray) -> np.ndarray:
    """Binary entropy in bits, elementwise, with 0 log 0 = 0."""
    z = np.clip(np.asarray(z, float), 0.0, 1.0)
    inner = (z > 0) & (z < 1)
    zi = np.where(inner, z, 0.5)
    return np.where(inner, -(zi * np.log2(zi) + (1 - zi) * np.log2(1 - zi)), 0.0)


def grid_loglik(bad: np.ndarray, good: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """log P(bad failures, good passes | rate) for every count row x every grid rate."""
    b, g = bad[:, None].astype(float), good[:, None].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.where(b > 0, b * np.log(rates), 0.0)
                + np.where(g > 0, g * np.log1p(-rates), 0.0))


def summary(grid: np.ndarray, w: np.ndarray) -> dict:
    """Mean and 90% interval of a distribution ``w`` over ``grid``."""
    cdf = np.cumsum(w) / w.sum()
    return {"mean": round(float(grid @ w / w.sum()), 4),
            "p05": float(grid[int((cdf >= 0.05 - 1e-12).argmax())]),
            "p95": float(grid[int((cdf >= 0.95 - 1e-12).argmax())])}


def _loglik(bad: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Binomial log-likelihood at the maximum (rate = bad / total), elementwise; 0 when empty."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(total > 0, bad / np.maximum(total, 1), 0.0)
        good = total - bad
        out = np.where(bad > 0, bad * np.log(np.where(rate > 0, rate, 1.0)), 0.0)
        out += np.where(good > 0, good * np.log(np.where(rate < 1, 1 - rate, 1.0)), 0.0)
    return out


def _cuts(bads: np.ndarray, totals: np.ndarray, k: np.ndarray | int):
    """Per row and cut j = 1..n: (statistic, lo, hi), ``[lo, hi)`` the side holding the cut."""
    b = np.atleast_2d(np.asarray(bads, dtype=float))
    t = np.asarray(totals, dtype=float)
    rows, m = b.shape
    cb = np.concatenate([np.zeros((rows, 1)), np.cumsum(b, axis=1)], axis=1)   # [S, m+1]
    ct = np.concatenate([[0.0], np.cumsum(t)])                                  # [m+1]
    kk = np.broadcast_to(np.asarray(k), (rows,))[:, None]                      # [S, 1]
    j = np.arange(1, m)[None, :]                                               # [1, m-1]
    lo, hi = np.where(j < kk, 0, kk), np.where(j < kk, kk, m)                  # [S, m-1]
    r = np.arange(rows)[:, None]
    b_left, t_left = cb[r, j] - cb[r, lo], ct[j] - ct[lo]
    b_right, t_right = cb[r, hi] - cb[r, j], ct[hi] - ct[j]
    stat = 2 * (_loglik(b_left, t_left) + _loglik(b_right, t_right)
                - _loglik(b_left + b_right, t_left + t_right))
    return np.where(j != kk, stat, 0.0), lo, hi


def split_statistic(bads: np.ndarray, totals: np.ndarray, k: np.ndarray | int) -> np.ndarray:
    """Largest two-segment likelihood-ratio statistic inside either side of culprit ``k``.

    ``bads``: shape ``(S, n + 1)`` (or ``(n + 1,)``), failures per position; ``totals``: runs per
    position, ``(n + 1,)``; ``k``: one culprit per row, 0..n+1. A cut at ``j`` (1..n, not ``k``)
    compares positions ``[lo, j)`` with ``[j, hi)`` of the side that contains both.
    """
    if np.shape(totals)[0] < 2:
        return np.zeros(np.atleast_2d(bads).shape[0])
    return _cuts(bads, totals, k)[0].max(axis=1)


def describe_misfit(goods: np.ndarray, bads: np.ndarray, k: int) -> str:
    """The worst cut of culprit ``k``'s sides, as runs failed on either side of it."""
    goods, bads = np.asarray(goods), np.asarray(bads)
    totals = goods + bads
    if len(totals) < 2:
        return "too few positions to cut"
    stat, lo, hi = _cuts(bads, totals, k)
    i = int(stat[0].argmax())
    j, lo, hi = i + 1, int(lo[0, i]), int(hi[0, i])
    return (f"{bads[lo:j].sum()}/{totals[lo:j].sum()} runs failed at positions {lo}..{j - 1} "
            f"but {bads[j:hi].sum()}/{totals[j:hi].sum()} at {j}..{hi - 1}, all on one side of "
            f"the likeliest culprit {k}")


def _side_deviance(bads: np.ndarray, totals: np.ndarray, k: np.ndarray, before: np.ndarray,
                   after: np.ndarray) -> np.ndarray:
    """Per row: twice the log-likelihood ratio of each side's own pooled failure rate against
    the drawn rate of that side, summed over the two sides."""
    b = np.atleast_2d(bads).astype(float)
    cb = np.concatenate([np.zeros((b.shape[0], 1)), np.cumsum(b, axis=1)], axis=1)
    ct = np.concatenate([[0.0], np.cumsum(np.asarray(totals, float))])
    r = np.arange(b.shape[0])
    out = np.zeros(b.shape[0])
    for bad, tot, rate in ((cb[r, k], ct[k], before),
                           (cb[:, -1] - cb[r, k], ct[-1] - ct[k], after)):
        good = tot - bad
        with np.errstate(divide="ignore", invalid="ignore"):
            at = (np.where(bad > 0, bad * np.log(rate), 0.0)
                  + np.where(good > 0, good * np.log1p(-rate), 0.0))
        out += 2 * (_loglik(bad, tot) - at)
    return out


def fit_pvalue(goods: np.ndarray, bads: np.ndarray, joint: np.ndarray, before: np.ndarray,
               after: np.ndarray, draws: int = 1000) -> float:
    """Posterior predictive p-value of ``split_statistic`` plus the sides' deviance.

    ``joint``: the posterior over ``(k, before rate, after rate)``, shape ``(n + 2, len(before),
    len(after))``, with ``before``/``after`` the rate grids. The discrepancy of a draw is the
    largest cut inside a side plus how far each side's pooled failure rate is from the drawn
    rate of that side: a side that holds a second step, or that fails at a rate the model does
    not allow, is far.
    """
    goods, bads = np.asarray(goods), np.asarray(bads)
    totals = goods + bads
    if (totals > 0).sum() < 2:
        return 1.0
    seed = np.concatenate([goods, bads]).astype(np.int64)
    rng = np.random.default_rng(np.abs(seed) % (2 ** 31))
    w = joint.ravel() / joint.sum()
    k, a, b = np.unravel_index(rng.choice(w.size, size=draws, p=w), joint.shape)
    f0, f1 = np.asarray(before)[a], np.asarray(after)[b]
    rate = np.where(np.arange(len(totals))[None, :] >= k[:, None], f1[:, None], f0[:, None])
    replay = rng.binomial(totals[None, :], rate)                         # [S, n+1]
    observed = np.broadcast_to(bads, replay.shape)

    def discrepancy(y: np.ndarray) -> np.ndarray:
        return split_statistic(y, totals, k) + _side_deviance(y, totals, k, f0, f1)
    return float((discrepancy(replay) >= discrepancy(observed) - 1e-9).mean())
