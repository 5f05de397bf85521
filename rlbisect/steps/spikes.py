"""Detectors over the per-step metric stream: they name the RL signal that moved, and why.

A training loop logs one row per step (keys from `rlbisect.metrics`). `DetectorSet.update(step, row)`
returns the hits of that step; the snapshot hook saves the step when the list is not empty. Loss and
grad norm alone are the wrong things to watch in GRPO (its loss is about 0 by design), so the
defaults watch the signals that move before the reward does:

* `mad`      a value far above its own running median, in multiples of the running MAD
             (median absolute deviation), e.g. `grad_norm`; robust to heavy-tailed RL statistics.
* `ceiling`  an absolute bound; the only kind that can fire at step 0, before any history exists
             (a learning rate ten times too high shows as a huge `approx_kl` on the very first step).
* `stuck`    signals exactly at their trivial value for k consecutive steps, e.g. `clip_frac == 0`
             and `ratio_max == 1` (old log-probs recomputed after the update: PPO is a no-op).
* `nonfinite` NaN or Inf in any numeric value of the row.

Every detector is edge-triggered: it fires when its condition starts and stays silent until the
condition has cleared, so a run broken from step 0 yields one hit per detector, not one per step.
Pure: no I/O, no torch. All default numbers live in `SpikeConfig` below.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlbisect.metrics import METRICS


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


def _known(name: str) -> str:
    # A misspelt signal would make its detector silently never fire: refuse it up front.
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; names come from rlbisect.metrics.METRICS")
    return name


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MadRule(_Rule):
    """Fire when `value - median > k * max(MAD, rel_floor * |median|)` over the last `window` steps."""

    signal: str = Field(description="metric name from rlbisect.metrics")
    k: float = Field(10.0, gt=0, description="how many MADs above the running median count as a spike")
    window: int = Field(100, ge=3, description="steps of history the median and MAD are taken over")
    warmup: int = Field(8, ge=3, description="steps of history needed before the rule may fire")
    rel_floor: float = Field(1.0, ge=0, description="MAD floor as a share of |median|; at 1.0 a "
                             "spike needs at least (1 + k) x the running median, however steady the signal")
    min_value: float = Field(0.0, ge=0, description="values at or below this never fire "
                             "(a noise floor, e.g. float round-off)")

    @field_validator("signal")
    @classmethod
    def _name(cls, v: str) -> str:
        return _known(v)


class CeilingRule(_Rule):
    """Fire when the value exceeds an absolute bound."""

    signal: str = Field(description="metric name from rlbisect.metrics")
    above: float = Field(description="fire when value > above")
    why: str = Field("", description="likely cause, appended to the hit message")

    @field_validator("signal")
    @classmethod
    def _name(cls, v: str) -> str:
        return _known(v)


class StuckRule(_Rule):
    """Fire when every listed signal sits exactly at its trivial value for `k` consecutive steps.

    A step where any listed signal is absent resets the count, so `kl_ref` (logged only when
    kl_coef > 0) is judged only while it is present.
    """

    name: str = Field(description="short rule name used in the hit's detector field")
    values: dict[str, float] = Field(description="metric name -> the exact trivial value it must equal")
    k: int = Field(4, ge=1, description="consecutive steps before the rule fires")
    why: str = Field("", description="likely cause, appended to the hit message")

    @field_validator("values")
    @classmethod
    def _names(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("a stuck rule needs at least one signal")
        return {_known(name): val for name, val in v.items()}


class SpikeConfig(_Rule):
    """The detector set. `SpikeConfig()` is the default; every number a healthy run must pass under.

    Calibrated on healthy reference-trainer runs (13 seeds, 24-48 steps): logp_gap <= 1e-7,
    approx_kl <= 0.037, grad_norm <= 1.74 and <= 6.2x its running median, clip_frac exactly 0 in
    many steps with ratio_max > 1, kl_ref > 0 from step 0 when kl_coef > 0.
    """

    # No approx_kl rule by default: as a policy converges its median approx_kl collapses (healthy
    # reference runs reach 400x their running median, at 0.037), so median multiples measure
    # convergence, not spikes; the absolute ceiling below watches it instead.
    mad: list[MadRule] = Field(default_factory=lambda: [
        MadRule(signal="grad_norm"),  # healthy reference runs reach 6x their running median
        # logp_gap is float noise (~1e-8) in a correct fp32 trainer; only a real jump may fire.
        MadRule(signal="logp_gap", min_value=1e-6),
    ], description="running median/MAD spike rules")
    ceilings: list[CeilingRule] = Field(default_factory=lambda: [
        CeilingRule(signal="logp_gap", above=1e-3,
                    why="sampler and trainer disagree on log-probs (mask shift, temperature, precision?)"),
        CeilingRule(signal="approx_kl", above=0.05,  # healthy max 0.037; lr 1e-2 gives 0.15 at step 0
                    why="the update moved the policy far in one step (learning rate too high?)"),
    ], description="absolute bounds; the only rules that can fire at step 0")
    stuck: list[StuckRule] = Field(default_factory=lambda: [
        # Needs more than one optimizer step per batch: with epochs=1, minibatches=1 the ratio is 1
        # by construction, and this rule should be removed.
        StuckRule(name="no_clipping", values={"clip_frac": 0.0, "ratio_max": 1.0}, k=4,
                  why="the ratio never leaves 1: are old log-probs recomputed after the update?"),
        StuckRule(name="kl_ref_zero", values={"kl_ref": 0.0}, k=3,
                  why="the KL term has no effect: is the reference model the policy itself?"),
    ], description="trivial-value streak rules")
    nonfinite: bool = Field(True, description="fire on NaN or Inf in any numeric value of the row")


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
        if len(self.history) >= r.warmup:
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
        self.rule, self.streak = rule, 0

    def update(self, step: int, row: Mapping[str, Any]) -> list[Hit]:
        r = self.rule
        at_trivial = all(_number(row.get(name)) == val for name, val in r.values.items())
        self.streak = self.streak + 1 if at_trivial else 0
        if self.streak != r.k:  # fire once, on the k-th step of a streak
            return []
        cond = " and ".join(f"{name} == {val:g}" for name, val in r.values.items())
        why = f" ({r.why})" if r.why else ""
        signal = "+".join(r.values)
        value = next(iter(r.values.values())) if len(r.values) == 1 else None
        return [Hit(f"stuck:{r.name}", signal, step, value, f"{cond} for {r.k} steps{why}")]


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
        ds: list[Detector] = [MadSpike(r) for r in config.mad]
        ds += [Ceiling(r) for r in config.ceilings]
        ds += [Stuck(r) for r in config.stuck]
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
