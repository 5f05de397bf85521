"""Verdicts from noisy measurements: did the probe's runs move beyond GOOD's seed spread?

The rule (pure, no I/O), for one metric or a whole dashboard of them:

* each metric's run scores at the probe are tested against GOOD's with Welch's t-test, one-sided
  when a direction is given (``lower``: lower is worse), two-sided for any change; on runs of the
  same seeds (``paired``, the short-run predicate's) also with the paired t-test on the per-seed
  differences (a move of at least :data:`PAIRED_FLOOR` spreads), the two sharing the threshold
  (:data:`PAIRED_SHARE`), so a move the same on every seed of a deterministic trainer is seen
  however wide the spread;
* the test is applied after k0 seeds and again each time seeds are added, up to a cap. With m
  metrics and L possible looks, a metric decides *bad* only when p < alpha / (m * L) (Bonferroni
  over metrics and looks), so the chance that a probe whose metrics all have GOOD's distribution
  is called bad is at most alpha over the whole sequence, however the metrics are correlated;
* good when even the most-moved metric is unremarkable: min p >= same_p / m; otherwise add seeds,
  and at the cap the verdict is "unknown" (the bisect skips the commit rather than guess).

With one metric this is the classic single-number rule; a dashboard pays for its m metrics in a
stricter per-metric threshold, which a metric that moved by several seed spreads clears at the
first look.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher", "change"]   # which change is a regression
PAIRED_FLOOR = 0.25  #: the smallest mean move, in GOOD's seed spreads, the paired test may call bad
PAIRED_SHARE = 0.2   #: the paired test's share of the false-alarm rate (Welch's keeps the rest)
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


def mean_sd(xs: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation) that neither overflow nor raise: the values are scaled by
    their largest size first (1e308 twice is a mean of 1e308, not inf); a non-finite value gives
    a non-finite answer instead of an error."""
    if not xs or not all(map(math.isfinite, xs)):
        return (math.fsum(xs) / len(xs) if xs else math.nan), math.nan
    scale = max(map(abs, xs)) or 1.0
    scaled = [x / scale for x in xs]
    sd = statistics.stdev(scaled) if len(xs) > 1 else 0.0
    return statistics.fmean(scaled) * scale, sd * scale


def welch_p(good: list[float], probe: list[float], direction: Direction = "lower") -> float:
    """p-value that the probe is worse than GOOD (direction "lower": lower values are worse).
    Scale-free, so it is computed on values scaled by the largest of both sides (no overflow)."""
    scale = max(map(abs, [*good, *probe])) or 1.0
    good, probe = [x / scale for x in good], [x / scale for x in probe]
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


def resolution(values: list[float]) -> float:
    """The step of the grid ``values`` lie on (1/64 for a share of 64 tasks), 0 for values on none:
    the largest g dividing every difference, by Euclid's algorithm to within 1e-9 of their range
    (on continuous values it falls under that at once)."""
    lo = min(values)
    tol = 1e-9 * ((max(values) - lo) or 1.0)
    g = 0.0
    for x in values:
        a, b = max(g, x - lo), min(g, x - lo)
        while b > tol:
            r = a % b
            a, b = b, 0.0 if b - r <= tol else r
        g = a
    return g if g > 1e3 * tol else 0.0


def paired_p(good: list[float], probe: list[float], direction: Direction = "lower", floor: float = PAIRED_FLOOR) -> float:
    """p-value of the per-seed differences (runs on the same seeds, in the same order): a move the
    same on every seed is seen however wide the seed spread, as Welch's test on the two sides cannot.
    A mean move smaller than ``floor`` of GOOD's seed standard deviations is no evidence here (p = 1):
    a consistent but tiny change (an epsilon, a reduction order) is not a move beyond the spread.
    Valid on unpaired runs too (their differences are independent draws), with fewer degrees of
    freedom. A metric with levels (a pass rate over 64 tasks) has the variance of its rounding added
    (:func:`resolution`, g: g^2 / 6 per difference): three independent pairs two levels apart each
    are a coincidence there, not a move the same on every seed."""
    if len(good) != len(probe) or len(good) < 2:
        return 1.0
    scale = max(map(abs, [*good, *probe])) or 1.0
    d = [(b - a) / scale for a, b in zip(good, probe)]
    md, sd_good = statistics.fmean(d), statistics.stdev([x / scale for x in good])
    if abs(md) < floor * sd_good or md == 0.0:
        return 1.0
    diff = {"lower": -md, "higher": md, "change": abs(md)}[direction]
    gap = resolution([x / scale for x in [*good, *probe]])
    se = math.sqrt((statistics.variance(d) + gap * gap / 6) / len(d))
    if se <= 1e-12 * abs(md):   # the same move on every seed (a deterministic trainer), up to rounding
        return 0.0 if diff > 0 else 1.0
    p = t_sf(diff / se, len(d) - 1)
    return min(1.0, 2.0 * p) if direction == "change" else p


