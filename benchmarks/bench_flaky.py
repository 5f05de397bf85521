"""Accuracy and cost of `rlbisect run --flaky` against a predicate that flips its verdict.

Two layers. By default, hundreds of simulated bisects per flip rate with the pure search
(:mod:`rlbisect.bisect.bayes`; fixed seeds; seconds), next to a fixed schedule of 10 runs per
probe with a majority verdict (git's own choice of commits). With ``--real``, the acceptance
measurement through git: HISTORIES repositories of COMMITS commits each, bisected by the real
CLI (``python -m rlbisect.cli run GOOD..BAD --flaky --json``) with an ``sh`` predicate that
reads the commit's ``state`` file and flips it with the given probability, drawing from a
hash of a counter file outside the repository and a per-history seed. The tool is never told
the rate.

    python benchmarks/bench_flaky.py [--trials 400] [--commits 64]
    python benchmarks/bench_flaky.py --real [--histories 40] [--real-rates 0.1]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rlbisect.bisect import bayes, search

RATES = (0.0, 0.05, 0.1, 0.2)


def flaky_oracle(culprit: int, rate: float, rng: random.Random):
    def oracle(i: int) -> str:
        return "bad" if (i >= culprit) != (rng.random() < rate) else "good"
    return oracle


def simulate_flaky(n: int, rate: float, trials: int, seed: int) -> dict:
    """The --flaky search on ``trials`` random culprits among positions 1..n."""
    correct, wrong, runs = 0, 0, []
    for t in range(trials):
        rng = random.Random(seed * 1_000_003 + t)
        culprit = rng.randint(1, n)
        out = bayes.simulate(n, flaky_oracle(culprit, rate, rng))
        correct += out.decision.status == "found" and out.decision.first_bad == culprit
        wrong += out.decision.status == "found" and out.decision.first_bad != culprit
        runs.append(len(out.runs))
    return {"accuracy": correct / trials, "wrong": wrong / trials, "runs": runs}


def simulate_fixed(n: int, rate: float, trials: int, seed: int, repeats: int = 10) -> dict:
    """Baseline: git's bisection, each probe run ``repeats`` times, majority verdict (a tie is
    bad). Cost is ``repeats`` x the probes of a deterministic bisect (60 for 64 commits)."""
    names = [f"c{i}" for i in range(n + 1)]
    parents = search.linear_history(names)
    correct, runs = 0, []
    for t in range(trials):
        rng = random.Random(seed * 1_000_003 + t)
        culprit = rng.randint(1, n)
        noisy = flaky_oracle(culprit, rate, rng)

        def majority(c: str) -> str:
            bad = sum(noisy(int(c[1:])) == "bad" for _ in range(repeats))
            return "bad" if 2 * bad >= repeats else "good"
        out = search.simulate(parents, [names[0]], names[-1], majority)
        correct += out.first_bad == names[culprit]
        runs.append(repeats * len(out.probes))
    return {"accuracy": correct / trials, "wrong": 1 - correct / trials, "runs": runs}


def row(label: str, res: dict) -> str:
    r = np.asarray(res["runs"])
    return (f"{label:<28} {res['accuracy']:>8.1%} {res['wrong']:>6.1%} {r.mean():>9.1f} "
            f"{np.percentile(r, 95):>8.0f} {r.max():>6d}")


def flaky_script(counter: Path, seed: int, rate: float) -> list[str]:
    """sh predicate: the ``state`` file's verdict, flipped with probability ``rate`` per run."""
    return ["sh", "-c",
            f'c=$(cat {counter} 2>/dev/null || echo 0); c=$((c + 1)); echo $c > {counter}\n'
            f'x=$(( (c * 1000003 + {seed} * 7919 + 12345) & 2147483647 ))\n'
            'x=$(( ((x ^ (x >> 13)) * 1274126177) & 2147483647 ))\n'
            'x=$(( ((x ^ (x >> 16)) * 1911520717) & 2147483647 ))\n'
            'x=$(( x ^ (x >> 13) ))\n'
            'v=0; [ "$(cat state)" = bad ] && v=1\n'
            f'[ $((x % 1000)) -lt {round(rate * 1000)} ] && v=$((1 - v))\n'
            'exit $v\n']


