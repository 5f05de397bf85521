"""A second RL trainer, part 2: batch layout, objective, accumulation, update. Independent of TinyAgent.

Batch layout (`Rollouts`): a dataclass of plain tensors, LEFT-padded, with POSITION-ALIGNED
log-probs: column t of every [B, T] tensor is about tokens[:, t] itself (P = T; column 0 is never
trained). `actor` holds ENV / POLICY / PADDING per token.

Objective, per trained token (CISPO-style REINFORCE with a clipped, stop-gradient importance weight):
    w = sg(min(ratio, 1 + clip_high)),   pg = -w * A * logp,   ratio = exp(logp - old_logp)
    A = r - mean(r of the group)         (Dr. GRPO: no division by the group std)
    + kl_coef * 0.5 * (logp - ref_logp)^2   - entropy_coef * entropy
all summed over tokens and divided by the minibatch's GLOBAL policy-token count. Accumulation splits
the minibatch into microbatches of `micro_rows` rows (a short one last) and backpropagates
sum_micro / N_global, so the parts add up to the one-pass loss exactly. Optimizer: plain SGD.

Faults (`bug=`), each at the place it would live in real code:
    mask_shift      prepare: mask built for next-token alignment (mask[t] = actor[t+1] is POLICY)
    sign_flip       prepare: advantages negated
    stale_old_logp  update: old_logp recomputed from the current weights before every minibatch
    accum_local     backward: each microbatch normalized by its own token count, averaged
    sampler_temp    adapter/prepare: sampler at SAMPLER_TEMP, its log-probs trusted as old_logp
    ref_is_policy   make_ref: the live policy object is the reference
    entropy_sign    token_terms: entropy added with the wrong sign (a penalty)
    batch_baseline  prepare: advantages centred on the batch mean instead of each group's mean
    pad_mean        normalizer: divide by every position of the padded rows, not the trained tokens
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from functools import lru_cache

import torch
import torch.nn.functional as F

from .rollout import ENV, PAD, PADDING, POLICY, SEP, PROMPTS, Episode, GRUPolicy, answer_tokens, prompt_tokens, sample_groups

BUGS = ("mask_shift", "sign_flip", "stale_old_logp", "accum_local", "sampler_temp", "ref_is_policy", "entropy_sign",
        "batch_baseline", "pad_mean")
ALIASES = {"mask": "mask_shift", "sign": "sign_flip", "stale": "stale_old_logp", "accum": "accum_local",
           "temp": "sampler_temp", "live_ref": "ref_is_policy", "entropy": "entropy_sign"}
SAMPLER_TEMP = 0.7


def check_bug(bug: str | None) -> str | None:
    bug = ALIASES.get(bug, bug)
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    return bug


@dataclass
class Config:
    group_size: int = 8
    temperature: float = 1.0
    clip_high: float = 0.3
    kl_coef: float = 0.0
    entropy_coef: float = 0.01
    lr: float = 0.1
    minibatches: int = 2
    micro_rows: int = 12           # rows per microbatch; the last one takes the remainder
    bug: str | None = None


@dataclass
class Rollouts:
    tokens: torch.Tensor           # [B, T] long, left-padded with PAD
    actor: torch.Tensor            # [B, T] long: ENV / POLICY / PADDING
    behaviour_logp: torch.Tensor   # [B, T] the sampler's log-prob of tokens[:, t] (0 where not POLICY)
    reward: torch.Tensor           # [B]
    group_size: int

    @property
    def live(self) -> torch.Tensor:
        return self.actor != PADDING

    def select(self, rows: torch.Tensor) -> "Rollouts":
        return Rollouts(self.tokens[rows], self.actor[rows], self.behaviour_logp[rows], self.reward[rows], self.group_size)

    def left_pad(self, extra: int) -> "Rollouts":
        return replace(self, tokens=F.pad(self.tokens, (extra, 0), value=PAD),
                       actor=F.pad(self.actor, (extra, 0), value=PADDING),
                       behaviour_logp=F.pad(self.behaviour_logp, (extra, 0), value=0.0))


def collate(episodes: list[Episode], group_size: int) -> Rollouts:
    T = max(len(e.tokens) for e in episodes)
    def left(xs, fill):
        return [fill] * (T - len(xs)) + list(xs)
    return Rollouts(torch.tensor([left(e.tokens, PAD) for e in episodes]),
                    torch.tensor([left(e.actors, PADDING) for e in episodes]),
                    torch.tensor([left(e.logps, 0.0) for e in episodes]),
                    torch.tensor([e.reward for e in episodes]), group_size)


def token_logp(model: GRUPolicy, batch: Rollouts, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (log pi(tokens[:, t] | tokens[:, :t]) [B, T], full log-softmax [B, T, V])."""
    all_logp = torch.log_softmax(model(batch.tokens, batch.live) / temperature, -1)
    return all_logp.gather(-1, batch.tokens[..., None]).squeeze(-1), all_logp


