"""The training loop: sample groups, update, log one metric row per step, evaluate on held-out tasks.

Determinism: one seeded generator drives task choice, sampling and minibatch order; evaluation uses
its own generator (seeded by the step), so evaluating never shifts the training stream; the thread
count is fixed. The same seed gives the same rows, bit for bit, except keys containing "time".
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Optional

import torch

from rlbisect.metrics import METRICS

from .batch import collate
from .config import RLConfig
from .faults import SAMPLER_TEMP, check_bug
from .sampler import Trajectory, sample_episodes, sample_groups
from .tasks import Task
from .tokenizer import Tokenizer
from .update import make_optimizer, make_ref, make_scheduler, rl_update


def rollout_row(trajs: list[Trajectory], group_size: int) -> dict:
    """The outcome and behavior half of a metric row, from one step's episodes."""
    n = len(trajs)
    rewards = torch.tensor([t.reward for t in trajs]).view(-1, group_size)             # [P, G]
    passed = [t.info.submitted and t.info.hidden_pass for t in trajs]
    lengths = [sum(1 for o in t.owner if o == 1) for t in trajs]                       # policy tokens
    flat = rewards.max(-1).values == rewards.min(-1).values

    def mean_length(want):
        picked = [n_tok for n_tok, p in zip(lengths, passed) if p == want]
        return sum(picked) / max(len(picked), 1)

    def per_episode(op):
        return sum(t.info.ops.count(op) for t in trajs) / n

    return {
        "reward": rewards.mean().item(),
        "pass_rate": sum(passed) / n,
        "reads": per_episode("read"), "tests": per_episode("test"), "edits": per_episode("edit"),
        "malformed": sum(t.info.n_invalid for t in trajs) / n,
        "hardcode": sum("hardcode_tests" in t.info.ops for t in trajs) / n,
        "submitted": sum(t.info.submitted for t in trajs) / n,
        "turns": sum(t.info.n_turns for t in trajs) / n,
        "length": sum(lengths) / n, "length_pass": mean_length(True), "length_fail": mean_length(False),
        "zero_adv_frac": flat.float().mean().item(),
        "zero_adv_pass": (flat & (rewards[:, 0] > 0)).float().mean().item(),
        "zero_adv_fail": (flat & (rewards[:, 0] <= 0)).float().mean().item(),
    }


def evaluate(model, tasks: list[Task], tok: Tokenizer, cfg: RLConfig, generator: torch.Generator) -> dict:
    """Hidden-test pass rate on `tasks`, `cfg.eval_episodes` episodes each, with its own generator."""
    env_cfg = cfg.env.model_copy(update={"reward": "hidden"})   # an independent verifier, whatever we train on
    episodes = [t for t in tasks for _ in range(cfg.eval_episodes)]
    trajs = sample_episodes(model, episodes, tok, env_cfg, cfg.sampler.temperature, generator)
    return {"pass_rate": sum(t.info.hidden_pass for t in trajs) / len(trajs)}


def pick_tasks(tasks: list[Task], n: int, gen: torch.Generator, seed: int, bug=None) -> list[Task]:
    """This step's `n` distinct training tasks, drawn from the training stream."""
    if bug == "tasks_reseeded":   # the draw re-seeded every step: the same tasks each step (NVIDIA-NeMo/RL#239)
        gen = torch.Generator().manual_seed(seed)
    if bug == "tasks_with_replacement":   # duplicates within a step (oumi-ai/oumi#1542)
        return [tasks[i] for i in torch.randint(len(tasks), (n,), generator=gen).tolist()]
    return [tasks[i] for i in torch.randperm(len(tasks), generator=gen)[:n].tolist()]


def sync_sampler(sampler, model, bug=None) -> None:
    """Push the trainer's weights to the sampler (an inference engine's copy), after every update."""
    if bug == "sampler_stale":   # the push gated on an unrelated flag, off (verl-project/verl#4248)
        return
    with torch.no_grad():
        for s, p in zip(sampler.parameters(), model.parameters()):
            s.copy_(p)