@dataclass(frozen=True)
class MetricTest:
    """One metric's evidence at one look: GOOD's and the probe's per-seed scores and the p-value."""

    metric: str
    good: list[float]
    probe: list[float]
    direction: Direction
    p: float
    by_seed: bool = False     # p is the paired test's (weighted to Welch's share), not Welch's

    @property
    def moved(self) -> float:
        """The probe's mean minus GOOD's (half of each, doubled: no overflow near the float limit)."""
        return 2 * (mean_sd(self.probe)[0] / 2 - mean_sd(self.good)[0] / 2)

    @property
    def spreads(self) -> float:
        """How many of GOOD's seed standard deviations it moved (inf when GOOD has no spread)."""
        sd = mean_sd(self.good)[1]
        return abs(self.moved) / sd if sd > 0 else (0.0 if self.moved == 0 else math.inf)

    def describe(self) -> str:
        way = "up" if self.moved > 0 else "down"
        size = f"{self.spreads:.1f} GOOD spreads" if math.isfinite(self.spreads) else "GOOD has no spread"
        paired = ", seed by seed" if self.by_seed else ""
        return (f"{self.metric} {mean_sd(self.probe)[0]:.4g} vs {mean_sd(self.good)[0]:.4g}"
                f" at GOOD: {way} {abs(self.moved):.3g} ({size}, p={self.p:.2g}{paired})")


@dataclass(frozen=True)
class Decision:
    """The verdict at one look, with every metric's test, most-moved (smallest p) first."""

    verdict: Judgement
    tests: list[MetricTest]
    threshold: float            # p below which a metric decides "bad" at this look

    @property
    def p(self) -> float:
        return self.tests[0].p if self.tests else 1.0

    @property
    def deciding(self) -> list[MetricTest]:
        """The metrics that moved beyond the spread (those that make the verdict bad)."""
        return [t for t in self.tests if t.p < self.threshold]


@dataclass(frozen=True)
class Rule:
    """The sequential rule; `looks` is how many times it may be applied."""

    alpha: float = 0.05     # overall false-positive rate (bad on a commit no worse than GOOD)
    same_p: float = 0.3     # the smallest p at or above same_p / m: nothing moved (good)
    k0: int = 3             # seeds at the first look
    step: int = 2           # seeds added per further look
    max_seeds: int = 9      # the cap
    paired: bool = False    # both sides ran the same seeds, in order: Welch's and the paired test (PAIRED_SHARE)

    @property
    def looks(self) -> int:
        return 1 + math.ceil(max(0, self.max_seeds - self.k0) / self.step)

    def schedule(self) -> list[int]:
        """Seed counts at each look: k0, k0 + step, ..., max_seeds."""
        return [min(self.k0 + i * self.step, self.max_seeds) for i in range(self.looks)]

    def judge(self, good: dict[str, list[float]], probe: dict[str, list[float]],
              direction: Direction | dict[str, Direction] = "change") -> Decision:
        """One look at every metric both sides have: bad if any moved beyond the spread,
        good if none is even suspicious, else unknown (add seeds; at the cap: give up)."""
        share = PAIRED_SHARE if self.paired else 0.0

        def test(m: str, d: Direction) -> MetricTest:
            # the paired p weighted to Welch's scale: each is held to its share of the threshold
            p = welch_p(good[m], probe[m], d)
            q = min(1.0, paired_p(good[m], probe[m], d) * (1 - share) / share) if share else 1.0
            return MetricTest(m, good[m], probe[m], d, min(p, q), q < p)
        tests = sorted((test(m, direction if isinstance(direction, str) else direction.get(m, "change"))
                        for m in good if m in probe), key=lambda t: (t.p, t.metric))
        m = max(1, len(tests))
        threshold = self.alpha * (1 - share) / (self.looks * m)
        if not tests:   # nothing to compare is no evidence either way
            verdict: Judgement = "unknown"
        elif tests[0].p < threshold:
            verdict = "bad"
        elif tests[0].p >= self.same_p / m:
            verdict = "good"
        else:
            verdict = "unknown"
        return Decision(verdict, tests, threshold)

    def decide(self, good: list[float], probe: list[float], direction: Direction) -> tuple[Judgement, float]:
        """(verdict, p) for a single metric at one look."""
        d = self.judge({"metric": good}, {"metric": probe}, direction)
        return d.verdict, d.p