def log_probs(model: GRUPolicy, batch: Rollouts, cfg: Config) -> torch.Tensor:
    with torch.no_grad():
        return token_logp(model, batch, cfg.temperature)[0]


def prepare(model: GRUPolicy, batch: Rollouts, cfg: Config):
    """-> (mask [B, T], old_logp [B, T], advantages [B])."""
    is_policy = (batch.actor == POLICY).float()
    mask = F.pad(is_policy[:, 1:], (0, 1)) if cfg.bug == "mask_shift" else is_policy
    old_logp = batch.behaviour_logp if cfg.bug == "sampler_temp" else log_probs(model, batch, cfg)
    r = batch.reward.view(-1, batch.group_size)
    adv = (r - (r.mean() if cfg.bug == "batch_baseline" else r.mean(-1, keepdim=True))).flatten()
    return mask, old_logp, (-adv if cfg.bug == "sign_flip" else adv)


def normalizer(m: torch.Tensor, cfg: Config) -> torch.Tensor:
    """How many terms the loss averages over: the trained tokens of these rows."""
    return torch.tensor(float(m.numel())) if cfg.bug == "pad_mean" else m.sum()


def token_terms(model, batch: Rollouts, rows, mask, old_logp, adv, cfg: Config, ref=None):
    """One forward over `rows` -> (sum over trained tokens of the per-token loss, n tokens, stats)."""
    sub = batch.select(rows)
    m, old = mask[rows], old_logp[rows]
    logp, all_logp = token_logp(model, sub, cfg.temperature)
    ratio = torch.exp(logp - old)
    weight = ratio.clamp(max=1 + cfg.clip_high).detach()
    per_tok = -weight * adv[rows, None] * logp
    entropy = -(all_logp.exp() * all_logp).sum(-1)
    ent_coef = -cfg.entropy_coef if cfg.bug == "entropy_sign" else cfg.entropy_coef
    per_tok = per_tok - ent_coef * entropy
    if ref is not None and cfg.kl_coef:
        with torch.no_grad():
            ref_logp = token_logp(ref, sub, cfg.temperature)[0]
        per_tok = per_tok + cfg.kl_coef * 0.5 * (logp - ref_logp) ** 2
    on = m > 0
    r_on = ratio.detach()[on] if on.any() else torch.ones(1)
    log_r = (logp - old).detach()
    stats = {"ratio_max": float(r_on.max()), "ratio_min": float(r_on.min()),
             "k3_sum": float((((ratio.detach() - 1) - log_r) * m).sum())}
    return (per_tok * m).sum(), normalizer(m, cfg), stats


def minibatch_loss(model, batch, rows, mask, old_logp, adv, cfg, ref=None):
    total, n, stats = token_terms(model, batch, rows, mask, old_logp, adv, cfg, ref)
    return total / n.clamp(min=1), stats


