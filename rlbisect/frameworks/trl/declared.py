"""What a GRPOTrainer declares it does, read from its configuration (never from the code that does it):
the objective its `_compute_loss` means to compute, the checks it fails on purpose, and the settings
at which every identity still holds.

The objective is TRL 1.16's `_compute_loss` (trl/trainer/grpo_trainer.py) stated as an
:class:`~rlbisect.check.spec.Objective` where it can be stated exactly:

    loss_type   per_token_loss (token-level ratio r)        aggregation over the micro-batch's rows
    grpo        -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)   mean over rows of each row's token mean
    bnpo        as grpo                                     token mean over the micro-batch
    dapo        as grpo                                     token sum / the window's token count (a
                                                            token mean when one micro-batch is the window)
    cispo       -sg(min(r, eps_high)) A logp               as dapo
    sapo        -sigmoid(tau (r - 1)) 4 / tau A (tau by A's sign)   as grpo
    dr_grpo     as grpo                                     token sum / (rows x max_completion_length)
    vespo       -sg(phi(w)) A logp, w the sequence ratio     as dapo
                (VESPO's gamma weight: spec.Objective)
    luspo       as grpo, at a sequence-level ratio           mean over rows of each row's token sum
    importance_sampling_level="sequence" (GSPO): one ratio per row, exp of its mean token log-ratio
    + beta * k3(logp, ref_logp) per token, before aggregating (so aggregated as the policy term)
    - entropy_coef * token mean of the entropies TRL's LM head computed (grpo, bnpo, sapo, dr_grpo)
    top_entropy_quantile < 1: the policy term (and the bonus) only on the tokens at or above the
                entropy quantile of the micro-batch's trained tokens
    advantages  (r - group mean) / (group std + 1e-4) (scale_rewards="group"), r - group mean ("none"),
                (r - group mean) / (the generation batch's std + 1e-4) ("batch")

Where the loss cannot be stated in `Objective` the declaration keeps only its kind ("ppo-clip" for
the clipped loss types, else the loss type) with the reason (:func:`objective`): then checks 18-20
are n/a and say so. Each reason names the field `Objective` would need.
"""

from __future__ import annotations

import types
from typing import Any

from rlbisect.check.spec import Objective

# TRL's loss types whose objective is PPO's clipped surrogate (check 10 applies to these)
PPO_CLIP = {"grpo", "bnpo", "dr_grpo", "dapo", "luspo"}
OTHER_OBJECTIVES = {"cispo", "sapo", "vespo"}     # check 10 is n/a for these
AGGREGATION = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean", "cispo": "token_mean",
               "sapo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum", "vespo": "token_mean",
               "luspo": "seq_mean_token_sum"}
ENTROPY_BESIDE = {"grpo", "bnpo", "sapo", "dr_grpo", "luspo"}   # divided by the accumulation alone, as the bonus is
ADV_EPS = 1e-4            # `advantages / (std_rewards + 1e-4)` in _generate_and_score_completions
ADVANTAGES: dict[str, Any] = {"group": "group_mean_std", "none": "group_mean", "batch": "group_mean_batch_std"}

ACCUMULATION = "accumulated = one-pass gradient"
GROUP_LOCAL = "advantages depend only on their own group"
PER_MICROBATCH = {
    "bnpo": "bnpo normalizes each microbatch by its own token count (TRL's documented choice), so "
            "accumulated microbatches differ from one pass unless they hold equal token counts",
}


def setting(trainer, field: str, attribute: str = "", default: Any = None) -> Any:
    """A setting as configured (``trainer.args.<field>``), where this TRL's config has the field;
    else the trainer's ``attribute`` (or ``default``). TRL copies its config into attributes in
    ``__init__``, code under test like any other: the declaration reads past it."""
    if hasattr(trainer.args, field):
        return getattr(trainer.args, field)
    return getattr(trainer, attribute or field, default)


def entropy_bonus(trainer) -> bool:
    """TRL's entropy bonus is on (`entropy_coef != 0` or adaptive; absent before TRL had one)."""
    return bool(setting(trainer, "use_adaptive_entropy", "_entropy_bonus_enabled", False)
                or setting(trainer, "entropy_coef", default=0.0))


