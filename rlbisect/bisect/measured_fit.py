"""The numbers behind measured.py: normal scores, and each side's likelihood and predictive.

Pure: numpy only. Runs enter only through their pooled ranks: :func:`normal_scores`
maps them to Blom's normal scores, so heavy tails, outliers and the metric's scale do not matter.
Each side of a split (the runs before the culprit, the runs from it on) is then normal in those
scores with its own unknown mean and variance under a Normal-Inverse-Gamma prior
(``sigma^2 ~ IG(A0, B0)``, ``mean ~ N(0, sigma^2 / KAPPA0)``): :func:`side_loglik` is a side's
marginal likelihood in closed form, :func:`side_predictive` its predictive of one more score (a
Student t) as weights on :data:`GRID`. Sums over positions come in as counts, sums and sums of
squares, so every split is one vectorised call.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_gammaln = np.vectorize(math.lgamma, otypes=[float])
_ndtri = np.vectorize(NormalDist().inv_cdf, otypes=[float])

A0, B0, KAPPA0 = 1.0, 0.5, 0.5   #: per side: sigma^2 ~ IG(A0, B0), mean ~ N(0, sigma^2 / KAPPA0)
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