def accumulate_backward(model, batch, rows, mask, old_logp, adv, cfg, ref=None) -> dict:
    """Backward of the minibatch `rows` over microbatches of `micro_rows` rows, no optimizer step."""
    parts = rows.split(cfg.micro_rows)
    n_global = normalizer(mask[rows], cfg).clamp(min=1)
    out = {"loss": 0.0, "ratio_max": float("-inf"), "ratio_min": float("inf"), "k3_sum": 0.0, "tokens": float(n_global)}
    for part in parts:
        total, n_local, stats = token_terms(model, batch, part, mask, old_logp, adv, cfg, ref)
        scaled = total / n_local.clamp(min=1) / len(parts) if cfg.bug == "accum_local" else total / n_global
        scaled.backward()
        out["loss"] += float(scaled.detach())
        out["ratio_max"] = max(out["ratio_max"], stats["ratio_max"])
        out["ratio_min"] = min(out["ratio_min"], stats["ratio_min"])
        out["k3_sum"] += stats["k3_sum"]
    return out


def make_ref(model, cfg: Config):
    if not cfg.kl_coef:
        return None
    if cfg.bug == "ref_is_policy":
        return model
    return copy.deepcopy(model).requires_grad_(False).eval()


def update(model, batch: Rollouts, cfg: Config, ref=None, seed: int = 0) -> dict:
    """One RL update: old_logp once, then `minibatches` SGD steps over a random split of the rows."""
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    mask, old_logp, adv = prepare(model, batch, cfg)
    k3, tokens, losses = 0.0, 0.0, []
    for rows in torch.randperm(len(adv), generator=torch.Generator().manual_seed(seed)).chunk(cfg.minibatches):
        if cfg.bug == "stale_old_logp":     # the no-grad forward moved inside the loop
            old_logp = log_probs(model, batch, cfg)
        opt.zero_grad()
        stats = accumulate_backward(model, batch, rows, mask, old_logp, adv, cfg, ref)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        k3, tokens = k3 + stats["k3_sum"], tokens + stats["tokens"]
        losses.append(stats["loss"])
    return {"approx_kl": k3 / max(tokens, 1.0), "loss": sum(losses) / len(losses), "reward": float(batch.reward.mean())}


def supervised_batch(prompts) -> Rollouts:
    """Teacher-forced episodes that write the right answer (for the warm start)."""
    eps = []
    for a, b in prompts:
        e = Episode(a, b)
        for t in prompt_tokens(a, b):
            e.add(t, ENV)
        ans = answer_tokens(a, b)
        for i, t in enumerate(ans):
            e.add(t, POLICY)
            if i < len(ans) - 1:
                e.add(SEP, ENV)
        eps.append(e)
    return collate(eps, 1)


@lru_cache(maxsize=None)
def _base_state(steps: int, seed: int):
    torch.set_num_threads(1)
    model = GRUPolicy(seed=seed)
    batch, cfg = supervised_batch(PROMPTS), Config()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    on = (batch.actor == POLICY).float()
    for _ in range(steps):
        opt.zero_grad()
        nll = -(token_logp(model, batch, cfg.temperature)[0] * on).sum() / on.sum()
        nll.backward()
        opt.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def make_base(steps: int = 60, seed: int = 0) -> GRUPolicy:
    """A deterministic, partly trained starting policy (cached per process)."""
    model = GRUPolicy(seed=seed)
    model.load_state_dict(_base_state(steps, seed))
    return model


def success_prob(model, prompts) -> float:
    """Exact expected reward on `prompts`: the probability of writing the right answer (teacher forcing)."""
    batch = supervised_batch(prompts)
    logp = log_probs(model, batch, Config()) * (batch.actor == POLICY)
    return float(logp.sum(-1).exp().mean())


def train(model, prompts, steps: int, cfg: Config, seed: int = 0) -> list[float]:
    """RL on a fixed prompt set, one update per freshly sampled batch -> mean training reward per step.
    Plain SGD keeps no state, so a fresh optimizer per update is the same as a persistent one."""
    gen, rewards = torch.Generator().manual_seed(seed), []
    for step in range(steps):
        batch = collate(sample_groups(model, prompts, cfg.group_size, gen, cfg.temperature), cfg.group_size)
        rewards.append(update(model, batch, cfg, make_ref(model, cfg), seed=seed + step)["reward"])
    return rewards
