"""False alarms of the checks on healthy TinyAgent: every check (the chapter's nine and ours) on
20 probe seeds, in both loss modes, at temperature 1 and 0.7, with and without a KL term
(160 probe batches). Target: 0. Usage: python benchmarks/bench_check_false_alarms.py [--seeds 20]"""

from __future__ import annotations

import argparse
import itertools
import time

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import sanity_checks

SETTINGS = list(itertools.product(("token_mean", "seq_mean_token_mean"), (1.0, 0.7), (0.0, 0.1)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    a = p.parse_args()
    print(f"{'loss_mode':<20} {'temperature':>11} {'kl_coef':>7} {'batches':>7} {'false alarms':>12}  n/a")
    total, alarms, t0 = 0, 0, time.perf_counter()
    for loss_mode, temperature, kl in SETTINGS:
        bad, na = [], set()
        for seed in range(1, a.seeds + 1):
            res = sanity_checks(make_adapter(seed=seed, kl_coef=kl, temperature=temperature, loss_mode=loss_mode))
            bad += [(seed, name, r.value) for name, r in res.items() if not r.passed]
            na |= {name for name, r in res.items() if r.na}
        total, alarms = total + a.seeds, alarms + len(bad)
        print(f"{loss_mode:<20} {temperature:>11g} {kl:>7g} {a.seeds:>7} {len(bad):>12}  {', '.join(sorted(na)) or '-'}")
        for seed, name, value in bad:
            print(f"    seed {seed}: {name} = {value:.3g}")
    print(f"{total} probe batches, {alarms} false alarms, {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
