"""The pieces of the objective, as small pure functions over tensors.

Shapes: B episodes, T-1 next-token positions. `mask` is 1 on the positions the loss trains on.
Formulas (the same ones rlbisect.metrics documents):
    ratio       = exp(logp - old_logp)
    pg          = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)
    approx_kl   = ((ratio - 1) - log ratio), masked mean
    k1          = logp - ref_logp            k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def compute_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6, bug=None) -> torch.Tensor:
    """GRPO: reward minus its group mean, over the group std. Rows are laid out group by group."""
    r = rewards.view(-1, group_size)                                          # [P, G]
    dim = 0 if bug == "adv_wrong_axis" else -1   # mean over the batch axis (XU-YIJIE/grpo-flat#2)
    std = r.std() if bug == "adv_batch_std" else r.std(dim, keepdim=True)    # global std (NVIDIA-NeMo/RL#1423)
    if bug == "adv_no_eps":       # a flat group: 0 / 0 (Tencent-Hunyuan/UniRL#330)
        eps = 0.0
    adv = (r - r.mean(dim, keepdim=True)) / (std + eps)
    return adv.flatten()                                                      # [B]


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, bug=None) -> torch.Tensor:
    """token_mean weighs every token alike; seq_mean_token_mean weighs every episode alike,
    so a long failing episode spreads its penalty thin (the length-bias mechanism)."""
    if mode == "token_mean":
        return masked_mean(per_token, mask)
    if mode == "seq_mean_token_mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)     # [B]
        if bug == "seq_mean_padded":   # divided by the padded width (d2l-ai/d2l-en#2707)
            per_seq = (per_token * mask).sum(-1) / mask.shape[-1]
        return per_seq.mean()
    raise ValueError(f"unknown loss_mode {mode!r}")


def policy_loss(logp, old_logp, advantages, mask, clip_eps: float, mode: str, bug=None):
    """PPO clipped surrogate -> (loss, stats of the ratio on trained tokens)."""
    log_ratio = logp - old_logp                                               # [B, T-1]
    if bug == "ratio_inverted":   # exp(old - new) (openai/baselines#1218)
        log_ratio = old_logp - logp
    ratio = log_ratio.exp()
    adv = advantages[:, None]                                                 # [B, 1]
    low = clip_eps if bug == "clip_low_eps" else 1 - clip_eps                 # [eps, 1 + eps] (ChenmienTan/RL2#21)
    clipped = ratio.clamp(low, 1 + clip_eps)
    pessimistic = torch.max if bug == "clip_max" else torch.min               # the min left out (tensorforce/tensorforce#106)
    if bug == "clip_min_before_advantage":   # min(ratio, clipped) * A ignores A's sign (takuseno/ppo#3)
        surrogate = torch.min(ratio, clipped) * adv
    else:
        surrogate = pessimistic(ratio * adv, clipped * adv)
    loss = aggregate(-surrogate, mask, mode, bug)
    with torch.no_grad():
        on = mask > 0
        r = ratio[on] if on.any() else torch.ones(1)
        stats = {
            "clip_frac": masked_mean(((ratio - clipped).abs() > 0).float(), mask).item(),
            "ratio_max": r.max().item(),
            "ratio_min": r.min().item(),
            "approx_kl": masked_mean((ratio - 1) - log_ratio, mask).item(),
        }
    return loss, stats


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3", bug=None) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate from sampled tokens."""
    if kind == "k1":
        return logp - ref_logp
    if kind == "k3":
        # kl_k3_reversed: x = logp - ref, whose e^x has mean != 1 under the policy (walkinglabs/hands-on-modern-rl#27)
        x = logp - ref_logp if bug == "kl_k3_reversed" else ref_logp - logp
        return x.exp() - x - 1
    raise ValueError(f"unknown kl_kind {kind!r}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution per position: [B, T, V] -> [B, T]."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)
