"""TinyAgent's implementation of rlbisect's TrainerAdapter: every probe point calls the trainer's
own code (batch.prepare_batch, update.minibatch_loss / minibatch_backward / rl_update / make_ref),
with an optional fault switched on, so the checker sees exactly what training would do.
"""

from __future__ import annotations

import copy
import functools

import torch

from rlbisect.check import Capabilities, Prepared, Truth

from . import declared
from .base import make_base
from .batch import collate, pad_batch, prepare_batch, recompute_log_probs
from .config import EnvConfig, RLConfig, SamplerConfig, UpdateConfig
from .declared import PROBE_VARIANTS, RUN_VARIANT, VARIANTS
from .faults import BUGS, SAMPLER_TEMP, check_bug
from .sampler import sample_groups
from .tasks import make_tasks
from .tokenizer import build_tokenizer
from .update import make_optimizer, make_ref, make_scheduler, minibatch_backward, minibatch_loss, rl_update


class ReferenceAdapter:
    faults = list(BUGS)   # what `rlbisect check --matrix` switches on, one row each
    variants = VARIANTS   # settings at which every identity holds: the checks exercise each
    run_variant = RUN_VARIANT
    probe_variants = PROBE_VARIANTS

    def __init__(self, episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None,
                 **settings):
        self.bug = check_bug(bug)
        self.cfg = _config(kl_coef, settings)
        if episodes % self.cfg.sampler.group_size:
            raise ValueError(f"episodes must be a multiple of the group size {self.cfg.sampler.group_size}")
        self.episodes, self.seed = episodes, seed
        torch.set_num_threads(self.cfg.threads)
        self.tok = build_tokenizer(make_tasks("all"))
        self._task_ids = {t.name: t.index for t in make_tasks("all")}

    @functools.cached_property
    def _built(self):
        # built at first use, inside the checks: the trainer's own code (its environment, its
        # tokenizer) raising here is a finding (exit 1), not an adapter that cannot run (exit 125);
        # what it raised is kept, so each check does not build it again to raise again
        try:
            return make_base(self.tok), None
        except Exception as e:      # noqa: BLE001 - the trainer's code: re-raised at every use
            return None, e

    @property
    def _base(self):
        base, error = self._built
        if error is not None:
            raise error
        return base

    def with_settings(self, **settings) -> "ReferenceAdapter":
        """The same trainer, fault and probe batch at other settings (config fields)."""
        other = copy.copy(self)
        u = self.cfg.update
        other.cfg = _config(settings.pop("kl_coef", u.kl_coef), {**_fields(self.cfg), **settings})
        return other

    @property
    def objective(self):
        return declared.objective(self.cfg)

    @property
    def capabilities(self) -> Capabilities:
        u = self.cfg.update     # one epoch of one minibatch: the ratio is 1 at the only step, by design
        return Capabilities(one_step_per_batch=u.epochs * u.minibatches == 1)

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
        batch = collate(trajs, self.tok.pad_id, G, self.bug)
        return batch, self.truth(trajs, batch, cfg)

    def truth(self, trajs, batch, cfg: RLConfig) -> Truth:
        """What the sampler recorded of `trajs` (not the collated batch, which the checks test)."""
        P = batch["ids"].shape[1] - 1
        owned = torch.tensor([[1.0 if o == 1 else 0.0 for o in t.owner[1:]] + [0.0] * (P - len(t.owner) + 1)
                              for t in trajs])
        sample_logp = torch.tensor([t.sample_logp[1:] + [0.0] * (P - len(t.owner) + 1) for t in trajs])
        return Truth(owned, sample_logp, torch.tensor([t.reward for t in trajs]), cfg.sampler.group_size,
                     drawn=torch.tensor([t.drawn for t in trajs]),
                     rescored=torch.tensor([_configured_reward(t.info, cfg.env) for t in trajs]),
                     tasks=torch.tensor([self._task_ids[t.info.task] for t in trajs]))

    def prepare(self, model, batch):
        return Prepared(*prepare_batch(model, batch, self.cfg, self.bug))

    def log_probs(self, model, batch, rows=None):
        return recompute_log_probs(model, batch["ids"] if rows is None else batch["ids"][rows], self.cfg, self.bug)

    def loss(self, model, batch, rows, prep, ref=None, tap=None):
        return minibatch_loss(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg, self.bug,
                              ref_model=ref, tap=tap)

    def backward(self, model, batch, rows, prep):
        return minibatch_backward(model, batch, rows, prep.mask, prep.old_logp, prep.advantages, self.cfg, self.bug)

    def update(self, model, batch, ref, tap=None):
        opt = make_optimizer(model, self.cfg.update, self.bug)
        return rl_update(model, opt, batch, self.cfg, self.bug, ref, torch.Generator().manual_seed(0), tap)

    def make_ref(self, model):
        return make_ref(model, self.cfg, self.bug)

    def pad(self, batch, extra):
        return pad_batch(batch, extra, self.tok.pad_id)

    def with_rewards(self, batch, rewards):
        """The same batch with other rewards (for rlbisect's group-locality check)."""
        return {**batch, "rewards": rewards}

    def _run_config(self, seed: int, settings: dict | None) -> RLConfig:
        """A check-sized run at these settings: 8 of the 20 training tasks a step in groups of 2
        (a draw with repeats shows in a step with probability 0.80, over the five steps drawn apart
        all but surely), one held-out episode per task."""
        cfg = self.with_settings(**(settings or {})).cfg
        sampler = cfg.sampler.model_copy(update={"tasks_per_step": 8, "group_size": 2})
        return cfg.model_copy(update={"seed": seed, "eval_episodes": 1, "sampler": sampler})

    def train_run(self, steps, seed, eval_every, tap=None, settings=None):
        """A short run of the real training loop (for rlbisect's run-level checks), shown to `tap`;
        an `eval_every` past the run's end evaluates nothing (the checks' run that never evaluates)."""
        from .train import run
        cfg = self._run_config(seed, settings)
        shown = None
        if tap is not None:
            def shown(event, trajs=None, **values):
                if event == "sampled":
                    values["truth"] = self.truth(trajs, values["batch"], cfg)
                tap(event, **values)
        return run(cfg, steps, self.bug, eval_every, tap=shown, evaluate=eval_every <= steps)

    def run_spec(self, steps, settings=None):
        return declared.run_spec(self._run_config(0, settings), steps)

    def lr_schedule(self, total):
        """The learning rate at each of `total` optimizer steps, from the trainer's own optimizer and
        scheduler, stepped as train.py steps them (a scheduler step after each optimizer step)."""
        optimizer = make_optimizer(torch.nn.Linear(1, 1), self.cfg.update, self.bug)
        scheduler, out = make_scheduler(optimizer, self.cfg.update, total, self.bug), []
        for _ in range(total):
            out.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return out

    def environment(self):
        return declared.Environment(self.tok, self.cfg, self.bug)


