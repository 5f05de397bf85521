"""What verl's actor declares it does, read from its settings (never from the code that does it).

verl 0.9.1's `ppo_loss` (verl/workers/utils/losses.py) with the vanilla policy loss
(`compute_policy_loss_vanilla`), stated as an :class:`~rlbisect.check.spec.Objective`:

    per token      -min(r A, clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high) A), and for A < 0
                   the dual clip at clip_ratio_c (3: never binds at check 19's ratios, 0.55-1.8)
    loss_agg_mode  token-mean -> token_mean; seq-mean-token-mean -> seq_mean_token_mean;
                   token-sum -> token_sum (dp_size 1: no normaliser); seq-mean-token-sum ->
                   seq_mean_token_sum; seq-mean-token-sum-norm -> the same over loss_scale_factor
                   (Dr. GRPO's constant; without one, verl divides by the padded horizon
                   loss_mask.shape[-1], a per-call number, so stated as a kind only)
    KL loss        + kl_loss_coef * agg(kl_penalty(logp, ref, kl_loss_type)), same aggregation;
                   kl/k1 -> k1, mse/k2 -> k2, low_var_kl/k3 -> k3 (clamped to [-10, 10]: the
                   checks' log-ratios stay far inside); "abs" and the straight-through "+" forms
                   have no Objective field
    entropy        - entropy_coeff * agg(entropy of softmax(logits / temperature)), same aggregation
    advantages     grpo, grpo_vectorized: (r - group mean) / (group std + 1e-6), or r - group mean
                   without norm_adv_by_std_in_grpo; rloo, rloo_vectorized: leave-one-out; every
                   other estimator has no Objective.advantages value
"""

from __future__ import annotations

from typing import Any

from rlbisect.check.spec import Objective

AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean", "token-sum": "token_sum",
               "seq-mean-token-sum": "seq_mean_token_sum", "seq-mean-token-sum-norm": "seq_mean_token_sum"}
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
KL_TYPES = ("kl", "k1", "mse", "k2", "low_var_kl", "k3", "abs", "k1+", "k3+", "low_var_kl+")
GROUP_ESTIMATORS = {"grpo": None, "grpo_vectorized": None, "rloo": "loo", "rloo_vectorized": "loo"}
#: the estimators that run from outcome rewards alone (no critic values, no baselines, no extra config)
ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
              "reinforce_plus_plus_baseline", "opo", "gpg")
ADV_EPS = 1e-6              # compute_grpo_outcome_advantage's `epsilon`

ACCUMULATION = "accumulated = one-pass gradient"
PADDING = "loss invariant to padding"
GROUP_LOCAL = "advantages depend only on their own group"
GROUP_MEAN = "group advantage mean = 0"
KL_PULL = "KL term pulls toward the reference"
#: estimators that whiten over the whole batch (core_algos: `masked_whiten` over every row)
BATCH_WHITENED = ("reinforce_plus_plus", "reinforce_plus_plus_baseline")


def objective(s: dict) -> "tuple[Objective | str, str]":
    """(the declared objective, why it is only a kind string: "" when stated exactly) at settings ``s``
    (the demo's: loss_agg_mode, adv_estimator, norm_adv_by_std_in_grpo, use_kl_loss, kl_loss_type,
    kl_loss_coef, entropy_coeff, temperature, clip_ratio_low/high)."""
    why = []
    mode, est = s["loss_agg_mode"], s["adv_estimator"]
    norm = s.get("loss_scale_factor") if mode == "seq-mean-token-sum-norm" else 1.0
    if mode not in AGGREGATION:
        why.append(f"loss_agg_mode {mode!r} (no Objective aggregation)")
    elif norm is None:
        why.append("loss_agg_mode 'seq-mean-token-sum-norm' without loss_scale_factor divides by the padded "
                   "horizon, a per-call number (Objective.sum_norm is one number)")
    if s["use_kl_loss"] and s["kl_loss_type"] not in KL:
        why.append(f"kl_loss_type {s['kl_loss_type']!r} (no Objective.kl_estimator value: "
                   f"{'straight-through k2 gradient' if s['kl_loss_type'].endswith('+') else 'abs'})")
    if est not in GROUP_ESTIMATORS:
        why.append(f"adv_estimator {est!r} (no Objective.advantages value)")
    if why:
        return "ppo-clip", "; ".join(why)
    adv: Any = GROUP_ESTIMATORS[est] or ("group_mean_std" if s["norm_adv_by_std_in_grpo"] else "group_mean")
    return Objective(kind="ppo-clip", clip_low=float(s["clip_ratio_low"]), clip_high=float(s["clip_ratio_high"]),
                     aggregation=AGGREGATION[mode], sum_norm=float(norm),  # type: ignore[arg-type]
                     kl_coef=float(s["kl_loss_coef"]) if s["use_kl_loss"] else 0.0,
                     kl_estimator=KL.get(s["kl_loss_type"], "k3"),  # type: ignore[arg-type]
                     entropy_coef=float(s["entropy_coeff"]), temperature=float(s["temperature"]),
                     advantages=adv, adv_eps=ADV_EPS), ""


def by_design(s: dict) -> dict[str, str]:
    """The checks verl fails on purpose at settings ``s``, each with verl's reason."""
    out = {}
    if s["loss_agg_mode"] == "seq-mean-token-sum-norm" and s.get("loss_scale_factor") is None:
        out[PADDING] = ("seq-mean-token-sum-norm divides by loss_mask.shape[-1] when loss_scale_factor is "
                        "None (agg_loss's documented fallback: set loss_scale_factor to a constant), so "
                        "padding the responses changes the loss")
    if s["use_kl_loss"] and KL.get(s["kl_loss_type"]) == "k1":
        # check 11 says n/a for a declared k1; an undeclared objective (another estimator or
        # aggregation) keeps the same estimator, so the same reason is given here
        out[KL_PULL] = ("kl_loss_type k1 (log ratio): its sampled gradient has mean 0 at the sampler's policy, "
                        "so it need not pull toward the reference on one batch")
    if s["adv_estimator"] in BATCH_WHITENED:
        why = (f"{s['adv_estimator']} whitens the advantages over the whole batch (core_algos: "
               "masked_whiten over every row), a documented choice: groups are coupled and a group's "
               "mean is not 0")
        out[GROUP_LOCAL] = out[GROUP_MEAN] = why
    elif s["adv_estimator"] == "opo":
        out[GROUP_MEAN] = ("opo's baseline is the group's length-weighted mean reward (core_algos: "
                           "sum(len * r) / sum(len)), so a group's advantages need not average to 0")
    elif s["adv_estimator"] == "gpg":
        out[GROUP_LOCAL] = ("gpg scales every advantage by alpha = batch size / rows with a non-zero reward "
                            "(core_algos: compute_gpg_outcome_advantage), so one group's rewards move the others'")
    return out


#: Settings at which every identity still holds for the demo: checks 6, 18, 19, 20 run at it too. One
#: variant holding them all: temperature != 1 (verl scales the logits in `prepare_model_outputs`),
#: an entropy bonus, the k1 KL estimator, another aggregation, and dynamic batch size with a token
#: budget that splits the rows into micro-batches of unequal sizes.
VARIANTS: dict[str, dict[str, Any]] = {
    "temperature 0.7, entropy 0.01, k2, seq-mean-token-mean, dynamic bsz": {
        "temperature": 0.7, "entropy_coeff": 0.01, "kl_loss_type": "mse",
        "loss_agg_mode": "seq-mean-token-mean", "use_dynamic_bsz": True, "max_token_len": 28},
}
