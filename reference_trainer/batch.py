"""From trajectories to the tensors the loss consumes.

`collate` is the data side (padding, owners, the sampler's log-probs aligned to targets);
`prepare_batch` is the trainer side: the action mask, `old_logp` and advantages, with three of the
chapter's faults at the exact places they live in real trainers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .losses import compute_advantages
from .policy import selected_log_probs
from .sampler import OWNER, Trajectory


def pad_rows(rows: list[list], width: int, value) -> torch.Tensor:
    """Right-pad ragged rows to one [B, width] tensor."""
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows])


def collate(trajs: list[Trajectory], pad_id: int, group_size: int, bug: str | None = None) -> dict[str, torch.Tensor]:
    """Right-padded batch. Positions t of the [B, T-1] tensors describe predicting token t+1."""
    T = max(len(t.ids) for t in trajs)
    rewards = [t.reward for t in trajs]
    if bug == "rewards_misaligned":   # collected in the order episodes finished, not row order (verl-project/verl#2185)
        rewards = [trajs[i].reward for i in sorted(range(len(trajs)), key=lambda i: trajs[i].info.n_turns)]
    owner = pad_rows([t.owner for t in trajs], T, OWNER["pad"])                  # [B, T]
    return {
        "ids": pad_rows([t.ids for t in trajs], T, pad_id),                       # [B, T]
        "attention_mask": (owner != OWNER["pad"]).float(),                          # [B, T]
        "action_mask": (owner[:, 1:] == OWNER["policy"]).float(),                   # [B, T-1]
        "owner": owner,                                                             # [B, T]
        "sample_logp": pad_rows([t.sample_logp for t in trajs], T, 0.0)[:, 1:].float(),  # [B, T-1]
        "rewards": torch.tensor(rewards, dtype=torch.float),                       # [B]
        "groups": torch.arange(len(trajs)) // group_size,                           # [B]
    }


PADDED_KEYS = {"ids": None, "attention_mask": 0.0, "action_mask": 0.0, "owner": OWNER["pad"], "sample_logp": 0.0}


def pad_batch(batch: dict, extra: int, pad_id: int) -> dict:
    """The same batch with `extra` more columns of right padding on every sequence tensor."""
    out = dict(batch)
    for key, value in PADDED_KEYS.items():
        if key in batch:
            out[key] = F.pad(batch[key], (0, extra), value=pad_id if value is None else value)
    return out


def trainer_log_probs(model, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """The trainer's log-prob of every next token: [B, T] -> [B, T-1]."""
    return selected_log_probs(model(ids)[:, :-1] / temperature, ids[:, 1:])


def recompute_log_probs(model, ids, cfg, bug: str | None = None):
    """The trainer's own no-grad recomputation of log pi(target): old_logp, and what the checks
    compare with the sampler's record."""
    temp = 1.0 if bug == "logp_no_temp" else cfg.sampler.temperature   # huggingface/trl#3029
    with torch.no_grad():
        return trainer_log_probs(model, ids, temp)


def prepare_batch(model, batch: dict, cfg, bug: str | None = None):
    """What the loss consumes -> (mask [B, T-1], old_logp [B, T-1], advantages [B])."""
    ids, mask = batch["ids"], batch["action_mask"]
    if bug == "mask_shift":       # built from owners aligned to ids, not ids[1:]: spans move right
        mask = F.pad(mask, (1, 0))[:, :-1]
    if bug == "env_in_mask":      # tool output trained on (THUDM/slime#1418)
        mask = (batch["owner"][:, 1:] != OWNER["prompt"]).float()
    if bug == "pad_in_mask":      # "not prompt, not tool" also keeps the padding (huggingface/trl#6654)
        mask = ((batch["owner"][:, 1:] != OWNER["prompt"]) & (batch["owner"][:, 1:] != OWNER["env"])).float()
    if bug == "last_token_unmasked":   # off-by-one: the episode's final token dropped (OpenRLHF/OpenRLHF#973)
        mask = mask.scatter(1, (batch["attention_mask"].sum(-1, keepdim=True).long() - 2).clamp(min=0), 0.0)
    old_logp = recompute_log_probs(model, ids, cfg, bug)
    if bug == "sampler_temp":     # trusting the inference engine's log-probs
        old_logp = batch["sample_logp"]
    advantages = compute_advantages(batch["rewards"], cfg.sampler.group_size, cfg.update.adv_eps, bug)
    if bug == "sign_flip":
        advantages = -advantages
    return mask, old_logp, advantages
