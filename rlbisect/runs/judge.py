"""The one judge of runs against GOOD's seed spread: ``rlbisect compare`` and the short-run
predicate both ask it, so a metric is treated alike wherever it is judged.

A run is a list of metric rows (:mod:`rlbisect.runs.read`). Each run is scored per metric
(:func:`score`); the scores of the runs at GOOD and at the other side go to the sequential
:class:`~rlbisect.runs.stats.Rule`:

* by default the whole dashboard: every metric both sides log except bookkeeping, any change
  beyond the spread is a behaviour change, the false-alarm rate held over all of them;
* or one named metric (or a list), in the direction that counts as a regression; a named metric
  is judged even when it looks like bookkeeping.

A metric asked for, or (on the whole dashboard) one every GOOD run logs, that the other side's
runs do not log is ``absent``: no verdict is given without it.

Bookkeeping is never judged unless named, because it moves with the machine or the seed, not with
the code: known by name (:func:`bookkeeping`: step counters, anything time-like, throughput, seeds,
``summary/``, ``config/``, ``args/``, ``hparams/``, ``system/`` and ``_``-prefixed keys) and by
behaviour (:func:`by_behaviour`: a value equal to its run's seed in every row, clock-like values,
one constant value in every row of every run on both sides).

A metric whose score (its last ``window`` rows) is finite in every one of GOOD's runs and
non-finite or not a number in any of the others is a regression by itself (the Rule is not
asked, :func:`what_went_wrong` says how); one that is already non-finite at GOOD is left out,
said so. Rows before the window do not count: a value that went inf once and came back (a
skipped mixed-precision overflow step) is the trainer working.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable

from rlbisect.metrics import ALIASES, is_timing, words
from rlbisect.runs.stats import Decision, Direction, Rule

Runs = dict[int, list[dict]]       # seed (or run index) -> that run's rows

#: Names of keys that count steps or measure the machine, never behaviour (the last part of a
#: key, lower case); a key with the word "seed" or a timing word (``train/step_time``) is one too.
BOOKKEEPING = frozenset({"step", "steps", "global_step", "epoch", "iteration", "iter", "total_flos",
                         "t", "ts", "wall", "clock", "seed", "random_seed"})
PREFIXES = ("summary/", "config/", "args/", "hparams/", "system/", "_")


def bookkeeping(key: str) -> bool:
    """Whether a key's name says it is bookkeeping (see the module docstring)."""
    k = key.lower()
    last = k.rsplit("/", 1)[-1]
    return last in BOOKKEEPING or k.startswith(PREFIXES) or is_timing(key) or not {"seed", "seeds"}.isdisjoint(words(key))


def fingerprint(rows: list[dict]) -> str:
    """A digest of what a run logged, bookkeeping left out: two runs of a deterministic trainer on
    one seed have the same one exactly when they reproduce each other (the measured search reads
    repeats by it: :mod:`rlbisect.bisect.measured_pairs`). Empty when it logged only bookkeeping."""
    kept = [{k: v for k, v in row.items() if not bookkeeping(k)} for row in rows]
    if not any(kept):
        return ""
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def not_numbers(rows: list[dict]) -> str | None:
    """What a run logged instead of numbers ("reward is a list, loss is a list"), when it logged
    metrics but not one finite number among them; else None."""
    seen: dict[str, str] = {}
    for row in rows:
        for k, v in row.items():
            if bookkeeping(k):
                continue
            if math.isfinite(v):
                return None
            seen.setdefault(k, getattr(v, "what", None) or ("NaN" if math.isnan(v) else "infinite"))
    if not seen:
        return None
    said = [f"{k} is {what}" for k, what in sorted(seen.items())]
    return ", ".join(said[:3]) + (f" (and {len(said) - 3} more)" if len(said) > 3 else "")


def no_spread(good: dict[int, list[dict]], seeds: list[int]) -> str | None:
    """Why GOOD's runs on ``seeds`` give no seed spread to judge against, or None. Runs that logged
    no number look alike whatever their seed: that is said as such, never as a seed-blind script."""
    odd = not_numbers(good[seeds[0]])
    if odd is not None:
        return (f"GOOD's run with seed {seeds[0]} logged no number: {odd}; each row needs one number "
                "per metric, one row per step")
    prints = {fingerprint(good[s]) for s in seeds}
    if len(prints) == 1 and "" not in prints:
        return (f"GOOD's runs on seeds {seeds[0]}-{seeds[-1]} logged the same numbers: the seed does not "
                "reach the training run (is {seed} passed on and used?), so there is no seed spread to "
                "judge against")
    return None


