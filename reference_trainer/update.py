"""One RL update: the reference model, the optimizer and its schedule, the minibatch backward, and
the optimizer loop.

Four of the chapter's faults live here, where they live in real trainers: a reference that is the
live policy (`make_ref`), an entropy term with the wrong sign and a gradient-accumulation normalizer
that is local to each microbatch (`minibatch_backward`), and `old_logp` recomputed inside the
minibatch loop (`rl_update`).

``tap``, where a function takes one, is rlbisect's observation tap (rlbisect.check.observe): the
loss shows it exactly what it consumes, before its backward.
"""

from __future__ import annotations

import copy
import math

import torch

from .batch import prepare_batch
from .faults import ENTROPY_COEF
from .losses import aggregate, entropy_from_logits, kl_penalty, policy_loss
from .policy import selected_log_probs


def make_ref(model, cfg, bug=None):
    """The frozen KL reference (None when kl_coef is 0)."""
    if not cfg.update.kl_coef:
        return None
    if bug == "ref_is_policy":
        return model
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


def make_optimizer(model, u, bug=None) -> torch.optim.Optimizer:
    """The configured optimizer over the policy's parameters."""
    kind = torch.optim.AdamW if u.optimizer == "adamw" else torch.optim.Adam
    if bug == "optimizer_lr_ignored":   # the config never reaches the optimizer: torch's default lr (MakazhanAlpamys/Soup#805)
        return kind(model.parameters(), betas=BETAS, eps=ADAM_EPS, weight_decay=u.weight_decay)
    weight_decay = 0.0 if bug == "weight_decay_ignored" else u.weight_decay   # meta-llama/llama-cookbook#191
    return kind(model.parameters(), lr=u.lr, betas=BETAS, eps=ADAM_EPS, weight_decay=weight_decay)


def lr_lambda(u, total: int, bug=None):
    """The schedule's factor at optimizer step n: warmup over `warmup_steps`, then the decay."""
    def factor(n: int) -> float:
        if n < u.warmup_steps:
            return (n if bug == "warmup_zero_first" else n + 1) / u.warmup_steps   # first step at lr 0 (verl-project/verl#3674)
        if u.lr_schedule == "constant":
            return 1.0
        done = min((n - u.warmup_steps) / max(total - u.warmup_steps, 1), 1.0)
        return 1.0 - done if u.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * done))
    return factor


