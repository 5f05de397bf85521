"""False alarms of the default `rlbisect check` on healthy TinyAgent over a settings sweep.

Every check (step-0 at every declared setting, and the run-level checks: what `rlbisect check`
runs by default) on probe seeds 1..N at each setting of the sweep: loss modes, temperatures, KL off
and on with each estimator, entropy coefficients, epochs x minibatches, accumulation, optimizers
and schedules, a binding gradient clip, and a few settings that combine them. Target: 0.

Usage: python benchmarks/bench_check_false_alarms.py [--seeds 20] [--settings 0,3] [--step0-only]
"""

from __future__ import annotations

import argparse
import time

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import check_seeds

# one factor at a time away from the defaults, then combinations; kl_coef is the factory's own option
SWEEP: list[dict] = [
    {},
    {"kl_coef": 0.0},
    {"loss_mode": "seq_mean_token_mean"},
    {"temperature": 0.7},
    {"temperature": 1.3},
    {"kl_kind": "k1"},
    {"kl_coef": 0.5, "kl_kind": "k3"},
    {"entropy_coef": 0.01},
    {"entropy_coef": 0.3},
    {"epochs": 2, "minibatches": 4},
    {"minibatches": 1},
    {"microbatches": 4},
    {"optimizer": "adamw", "weight_decay": 0.1},
    {"lr_schedule": "linear", "warmup_steps": 2},
    {"lr_schedule": "cosine", "warmup_steps": 1},
    {"max_grad_norm": 0.01},
    {"clip_eps": 0.05},
    {"loss_mode": "seq_mean_token_mean", "temperature": 0.7, "kl_kind": "k1", "entropy_coef": 0.05,
     "epochs": 2, "microbatches": 2},
    {"kl_coef": 0.0, "temperature": 0.8, "optimizer": "adamw", "weight_decay": 0.01, "lr_schedule": "cosine",
     "max_grad_norm": 0.05},
]


def label(s: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in s.items()) or "defaults (kl_coef=0.1)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--settings", default=None, help="indices into the sweep, e.g. 0,3 (default: all)")
    p.add_argument("--step0-only", action="store_true", help="without the run-level checks (--no-runs)")
    a = p.parse_args()
    sweep = [SWEEP[int(i)] for i in a.settings.split(",")] if a.settings else SWEEP
    print(f"{'setting':<60} {'seeds':>5} {'false alarms':>12}  s/check  n/a")
    total, alarms, t0 = 0, [], time.perf_counter()
    for s in sweep:
        bad, na, t = [], set(), time.perf_counter()
        opts = {k: v for k, v in s.items() if k != "kl_coef"}
        for seed in range(1, a.seeds + 1):
            res = check_seeds(lambda sd: make_adapter(seed=sd, kl_coef=s.get("kl_coef", 0.1), **opts), [seed],
                              runs=not a.step0_only)
            bad += [(seed, name, r.value, r.setting) for name, r in res.items() if r.failed]
            na |= {name for name, r in res.items() if r.na}
        total, alarms = total + a.seeds, alarms + bad
        print(f"{label(s):<60} {a.seeds:>5} {len(bad):>12}  {(time.perf_counter() - t) / a.seeds:7.2f}  "
              f"{len(na)} checks n/a", flush=True)
        for seed, name, value, at in bad:
            print(f"    seed {seed}: {name} = {value:.3g}{f' at {at!r}' if at else ''}")
    print(f"\n{len(alarms)} false alarms over {total} checks of healthy code "
          f"({len(sweep)} settings x {a.seeds} seeds, {'step-0 only' if a.step0_only else 'step-0 + run-level'}); "
          f"{time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
