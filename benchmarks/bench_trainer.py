"""TinyAgent speed: seconds per RL step, sampler tokens/s with and without the KV cache (side by side),
and the wall time of the 24-step healthy run with evaluations. Usage: python benchmarks/bench_trainer.py"""

from __future__ import annotations

import statistics
import time

import torch

from reference_trainer.base import make_base
from reference_trainer.config import make_config
from reference_trainer.sampler import sample_episodes
from reference_trainer.tasks import make_tasks
from reference_trainer.tokenizer import build_tokenizer
from reference_trainer.train import run


def sampler_rate(model, tok, cfg, use_cache: bool, repeats: int = 3) -> float:
    """Tokens per second over `repeats` batches of 64 episodes (the same seeds for both paths)."""
    tasks = [t for t in make_tasks("train")[:8] for _ in range(8)]
    rates = []
    for seed in range(repeats):
        t0 = time.perf_counter()
        trajs = sample_episodes(model, tasks, tok, cfg.env, 1.0, torch.Generator().manual_seed(seed), use_cache)
        rates.append(sum(len(t.ids) for t in trajs) / (time.perf_counter() - t0))
    return statistics.median(rates)


def main() -> None:
    cfg = make_config()
    torch.set_num_threads(cfg.threads)
    tok = build_tokenizer(make_tasks("all"))
    t0 = time.perf_counter()
    model = make_base(tok)
    load = time.perf_counter() - t0
    with_cache, without = [], []
    for _ in range(2):   # interleaved, so machine noise hits both paths alike
        with_cache.append(sampler_rate(model, tok, cfg, True))
        without.append(sampler_rate(model, tok, cfg, False))
    t0 = time.perf_counter()
    rows = run(cfg, 24, eval_every=8)
    total = time.perf_counter() - t0
    step = statistics.median(r["step_time"] for r in rows if "eval_pass" not in r)
    print(f"starting policy (cached) load      {load:8.2f} s")
    episodes = cfg.sampler.tasks_per_step * cfg.sampler.group_size
    print(f"RL step ({episodes} episodes + update)    {step:8.3f} s  (median over non-eval steps)")
    print(f"sampler with KV cache              {statistics.median(with_cache):8.0f} tokens/s")
    print(f"sampler without KV cache           {statistics.median(without):8.0f} tokens/s")
    print(f"KV-cache speed-up                  {statistics.median(with_cache) / statistics.median(without):8.1f} x")
    print(f"healthy 24-step run, 4 evaluations {total:8.2f} s  (target < 90 s)")


if __name__ == "__main__":
    main()
