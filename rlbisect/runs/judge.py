"""The one judge of runs against GOOD's seed spread: ``rlbisect compare`` and the short-run
predicate both ask it, so a metric is treated alike wherever it is judged.

A run is a list of metric rows (:mod:`rlbisect.runs.read`). Each run is scored per metric
(:func:`score`); the scores of the runs at GOOD and at the other side go to the sequential
:class:`~rlbisect.runs.stats.Rule`:

* by default the whole dashboard: every metric both sides log (step counters and wall-clock
  keys left out), any change beyond the spread is a behaviour change, the false-alarm rate held
  over all of them;
* or one named metric, in the direction that counts as a regression.

A metric that is finite in every one of GOOD's runs and non-finite in any of the others is a
regression by itself (the Rule is not asked); one that is already non-finite at GOOD is left out,
said so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable

from rlbisect.metrics import is_timing
from rlbisect.runs.stats import Decision, Direction, Rule

Runs = dict[int, list[dict]]       # seed (or run index) -> that run's rows

#: Keys that count steps or measure the machine, never behaviour: left out of the default
#: dashboard (as is every key with "time" in it, see :func:`rlbisect.metrics.is_timing`).
BOOKKEEPING = frozenset({"step", "steps", "global_step", "epoch", "iteration", "iter", "_step",
                         "total_flos"})


def bookkeeping(key: str) -> bool:
    k = key.lower().rsplit("/", 1)[-1]
    return k in BOOKKEEPING or is_timing(k) or "per_second" in k or k.endswith("_per_s")


def score(rows: list[dict], metric: str, window: int) -> float:
    """A run's score for ``metric``: the mean of its last ``window`` logged values, or the last
    value alone when it is logged on fewer than half of the rows (an evaluation metric)."""
    logged = [r[metric] for r in rows if metric in r]
    if not logged:
        raise KeyError(f"metric {metric!r} is not in the run's rows "
                       f"(have: {', '.join(sorted(rows[-1])) if rows else 'no rows'})")
    sparse = 2 * len(logged) < len(rows)
    return statistics.fmean(logged[-1:] if sparse else logged[-window:])


def dashboard(runs: Iterable[list[dict]], metrics: list[str] | None = None) -> list[str]:
    """The metrics to judge: ``metrics`` if given, else every key logged in every run except
    step counters and wall-clock values, in first-seen order."""
    runs = list(runs)
    if metrics:
        return list(metrics)
    seen: dict[str, None] = {}
    for rows in runs:
        for row in rows:
            seen.update(dict.fromkeys(row))
    present = [k for k in seen if all(any(k in r for r in rows) for rows in runs)]
    return [k for k in present if not bookkeeping(k)]


def scores(runs: Runs, metrics: list[str], window: int) -> dict[str, list[float]]:
    """{metric: [score per run, in seed order]} for the metrics every run logged."""
    seeds = sorted(runs)
    out = {}
    for m in metrics:
        try:
            out[m] = [score(runs[s], m, window) for s in seeds]
        except KeyError:
            continue
    return out


def finite(values: Iterable[float]) -> bool:
    return all(map(math.isfinite, values))


@dataclass(frozen=True)
class Question:
    """What to judge: one ``metric`` (in ``direction``), a list of ``metrics``, or (neither) the
    whole dashboard; a run's score is the mean of its last ``window`` rows."""

    metric: str | None = None
    metrics: list[str] | None = None
    direction: Direction | None = None
    window: int = 4

    @property
    def asked(self) -> list[str] | None:
        return [self.metric] if self.metric else self.metrics

    @property
    def sense(self) -> Direction:
        """The direction the Rule tests: one metric's, or a change either way on a dashboard."""
        return (self.direction or "lower") if self.metric else "change"


@dataclass
class Judgement:
    """The judge's answer for one look at the runs."""

    decision: Decision | None                       # None: a short cut below decided
    good: dict[str, list[float]] = field(default_factory=dict)    # GOOD's scores per metric
    other: dict[str, list[float]] = field(default_factory=dict)   # the other side's
    absent: list[tuple[str, str]] = field(default_factory=list)   # (metric asked for, side lacking it)
    went_nonfinite: list[str] = field(default_factory=list)       # finite at GOOD, not on the other side
    left_out: list[str] = field(default_factory=list)             # not finite at GOOD: not judged

    @property
    def nothing_in_common(self) -> bool:
        return self.decision is None and not self.absent and not self.went_nonfinite


def judge(good: Runs, other: Runs, rule: Rule, question: Question) -> Judgement:
    """Judge ``other``'s runs against ``good``'s seed spread (see the module docstring)."""
    names = dashboard([*good.values(), *other.values()], question.asked)
    g, o = scores(good, names, question.window), scores(other, names, question.window)
    absent = [(m, "GOOD" if m not in g else "other") for m in question.asked or [] if m not in g or m not in o]
    if absent:
        return Judgement(None, g, o, absent=absent)
    nonfinite = [m for m in names if m in g and m in o and finite(g[m]) and not finite(o[m])]
    if nonfinite:
        return Judgement(None, g, o, went_nonfinite=nonfinite)
    left_out = [m for m, v in g.items() if not finite(v)]
    g = {m: v for m, v in g.items() if m not in left_out}
    if not set(g) & set(o):
        return Judgement(None, g, o, left_out=left_out)
    return Judgement(rule.judge(g, o, question.sense), g, o, left_out=left_out)