def objective(trainer) -> "tuple[Objective | str, str]":
    """(the declared objective, why it is only a kind string: "" when it is stated exactly)."""
    args, lt, beta = trainer.args, setting(trainer, "loss_type"), float(setting(trainer, "beta"))
    kind = "ppo-clip" if lt in PPO_CLIP else lt
    why = []
    if lt not in AGGREGATION:
        why.append(f"loss_type {lt!r} ({'its own objective' if lt not in PPO_CLIP else 'its normalizer'} "
                   "has no Objective field)")
    if getattr(args, "delta", None) is not None:
        why.append("delta (two-sided clipping: no Objective field)")
    if setting(trainer, "off_policy_mask_threshold") is not None:
        why.append("off_policy_mask_threshold (a sequence mask: no Objective field)")
    if setting(trainer, "use_vllm", default=False) and setting(trainer, "vllm_importance_sampling_correction",
                                                               default=False):
        why.append("vLLM importance-sampling correction (no Objective field)")
    if setting(trainer, "use_adaptive_entropy", default=False):
        why.append("use_adaptive_entropy (a coefficient its controller moves between steps: no Objective field)")
    elif entropy_bonus(trainer) and lt not in ENTROPY_BESIDE:
        why.append(f"the entropy bonus beside {lt!r}'s window normalizer (a token mean over each micro-batch "
                   "beside a token sum over the window: no one Objective aggregation in a run)")
    if beta != 0.0 and getattr(args, "use_bias_correction_kl", False):
        why.append("use_bias_correction_kl (the KL term times the importance ratio: no Objective field)")
    scale = _scale(trainer)
    if scale not in ADVANTAGES:
        why.append(f"scale_rewards={scale!r} (no Objective.advantages value)")
    if setting(trainer, "multi_objective_aggregation", default="sum_then_normalize") != "sum_then_normalize":
        why.append("multi_objective_aggregation='normalize_then_sum' (no Objective.advantages value)")
    if why:
        return kind, "; ".join(why)
    low = float(setting(trainer, "epsilon", "epsilon_low"))
    high = setting(trainer, "epsilon_high")      # None in the config: the same as epsilon (TRL's docs)
    return Objective(kind=kind, clip_low=low, clip_high=low if high is None else float(high),
                     aggregation=AGGREGATION[lt], kl_coef=beta, kl_estimator="k3",  # type: ignore[arg-type]
                     sum_norm=float(setting(trainer, "max_completion_length")) if lt == "dr_grpo" else 1.0,
                     temperature=float(setting(trainer, "temperature")),
                     entropy_coef=float(setting(trainer, "entropy_coef", default=0.0) or 0.0),
                     entropy_aggregation="token_mean",
                     advantages=ADVANTAGES[scale], adv_eps=ADV_EPS,
                     sapo_tau_pos=float(setting(trainer, "sapo_temperature_pos", default=1.0)),
                     sapo_tau_neg=float(setting(trainer, "sapo_temperature_neg", default=1.05)),
                     top_entropy_quantile=float(setting(trainer, "top_entropy_quantile", default=1.0)),
                     ratio_level=setting(trainer, "importance_sampling_level", default="token"),
                     vespo_pos=(float(setting(trainer, "vespo_k_pos", default=2.0)),
                                float(setting(trainer, "vespo_lambda_pos", default=3.0))),
                     vespo_neg=(float(setting(trainer, "vespo_k_neg", default=3.0)),
                                float(setting(trainer, "vespo_lambda_neg", default=2.0)))), ""


def _scale(trainer) -> Any:
    scale = setting(trainer, "scale_rewards", default="group")
    return "group" if scale is True else "none" if scale is False else scale   # older TRL: a bool


def by_design(trainer) -> dict[str, str]:
    """The checks this trainer fails on purpose, each with TRL's reason."""
    out, lt = {}, setting(trainer, "loss_type")
    if lt in PER_MICROBATCH:
        out[ACCUMULATION] = PER_MICROBATCH[lt]
    if _scale(trainer) == "batch" or \
            setting(trainer, "multi_objective_aggregation", default="sum_then_normalize") != "sum_then_normalize":
        out[GROUP_LOCAL] = ("TRL scales advantages by the whole batch's reward std (scale_rewards='batch', or "
                            "multi_objective_aggregation='normalize_then_sum'), a documented choice: a group's "
                            "rewards move every other group's advantages")
    if entropy_bonus(trainer):
        out[ACCUMULATION] = ("TRL's entropy bonus is a token mean over each micro-batch (`_compute_loss`: "
                             "`(entropies * mask).sum() / mask.sum() / accumulation`), so accumulated "
                             "micro-batches differ from one pass unless they hold equal token counts")
    if setting(trainer, "top_entropy_quantile", default=1.0) < 1.0:
        out[ACCUMULATION] = ("TRL trains only on the tokens above an entropy quantile it takes over each "
                             "micro-batch's own tokens (top_entropy_quantile), so accumulated micro-batches "
                             "differ from one pass")
    if shaping := truncated_sampling(trainer):
        why = (f"TRL samples from a distribution reshaped by {shaping} and trains on the model's own "
               "log-probs over the whole vocabulary: a known gap (huggingface/trl#6789), not a regression")
        out.update({name: why for name in SAMPLER_CHECKS})
    if setting(trainer, "sync_ref_model", default=False):
        out[REFERENCE] = ("sync_ref_model: TRL mixes the policy into the reference model every "
                          "ref_model_sync_steps (TR-DPO), a documented choice")
    return out


