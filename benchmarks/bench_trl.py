"""The sixteen checks on TRL's GRPOTrainer against one TRL training step, both timed in one run
(target: checks <= 3x a step). A step is what `trainer.train()` does per optimizer step (sample,
score, forward/backward over the accumulation window, optimizer step), timed between the
TrainerCallback events that bracket it; the checks include sampling their probe batch.

Usage: python benchmarks/bench_trl.py [--loss-type grpo] [--num-iterations 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loss-type", default="grpo")
    ap.add_argument("--num-iterations", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from transformers import TrainerCallback
    from transformers.utils import logging
    logging.set_verbosity_error()

    from rlbisect.frameworks.trl.adapter import GRPOAdapter
    from rlbisect.frameworks.trl.tiny import build_trainer
    from rlbisect.check.invariants import sanity_checks

    opts = {"loss_type": args.loss_type, "num_iterations": args.num_iterations}

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t = [], None

        def on_step_begin(self, *a, **k):
            self._t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._t)

    steps, checks = [], []
    for r in range(args.repeats):      # alternate, so both sides see the same machine state
        trainer = build_trainer(**opts)
        trainer.args.max_steps = 4
        timer = StepTimer()
        trainer.add_callback(timer)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        steps += timer.times[1:]      # the first step pays one-time setup
        adapter = GRPOAdapter(build_trainer(**opts), seed=1 + r)
        t0 = time.perf_counter()
        results = sanity_checks(adapter)
        checks.append(time.perf_counter() - t0)
        assert all(x.passed for x in results.values()), "a check failed on unmodified TRL"
    step, check = statistics.median(steps), statistics.median(checks)
    import trl
    print(f"TRL {trl.__version__}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{opts}, 32 episodes per generation batch")
    print(f"one TRL training step: {step * 1e3:.0f} ms (median of {len(steps)})")
    print(f"the sixteen checks:    {check * 1e3:.0f} ms (median of {len(checks)})")
    print(f"ratio: {check / step:.2f}x (target <= 3x)")


if __name__ == "__main__":
    main()
