"""What a trainer declares it does, as data, and what that declaration implies, computed here.

The checks compare what they *observe* the trainer do with what its adapter *declares* (the loss it
means to compute, the optimizer and schedule its loop means to step, the tasks it may draw). The
declarations are plain values, so the expected numbers below come from rlbisect's own formulas and
never from the trainer's code: a fault in the trainer cannot also move what it is compared with.

Shapes: b rows, P next-token positions, V vocabulary; ``mask`` is 1 on the positions trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Optional

import torch

Aggregation = Literal["token_mean", "seq_mean_token_mean", "token_sum", "seq_mean_token_sum"]


@dataclass(frozen=True)
class Objective:
    """The per-minibatch loss a trainer means to compute (PPO/GRPO family).

    loss = agg(-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A))
           + kl_coef * agg_kl(KL estimator(logp, ref_logp))
           - entropy_coef * agg_entropy(entropy of softmax(logits / temperature))

    with r = exp(logp - old_logp) and logp = log softmax(logits / temperature)[target]
    (``ratio_level="sequence"``: one r per row, exp of the mean of its trained tokens' logp - old_logp,
    GSPO's, on the graph through every token's logp). Each ``agg``
    is over the rows handed to the loss: ``token_mean`` (every trained token alike),
    ``seq_mean_token_mean`` (every episode alike), ``token_sum`` divided by ``sum_norm``, or
    ``seq_mean_token_sum``, the token sum over the rows handed to the loss divided by their count
    and by ``sum_norm`` (Dr. GRPO's: rows x a fixed length). Three other policy terms are stated
    (:data:`STATED`): ``kind="cispo"``, -sg(min(r, clip_high)) A logp (CISPO: the importance weight
    capped at clip_high itself and detached), ``kind="sapo"``, -sigmoid(tau (r - 1)) 4 / tau A with
    tau = sapo_tau_pos where A > 0, else sapo_tau_neg (SAPO's soft gate), and ``kind="vespo"``,
    -sg(phi(w)) A logp with w the sequence's ratio (its trained tokens' log-ratios summed, each
    clamped to [-20, 20], the sum to [log 1e-8, 20]) and phi(w) = exp(lam + k log w - lam w),
    (k, lam) = vespo_pos where A >= 0, else vespo_neg (VESPO's gamma weight, 1 at w = 1). Any other
    ``kind`` is another objective: its exact identities are not checked (n/a), only the ones that
    hold for any policy gradient.
    """

    kind: str = "ppo-clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: Aggregation = "token_mean"
    sum_norm: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_aggregation: Optional[Aggregation] = None        # None: as ``aggregation``
    entropy_coef: float = 0.0
    entropy_aggregation: Optional[Aggregation] = None   # None: as ``aggregation``
    temperature: float = 1.0
    #: group_mean_std: (r - group mean) / (group std + adv_eps); group_mean: r - group mean;
    #: group_mean_batch_std: (r - group mean) / (std of the whole batch's rewards + adv_eps);
    #: loo: r - mean of the others in the group (RLOO). Stds are unbiased (n - 1).
    advantages: Literal["group_mean_std", "group_mean", "group_mean_batch_std", "loo"] = "group_mean_std"
    adv_eps: float = 1e-6
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    ratio_level: Literal["token", "sequence"] = "token"
    vespo_pos: tuple[float, float] = (2.0, 3.0)    # (k, lambda) where A >= 0
    vespo_neg: tuple[float, float] = (3.0, 2.0)    # (k, lambda) where A < 0
    #: below 1: the policy term and the entropy bonus only on the trained tokens whose entropy is at
    #: or above the (1 - this) quantile of the pass's trained tokens' (torch.quantile's), the others
    #: still counted in the aggregation's denominators (TRL's top_entropy_quantile)
    top_entropy_quantile: float = 1.0


#: The kinds whose policy term :func:`objective_loss` states exactly (checks 18-20 apply).
STATED = ("ppo-clip", "cispo", "sapo", "vespo")


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule over optimizer steps n = 0, 1, ...: linear warmup over ``warmup``
    steps (factor (n + 1) / warmup, or n / warmup with ``warmup_from_zero``, Hugging Face's
    convention), then ``kind``: constant, or a linear or cosine decay to ``min_ratio`` at ``total``."""

    kind: Literal["constant", "linear", "cosine"] = "constant"
    warmup: int = 0
    total: int = 0
    warmup_from_zero: bool = False
    min_ratio: float = 0.0


@dataclass(frozen=True)
class RunSpec:
    """What a trainer's loop means to do over a short run."""

    optimizer: str                                  # the torch.optim class that steps, e.g. "Adam"
    lr: float
    hyper: dict = field(default_factory=dict)       # other param-group values it holds (betas, eps, weight_decay)
    schedule: Schedule = Schedule()
    max_grad_norm: Optional[float] = None           # global gradient-norm clip before each step (None: none)
    train_tasks: Optional[frozenset] = None         # the task ids training may draw
    heldout_tasks: Optional[frozenset] = None       # the task ids evaluation may use (and training may not)
    optimizer_steps: Optional[int] = None           # the steps it takes over the run (None: not declared)
    tasks_per_step: Optional[int] = None            # the distinct tasks each step trains on (None: not declared)


def lr_factor(s: Schedule, n: int) -> float:
    """The schedule's multiplier of the base learning rate at optimizer step ``n`` (0-based)."""
    if n < s.warmup:
        return (n if s.warmup_from_zero else n + 1) / s.warmup
    if s.kind == "constant":
        return 1.0
    span = max(s.total - s.warmup, 1)
    progress = min(max(n - s.warmup, 0) / span, 1.0)
    shape = 1.0 - progress if s.kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return s.min_ratio + (1.0 - s.min_ratio) * shape


def advantages(rewards: torch.Tensor, group_size: int, spec: Objective) -> torch.Tensor:
    """The declared advantage of every row from the rewards alone; rows laid out group by group."""
    r = rewards.double().view(-1, group_size)
    if spec.advantages == "loo":
        out = r - (r.sum(-1, keepdim=True) - r) / max(group_size - 1, 1)
    else:
        out = r - r.mean(-1, keepdim=True)
        if spec.advantages == "group_mean_std":
            out = out / (r.std(-1, keepdim=True) + spec.adv_eps)
        elif spec.advantages == "group_mean_batch_std":
            out = out / (r.std() + spec.adv_eps)
    return out.flatten()


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from tokens the policy sampled (Schulman's k1,
    k2, k3: with x = ref_logp - logp, k1 = -x, k2 = x^2 / 2, k3 = e^x - x - 1)."""
    x = ref_logp - logp
    if estimator == "k1":
        return -x
    if estimator == "k2":
        return 0.5 * x * x
    return x.exp() - x - 1


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str, sum_norm: float = 1.0) -> torch.Tensor:
    mask = mask.to(per_token.dtype)
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
    if how == "seq_mean_token_mean":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if how == "token_sum":
        return (per_token * mask).sum() / sum_norm
    if how == "seq_mean_token_sum":
        return (per_token * mask).sum(-1).mean() / sum_norm
    raise ValueError(f"unknown aggregation {how!r}")


def objective_loss(spec: Objective, mask: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                   logits: Optional[torch.Tensor] = None, targets: Optional[torch.Tensor] = None,
                   logp: Optional[torch.Tensor] = None, ref_logp: Optional[torch.Tensor] = None,
                   entropy: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The declared loss of one forward pass, from the policy's raw (untempered) ``logits`` and the
    ``targets``, or from its log-probs ``logp`` when the logits are not offered (then the entropy
    term needs the per-token ``entropy`` the trainer computed: a fused LM head offers no logits)."""
    scaled = None
    if logits is not None:
        assert targets is not None, "objective_loss's logits come with their targets"
        scaled = logits / spec.temperature
        logp = torch.log_softmax(scaled, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert logp is not None, "objective_loss needs logits and targets, or logp"
    if scaled is not None and (spec.entropy_coef or spec.top_entropy_quantile < 1):
        lp = torch.log_softmax(scaled, -1)
        entropy = -(lp.exp() * lp).sum(-1)
    log_ratio = logp - old_logp
    if spec.ratio_level == "sequence":
        on = mask.to(logp.dtype)
        log_ratio = (log_ratio * on).sum(-1, keepdim=True) / on.sum(-1, keepdim=True).clamp(min=1)
    ratio = log_ratio.exp()
    a = adv[:, None].to(logp.dtype)
    if spec.kind == "cispo":
        per_token = -ratio.clamp(max=spec.clip_high).detach() * a * logp
    elif spec.kind == "sapo":
        tau = torch.where(a > 0, spec.sapo_tau_pos, spec.sapo_tau_neg)
        per_token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * a
    elif spec.kind == "vespo":
        per_token = -gamma_weight(spec, (logp - old_logp).detach(), mask, a) * a * logp
    else:
        per_token = -torch.min(ratio * a, ratio.clamp(1 - spec.clip_low, 1 + spec.clip_high) * a)
    kept = mask
    if spec.top_entropy_quantile < 1:
        assert entropy is not None, "an entropy quantile needs the logits or the per-token entropies"
        kept = mask * high_entropy(entropy.detach(), mask, spec.top_entropy_quantile)
        per_token = per_token * kept
    loss = aggregate(per_token, mask, spec.aggregation, spec.sum_norm)
    if spec.kl_coef:
        assert ref_logp is not None, "a KL term needs the reference log-probs"
        kl = kl_estimate(logp, ref_logp, spec.kl_estimator)
        loss = loss + spec.kl_coef * aggregate(kl, mask, spec.kl_aggregation or spec.aggregation, spec.sum_norm)
    if spec.entropy_coef:
        assert entropy is not None, "an entropy term needs the logits or the per-token entropies"
        loss = loss - spec.entropy_coef * aggregate(entropy, kept, spec.entropy_aggregation or spec.aggregation,
                                                    spec.sum_norm)
    return loss


def gamma_weight(spec: Objective, log_ratio: torch.Tensor, mask: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """VESPO's per-sequence weight phi(w) (see :class:`Objective`), shape (rows, 1); 0 where it overflows."""
    log_w = (log_ratio.clamp(-20.0, 20.0) * mask.to(log_ratio.dtype)).sum(-1, keepdim=True)
    log_w = log_w.clamp(math.log(1e-8), 20.0)
    pos = a >= 0
    k = torch.where(pos, spec.vespo_pos[0], spec.vespo_neg[0])
    lam = torch.where(pos, spec.vespo_pos[1], spec.vespo_neg[1]).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * log_w.exp()).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def high_entropy(entropy: torch.Tensor, mask: torch.Tensor, top: float) -> torch.Tensor:
    """1 on the trained tokens whose entropy is at or above the ``1 - top`` quantile of all trained
    tokens' entropies, taken in float32 (ties kept), else 0; all 0 when nothing is trained."""
    on = mask > 0
    if not bool(on.any()):
        return torch.zeros_like(mask)
    cut = torch.quantile(entropy[on].float(), 1 - top)
    return ((entropy.float() * on.float() >= cut) & on).to(mask.dtype)
