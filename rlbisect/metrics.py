"""Every dashboard metric, named and defined once.

A training loop writes one JSON row per step whose keys come from `METRICS`; detectors, plots,
the bisect's short-run predicate and replay comparisons all read the same names. The four groups
follow the rule "a metric earns its place when some failure moves it before the reward does":

* outcome      what the optimizer is paid for, and the independent check on it;
* behavior     how the reward was earned (a skill or a shortcut);
* optimizer    the health of the update itself;
* consistency  quantities that are a fixed value in a correct trainer: any visible value is a bug.

Wall-clock values are the only non-deterministic numbers a row may carry, and only under keys
that name a time or a rate per unit of time (`is_timing`: `step_time`, `elapsed_s`,
`tokens_per_sec`, `throughput`), so that two runs with one seed compare equal on everything else.
Keys are read word by word (`words`), never by substring: `env/sentiment` holds "time" and
`reward_per_step` holds "per_s", and both are behaviour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    group: str
    doc: str


_TABLE = [
    # outcome
    ("reward", "outcome", "mean training reward of the step's episodes (what the optimizer sees)"),
    ("pass_rate", "outcome", "share of the step's episodes that submitted code passing the hidden tests"),
    ("eval_pass", "outcome", "held-out hidden-test pass rate (evaluation steps only; own generator)"),
    # behavior
    ("reads", "behavior", "`read` calls per episode"),
    ("tests", "behavior", "`test` calls per episode"),
    ("edits", "behavior", "`edit` calls per episode"),
    ("malformed", "behavior", "unparsable calls per episode"),
    ("hardcode", "behavior", "share of episodes that used the `hardcode_tests` exploit"),
    ("submitted", "behavior", "share of episodes that called `submit`"),
    ("turns", "behavior", "policy calls per episode"),
    ("length", "behavior", "policy tokens per episode"),
    ("length_pass", "behavior", "policy tokens per passing episode"),
    ("length_fail", "behavior", "policy tokens per failing episode"),
    # optimizer health
    ("entropy", "optimizer", "mean policy entropy on action tokens (nats)"),
    ("approx_kl", "optimizer", "((ratio - 1) - log ratio) averaged over action tokens and minibatches"),
    ("clip_frac", "optimizer", "share of action tokens where the PPO clip was active"),
    ("ratio_max", "optimizer", "largest ratio pi/pi_old over action tokens, mean over minibatches"),
    ("ratio_min", "optimizer", "smallest ratio pi/pi_old over action tokens, mean over minibatches"),
    ("grad_norm", "optimizer", "global gradient norm before clipping, mean over minibatches"),
    ("loss", "optimizer", "the loss the optimizer minimized, mean over minibatches"),
    ("zero_adv_frac", "optimizer", "share of groups whose rewards are all equal (no gradient)"),
    ("zero_adv_pass", "optimizer", "share of groups that are flat because every episode passed"),
    ("zero_adv_fail", "optimizer", "share of groups that are flat because every episode failed"),
    ("kl_ref", "optimizer", "KL to the frozen reference on action tokens (only when kl_coef > 0)"),
    # consistency
    ("logp_gap", "consistency", "mean |sampler logp - trainer logp| on trained tokens"),
    ("logp_gap_max", "consistency", "max |sampler logp - trainer logp| on trained tokens"),
    ("prob_gap", "consistency", "mean |sampler p - trainer p| on trained tokens (verl's rollout_probs_diff)"),
    ("loss_tokens", "consistency", "action-mask tokens per episode that the loss trains on"),
    ("frozen_moved", "consistency", "1 when a module the snapshot hook watches as frozen (the KL reference) "
     "changed since the step before, else 0 (added by the hook to what its detectors see)"),
]

METRICS: dict[str, Metric] = {name: Metric(name, group, doc) for name, group, doc in _TABLE}

#: Other trainers' logged names for the same quantities, read as ours without a `--metric-map`
#: (their own names stay readable too). Only where the quantity is the same: verl's
#: `actor/ppo_kl` is the mean of -log ratio, not `approx_kl`, and `critic/rewards/mean` may
#: include an in-reward KL penalty, so neither is mapped.
FOREIGN: dict[str, dict[str, str]] = {
    "verl": {"critic/score/mean": "reward", "response_length/mean": "length", "actor/pg_clipfrac": "clip_frac",
             "actor/entropy": "entropy", "actor/grad_norm": "grad_norm", "actor/kl_loss": "kl_ref", "actor/loss": "loss",
             "training/rollout_probs_diff_mean": "prob_gap"},
    "trl": {"frac_reward_zero_std": "zero_adv_frac"},
}
#: Each foreign name -> ours, whatever the trainer.
ALIASES: dict[str, str] = {theirs: ours for names in FOREIGN.values() for theirs, ours in names.items()}
GROUPS = ("outcome", "behavior", "optimizer", "consistency")

# What a dashboard shows by default under the reward panel, per group.
DEFAULT_PANELS = ("logp_gap", "clip_frac", "entropy", "reads", "zero_adv_frac", "grad_norm")


def by_group(group: str) -> list[str]:
    """Metric names of one group, in table order."""
    return [m.name for m in METRICS.values() if m.group == group]


#: Words that make a key a clock, a duration or a speed (see the module docstring).
TIMING_WORDS = frozenset({"time", "times", "timing", "timings", "timestamp", "timestamps", "elapsed", "duration",
                          "durations", "runtime", "second", "seconds", "sec", "secs", "ms", "throughput", "fps",
                          "sps", "tps"})
PER_TIME = frozenset({"s", "sec", "secs", "second", "seconds", "ms", "min", "minute", "hour", "hr"})


def words(key: str) -> list[str]:
    """A key's words, lower case: split at every non-alphanumeric and at camelCase
    (``train/stepTime_ms`` -> train, step, time, ms)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def is_timing(key: str) -> bool:
    """Wall-clock keys are excluded from every determinism and replay comparison."""
    ws = words(key)
    return any(w in TIMING_WORDS for w in ws) or any(a == "per" and b in PER_TIME for a, b in zip(ws, ws[1:]))


def comparable(row: dict) -> dict:
    """The part of a row that must reproduce bit for bit."""
    return {k: v for k, v in row.items() if not is_timing(k)}