def train(model, tasks: list[Task], tok: Tokenizer, cfg: RLConfig, steps: int, bug: Optional[str] = None,
          eval_tasks: Optional[list[Task]] = None, eval_every: int = 8,
          on_row: Optional[Callable[[dict], None]] = None, hook=None, tap=None) -> list[dict]:
    """Train `model` in place for `steps` steps -> the metric rows (also passed to `on_row`).

    `hook`, if given, is an rlbisect SnapshotHook: it keeps the pre-update state and saves it when a
    detector fires on the row (or every k steps). `tap`, if given, is rlbisect's observation tap
    (rlbisect.check.observe): shown each step's batch, each loss and each evaluation.
    """
    check_bug(bug)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    sampler_temp = SAMPLER_TEMP if bug == "sampler_temp" else None   # None: the sampler's own setting
    ref_model = make_ref(model, cfg, bug)
    sampler = copy.deepcopy(model).requires_grad_(False)   # the inference engine's copy of the weights
    u = cfg.update
    optimizer = make_optimizer(model, u, bug)
    scheduler = make_scheduler(optimizer, u, steps * u.epochs * u.minibatches, bug)
    history = []

    def held_out(step: int) -> float:
        nonlocal tasks
        eval_gen = gen if bug == "eval_train_rng" else torch.Generator().manual_seed(step)   # karpathy/char-rnn#17
        if tap is not None:
            tap("eval_begin", step=step, model=model, tasks=[t.index for t in eval_tasks])
        passed = evaluate(model, eval_tasks, tok, cfg, eval_gen)["pass_rate"]
        if tap is not None:
            tap("eval_end", step=step, model=model)
        if bug == "heldout_in_train":   # evaluated tasks join the training pool (corail-research/SeaPearl.jl#187)
            tasks = tasks + [t for t in eval_tasks if t not in tasks]
        return passed

    for step in range(steps):
        t0 = time.perf_counter()
        # a row describes one policy: step k's evaluation is of the policy that samples step k (the
        # starting policy at step 0), the last step's of the trained policy, after its update
        last = step == steps - 1
        before = held_out(step) if eval_tasks is not None and step % eval_every == 0 and not last else None
        if bug == "optimizer_per_step" and step:   # rebuilt each step, its moments lost (alan-turing-institute/deepsensor#47)
            optimizer = make_optimizer(model, u, bug)
            scheduler = make_scheduler(optimizer, u, steps * u.epochs * u.minibatches, bug)
        picked = pick_tasks(tasks, cfg.sampler.tasks_per_step, gen, cfg.seed, bug)
        trajs = sample_groups(sampler, picked, tok, cfg.env, cfg.sampler, gen, temperature=sampler_temp, bug=bug)
        batch = collate(trajs, tok.pad_id, cfg.sampler.group_size, bug)
        if tap is not None:
            tap("sampled", step=step, model=model, batch=batch, trajs=trajs)
        if hook is not None:
            hook.before_update(step, model=model, optimizer=optimizer, batch=batch, generators={"train": gen},
                               frozen={"ref": ref_model}, scheduler=scheduler)   # stored only when a snapshot is saved
        update_stats = rl_update(model, optimizer, batch, cfg, bug, ref_model, gen, tap, scheduler)
        sync_sampler(sampler, model, bug)
        if bug == "ref_synced" and ref_model is not None:   # reference synced to the policy every step (aburkov/theLMbook#8)
            ref_model.load_state_dict(model.state_dict())
        row = {"step": step, **rollout_row(trajs, cfg.sampler.group_size), **update_stats}
        if bug == "log_sample_rng" and step % eval_every == 0:   # a sample episode to print, from the training stream (wandb/wandb#462)
            example = trajs[int(torch.randint(len(trajs), (1,), generator=gen))]   # noqa: F841 (shown by a verbose logger)
        if before is not None:
            row["eval_pass"] = before
        elif eval_tasks is not None and last:
            row["eval_pass"] = held_out(step)
        row["step_time"] = time.perf_counter() - t0
        unknown = set(row) - set(METRICS) - {"step", "step_time"}
        assert not unknown, f"metrics not named in rlbisect.metrics: {unknown}"
        if hook is not None:
            hook.after_update(step, row)
        history.append(row)
        if on_row is not None:
            on_row(row)
    return history


def run(cfg: RLConfig, steps: int, bug: Optional[str] = None, eval_every: int = 8,
        on_row: Optional[Callable[[dict], None]] = None, hook=None, tap=None, evaluate: bool = True) -> list[dict]:
    """A full run from the cached starting policy on the standard task split -> metric rows
    (without held-out evaluations unless ``evaluate``)."""
    from .base import make_base
    from .tasks import make_tasks
    from .tokenizer import build_tokenizer
    check_bug(bug)
    torch.set_num_threads(cfg.threads)
    tok = build_tokenizer(make_tasks("all"))
    model = make_base(tok)
    held_out = make_tasks("heldout") if evaluate else None
    return train(model, make_tasks("train"), tok, cfg, steps, bug, held_out, eval_every, on_row, hook, tap)


def short_run(steps: int, seed: int) -> list[dict]:
    """The default config trained `steps` steps with `seed`, evaluated at the last step: the runner
    rlbisect's short-run bisect predicate calls (`reference_trainer.train:short_run`)."""
    from .config import make_config
    return run(make_config(seed=seed), steps, eval_every=steps)
