"""Other rules for which run ``--flaky`` makes next, for ``bench_flaky.py --choice``: does the choice,
rather than the prior and the stop, hold the search back? Each is the shipped search
(:class:`rlbisect.bisect.bayes.FlakySearch`) with its choice replaced (``next_probe``, or the
``information_gain`` it maximises); the posterior, the stop and the fit check are the shipped ones.
Measured in docs/noisy.md (none kept).

* ``chernoff``: once a culprit k* has posterior 0.5 or more, the run whose outcome best tells k* from
  the rest (the largest Kullback-Leibler divergence between the run's outcome under k* and under the
  posterior's other culprits); before that, the shipped choice. Chernoff's rule for sequential tests.
* ``joint``: the most information about the culprit *and* both failure rates, not the culprit alone
  (the stop reads a posterior that the rates' uncertainty flattens).
* ``maxpost``: the run that raises the expected top posterior most, one run ahead (the shipped
  choice where no run raises it).
* ``ratesmean`` / ``ratesdraw``: the shipped information, but with one pair of rates for every
  culprit, the rates' posterior mean or a draw from their posterior (seeded by the run count), in
  place of each culprit's own: the choice with the rates told, using what is learned of them.
"""

from __future__ import annotations

import numpy as np

from rlbisect.bisect import bayes
from rlbisect.bisect.bayes_fit import entropy_bits


def _fail_rates(search: bayes.FlakySearch) -> tuple[np.ndarray, np.ndarray]:
    """(P(culprit = k), P(a run at i fails | k)) as ``[k]`` and ``[i, k]``."""
    c = search._update()
    i, k = np.arange(search.n + 1)[:, None], np.arange(search.n + 2)[None, :]
    return c["post"], np.where(i >= k, c["f1"][None, :], c["f0"][None, :])


def _best(score: np.ndarray, skipped: set[int]) -> int:
    score = score.copy()
    score[sorted(skipped)] = -np.inf
    return int(score.argmax())


class Chernoff(bayes.FlakySearch):
    def next_probe(self) -> int | None:
        p, m = _fail_rates(self)
        top = int(p.argmax())
        if p[top] < 0.5 or len(self.skipped) > self.n:
            return super().next_probe()
        rest = np.delete(p, top)
        mix = np.delete(m, top, axis=1) @ (rest / rest.sum())
        mk, eps = m[:, top], 1e-12
        kl = mk * np.log((mk + eps) / (mix + eps)) + (1 - mk) * np.log((1 - mk + eps) / (1 - mix + eps))
        return _best(kl, self.skipped)


class Joint(bayes.FlakySearch):
    def information_gain(self) -> np.ndarray:
        c = self._update()
        p, a, b, n = c["post"], c["f0"], c["f1"], self.n
        ha = c["cond"].sum(axis=2) @ entropy_bits(self.before)   # E[H(f0) | k]
        hb = c["cond"].sum(axis=1) @ entropy_bits(self.after)    # E[H(f1) | k]
        z = np.cumsum(p * b)[:n + 1] + (p @ a - np.cumsum(p * a)[:n + 1])
        noise = np.cumsum(p * hb)[:n + 1] + (p @ ha - np.cumsum(p * ha)[:n + 1])
        gain = np.maximum(entropy_bits(z) - noise, 0.0)
        gain[sorted(self.skipped)] = 0.0
        return gain


class MaxPosterior(bayes.FlakySearch):
    def next_probe(self) -> int | None:
        p, m = _fail_rates(self)
        expected = (p[None, :] * m).max(axis=1) + (p[None, :] * (1 - m)).max(axis=1)
        if len(self.skipped) > self.n or expected.max() <= p.max() + 1e-9:
            return super().next_probe()
        return _best(expected, self.skipped)


class RatesMean(bayes.FlakySearch):
    draw = False

    def information_gain(self) -> np.ndarray:
        c, j, n = self._update(), self.joint(), self.n
        if self.draw:
            w = j.sum(axis=0).ravel()
            a, b = np.unravel_index(np.random.default_rng(self.n_obs).choice(w.size, p=w / w.sum()), j.shape[1:])
            f0, f1 = self.before[a], self.after[b]
        else:
            f0, f1 = j.sum(axis=(0, 2)) @ self.before, j.sum(axis=(0, 1)) @ self.after
        bad = np.cumsum(c["post"])[:n + 1]          # P(a run at i is on the bad side)
        z = bad * f1 + (1 - bad) * f0
        noise = bad * entropy_bits(f1) + (1 - bad) * entropy_bits(f0)
        gain = np.maximum(entropy_bits(z) - noise, 0.0)
        gain[sorted(self.skipped)] = 0.0
        return gain


class RatesDraw(RatesMean):
    draw = True


CHOICES = {"chernoff": Chernoff, "joint": Joint, "maxpost": MaxPosterior, "ratesmean": RatesMean,
           "ratesdraw": RatesDraw}
