"""Detectors over the per-step metric stream: they name the RL signal that moved, and why.

A training loop logs one row per step (keys from `rlbisect.metrics`). `DetectorSet.update(step, row)`
returns the hits of that step; the snapshot hook saves the step when the list is not empty. Loss and
grad norm alone are the wrong things to watch in GRPO (its loss is about 0 by design), so the
defaults watch the signals that move before the reward does:

* `mad`      a value far above its own running median, in multiples of the running MAD
             (median absolute deviation), e.g. `grad_norm`; robust to heavy-tailed RL statistics.
             It needs `warmup` steps (8) of history; inside the warm-up only a jump of
             `early_jump` (100) times the median so far fires, so a 1000x spike at step 5 is saved.
* `ceiling`  an absolute bound; the only kind that can fire at step 0, before any history exists
             (a learning rate ten times too high shows as a huge `approx_kl` on the very first step).
* `stuck`    signals exactly at a telling value in k of the last n steps, e.g. `clip_frac == 0`
             and `ratio_max == 1` (old log-probs recomputed after the update: PPO is a no-op),
             `clip_frac == 1` (every token clipped), `kl_ref == 0` on every other step,
             `frozen_moved == 1` (the snapshot hook saw the frozen reference change) twice in 4 steps.
* `trend`    a signal that rose on each of the last k steps to a multiple of where the climb began
             (`grad_norm` creeping up: too slow for a spike rule, which absorbs level shifts).
* `relative` a signal several times the run's own early level, under any fixed ceiling
             (`approx_kl` 5x its first steps' median: the update grew, not the noise).
* `nonfinite` NaN or Inf in any numeric value of the row, from step 0 on (no warm-up).

Rules know the trainer's shape: with one optimizer step per batch the ratio is 1 by construction,
so `SpikeConfig.for_trainer(updates_per_batch=1)` leaves out the "no clipping ever" rule.

Every detector is edge-triggered: it fires when its condition starts and stays silent until the
condition has cleared, so a run broken from step 0 yields one hit per detector, not one per step.
Pure: no I/O, no torch. The rules and all default numbers live in `spike_rules.SpikeConfig`.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from rlbisect.steps.spike_rules import (CeilingRule, MadRule, RelativeRule, SpikeConfig, StuckRule,
                                        TrendRule)

__all__ = ["CeilingRule", "DetectorSet", "Hit", "MadRule", "RelativeRule", "SpikeConfig", "StuckRule",
           "TrendRule", "default_detectors"]


@dataclass(frozen=True)
class Hit:
    """One detector firing at one step."""

    detector: str  # e.g. "ceiling:approx_kl", "stuck:no_clipping", "nonfinite"
    signal: str  # the metric(s) it watched, "+"-joined when several
    step: int
    value: float | None  # the offending value (None for multi-signal rules)
    message: str  # one line a person can act on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Hit":
        value = d.get("value")
        return cls(str(d["detector"]), str(d["signal"]), int(d["step"]),
                   None if value is None else float(value), str(d["message"]))


def _number(v: Any) -> float | None:
    """The row value as a float, or None when it is not a plain number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


class Detector(Protocol):
    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]: ...


class MadSpike:
    def __init__(self, rule: MadRule) -> None:
        self.rule = rule
        self.history: deque[float] = deque(maxlen=rule.window)
        self.active = False

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r, x = self.rule, _number(row.get(self.rule.signal))
        if x is None or not math.isfinite(x):
            return []
        hits: list[Hit] = []
        spike = False
        if 0 < len(self.history) < r.warmup:         # the warm-up: only a jump no noise explains
            med = statistics.median(self.history)
            spike = x > r.early_jump * max(abs(med), r.min_value) > 0
            if spike and not self.active:
                hits.append(Hit(f"mad:{r.signal}", r.signal, step, x,
                                f"{r.signal} {x:.3g} > {r.early_jump:g} x the median {med:.3g} of the "
                                f"first {len(self.history)} steps (inside the warm-up)"))
        elif len(self.history) >= r.warmup:
            med = statistics.median(self.history)
            mad = statistics.median(abs(h - med) for h in self.history)
            floor = r.rel_floor * abs(med)
            spike = x > r.min_value and x - med > r.k * max(mad, floor, 1e-300)
            if spike and not self.active:
                used = f"MAD {mad:.2g}" if mad >= floor else f"MAD {mad:.2g} floored to {floor:.2g}"
                hits.append(Hit(f"mad:{r.signal}", r.signal, step, x,
                                f"{r.signal} {x:.3g} > {r.k:g} x MAD above running median {med:.3g} "
                                f"({used}, {len(self.history)} steps)"))
        self.active = spike
        # Spikes stay in the history: the median ignores them, and a lasting level shift is then
        # absorbed instead of firing forever.
        self.history.append(x)
        return hits


