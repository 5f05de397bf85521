"""What TinyAgent declares it does, for rlbisect's checks: the objective its loss means to compute,
the optimizer and schedule its loop means to step, the settings at which every identity still holds,
and its environment's contract (played through the real sampler and environment).

Everything here is read from the configuration, never from the code that implements it: a fault
in the trainer must not move what the trainer is compared with.
"""

from __future__ import annotations

import torch

from rlbisect.check.environment import Played
from rlbisect.check.spec import Objective, RunSpec, Schedule

from .base import MALFORMED_CALLS
from .config import RLConfig
from .env import OWNER
from .sampler import sample_episodes
from .tasks import N_FIXES, make_tasks

#: Settings at which every identity still holds; the checks exercise each by default (step-0
#: objective checks one at a time, the run-level checks all at once).
VARIANTS = {
    "temperature 0.7, entropy bonus": {"temperature": 0.7, "entropy_coef": 0.01},
    # a turn limit off the default: one the environment reads from a constant shows in checks 21-22
    "KL k1, 4 turns": {"kl_coef": 0.1, "kl_kind": "k1", "max_turns": 4},
    "per-episode mean, 3 microbatches": {"loss_mode": "seq_mean_token_mean", "microbatches": 3},
    # a clip that binds: a gradient clipped per microbatch, not once before the step, shows in check 6
    "2 microbatches, clip 0.01": {"microbatches": 2, "max_grad_norm": 0.01},
}


#: The run-level checks' off-default run: every variant at once, the loop's own off-default paths
#: (a schedule, AdamW with weight decay, a gradient clip that binds, two epochs), and the public
#: reward (so a sampler that ignores the configured environment shows).
RUN_VARIANT = {**{k: v for settings in VARIANTS.values() for k, v in settings.items()},
               "lr_schedule": "linear", "warmup_steps": 2, "optimizer": "adamw", "weight_decay": 0.01,
               "max_grad_norm": 0.001, "epochs": 2, "reward": "public",
               # off the defaults and off the step-0 variants: a value the loop hard-codes, or a
               # setting it never reads, shows as run B's objective or optimizer-step count
               "minibatches": 3, "clip_eps": 0.15, "kl_coef": 0.05}


#: Settings only the cheap probes visit (the environment's contract, the learning-rate schedule):
#: a call limit that cuts the scripted solution (a limit read from a constant pays it), and the
#: schedules run B does not take.
PROBE_VARIANTS = {"calls of 3 tokens": {"max_call_tokens": 3},
                  "cosine schedule, 3 warmup steps": {"lr_schedule": "cosine", "warmup_steps": 3},
                  "linear schedule": {"lr_schedule": "linear"}}


def objective(cfg: RLConfig) -> Objective:
    """The loss update.minibatch_loss means to compute: PPO's clipped surrogate, its KL and entropy
    terms, all under the configured aggregation."""
    u = cfg.update
    return Objective(kind="ppo-clip", clip_low=u.clip_eps, clip_high=u.clip_eps, aggregation=u.loss_mode,
                     kl_coef=u.kl_coef, kl_estimator=u.kl_kind, entropy_coef=u.entropy_coef,
                     temperature=cfg.sampler.temperature, advantages="group_mean_std", adv_eps=u.adv_eps)


def run_spec(cfg: RLConfig, steps: int) -> RunSpec:
    """The optimizer train.train means to step over `steps` steps."""
    u = cfg.update
    tasks = make_tasks("all")
    return RunSpec(optimizer="AdamW" if u.optimizer == "adamw" else "Adam", lr=u.lr,
                   hyper={"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": u.weight_decay, "amsgrad": False},
                   schedule=Schedule(kind=u.lr_schedule, warmup=u.warmup_steps, total=steps * u.epochs * u.minibatches),
                   optimizer_steps=steps * u.epochs * u.minibatches, tasks_per_step=cfg.sampler.tasks_per_step,
                   max_grad_norm=u.max_grad_norm,
                   train_tasks=frozenset(t.index for t in tasks if t.split == "train"),
                   heldout_tasks=frozenset(t.index for t in tasks if t.split == "heldout"))


