"""Short runs of verl's actor loop for rlbisect's run-level checks (rlbisect.check.run_level).

verl's `fit` loop is Ray-driven (ray_trainer / the v1 trainer): not run here. A short run is its
actor-side steps in `fit`'s order, each step: a batch of tasks from a seeded stream, sampled from the
current policy (HF generate for the rollout), scored (`NaiveRewardManager`, the estimator), old
log-probs from the current policy and reference log-probs from the step-0 policy through the
engine's forward, then `ActorWorker.train_mini_batch`'s loop with ONE optimizer for the whole run
(verl's engine builds its optimizer once). The tap sees "sampled" per step and "loss" per `ppo_loss`
call; torch's optimizer hook sees every step. There is no evaluation (the evaluation checks say n/a).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from rlbisect.check.spec import RunSpec, Schedule
from rlbisect.frameworks.verl import _internals as v, tiny


def train_run(adapter, steps: int, seed: int, eval_every: int, tap=None, settings: Optional[dict] = None,
              on_worker: Optional[Callable] = None) -> list[dict]:
    """``on_worker`` is handed the run's worker before the first step (the snapshot hook's `watch`)."""
    run = adapter.with_settings(**(settings or {})) if settings else adapter
    model = run.policy()
    opt = v.optimizer(model, run.s["lr"], 0.0)
    worker = run.worker(model, opt, run.s["use_kl_loss"], run.episodes // run.s["mini_batches"])
    if on_worker is not None:
        on_worker(worker)
    all_tasks = tiny.tasks()
    n = run.episodes // tiny.GROUP
    out = []
    for step in range(steps):
        pick = torch.randperm(len(all_tasks), generator=torch.Generator().manual_seed(seed * 1000 + step))[:n]
        rows = [all_tasks[int(i)] for i in pick for _ in range(tiny.GROUP)]
        batch, truth = run.scored(model, rows, seed * 1000 + step)
        if tap is not None:
            tap("sampled", step=step, model=model, batch=batch, truth=truth)
        stats = run.train_step(model, batch, run.s["use_kl_loss"], tap, opt, worker)
        out.append({"step": step, "reward": float(truth.rewards.mean()), **stats})
    return out


def run_spec(adapter, steps: int, settings: Optional[dict] = None) -> RunSpec:
    """verl's `FSDPOptimizerConfig` defaults as `build_optimizer` applies them (AdamW, lr,
    weight_decay, betas), a constant schedule (no warmup: lr_warmup_steps_ratio 0), the engine's
    `clip_grad`, and the task ids."""
    from verl.workers.config.optimizer import FSDPOptimizerConfig
    run = adapter.with_settings(**settings) if settings else adapter
    cfg = FSDPOptimizerConfig(lr=run.s["lr"], weight_decay=0.0)
    hyper: dict[str, Any] = {"betas": tuple(cfg.betas), "weight_decay": cfg.weight_decay}
    return RunSpec(optimizer=cfg.optimizer, lr=cfg.lr, hyper=hyper, schedule=Schedule(kind="constant"),
                   max_grad_norm=run.s["clip_grad"], train_tasks=frozenset(t["id"] for t in tiny.tasks()),
                   heldout_tasks=None)
