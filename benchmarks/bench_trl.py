"""What `rlbisect check --adapter rlbisect.frameworks.trl:demo` costs against one TRL training step,
both timed in one run, alternating (target: checks <= (3 + K) x a step, K = the training steps the
run-level checks take; K = 0 while the adapter offers no train_run). A step is what `trainer.train()`
does per optimizer step (sample, score, forward/backward over the accumulation window, optimizer
step), timed between the TrainerCallback events that bracket it. The checks are what the CLI runs by
default: every step-0 check at the configured setting and at each declared variant (so including
the variants' trainers being built and scoring the probe batch again), and beside them, in a forked
child on the second core, the run-level checks; then the same parts one after another, for the split.

Usage: python benchmarks/bench_trl.py [--loss-type grpo] [--num-iterations 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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

    from rlbisect._proc.forked import usable_cores
    from rlbisect.check.adapter import Offers
    from rlbisect.check.invariants import check_seeds, sanity_checks
    from rlbisect.check.run_level import STEPS, VARIANT_STEPS, run_checks
    from rlbisect.frameworks.trl.adapter import demo
    from rlbisect.frameworks.trl.tiny import build_trainer

    opts = {"loss_type": args.loss_type, "num_iterations": args.num_iterations}

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t = [], None

        def on_step_begin(self, *a, **k):
            self._t = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._t)

    steps, checks, parts, variants, K = [], [], [], 0, 0
    for r in range(args.repeats):      # alternate, so both sides see the same machine state
        # each part starts from a collected heap, as a fresh `rlbisect check` process does: the
        # trainers and adapters of the part before are otherwise still in memory, and the forked
        # child copies every page either process writes
        gc.collect()
        trainer = build_trainer(**opts)
        trainer.args.max_steps = 4
        timer = StepTimer()
        trainer.add_callback(timer)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        steps += timer.times[1:]      # the first step pays one-time setup
        del trainer, timer
        gc.collect()
        t0 = time.perf_counter()
        adapter = demo(seed=1 + r, **opts)          # building the adapter is part of what the CLI pays
        with contextlib.redirect_stdout(io.StringIO()):    # as the CLI runs them: both at once on 2 cores
            results = check_seeds(lambda seed: adapter, [1 + r], runs=True)
        checks.append(time.perf_counter() - t0)
        failed = [x.name for x in results.values() if x.failed]
        assert not failed, f"a check failed on unmodified TRL: {failed}"
        del adapter, results
        gc.collect()
        t0 = time.perf_counter()                    # the parts one after another, for the breakdown
        adapter = demo(seed=1 + r, **opts)
        t1 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            sanity_checks(adapter)
            t2 = time.perf_counter()
            run_checks(adapter)
        parts.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
        offers = Offers.of(adapter)
        variants = len(offers.variants) if offers.with_settings else 0
        K = 0 if offers.train_run is None else 2 * STEPS + VARIANT_STEPS * bool(offers.run_variant)
    step, check = statistics.median(steps), statistics.median(checks)
    import trl
    print(f"TRL {trl.__version__}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{opts}, 32 episodes per generation batch, {variants} variants, K = {K} run-level training steps")
    print(f"one TRL training step:   {step * 1e3:.0f} ms (median of {len(steps)})")
    print(f"rlbisect check (default): {check * 1e3:.0f} ms (median of {len(checks)}; the run-level checks "
          f"beside the step-0 checks on a second core: {usable_cores()} usable)")
    build, step0, runs = (statistics.median(p[i] for p in parts) for i in range(3))
    print(f"  of which: building the adapter {build * 1e3:.0f} ms, step-0 checks (probe batch, {variants} "
          f"variant(s)) {step0 * 1e3:.0f} ms ({step0 / step:.1f}x), run-level checks {runs * 1e3:.0f} ms "
          f"({runs / step:.1f}x for K = {K})")
    print(f"ratio: {check / step:.2f}x (target <= 3 + K = {3 + K}x)")


if __name__ == "__main__":
    main()