def real(histories: int, commits: int, rate: float, seed: int) -> dict:
    """Bisect ``histories`` real repositories through the CLI; returns accuracy and runs."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_bisect_overhead import build  # the same 64-commit line of `state` files

    correct, wrong, runs, seconds, codes = 0, 0, [], [], []
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="rlbisect-bench-flaky-") as tmp:
        for h in range(histories):
            culprit = rng.randint(1, commits - 1)
            repo, out = Path(tmp) / f"r{h}", Path(tmp) / f"r{h}.json"
            build(repo, commits, culprit)
            culprit_sha = subprocess.run(["git", "rev-parse", f"main~{commits - 1 - culprit}"],
                                         cwd=repo, capture_output=True, text=True,
                                         check=True).stdout.strip()
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "rlbisect.cli", "run", f"main~{commits - 1}..main",
                 "--repo", str(repo), "--flaky", "--json", str(out), "--",
                 *flaky_script(Path(tmp) / f"counter{h}", seed * 1000 + h, rate)],
                capture_output=True, text=True)
            seconds.append(time.perf_counter() - t0)
            data = json.loads(out.read_text())
            codes.append(proc.returncode)
            correct += data["first_bad"] == culprit_sha
            wrong += data["first_bad"] not in (None, culprit_sha)
            runs.append(data["n_runs"])
    return {"accuracy": correct / histories, "wrong": wrong / histories, "runs": runs,
            "seconds": seconds, "codes": codes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=64, help="commits per history, GOOD included")
    ap.add_argument("--trials", type=int, default=400, help="simulated bisects per flip rate")
    ap.add_argument("--seed", type=int, default=2024, help="base seed of culprits and flips")
    ap.add_argument("--real", action="store_true", help="also bisect real repositories via git")
    ap.add_argument("--histories", type=int, default=40, help="--real: repositories per rate")
    ap.add_argument("--real-rates", default="0.1", help="--real: comma-separated flip rates")
    args = ap.parse_args()
    n = args.commits - 1
    print(f"{args.commits}-commit history (N = {n} candidates, ceil(log2 N) = "
          f"{math.ceil(math.log2(n))}); {args.trials} simulated bisects per row, seed {args.seed}")
    head = f"{'accuracy':>8} {'wrong':>6} {'mean runs':>9} {'p95 runs':>8} {'max':>6}"
    print(f"{'search, flip rate':<28} {head}")
    t0 = time.perf_counter()
    for rate in RATES:
        print(row(f"--flaky, {rate:g}", simulate_flaky(n, rate, args.trials, args.seed)),
              flush=True)
    for rate in RATES:
        print(row(f"fixed 10 runs/probe, {rate:g}",
                  simulate_fixed(n, rate, args.trials, args.seed)), flush=True)
    print(f"(simulation: {time.perf_counter() - t0:.1f}s; wrong = a culprit named with confidence "
          "but not the right one; the rest of 100% - accuracy ended unsure, exit 3)")
    if args.real:
        print(f"\nreal git: {args.histories} repositories per rate, `rlbisect run --flaky` "
              "(CLI subprocess)")
        print(f"{'flip rate':<28} {head} {'s/bisect':>9}  exit codes")
        for rate in (float(x) for x in args.real_rates.split(",")):
            res = real(args.histories, args.commits, rate, args.seed)
            codes = {c: res["codes"].count(c) for c in sorted(set(res["codes"]))}
            print(row(f"{rate:g}", res) + f" {np.mean(res['seconds']):>9.2f}  {codes}",
                  flush=True)


if __name__ == "__main__":
    main()
