"""Verdicts from noisy measurements: is the probe's metric worse than GOOD's, beyond the seed spread?

The rule (pure, no I/O):

* Welch's t-test of the probe's per-seed scores against GOOD's, one-sided in the "worse" direction
  (two-sided when any change counts);
* it is applied after k0 seeds and again each time seeds are added, up to a cap. Each of the m
  possible looks uses alpha / m (Bonferroni), so the chance of calling a commit *bad* when its
  metric has GOOD's distribution is at most alpha over the whole sequence;
* bad when p < alpha / m; good when p >= same_p (the probe is plausibly not worse); otherwise add
  seeds, and at the cap the verdict is "unknown" (the bisect skips the commit rather than guess).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher", "change"]   # which change is a regression
Judgement = Literal["good", "bad", "unknown"]   # unknown: add seeds (at the cap: skip)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def welch_p(good: list[float], probe: list[float], direction: Direction = "lower") -> float:
    """p-value that the probe is worse than GOOD (direction "lower": lower values are worse)."""
    mg, mp = statistics.fmean(good), statistics.fmean(probe)
    vg = statistics.variance(good) / len(good) if len(good) > 1 else 0.0
    vp = statistics.variance(probe) / len(probe) if len(probe) > 1 else 0.0
    se2 = vg + vp
    diff = {"lower": mg - mp, "higher": mp - mg, "change": abs(mp - mg)}[direction]
    if se2 == 0.0:   # no spread at all (e.g. identical code and matched seeds)
        return 0.0 if diff > 0 else 1.0
    t = diff / math.sqrt(se2)
    df = se2 ** 2 / ((vg ** 2 / (len(good) - 1) if len(good) > 1 else 0.0) +
                     (vp ** 2 / (len(probe) - 1) if len(probe) > 1 else 0.0))
    p = t_sf(t, df)
    return min(1.0, 2.0 * p) if direction == "change" else p


@dataclass(frozen=True)
class Rule:
    """The sequential rule; `looks` is how many times it may be applied."""

    alpha: float = 0.05     # overall false-positive rate (bad on a commit no worse than GOOD)
    same_p: float = 0.3     # p at or above this: not worse (good)
    k0: int = 3             # seeds at the first look
    step: int = 2           # seeds added per further look
    max_seeds: int = 9      # the cap

    @property
    def looks(self) -> int:
        return 1 + math.ceil(max(0, self.max_seeds - self.k0) / self.step)

    def schedule(self) -> list[int]:
        """Seed counts at each look: k0, k0 + step, ..., max_seeds."""
        return [min(self.k0 + i * self.step, self.max_seeds) for i in range(self.looks)]

    def decide(self, good: list[float], probe: list[float], direction: Direction) -> tuple[Judgement, float]:
        """(verdict, p) at one look; "unknown" asks for more seeds (at the cap: give up)."""
        p = welch_p(good, probe, direction)
        if p < self.alpha / self.looks:
            return "bad", p
        if p >= self.same_p:
            return "good", p
        return "unknown", p