def _configured_reward(info, env: EnvConfig) -> float:
    """The reward rule as configured, applied to an episode's record: the configured verifier's
    verdict if it submitted within the configured turn budget, else 0."""
    verdict = info.hidden_pass if env.reward == "hidden" else info.public_pass
    return float(verdict) if info.submitted and info.n_turns <= env.max_turns else 0.0


def _fields(cfg: RLConfig) -> dict:
    """The settings a config was made with, as factory options (kl_coef apart)."""
    out = {}
    for stage in (cfg.env, cfg.sampler, cfg.update):
        out.update({k: v for k, v in stage.model_dump().items() if k in stage.model_fields_set})
    out.pop("kl_coef", None)
    return out


def _config(kl_coef, settings: dict) -> RLConfig:
    """The trainer's own settings (`--adapter-opt temperature=0.7`): the checks run where training does."""
    settings = dict(settings)
    stages = (EnvConfig, SamplerConfig, UpdateConfig)
    env, sampler, update = ({k: settings.pop(k) for k in list(settings) if k in c.model_fields} for c in stages)
    if settings:
        known = sorted({f for c in stages for f in c.model_fields} - {"kl_coef"})
        raise ValueError(f"unknown setting {next(iter(settings))!r} (settings: {', '.join(known)})")
    return RLConfig(env=EnvConfig(**env), sampler=SamplerConfig(**sampler),
                    update=UpdateConfig(**{"kl_coef": kl_coef or 0.0, **update}))


def make_adapter(episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None,
                 **settings) -> ReferenceAdapter:
    """The factory `rlbisect check` uses when no --adapter is given; ``settings`` are environment,
    sampler and update config fields (max_turns, reward, temperature, loss_mode, microbatches, ...)."""
    return ReferenceAdapter(episodes=episodes, seed=seed, kl_coef=kl_coef, bug=bug, **settings)


def check_options(episodes: int = 64, seed: int = 1, kl_coef: float = 0.1, bug: str | None = None,
                  **settings) -> None:
    """make_adapter's options, checked without building anything (rlbisect calls it before the
    build, as ``make_adapter.check_options``): an unknown fault or setting, a bad value or a probe
    size that is not whole groups raises ValueError, which by hand is the caller's mistake."""
    check_bug(bug)
    group = _config(kl_coef, settings).sampler.group_size
    if episodes % group:
        raise ValueError(f"--episodes {episodes}: must be a multiple of the group size {group}")


make_adapter.check_options = check_options      # type: ignore[attr-defined]
