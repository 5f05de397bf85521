"""The numbers behind measured.py: normal scores, and each side's likelihood and predictive.

Pure: numpy only. Runs enter only through their pooled ranks: :func:`normal_scores`
maps them to Blom's normal scores, so heavy tails, outliers and the metric's scale do not matter.
Each side of a split (the runs before the culprit, the runs from it on) is then normal in those
scores with its own unknown mean and variance under a Normal-Inverse-Gamma prior
(``sigma^2 ~ IG(A0, B0)``, ``mean ~ N(0, sigma^2 / KAPPA0)``): :func:`side_loglik` is a side's
marginal likelihood in closed form, :func:`side_predictive` its predictive of one more score (a
Student t) as weights on :data:`GRID`. Sums over positions come in as counts, sums and sums of
squares, so every split is one vectorised call.

Ranks do not see how far apart two sides are: however large the move, the runs either side of it
are neighbours in rank. :func:`values_posterior` is the second view, on the values themselves in
seed spreads (the spread between runs of one commit): each side normal with its own mean, one
variance for both, so an outlier widens it for both sides and makes the view less sure, not more.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_gammaln = np.vectorize(math.lgamma, otypes=[float])
_ndtri = np.vectorize(NormalDist().inv_cdf, otypes=[float])

A0, B0, KAPPA0 = 1.0, 0.5, 0.5   #: per side: sigma^2 ~ IG(A0, B0), mean ~ N(0, sigma^2 / KAPPA0)
VALUES_KAPPA0 = 0.1              #: the values' view: each side's mean ~ N(0, sigma^2 / 0.1), sigma^2 shared
GRID = np.linspace(-4.0, 4.0, 161)   #: scores on which the predictive is integrated


def normal_scores(values: np.ndarray) -> np.ndarray:
    """Blom normal scores of ``values`` by their pooled ranks (ties share their mean rank)."""
    v = np.asarray(values, float)
    n = len(v)
    if n == 0:
        return v
    order = np.argsort(v, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(1, n + 1)
    sv = v[order]
    starts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
    ends = np.r_[starts[1:], n]
    for s, e in zip(starts, ends):
        if e - s > 1:
            ranks[order[s:e]] = (s + 1 + e) / 2
    return _ndtri((ranks - 0.375) / (n + 0.25))


def position_sums(scores: np.ndarray, positions: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Counts, sums and square sums of ``scores`` over positions ``< j``, for j = 0..n+1."""
    def prefix(w):
        return np.r_[0.0, np.cumsum(np.bincount(positions, weights=w, minlength=n + 1))]
    return prefix(np.ones_like(scores)), prefix(scores), prefix(scores * scores)


