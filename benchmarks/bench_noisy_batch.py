"""`--flaky --jobs J` in simulation: rounds of J runs against the sequential search's runs.

On bench_flaky's histories and draws (the same culprit and the same luck for every J: run r of a
search on history h fails iff ``draw(seed, h, r)`` is below the rate of its commit's side), the
noisy search once with one run per round and once per J in ``--jobs`` with rounds of J runs
(:func:`rlbisect.bisect.noisy_batch.propose_batch`). Per row and J: right / wrong / none, mean
(p95) runs, mean rounds, and rounds as a share of the sequential search's mean runs (issue 37's
bar: at most 0.35 for J = 4, the same accuracy).

    python benchmarks/bench_noisy_batch.py [--jobs 2,4,8] [--histories 100] [--pairs 0.1:0.9,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_flaky  # noqa: E402

from rlbisect.bisect.simulate import simulate  # noqa: E402

PAIRS = "0:1,0.05:0.95,0.1:0.9,0.2:0.8,0:0.9,0.05:0.5,0.2:0.6"


def one(args: tuple) -> tuple:
    """One history, one J: (case, J, culprit, named or None, runs, rounds)."""
    case, h, n, seed, jobs, distinct = args
    _, before, after = bench_flaky.CASES[case]
    culprit, hseed = bench_flaky.history(seed, case, h, n)
    count = [0]

    def verdict(pos: int) -> str:
        count[0] += 1
        rate = after if pos >= culprit else before
        return "bad" if bench_flaky.draw(hseed, count[0]) < round(1000 * rate) else "good"
    out = simulate(n, verdict, jobs=jobs, distinct=distinct)
    named = out.decision.first_bad if out.decision.status == "found" else None
    return case, jobs, culprit, named, len(out.runs), out.rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="4", help="runs per round to compare with 1, comma-separated")
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--pairs", default=PAIRS, metavar="F0:F1,...")
    ap.add_argument("--distinct", action="store_true", help="no commit twice in a round")
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    bench_flaky.CASES = bench_flaky.parse_pairs(args.pairs)
    levels = [1] + [int(j) for j in args.jobs.split(",") if int(j) > 1]
    n, t0 = args.commits - 1, time.perf_counter()
    print(f"{args.commits}-commit histories, {args.histories} per row, seed {args.seed}; "
          f"rounds of J runs{' (distinct commits)' if args.distinct else ''}")
    with Pool(args.processes) as pool:
        res = pool.map(one, [(c, h, n, args.seed, j, args.distinct)
                             for c in range(len(bench_flaky.CASES)) for h in range(args.histories)
                             for j in levels], chunksize=4)
    print("| rise | J | right / wrong / none | mean runs (p95) | mean rounds | rounds / J=1 runs |")
    print("|---|---|---|---|---|---|")
    for c, (label, _, _) in enumerate(bench_flaky.CASES):
        seq = None
        for j in levels:
            rows = [r for r in res if r[0] == c and r[1] == j]
            right = sum(r[3] == r[2] for r in rows)
            wrong = sum(r[3] is not None and r[3] != r[2] for r in rows)
            runs, rounds = np.array([r[4] for r in rows]), np.array([r[5] for r in rows])
            seq = runs.mean() if j == 1 else seq
            print(f"| {label} | {j} | {right} / {wrong} / {len(rows) - right - wrong} | "
                  f"{runs.mean():.1f} ({np.percentile(runs, 95):.0f}) | {rounds.mean():.1f} | "
                  f"{rounds.mean() / seq:.2f} |", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