class Ceiling:
    def __init__(self, rule: CeilingRule) -> None:
        self.rule, self.active = rule, False

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r, x = self.rule, _number(row.get(self.rule.signal))
        over = x is not None and x > r.above  # NaN compares False: left to the nonfinite rule
        hits = []
        if over and not self.active:
            why = f" ({r.why})" if r.why else ""
            hits.append(Hit(f"ceiling:{r.signal}", r.signal, step, x,
                            f"{r.signal} {x:.3g} > ceiling {r.above:g}{why}"))
        self.active = over
        return hits


class Stuck:
    def __init__(self, rule: StuckRule) -> None:
        self.rule, self.active = rule, False
        self.recent: deque[bool] = deque(maxlen=rule.within or rule.k)

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r = self.rule
        self.recent.append(all(_number(row.get(name)) == val for name, val in r.values.items()))
        stuck = sum(self.recent) >= r.k
        fire, self.active = stuck and not self.active, stuck
        if not fire:
            return []
        cond = " and ".join(f"{name} == {val:g}" for name, val in r.values.items())
        span = f"{r.k} steps" if len(self.recent) == r.k else f"{sum(self.recent)} of the last {len(self.recent)} steps"
        why = f" ({r.why})" if r.why else ""
        value = next(iter(r.values.values())) if len(r.values) == 1 else None
        return [Hit(f"stuck:{r.name}", "+".join(r.values), step, value, f"{cond} for {span}{why}")]


class Trend:
    def __init__(self, rule: TrendRule) -> None:
        self.rule, self.active = rule, False
        self.climb: list[float] = []   # the current run of rises, from where it started

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r, x = self.rule, _number(row.get(self.rule.signal))
        if x is None or not math.isfinite(x):
            return []
        self.climb = self.climb + [x] if self.climb and x > self.climb[-1] else [x]
        rising = len(self.climb) > r.k and self.climb[0] > 0 and x >= r.factor * self.climb[0]
        fire, self.active = rising and not self.active, rising
        if not fire:
            return []
        why = f" ({r.why})" if r.why else ""
        return [Hit(f"trend:{r.signal}", r.signal, step, x, f"{r.signal} rose {len(self.climb) - 1} "
                    f"steps in a row, {self.climb[0]:.3g} -> {x:.3g} ({x / self.climb[0]:.1f}x){why}")]


class Relative:
    def __init__(self, rule: RelativeRule) -> None:
        self.rule, self.active = rule, False
        self.early: list[float] = []
        self.last: deque[float] = deque(maxlen=rule.recent)

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r, x = self.rule, _number(row.get(self.rule.signal))
        if x is None or not math.isfinite(x):
            return []
        if len(self.early) < r.baseline:
            self.early.append(x)
            return []
        self.last.append(x)
        level, now = statistics.median(self.early), statistics.median(self.last)
        grown = len(self.last) == r.recent and now > r.min_value and level > 0 and now > r.factor * level
        fire, self.active = grown and not self.active, grown
        if not fire:
            return []
        why = f" ({r.why})" if r.why else ""
        return [Hit(f"relative:{r.signal}", r.signal, step, now, f"{r.signal} {now:.3g} (median of "
                    f"the last {r.recent} steps) is {now / level:.1f}x its early level {level:.3g} "
                    f"(median of the first {r.baseline}){why}")]


class NonFinite:
    def __init__(self) -> None:
        self.active: set[str] = set()

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        bad = {k for k, v in row.items() if (x := _number(v)) is not None and not math.isfinite(x)}
        hits = [Hit("nonfinite", k, step, float(row[k]), f"{k} is {float(row[k])}")
                for k in sorted(bad - self.active)]
        self.active = bad
        return hits


class DetectorSet:
    """The detectors a run is watched by; feed it one row per step, in step order."""

    def __init__(self, detectors: list[Detector], config: SpikeConfig | None = None) -> None:
        self.detectors = detectors
        self.config = config

    @classmethod
    def from_config(cls, config: SpikeConfig) -> "DetectorSet":
        # absolute bounds first: when several fire on one step, the first hit is the plainest
        ds: list[Detector] = [Ceiling(r) for r in config.ceilings]
        ds += [MadSpike(r) for r in config.mad]
        ds += [Stuck(r) for r in config.stuck]
        ds += [Trend(r) for r in config.trends]
        ds += [Relative(r) for r in config.relative]
        if config.nonfinite:
            ds.append(NonFinite())
        return cls(ds, config)

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        return [hit for d in self.detectors for hit in d.update(step, row)]

    def scan(self, rows: list[Mapping[str, Any]]) -> list[Hit]:
        """Hits over a whole stream; a row's "step" key is used when present, else its index."""
        return [h for i, row in enumerate(rows) for h in self.update(int(row.get("step", i)), row)]


def default_detectors(config: SpikeConfig | None = None) -> DetectorSet:
    """A fresh detector set (state starts empty) from `config`, or from the defaults."""
    return DetectorSet.from_config(config or SpikeConfig())