def make_scheduler(optimizer, u, total: int, bug=None):
    """A LambdaLR stepped after every optimizer step; `total` optimizer steps make the run."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(u, total, bug))


def _share(part_mask, mask, mode):
    """Weight of one microbatch in the minibatch loss, so accumulated parts sum to the one-pass loss."""
    if mode == "token_mean":
        return float(part_mask.sum() / mask.sum().clamp(min=1))
    return len(part_mask) / len(mask)


def minibatch_loss(model, batch, rows, mask, old_logp, advantages, cfg, bug=None, ref_model=None, tap=None):
    """The loss of `rows` in one forward pass -> (loss tensor, stats). No backward."""
    u, temp, ids = cfg.update, cfg.sampler.temperature, batch["ids"]
    if bug == "logp_no_temp":     # the sampler's temperature never reaches the trainer (huggingface/trl#3029)
        temp = 1.0
    m = mask[rows]
    raw = model(ids[rows])[:, :-1]                                            # [b, T-1, V]
    logits = raw / temp
    logp = selected_log_probs(logits, ids[rows, 1:])
    loss, stats = policy_loss(logp, old_logp[rows], advantages[rows], m, u.clip_eps, u.loss_mode, bug)
    in_loss = bug == "entropy_sign" or u.entropy_coef > 0
    with torch.set_grad_enabled(in_loss and torch.is_grad_enabled()):   # logged only: no graph
        # entropy_untempered: taken before the logits are scaled (OpenRLHF/OpenRLHF#1319);
        # entropy_unmasked: averaged over every position, padding included (huggingface/trl#6121)
        per_token = entropy_from_logits(raw if bug == "entropy_untempered" else logits)
        entropy = per_token.mean() if bug == "entropy_unmasked" else aggregate(per_token, m, u.loss_mode)
    if bug == "entropy_sign":
        loss = loss + ENTROPY_COEF * entropy
    elif u.entropy_coef:
        loss = loss - u.entropy_coef * entropy
    ref_logp = None
    if ref_model is not None:
        ref_temp = 1.0 if bug == "ref_untempered" else temp   # reference scored on raw logits (OpenRLHF/OpenRLHF#853)
        with torch.no_grad():
            ref_logp = selected_log_probs(ref_model(ids[rows])[:, :-1] / ref_temp, ids[rows, 1:])
        # kl_detached: the estimator run under no_grad, a logged number only (NovaSky-AI/SkyRL#1340)
        per_token_kl = kl_penalty(logp.detach() if bug == "kl_detached" else logp, ref_logp, u.kl_kind, bug)
        # kl_unmasked: averaged over every position, prompt and padding included (natolambert/rlhf-book#216)
        kl = per_token_kl.mean() if bug == "kl_unmasked" else aggregate(per_token_kl, m, u.loss_mode)
        kl_sign = -1.0 if bug == "kl_sign" else 1.0   # the penalty subtracted (Jiayi-Pan/TinyZero#72)
        loss = loss + kl_sign * u.kl_coef * kl
        stats["kl_ref"] = kl.item()
    if tap is not None:
        tap("loss", rows=rows, mask=m, old_logp=old_logp[rows], advantages=advantages[rows], ref_logp=ref_logp,
            logits=raw, targets=ids[rows, 1:], loss=loss)
    stats["entropy"] = entropy.item()
    return loss, stats


def minibatch_backward(model, batch, rows, mask, old_logp, advantages, cfg, bug=None, ref_model=None,
                       tap=None) -> dict:
    """Loss and backward for one minibatch, accumulated over microbatches (no optimizer step) -> stats."""
    mode = cfg.update.loss_mode
    if bug == "accum_local":   # a token-budget scheduler's microbatches, each normalized on its own
        parts = rows[mask[rows].sum(-1).argsort()].chunk(4)
        weights = [1 / len(parts)] * len(parts)
    else:
        parts = rows.chunk(cfg.update.microbatches)
        weights = [_share(mask[p], mask[rows], mode) for p in parts]
        if bug == "token_norm_over_batch":   # the whole batch's tokens, not the minibatch's (huggingface/trl#6024, modelscope/ms-swift#10117)
            weights = [_share(mask[p], mask, mode) for p in parts]
    out = {"loss": 0.0, "ratio_max": float("-inf"), "ratio_min": float("inf")}
    for part, w in zip(parts, weights):
        loss, stats = minibatch_loss(model, batch, part, mask, old_logp, advantages, cfg, bug, ref_model, tap)
        if bug == "zero_grad_per_micro":   # zeroed per forward/backward, not per step (pytorch/torchtitan#3575)
            model.zero_grad()
        (w * loss).backward()
        out["loss"] += w * loss.item()
        for k in ("clip_frac", "approx_kl", "entropy", "kl_ref"):
            if k in stats:
                out[k] = out.get(k, 0.0) + w * stats[k]
        out["ratio_max"] = max(out["ratio_max"], stats["ratio_max"])
        out["ratio_min"] = min(out["ratio_min"], stats["ratio_min"])
    return out


def rl_update(model, optimizer, batch, cfg, bug=None, ref_model=None, generator=None, tap=None,
              scheduler=None) -> dict:
    """The PPO/GRPO update on one batch -> mean stats over minibatches, plus consistency metrics.
    ``scheduler``, if given, is stepped after every optimizer step."""
    u = cfg.update
    mask, old_logp, advantages = prepare_batch(model, batch, cfg, bug)
    trainer_logp = prepare_batch(model, batch, cfg)[1] if bug else old_logp     # clean recomputation
    on = mask > 0
    gap = (trainer_logp - batch["sample_logp"])[on].abs()                      # [N trained tokens]
    prob_gap = (trainer_logp.exp() - batch["sample_logp"].exp())[on].abs()
    logs = []
    for _ in range(u.epochs):
        for rows in torch.randperm(len(advantages), generator=generator).chunk(u.minibatches):
            if bug == "stale_old_logp":   # the no-grad forward moved inside the minibatch loop
                old_logp = prepare_batch(model, batch, cfg)[1]
            if bug != "no_zero_grad":   # gradients never cleared (meta-pytorch/torchforge#71)
                optimizer.zero_grad()
            adv = advantages
            if bug == "adv_renorm_in_update":   # learner-side second whitening, per minibatch (axon-rl/gem#113)
                adv = advantages.clone()
                adv[rows] = (advantages[rows] - advantages[rows].mean()) / (advantages[rows].std() + 1e-6)
            stats = minibatch_backward(model, batch, rows, mask, old_logp, adv, cfg, bug, ref_model, tap)
            if bug == "scheduler_per_microbatch" and scheduler is not None:   # huggingface/accelerate#963
                for _ in range(u.microbatches - 1):
                    scheduler.step()
            if bug == "clip_grad_after_step":   # the clip lands after the step it should bound (awslabs/graphstorm#1366)
                optimizer.step()
                stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), u.max_grad_norm))
            else:
                # grad_clip_hardcoded: the trainer's own 1.0, whatever is configured
                limit = 1.0 if bug == "grad_clip_hardcoded" else u.max_grad_norm
                stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), limit))
                optimizer.step()
            if scheduler is not None:
                scheduler.step()
            logs.append(stats)
    out = {k: sum(s[k] for s in logs) / len(logs) for k in logs[0]}
    empty = gap.numel() == 0
    return dict(out, logp_gap=0.0 if empty else gap.mean().item(), logp_gap_max=0.0 if empty else gap.max().item(),
                prob_gap=0.0 if empty else prob_gap.mean().item(), loss_tokens=mask.sum().item() / len(mask))
