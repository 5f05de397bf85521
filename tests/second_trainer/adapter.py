"""rlbisect's TrainerAdapter for the second trainer (tests/second_trainer): every probe point calls
that trainer's own code, with an optional fault switched on.

Load it by file path:  rlbisect check --adapter tests/second_trainer/adapter.py:make_adapter --bug sign

Positions: the trainer's log-probs are position-aligned (column t is about token t itself) and its
rows are LEFT-padded, so P = T columns and `pad` adds padding on the left, where this layout pads.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import sys
from pathlib import Path

import torch

from rlbisect.check.adapter import Prepared, Truth

_HERE = Path(__file__).resolve().parent
if "second_trainer" not in sys.modules:    # loaded by file path: register the package without touching sys.path
    _spec = importlib.util.spec_from_file_location("second_trainer", _HERE / "__init__.py",
                                                   submodule_search_locations=[str(_HERE)])
    sys.modules["second_trainer"] = _pkg = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_pkg)

from second_trainer import trainer as tr  # noqa: E402
from second_trainer.rollout import POLICY, PROMPTS, sample_groups  # noqa: E402


class SecondTrainerAdapter:
    faults = list(tr.BUGS)   # the rows of `rlbisect check --matrix`
    objective = "cispo"      # a stop-gradient clipped weight: no PPO clip to check

    def __init__(self, episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None):
        self.cfg = tr.Config(kl_coef=kl_coef or 0.0, bug=tr.check_bug(bug))
        if episodes % self.cfg.group_size:
            raise ValueError(f"episodes must be a multiple of the group size {self.cfg.group_size}")
        torch.set_num_threads(1)
        self.episodes, self.seed = episodes, seed
        self._base = tr.make_base(steps=80)

    def policy(self):
        return copy.deepcopy(self._base)

    def probe_batch(self):
        """Episodes of the starting policy on prompts drawn from the seed; the truth is read from the
        sampler's episode records, never from the collated tensors."""
        gen = torch.Generator().manual_seed(self.seed)
        G = self.cfg.group_size
        prompts = [PROMPTS[i] for i in torch.randperm(len(PROMPTS), generator=gen)[: self.episodes // G].tolist()]
        temp = tr.SAMPLER_TEMP if self.cfg.bug == "sampler_temp" else self.cfg.temperature
        eps = sample_groups(self._base, prompts, G, gen, temperature=temp)
        batch = tr.collate(eps, G)
        T = batch.tokens.shape[1]
        owned, sample_logp = torch.zeros(len(eps), T), torch.zeros(len(eps), T)
        for i, e in enumerate(eps):
            start = T - len(e.tokens)
            for j, (who, lp) in enumerate(zip(e.actors, e.logps)):
                if who == POLICY:
                    owned[i, start + j], sample_logp[i, start + j] = 1.0, lp
        return batch, Truth(owned, sample_logp, torch.tensor([e.reward for e in eps]), G)

    def prepare(self, model, batch):
        return Prepared(*tr.prepare(model, batch, self.cfg))

    def log_probs(self, model, batch):
        return tr.log_probs(model, batch, self.cfg)

    def with_rewards(self, batch, rewards):
        return dataclasses.replace(batch, reward=rewards)

    def loss(self, model, batch, rows, prep):
        return tr.minibatch_loss(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg)

    def backward(self, model, batch, rows, prep):
        return tr.accumulate_backward(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg)

    def update(self, model, batch, ref):
        return tr.update(model, batch, self.cfg, ref)

    def make_ref(self, model):
        return tr.make_ref(model, self.cfg)

    def pad(self, batch, extra):
        return batch.left_pad(extra)


def make_adapter(episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None) -> SecondTrainerAdapter:
    return SecondTrainerAdapter(episodes=episodes, seed=seed, kl_coef=kl_coef, bug=bug)
