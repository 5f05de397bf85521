"""rlbisect's search for ``bench_flaky.py --known-rates``: told each case's true failure rates,
all of it (``both``) or one half: the choice of the next run (``choice``) or the posteriors its
stop reads (``stop``), the other half weighing every rate pair as shipped. Which half pays for
not knowing the rates, in runs and in wrong answers (docs/noisy.md)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from flaky_choice import CHOICES
from rlbisect.bisect import bayes
from rlbisect.bisect.simulate import simulate
from rlbisect.errors import Verdict


class ToldSearch(bayes.FlakySearch):
    """rlbisect's search with the true rates told to one half of it: ``choice`` (which run
    next) or ``stop`` (the posteriors the stop reads); the other half weighs every rate pair."""

    def __init__(self, n: int, rates: tuple[float, float], part: str):
        super().__init__(n)
        self.part = part
        self.truth = bayes.FlakySearch(n, before_grid=[rates[0]], after_grid=[rates[1]],
                                       rate_weights=np.ones((1, 1)))

    def observe(self, position: int, verdict: Verdict) -> None:
        super().observe(position, verdict)
        self.truth.observe(position, verdict)

    def information_gain(self) -> np.ndarray:
        return self.truth.information_gain() if self.part == "choice" else \
            super().information_gain()

    def culprit_posterior(self) -> np.ndarray:
        return self.truth.culprit_posterior() if self.part == "stop" else \
            super().culprit_posterior()


#: ``bench_flaky.py --choice``: another rule for the next run (:mod:`flaky_choice`), or "" (shipped)
CHOICE = ""


def search_rlbisect(n: int, fails: Callable[[int], bool], confidence: float,
                    rates: tuple[float, float], known: str) -> bayes.Decision:
    """rlbisect's whole search against ``fails`` (position -> bool); ``known``: "" (the rates
    unknown, as shipped), "both", "choice" or "stop" (the true ``rates`` told to that part)."""
    def verdict(pos: int) -> Verdict:
        return "bad" if fails(pos) else "good"
    if CHOICE:
        search: bayes.FlakySearch = CHOICES[CHOICE](n)
    elif known in ("", "both"):
        told = (dict(before_grid=[rates[0]], after_grid=[rates[1]], rate_weights=np.ones((1, 1)))
                if known else {})
        return simulate(n, verdict, confidence, **told).decision
    else:
        search = ToldSearch(n, rates, known)
    cap = bayes.default_max_runs(n)
    while (d := search.decide(confidence, cap)).status == "probe":
        assert d.probe is not None
        search.observe(d.probe, verdict(d.probe))
    return d
