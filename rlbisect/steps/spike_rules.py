"""The spike detectors' rules and their defaults: one documented config model, `SpikeConfig`.

Each rule is a pydantic model naming the metric it watches (names from `rlbisect.metrics`, checked
up front: a misspelt signal would never fire) and the numbers it fires at; `SpikeConfig()` holds
every default, calibrated on healthy TinyAgent runs, and `SpikeConfig.for_trainer` adapts them to a
trainer's shape. The detectors that apply them are in `rlbisect.steps.spikes`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlbisect.metrics import METRICS

# Calibrated on 24 healthy TinyAgent runs of 48 steps (benchmarks/bench_detector_false_alarms.py:
# 6 seeds x default, kl_coef 0.1, temperature 0.7, seq_mean_token_mean): grad_norm rose at most 4
# steps in a row; the median of 4 consecutive approx_kl values reached at most 12.8x the run's first
# 4 steps' median (a policy sharpening moves further per update) and single values 0.075. Re-checked on the harder TinyAgent of
# issue 14 (the same 24 runs, 128 episodes per step): approx_kl <= 0.011, 4-step approx_kl medians
# <= 1.6x the first 4's, grad_norm <= 3.16, a single-step spike of 17x its running median (below).
TREND_K, TREND_FACTOR = 6, 3.0
KL_GROWTH, KL_FLOOR = 25.0, 1e-3
KL_CEILING = 0.1


def _known(name: str) -> str:
    # A misspelt signal would make its detector silently never fire: refuse it up front.
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; names come from rlbisect.metrics.METRICS")
    return name


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SignalRule(_Rule):
    """A rule that watches one metric."""

    signal: str = Field(description="metric name from rlbisect.metrics")

    @field_validator("signal")
    @classmethod
    def _name(cls, v: str) -> str:
        return _known(v)


class MadRule(_SignalRule):
    """Fire when `value - median > k * max(MAD, rel_floor * |median|)` over the last `window` steps."""

    k: float = Field(10.0, gt=0, description="how many MADs above the running median count as a spike")
    window: int = Field(100, ge=3, description="steps of history the median and MAD are taken over")
    warmup: int = Field(8, ge=3, description="steps of history needed before the median/MAD test applies; "
                        "inside the warm-up only a jump of early_jump x the median so far fires")
    early_jump: float = Field(100.0, gt=1, description="inside the warm-up: a value this many times the "
                              "median of the steps so far fires (a 1000x spike at step 5 is saved)")
    rel_floor: float = Field(1.0, ge=0, description="MAD floor as a share of |median|; at 1.0 a "
                             "spike needs at least (1 + k) x the running median, however steady the signal")
    min_value: float = Field(0.0, ge=0, description="values at or below this never fire "
                             "(a noise floor, e.g. float round-off)")


class CeilingRule(_SignalRule):
    """Fire when the value exceeds an absolute bound."""

    above: float = Field(description="fire when value > above")
    why: str = Field("", description="likely cause, appended to the hit message")


class StuckRule(_Rule):
    """Fire when every listed signal sits exactly at its telling value in `k` of the last `within`
    steps (by default `within = k`: k consecutive steps).

    A step where any listed signal is absent counts as not stuck, so `kl_ref` (logged only when
    kl_coef > 0) is judged only while it is present.
    """

    name: str = Field(description="short rule name used in the hit's detector field")
    values: dict[str, float] = Field(description="metric name -> the exact trivial value it must equal")
    k: int = Field(4, ge=1, description="steps at the value before the rule fires")
    within: int | None = Field(None, ge=1, description="...out of the last WITHIN steps (default: k, "
                               "consecutive)")
    why: str = Field("", description="likely cause, appended to the hit message")

    @model_validator(mode="after")
    def _window(self) -> "StuckRule":
        if self.within is not None and self.within < self.k:
            raise ValueError(f"within ({self.within}) must be at least k ({self.k})")
        return self

    @field_validator("values")
    @classmethod
    def _names(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("a stuck rule needs at least one signal")
        return {_known(name): val for name, val in v.items()}


class TrendRule(_SignalRule):
    """Fire when the signal rose on each of the last `k` steps and is now `factor` x the value the
    climb started from."""

    k: int = Field(6, ge=2, description="consecutive rises")
    factor: float = Field(3.0, gt=1, description="the climb's end over its start")
    why: str = Field("", description="likely cause, appended to the hit message")


class RelativeRule(_SignalRule):
    """Fire when the median of the last `recent` values exceeds `factor` x the run's own early
    level, the median of its first `baseline` logged values: a sustained growth, in units of the
    run itself (a single healthy outlier moves neither median)."""

    baseline: int = Field(4, ge=1, description="first logged values that set the early level")
    recent: int = Field(4, ge=1, description="last values whose median is compared")
    factor: float = Field(5.0, gt=1, description="how many times the early level counts as grown")
    min_value: float = Field(0.0, ge=0, description="values at or below this never fire")
    why: str = Field("", description="likely cause, appended to the hit message")


class SpikeConfig(_Rule):
    """The detector set. `SpikeConfig()` is the default; every number a healthy run must pass under.

    Calibrated on healthy reference-trainer runs (13 seeds, 24-48 steps, then 24 more runs of 48
    steps over four settings): logp_gap <= 1e-7, approx_kl <= 0.075, grad_norm <= 1.74 and <= 6.2x
    its running median, clip_frac exactly 0 in many steps with ratio_max > 1, kl_ref > 0 from
    step 0 when kl_coef > 0.
    """

    # No approx_kl rule by default: as a policy converges its median approx_kl collapses (healthy
    # reference runs reach 400x their running median, at 0.037), so median multiples measure
    # convergence, not spikes; the absolute ceiling below watches it instead.
    mad: list[MadRule] = Field(default_factory=lambda: [
        # Healthy TinyAgent runs reach 17x their running median on a single step (issue 14's
        # TinyAgent, kl_coef 0.1, seed 1, step 26): 20 MADs, floored at the median, fire above 21x.
        MadRule(signal="grad_norm", k=20.0),
        # logp_gap is float noise (~1e-8) in a correct fp32 trainer; only a real jump may fire.
        MadRule(signal="logp_gap", min_value=1e-6),
    ], description="running median/MAD spike rules")
    ceilings: list[CeilingRule] = Field(default_factory=lambda: [
        CeilingRule(signal="logp_gap", above=1e-3,
                    why="sampler and trainer disagree on log-probs (mask shift, temperature, precision?)"),
        CeilingRule(signal="approx_kl", above=KL_CEILING,  # healthy max 0.075; lr 1e-2 gives 0.15 at step 0
                    why="the update moved the policy far in one step (learning rate too high?)"),
    ], description="absolute bounds; the only rules that can fire at step 0")
    stuck: list[StuckRule] = Field(default_factory=lambda: [
        # Needs more than one optimizer step per batch (see for_trainer): with one, the ratio is 1
        # by construction.
        StuckRule(name="no_clipping", values={"clip_frac": 0.0, "ratio_max": 1.0}, k=4,
                  why="the ratio never leaves 1: are old log-probs recomputed after the update?"),
        StuckRule(name="clip_saturated", values={"clip_frac": 1.0}, k=2,
                  why="every token clipped: ratio computed the wrong way round, or a stale or "
                      "mismatched old log-prob?"),
        # kl_ref is > 0 from the first minibatch step on in a correct trainer; zeros on every other
        # step (a reference refreshed from the policy, a KL skipped on some steps) are as telling.
        StuckRule(name="kl_ref_zero", values={"kl_ref": 0.0}, k=2, within=4,
                  why="the KL term has no effect: is the reference model the policy itself?"),
        # Only the snapshot hook knows (it fingerprints the modules passed as `frozen`). One change
        # can be a scheduled refresh (TRL's ref_model_sync_steps); two in four steps is a reference
        # that follows the policy, and a KL term that holds nothing back.
        StuckRule(name="frozen_moved", values={"frozen_moved": 1.0}, k=2, within=4,
                  why="a module declared frozen (the KL reference) changed between steps: is it "
                      "reloaded from the policy?"),
    ], description="telling-value rules: k of the last `within` steps")
    trends: list[TrendRule] = Field(default_factory=lambda: [
        TrendRule(signal="grad_norm", k=TREND_K, factor=TREND_FACTOR,
                  why="gradients growing step after step: a loss scale, accumulation or "
                      "optimizer-state fault, or a learning rate too high?"),
    ], description="steady-climb rules")
    relative: list[RelativeRule] = Field(default_factory=lambda: [
        RelativeRule(signal="approx_kl", baseline=4, factor=KL_GROWTH, min_value=KL_FLOOR,
                     why="each update moves the policy further than at the start: learning rate, "
                         "clipping or advantage scale?"),
    ], description="rules relative to the run's own first steps")
    nonfinite: bool = Field(True, description="fire on NaN or Inf in any numeric value of the row")

    @classmethod
    def for_trainer(cls, updates_per_batch: int, **overrides) -> "SpikeConfig":
        """The defaults for a trainer that takes ``updates_per_batch`` optimizer steps per sampled
        batch: with one, the ratio is exactly 1 by design and "no clipping ever" is not a fault."""
        config = cls(**overrides)
        if updates_per_batch > 1:
            return config
        return config.model_copy(update={"stuck": [r for r in config.stuck if r.name != "no_clipping"]})