SAMPLER_CHECKS = ("sampler = trainer log-prob", "sampler = trainer log-prob, every step",
                  "old log-probs = the sampler's, every minibatch")
REFERENCE = "reference log-probs = the starting policy's"


def truncated_sampling(trainer) -> str:
    """The sampling settings that reshape what is sampled from (top_k, top_p, min_p,
    repetition_penalty), named; "" where there are none."""
    on = {"top_k": setting(trainer, "top_k") not in (None, 0, -1), "top_p": setting(trainer, "top_p", default=1.0) < 1,
          "min_p": bool(setting(trainer, "min_p")),
          "repetition_penalty": setting(trainer, "repetition_penalty", default=1.0) != 1}
    return ", ".join(name for name, active in on.items() if active)


#: Settings at which every identity still holds, for the demo trainer (`demo(**settings)`): the
#: step-0 checks that run at every setting (6, 18, 19, 20) exercise them. One variant holding them all
#: (each variant costs a trainer and a scoring of the probe batch): temperature != 1 reaches the
#: temperature TRL bakes into each model's fused LM head (the stored reference log-probs included),
#: another aggregation and normalizer over 4 accumulated micro-batches, and DAPO's
#: clip-higher an upper clip bound of its own (at the default the two bounds are one), batch-scaled
#: advantages the other branch of TRL's advantage code (check 18 runs at every setting too). An
#: entropy bonus fails check 6 by design over several micro-batches (bnpo too), so it has a variant
#: of one micro-batch, where check 19 states the bonus, at SAPO (whose soft gate is another policy
#: term), training on the top 80% of tokens by entropy (a quantile per micro-batch, by design over
#: several; at 0.5 a quantile taken at q rather than 1 - q would cut the same tokens). The first
#: variant takes Dr. GRPO rather than dapo: dapo's clipped surrogate is grpo's, and its window
#: normalizer cispo's, which run B plays (RUN_VARIANT); Dr. GRPO's normalizer is its own. The
#: second takes GSPO's sequence-level ratio (TRL warns against it beside dr_grpo). A release without
#: a variant's field, or whose loss code does not know its loss type, skips that variant.
VARIANTS: dict[str, dict[str, Any]] = {
    "temperature 0.7, dr_grpo, 4 micro-batches, clip-higher 0.28, batch-scaled advantages": {
        "temperature": 0.7, "loss_type": "dr_grpo", "gradient_accumulation_steps": 4, "epsilon_high": 0.28,
        "scale_rewards": "batch"},
    "sapo, sequence-level ratio, entropy bonus 0.05, top 80% entropy tokens, one micro-batch": {
        "loss_type": "sapo", "importance_sampling_level": "sequence", "entropy_coef": 0.05,
        "top_entropy_quantile": 0.8, "gradient_accumulation_steps": 1},
}


def variants(trainer) -> dict[str, dict[str, Any]]:
    """The :data:`VARIANTS` whose every field this TRL's config has, and whose loss type its
    loss code names."""
    return {label: s for label, s in VARIANTS.items() if all(hasattr(trainer.args, k) for k in s)
            and ("loss_type" not in s or s["loss_type"] in _loss_code_strings(type(trainer)))}


def _loss_code_strings(cls) -> set[str]:
    """Every string constant in the trainer's loss methods (``loss_type == "vespo"`` puts one there)."""
    found: set[str] = set()
    todo: list[Any] = [getattr(getattr(cls, name, None), "__code__", None) for name in ("_compute_loss", "compute_loss")]
    while todo:
        const = todo.pop()
        if isinstance(const, str):
            found.add(const)
        elif isinstance(const, (tuple, frozenset)):
            todo += list(const)
        elif isinstance(const, types.CodeType):   # a comprehension or nested function inside
            todo += list(const.co_consts)
    return found


#: The run-level checks' off-default run (two iterations per generation batch, so later passes use
#: stored old log-probs): temperature != 1, a cosine schedule after one warmup step, and a gradient
#: clip that binds.
RUN_VARIANT: dict[str, Any] = {"temperature": 0.7, "num_iterations": 2, "lr_scheduler_type": "cosine",
                               "warmup_steps": 1, "max_grad_norm": 0.05,
                               # the normalizer dapo, cispo and vespo share, over an accumulation window
                               # longer than a generation batch (its rescale by the two is 1 elsewhere),
                               # regenerating inside it; at CISPO, its weight capped at 5, binding nowhere
                               # (a weight left on the graph shows in the gradient; dapo is the first
                               # variant's, at step 0)
                               "loss_type": "cispo", "epsilon_high": 5.0, "gradient_accumulation_steps": 3}