def side_loglik(m: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Log marginal likelihood of sides with ``m`` runs, score sums ``s`` and square sums ``q``."""
    m = np.asarray(m, float)
    safe = np.maximum(m, 1)
    ss = np.maximum(q - s * s / safe, 0.0)
    b = B0 + 0.5 * ss + KAPPA0 * s * s / safe / (2 * (KAPPA0 + m))
    out = (_gammaln(A0 + m / 2) - _gammaln(A0) + A0 * math.log(B0) - (A0 + m / 2) * np.log(b)
           + 0.5 * np.log(KAPPA0 / (KAPPA0 + m)) - m / 2 * math.log(2 * math.pi))
    return np.where(m > 0, out, 0.0)


def side_predictive(m: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Each side's predictive of one more score on :data:`GRID`, as weights summing to 1,
    shape ``(len(m), len(GRID))`` (a Student t; the prior's own when a side has no runs)."""
    m = np.asarray(m, float)[:, None]
    s, q = np.asarray(s, float)[:, None], np.asarray(q, float)[:, None]
    safe = np.maximum(m, 1)
    b = B0 + 0.5 * np.maximum(q - s * s / safe, 0.0) + KAPPA0 * s * s / safe / (2 * (KAPPA0 + m))
    a, kap = A0 + m / 2, KAPPA0 + m
    loc, scale2 = s / kap, b * (kap + 1) / (a * kap)
    nu = 2 * a
    logd = -(nu + 1) / 2 * np.log1p((GRID[None, :] - loc) ** 2 / (nu * scale2)) - 0.5 * np.log(scale2)
    d = np.exp(logd - logd.max(axis=1, keepdims=True))
    return d / d.sum(axis=1, keepdims=True)


def small_move(before: tuple, after: tuple, delta: float, higher: bool) -> np.ndarray:
    """Per split, the posterior that the mean score moved by less than ``delta`` the way asked
    (up if ``higher``, else down), from each side's (count, sum, square sum): the difference of the
    sides' posterior means, its t (variance nu / (nu - 2) times its scale) taken as a normal."""
    loc, var = [], []
    for m, s, q in (before, after):
        m = np.asarray(m, float)
        safe = np.maximum(m, 1)
        b = B0 + 0.5 * np.maximum(q - s * s / safe, 0.0) + KAPPA0 * s * s / safe / (2 * (KAPPA0 + m))
        a, kap = A0 + m / 2, KAPPA0 + m
        loc.append(s / kap)
        var.append(b / (a * kap) * np.where(2 * a > 2, 2 * a / np.maximum(2 * a - 2, 1e-9), 3.0))
    move = (loc[1] - loc[0]) if higher else (loc[0] - loc[1])
    z = (delta - move) / np.sqrt(var[0] + var[1])
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


def seed_spread(values: np.ndarray, positions: np.ndarray) -> float:
    """The spread between runs of one commit, robustly: the median |difference| of every two finite
    runs at the same position, over sqrt(2) x 0.6745 (a normal's); 0 without such a pair."""
    diffs = []
    for p in np.unique(positions):
        x = values[positions == p]
        if len(x) > 1:
            diffs.append(np.abs(x[:, None] - x[None, :])[np.triu_indices(len(x), 1)])
    return float(np.median(np.concatenate(diffs))) / (math.sqrt(2) * 0.6744897501960817) if diffs else 0.0


def shared_loglik(left: tuple, right: tuple) -> np.ndarray:
    """Log marginal likelihood of two sides, each (count, sum, square sum) per split: normal, each
    with its own mean (prior ``N(0, sigma^2 / VALUES_KAPPA0)``), one ``sigma^2 ~ IG(A0, B0)``."""
    logdet, spread, n = np.zeros(1), np.full(1, B0), np.zeros(1)
    for m, s, q in (left, right):
        m = np.asarray(m, float)
        safe = np.maximum(m, 1)
        logdet = logdet + 0.5 * np.log(VALUES_KAPPA0 / (VALUES_KAPPA0 + m))
        spread = spread + 0.5 * np.where(m > 0, np.maximum(q - s * s / safe, 0.0)
                                         + VALUES_KAPPA0 * s * s / safe / (VALUES_KAPPA0 + m), 0.0)
        n = n + m
    return (logdet + _gammaln(A0 + n / 2) - math.lgamma(A0) + A0 * math.log(B0)
            - (A0 + n / 2) * np.log(spread) - n / 2 * math.log(2 * math.pi))


def values_posterior(values: np.ndarray, positions: np.ndarray, log_prior: np.ndarray) -> np.ndarray | None:
    """Posterior of NONE (index 0) and each culprit 1..n from the finite values in seed spreads
    around their median; None while no commit has two finite runs that differ (crashed runs count
    in the ranks only)."""
    keep = np.isfinite(values)
    v, pos = values[keep], positions[keep]
    spread = seed_spread(v, pos) if len(v) else 0.0
    if not spread > 0:
        return None
    n = len(log_prior) - 1
    m, s, q = position_sums((v - np.median(v)) / spread, pos, n)
    k = np.arange(1, n + 1)
    none = (m[-1:], s[-1:], q[-1:])
    ll = np.r_[shared_loglik(none, (0.0, 0.0, 0.0)),
               shared_loglik((m[k], s[k], q[k]), (m[-1] - m[k], s[-1] - s[k], q[-1] - q[k]))]
    lp = log_prior + ll
    post = np.exp(lp - lp.max())
    return post / post.sum()


def information_gain(p: np.ndarray, m: np.ndarray, s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Expected nats learned about the culprit from one more score at each position 0..n, from the
    posterior ``p`` (NONE first) and the prefix sums: the mutual information of the culprit and the
    score under each hypothesis's predictive, on :data:`GRID`."""
    n = len(p) - 1
    k = np.arange(1, n + 1)
    left = side_predictive(m[k], s[k], q[k])                                  # [k-1, g]
    right = side_predictive(m[-1] - m[k], s[-1] - s[k], q[-1] - q[k])
    whole = side_predictive(m[-1:], s[-1:], q[-1:])[0]
    pk = p[1:, None]
    jl, jr = pk * left, pk * right
    with np.errstate(divide="ignore", invalid="ignore"):
        xl = np.where(jl > 0, jl * np.log(jl), 0.0).sum(axis=1)
        xr = np.where(jr > 0, jr * np.log(jr), 0.0).sum(axis=1)
    jw = p[0] * whole
    xw = float(np.where(jw > 0, jw * np.log(np.maximum(jw, 1e-300)), 0.0).sum())
    # a run at i is on the right (bad) side for culprits k <= i, the left side for k > i
    cr = np.vstack([np.zeros(len(GRID)), np.cumsum(jr, axis=0)])               # [i, g]: k <= i
    cl = np.vstack([np.cumsum(jl[::-1], axis=0)[::-1], np.zeros(len(GRID))])   # [i, g]: k > i
    mix = cr + cl + jw[None, :]
    joint_term = np.r_[0.0, np.cumsum(xr)] + np.r_[np.cumsum(xl[::-1])[::-1], 0.0] + xw
    with np.errstate(divide="ignore", invalid="ignore"):
        hmix = -np.where(mix > 0, mix * np.log(mix), 0.0).sum(axis=1)
        hk = -float(np.where(p > 0, p * np.log(p), 0.0).sum())
    gain = np.maximum(hk + hmix + joint_term, 0.0)   # I(k; y) = H(k) + H(y) - H(k, y)
    return gain


def skipped_block(post: np.ndarray, skipped: set[int], need: float) -> tuple[int, ...] | None:
    """Culprits glued together by skipped commits, once they hold ``need`` together: a run at
    position i tells k <= i from k > i, so a skipped i joins culprits i and i + 1."""
    blocks: list[tuple[int, ...]] = []
    cur: list[int] = []
    for k in range(1, len(post)):
        cur.append(k)
        if k not in skipped:
            blocks.append(tuple(cur))
            cur = []
    blocks.append(tuple(cur))   # empty when n is not skipped: no block
    return next((b for b in blocks if len(b) > 1 and post[list(b)].sum() >= need), None)
