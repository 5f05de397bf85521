"""TinyAgent's implementation of rlbisect's TrainerAdapter: every probe point calls the trainer's
own code (batch.prepare_batch, update.minibatch_loss / minibatch_backward / rl_update / make_ref),
with an optional fault switched on, so the checker sees exactly what training would do.
"""

from __future__ import annotations

import copy

import torch

from rlbisect.check import Prepared, Truth

from .base import make_base
from .batch import collate, pad_batch, prepare_batch, recompute_log_probs
from .config import EnvConfig, RLConfig, SamplerConfig, UpdateConfig
from .faults import BUGS, SAMPLER_TEMP, check_bug
from .sampler import sample_groups
from .tasks import make_tasks
from .tokenizer import build_tokenizer
from .update import make_ref, minibatch_backward, minibatch_loss, rl_update


class ReferenceAdapter:
    faults = list(BUGS)   # what `rlbisect check --matrix` switches on, one row each

    def __init__(self, episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None,
                 **settings):
        self.bug = check_bug(bug)
        # the trainer's own settings (`--adapter-opt temperature=0.7`): the checks run where training does
        stages = (EnvConfig, SamplerConfig, UpdateConfig)
        env, sampler, update = ({k: settings.pop(k) for k in list(settings) if k in c.model_fields} for c in stages)
        if settings:
            known = sorted({f for c in stages for f in c.model_fields} - {"kl_coef"})
            raise ValueError(f"unknown setting {next(iter(settings))!r} (settings: {', '.join(known)})")
        self.cfg = RLConfig(env=EnvConfig(**env), sampler=SamplerConfig(**sampler),
                            update=UpdateConfig(**{"kl_coef": kl_coef or 0.0, **update}))
        if episodes % self.cfg.sampler.group_size:
            raise ValueError(f"episodes must be a multiple of the group size {self.cfg.sampler.group_size}")
        self.episodes, self.seed = episodes, seed
        torch.set_num_threads(self.cfg.threads)
        self.tok = build_tokenizer(make_tasks("all"))
        self._base = make_base(self.tok)

    def policy(self):
        return copy.deepcopy(self._base)

    def probe_batch(self):
        """Episodes of the starting policy on the first training tasks, sampled as the pipeline samples."""
        cfg, G = self.cfg, self.cfg.sampler.group_size
        train = make_tasks("train")
        tasks = [train[i % len(train)] for i in range(self.episodes // G)]
        temp = SAMPLER_TEMP if self.bug == "sampler_temp" else None      # None: the sampler's own setting
        trajs = sample_groups(self._base, tasks, self.tok, cfg.env, cfg.sampler,
                              torch.Generator().manual_seed(self.seed), temperature=temp, bug=self.bug)
        batch = collate(trajs, self.tok.pad_id, G)
        # The truth comes from the trajectories (the sampler's records), not from the collated mask.
        P = batch["ids"].shape[1] - 1
        owned = torch.tensor([[1.0 if o == 1 else 0.0 for o in t.owner[1:]] + [0.0] * (P - len(t.owner) + 1)
                              for t in trajs])
        sample_logp = torch.tensor([t.sample_logp[1:] + [0.0] * (P - len(t.owner) + 1) for t in trajs])
        return batch, Truth(owned, sample_logp, torch.tensor([t.reward for t in trajs]), G,
                            drawn=torch.tensor([t.drawn for t in trajs]),
                            rescored=torch.tensor([self._configured_reward(t.info) for t in trajs]))

    def _configured_reward(self, info) -> float:
        """The reward rule as configured, applied to an episode's record: the configured verifier's
        verdict if it submitted within the configured turn budget, else 0."""
        env = self.cfg.env
        verdict = info.hidden_pass if env.reward == "hidden" else info.public_pass
        return float(verdict) if info.submitted and info.n_turns <= env.max_turns else 0.0

    def prepare(self, model, batch):
        return Prepared(*prepare_batch(model, batch, self.cfg, self.bug))

    def log_probs(self, model, batch, rows=None):
        return recompute_log_probs(model, batch["ids"] if rows is None else batch["ids"][rows], self.cfg, self.bug)

    def loss(self, model, batch, rows, prep, ref=None):
        return minibatch_loss(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg, self.bug,
                              ref_model=ref)

    def backward(self, model, batch, rows, prep):
        return minibatch_backward(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg, self.bug)

    def update(self, model, batch, ref, observe=None):
        opt = torch.optim.Adam(model.parameters(), lr=self.cfg.update.lr)
        return rl_update(model, opt, batch, self.cfg, self.bug, ref, torch.Generator().manual_seed(0), observe)

    def make_ref(self, model):
        return make_ref(model, self.cfg, self.bug)

    def pad(self, batch, extra):
        return pad_batch(batch, extra, self.tok.pad_id)

    def with_rewards(self, batch, rewards):
        """The same batch with other rewards (for rlbisect's group-locality check)."""
        return {**batch, "rewards": rewards}

    def train_run(self, steps, seed, eval_every):
        """A short run of the real training loop (for rlbisect's run-level checks)."""
        from .train import run
        return run(self.cfg.model_copy(update={"seed": seed}), steps, self.bug, eval_every)


def make_adapter(episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None,
                 **settings) -> ReferenceAdapter:
    """The factory `rlbisect check` uses when no --adapter is given; ``settings`` are environment,
    sampler and update config fields (max_turns, reward, temperature, loss_mode, microbatches, ...)."""
    return ReferenceAdapter(episodes=episodes, seed=seed, kl_coef=kl_coef, bug=bug, **settings)