class _Scripted(torch.nn.Module):
    """A policy that plays a fixed list of calls: at every position all its probability is on the
    next token of its script (the call in progress, else the next call, else ``idle`` forever).
    It follows the episode from the tokens it is fed, as the sampler's KV-cached step feeds them."""

    def __init__(self, tok, calls: list[str], idle: str):
        super().__init__()
        self.tok, self.calls, self.idle = tok, [tok.encode(c) for c in calls], tok.encode(idle)

    def _next(self, seen: list[int]) -> int:
        starts = [i for i, t in enumerate(seen) if t == self.tok.call_id]
        if starts and self.tok.obs_id not in seen[starts[-1]:]:
            call = self.calls[len(starts) - 1] if len(starts) <= len(self.calls) else self.idle
            done = len(seen) - starts[-1]
            if done < len(call):
                return call[done]
        call = self.calls[len(starts)] if len(starts) < len(self.calls) else self.idle
        return call[0]

    def step(self, ids: torch.Tensor, pos: int, cache):
        seen = cache or [[] for _ in range(len(ids))]
        for row, token in zip(seen, ids.tolist()):
            row.append(token)
        logits = torch.full((len(ids), len(self.tok)), -1e9)
        for i, row in enumerate(seen):
            logits[i, self._next(row)] = 0.0
        return logits, seen


class Environment:
    """TinyAgent's environment contract, played through the real sampler and environment."""

    malformed = tuple(MALFORMED_CALLS)
    idle = "<call> test <end>"
    submit = "<call> submit <end>"

    def __init__(self, tok, cfg: RLConfig, bug=None):
        self.tok, self.cfg, self.bug = tok, cfg, bug
        self.tasks = make_tasks("train")[:3]

    @property
    def budget(self) -> int:
        return self.cfg.env.max_turns       # every call takes a turn, a malformed one too

    def unplayable(self, actions: list[str]) -> str:
        env = self.cfg.env
        if len(actions) > env.max_turns:
            return f"{len(actions)} calls, max_turns is {env.max_turns}"
        longest = max(len(self.tok.encode(a)) for a in actions)
        return f"a call of {longest} tokens, max_call_tokens is {env.max_call_tokens}" \
            if longest > env.max_call_tokens else ""

    def solution(self, task: int) -> list[str]:
        return [f"<call> edit {self.tasks[task].right} <end>"]

    def exploit(self, task: int) -> list[str] | None:
        """What passes the visible tests and not the hidden ones, where the configured reward is the
        hidden tests' (under the public reward it earns one by configuration)."""
        return ["<call> hardcode_tests <end>"] if self.cfg.env.reward == "hidden" else None

    def wrong(self, task: int) -> list[str]:
        return [f"<call> edit {(self.tasks[task].right + 1) % N_FIXES} <end>"]

    def observations(self, task: int) -> list[tuple[list[str], str]]:
        """What each tool must answer, from the task's data (env.py's docstring is the contract):
        every wrong candidate and the task's buggy code fail a public test, the exploit passes them."""
        t, test = self.tasks[task], "<call> test <end>"
        return [(["<call> read <end>"], "<obs> fix " + " ".join(map(str, t.hint))),
                ([test], "<obs> fail"),
                (self.solution(task), "<obs> ok"),
                (self.solution(task) + [test], "<obs> pass"),
                (self.wrong(task) + [test], "<obs> fail"),
                (["<call> hardcode_tests <end>", test], "<obs> pass"),
                ([self.malformed[0]], "<obs> malformed")]

    def play(self, task: int, actions: list[str]) -> Played:
        (traj,) = sample_episodes(_Scripted(self.tok, actions, self.idle), [self.tasks[task]], self.tok,
                                  self.cfg.env, self.cfg.sampler.temperature, torch.Generator().manual_seed(0),
                                  bug=self.bug)
        info = traj.info
        # the calls the environment answered, and the last, which ended the episode: counted on the
        # answers, as a call token can sit inside another call (one cut at max_call_tokens)
        answers: list[list[int]] = []
        open_ = False        # inside an answer: environment tokens from an <obs> on
        for t, o in zip(traj.ids, traj.owner):
            if o == OWNER["env"] and t == self.tok.obs_id:
                answers.append([t])
            elif o == OWNER["env"] and open_:
                answers[-1].append(t)
            open_ = o == OWNER["env"] and bool(answers)
        observations = tuple(self.tok.decode(a) for a in answers)
        return Played(reward=info.reward, rejected=info.n_invalid, calls=1 + len(answers),
                      observations=observations)
