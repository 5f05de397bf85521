"""The short-run predicate's dashboard judgement on TinyAgent: false alarms and seeds per probe.

1. False alarms. Matched seeds make identical code give identical runs, so a benign commit can
   only be flagged when it changes the random stream (a refactor that draws in another order).
   That is modelled by comparing disjoint seed sets of the same healthy code: POOL runs of 8
   steps, then TRIALS sequential comparisons (GOOD's seeds vs the probe's, 3 then 5, 7, 9), each
   drawing 18 distinct runs from the pool. Reported: the share called bad (target <= 5%), good,
   unknown, and the mean seeds used.
2. Seeds per probe. `rlbisect run --predicate short-run -- python -m rlbisect train ...` on
   simulated histories (6 commits, the fault at 4) for faults the invariants do not all see:
   found or not, probes, mean seeds per probe, seconds.

Usage: python benchmarks/bench_short_run.py [--pool 72] [--trials 400] [--skip-bisect]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlbisect.runs.stats import Rule
from rlbisect.runs.judge import dashboard, scores

CASES = ("entropy_sign", "public_reward", "loss_scale")


def false_alarms(pool: int, trials: int) -> None:
    from reference_trainer.train import short_run
    t0 = time.perf_counter()
    runs = {s: short_run(8, s) for s in range(pool)}
    per_run = scores(runs, dashboard(runs.values()), 4)
    print(f"{pool} healthy runs of 8 steps in {time.perf_counter() - t0:.0f}s; "
          f"{len(per_run)} metrics on the dashboard")
    # the predicate's rule (Welch's and the paired test, the runs taken in seed order) and Welch's
    # alone, on the same draws
    for name, rule in (("with the paired test (shipped)", Rule(paired=True)), ("Welch alone", Rule())):
        rng = random.Random(2026)
        verdicts, seeds = [], []
        for _ in range(trials):
            order = rng.sample(range(pool), 18)

            def side(idx: list[int], k: int) -> dict:
                return {m: [v[i] for i in idx[:k]] for m, v in per_run.items()}
            for k in rule.schedule():
                d = rule.judge(side(order[:9], k), side(order[9:], k))
                if d.verdict != "unknown":
                    break
            verdicts.append(d.verdict)
            seeds.append(k)
        n = len(verdicts)
        print(f"{name}: identical code, disjoint seeds, {n} comparisons: bad {verdicts.count('bad') / n:.1%} "
              f"(target <= 5%), good {verdicts.count('good') / n:.1%}, unknown "
              f"{verdicts.count('unknown') / n:.1%}; mean seeds {statistics.fmean(seeds):.2f}")


def seeds_per_probe() -> None:
    from history_fixtures import build_history
    train = [sys.executable, "-m", "rlbisect", "train", "--seed", "{seed}", "--steps", "{steps}",
             "--eval-every", "{steps}", "--out", "{out}/metrics.jsonl"]
    print(f"\n{'fault':<15} {'found':>5} {'probes':>6} {'seeds/probe':>11} {'seconds':>8}  deciding metrics")
    for fault in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            h = build_history(Path(tmp) / "h", fault=fault, commits=6, bad_at=4)
            out = Path(tmp) / "r.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "rlbisect", "run", f"{h.good}..{h.bad}", "--repo", h.path,
                            "--no-cache", "--predicate", "short-run", "--steps", "8", "--json", str(out),
                            "--", *train], capture_output=True, check=False)
            seconds = time.perf_counter() - t0
            doc = json.loads(out.read_text())
            probes = [p for p in doc["probes"] if "seeds" in p["values"]]
            culprit = next((p for p in doc["probes"] if p["commit"] == doc["first_bad"]), None)
            decided = [m["metric"] for m in (culprit or {}).get("evidence", {}).get("metrics", []) if m["decides"]]
            print(f"{fault:<15} {str(doc['first_bad'] == h.fault_commit):>5} {len(doc['probes']):>6} "
                  f"{statistics.fmean(p['values']['seeds'] for p in probes):>11.2f} {seconds:>8.0f}  "
                  f"{', '.join(decided[:4])}{' ...' if len(decided) > 4 else ''}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", type=int, default=72)
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--skip-bisect", action="store_true")
    a = p.parse_args()
    false_alarms(a.pool, a.trials)
    if not a.skip_bisect:
        seeds_per_probe()


if __name__ == "__main__":
    main()
