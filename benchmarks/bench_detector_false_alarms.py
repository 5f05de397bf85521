"""The spike detectors on healthy TinyAgent runs: every default rule must stay silent.

The calibration sweep the defaults in `rlbisect/steps/spike_rules.py` were set against: 6 seeds x
4 settings (default, kl_coef 0.1, temperature 0.7, seq_mean_token_mean) x 48 steps, scanned by the
default detector set. Prints each run's peaks of the signals the rules watch and every hit (a hit
on healthy code is a false alarm; target 0).

Usage: python benchmarks/bench_detector_false_alarms.py [--seeds 6] [--steps 48]   (about 5 min)
"""

from __future__ import annotations

import argparse
import statistics

from reference_trainer.config import make_config
from reference_trainer.train import run
from rlbisect.steps.spikes import default_detectors

SETTINGS = ({}, {"kl_coef": 0.1}, {"temperature": 0.7}, {"loss_mode": "seq_mean_token_mean"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=48)
    args = ap.parse_args()
    alarms, spike = [], 0.0
    for knobs in SETTINGS:
        for seed in range(args.seeds):
            rows = run(make_config(seed=seed, **knobs), args.steps)
            hits = default_detectors().scan(rows)
            alarms += [(knobs, seed, h.detector, h.step) for h in hits]
            grad = [r["grad_norm"] for r in rows]
            # the largest single-step grad_norm against the median of the steps before it
            spike = max([spike] + [g / statistics.median(grad[:i]) for i, g in enumerate(grad) if i >= 8])
            print(f"{str(knobs) if knobs else 'default':<40} seed {seed}: approx_kl <= {max(r['approx_kl'] for r in rows):.4f}, "
                  f"grad_norm <= {max(grad):.2f}, logp_gap <= {max(r['logp_gap'] for r in rows):.1e}, "
                  f"{len(hits)} hits", flush=True)
    print(f"{len(SETTINGS) * args.seeds} healthy runs of {args.steps} steps: {len(alarms)} false alarms {alarms}; "
          f"largest grad_norm spike {spike:.1f}x its running median")


if __name__ == "__main__":
    main()
