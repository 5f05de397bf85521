"""Wall time of `rlbisect run --jobs 1` against `--jobs 2` on one history, side by side.

Builds a 64-commit line whose predicate sleeps 0.5 s (a stand-in for a slow test), then bisects
it alternately with one probe at a time (``run_bisect``, what ``--jobs 1`` runs) and with two
(``run_parallel``, what ``--jobs 2`` runs), each repetition on another culprit, so both see the
same machine load and the same culprits. Prints each run, the median wall times and the
speed-up (target: >= 1.3x on 2 cores); exits 1 if the two ever name different commits.

    python benchmarks/bench_jobs.py [--commits 64] [--reps 3] [--sleep 0.5] [--jobs 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_bisect_overhead import build   # the same 64-commit line (one git fast-import)

from rlbisect.bisect import BisectOptions, bisect, make_predicate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=64, help="commits after GOOD")
    ap.add_argument("--reps", type=int, default=3, help="runs of each (>= 2), alternating")
    ap.add_argument("--sleep", type=float, default=0.5, help="seconds the predicate sleeps")
    ap.add_argument("--jobs", type=int, default=2, help="probes at once in the parallel runs")
    args = ap.parse_args()
    pred = make_predicate(command=["sh", "-c", f'sleep {args.sleep}; test "$(cat state)" = good'])
    walls: dict[int, list[float]] = {1: [], args.jobs: []}
    same = True
    with tempfile.TemporaryDirectory(prefix="rlbisect-bench-jobs-") as tmp:
        for rep in range(max(2, args.reps)):
            culprit = 1 + (rep * 7919 + 23) % args.commits
            repo = Path(tmp) / f"r{rep}"
            build(repo, args.commits + 1, culprit)   # GOOD + COMMITS
            spec = f"main~{args.commits}..main"
            named = {}
            for jobs in ((1, args.jobs) if rep % 2 == 0 else (args.jobs, 1)):   # alternate
                t0 = time.perf_counter()
                res = bisect(repo, spec, pred, BisectOptions(jobs=jobs, use_cache=False,
                                                             diagnose=False))
                wall = time.perf_counter() - t0
                walls[jobs].append(wall)
                named[jobs] = res.first_bad
                print(f"rep {rep + 1} culprit {culprit:2d}  --jobs {jobs}: {wall:6.2f} s  "
                      f"{len(res.probes):2d} probes  {res.rounds} rounds  -> {str(res.first_bad)[:10]}",
                      flush=True)
            same &= named[1] == named[args.jobs] is not None
    one, many = statistics.median(walls[1]), statistics.median(walls[args.jobs])
    print(f"median wall time: --jobs 1 {one:.2f} s, --jobs {args.jobs} {many:.2f} s")
    print(f"speed-up: {one / many:.2f}x (target >= 1.3x); same commit named every time: "
          f"{'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