def by_behaviour(metric: str, good: Runs, other: Runs) -> str | None:
    """Why ``metric`` behaves as bookkeeping in these runs (keyed by seed), or None."""
    logged = {side: {seed: [r[metric] for r in rows if metric in r] for seed, rows in runs.items()}
              for side, runs in (("good", good), ("other", other))}
    values = [x for side in logged.values() for xs in side.values() for x in xs]
    if not values or not all(math.isfinite(x) for x in values):
        return None
    if len({*values}) == 1:
        return f"the same value ({values[0]:g}) in every row of every run"
    seeds = [seed for side in logged.values() for seed in side]
    if len(set(seeds)) > 1 and all(x == seed for side in logged.values() for seed, xs in side.items()
                                   for x in xs):
        return "equal to its run's seed"
    if all(len(xs) > 1 and all(1e9 < x < 1e13 for x in xs) and xs == sorted(xs)
           for side in logged.values() for xs in side.values()):
        return "a clock (increasing epoch timestamps)"
    return None


def what_went_wrong(metric: str, runs: Runs) -> str:
    """How ``metric`` stopped being a finite number in ``runs``: the first such value, in words."""
    for seed, rows in runs.items():
        for i, row in enumerate(rows):
            x = row.get(metric)
            if x is not None and not math.isfinite(x):
                what = getattr(x, "what", None) or repr(float(x))
                return f"{what} at row {i} of run {seed}"
    return "not finite"


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
    those whose name says they are bookkeeping, in first-seen order."""
    runs = list(runs)
    if metrics:
        return list(metrics)
    seen: dict[str, None] = {}
    for rows in runs:
        for row in rows:
            seen.update(dict.fromkeys(row))
    present = [k for k in seen if all(any(k in r for r in rows) for rows in runs)]
    # a foreign name read under ours too (verl's critic/score/mean as reward) is judged once: twice,
    # it was counted twice in the family-wise error (a trainer logging both, differently, keeps both)
    def same(a: float | None, b: float) -> bool:
        return a == b or (a is not None and math.isnan(a) and math.isnan(b))

    def copied(k: str) -> bool:
        return k in ALIASES and all(same(r.get(ALIASES[k]), r[k]) for rows in runs for r in rows if k in r)
    return [k for k in present if not bookkeeping(k) and not copied(k)]


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
    went_nonfinite: dict[str, str] = field(default_factory=dict)  # finite at GOOD, not on the other side: how
    left_out: list[str] = field(default_factory=list)             # not finite at GOOD: not judged
    bookkeeping: dict[str, str] = field(default_factory=dict)     # metric -> why it was not judged

    @property
    def nothing_in_common(self) -> bool:
        return self.decision is None and not self.absent and not self.went_nonfinite


def judge(good: Runs, other: Runs, rule: Rule, question: Question) -> Judgement:
    """Judge ``other``'s runs against ``good``'s seed spread (see the module docstring)."""
    names = dashboard([*good.values(), *other.values()], question.asked)
    kept = {m: why for m in names if not question.asked and (why := by_behaviour(m, good, other))}
    names = [m for m in names if m not in kept]
    g, o = scores(good, names, question.window), scores(other, names, question.window)
    absent = [(m, "GOOD" if m not in g else "other") for m in question.asked or [] if m not in g or m not in o]
    # the whole dashboard: a metric every GOOD run logs that the others stopped logging (renamed,
    # or its logging line now raises) is no evidence of "nothing moved"
    absent += [(m, "other") for m in ([] if question.asked or not names else dashboard(good.values()))
               if m not in names and m not in kept and by_behaviour(m, good, {}) is None]
    if absent:
        return Judgement(None, g, o, absent=absent, bookkeeping=kept)
    # in the scored window only: a value that went inf once and came back (a skipped AMP overflow
    # step) is the trainer working, and read from any row it named whichever commit first drew it
    nonfinite = {m: what_went_wrong(m, other) for m in names
                 if m in g and m in o and finite(g[m]) and not finite(o[m])}
    left_out = [m for m, v in g.items() if not finite(v)]
    # A metric that went non-finite decides by itself, but the others are still judged: a user
    # reading the table needs to see the loss that moved beside the reward that went NaN.
    g = {m: v for m, v in g.items() if m not in left_out}
    rest = {m: v for m, v in g.items() if m not in nonfinite}
    decision = rule.judge(rest, o, question.sense) if set(rest) & set(o) else None
    return Judgement(decision, g, o, went_nonfinite=nonfinite, left_out=left_out, bookkeeping=kept)
