"""How far the measured search (`--flaky` with `--metric`) is from searches that know more than it
can: the same simulated histories, the same draws, three searches.

* shipped: `rlbisect.bisect.measured.MeasuredSearch` as `rlbisect run` uses it (ranks, each side's
  mean and spread unknown);
* told the spread: the same search on the raw values with the seed spread known (its
  Normal-Inverse-Gamma prior pinned at sigma = 1) and both means unknown;
* oracle: both sides' means and the spread known: the exact posterior over the culprit, each run
  where it tells most (mutual information by quadrature), the same stop (posterior 0.975).

A user knows neither mean (the baseline, nor how large the regression is), so the oracle is a floor
no search reaches; the middle row is what knowing the seed spread alone would buy.

``--grid H``: also, on the first H histories, the exact search told the spread and the direction
(a grid over the baseline and the size of the drop), and the same told the baseline too; slow
(about a minute a history on 64 commits).

Usage: python benchmarks/bench_measured_bounds.py [--histories 100] [--shifts 1,2,4] [--commits 32,64]
       python benchmarks/bench_measured_bounds.py --histories 20 --shifts 1 --commits 64 --grid 20
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import bench_measured as bm   # noqa: E402   (its histories and its driver of the search)
from rlbisect.bisect import measured, measured_fit   # noqa: E402

STOP = 0.975     # the search's own: 1 - (1 - 0.95) / 2


@contextlib.contextmanager
def told_the_spread():
    """The shipped search on raw values, its prior pinned at sigma^2 = 1 (IG(1e4, 1e4)) with a
    vague prior on each side's mean (and without the values' second view: it is one)."""
    saved = measured.normal_scores, measured_fit.A0, measured_fit.B0, measured_fit.KAPPA0, measured.VALUES_STOP
    measured.normal_scores = lambda v: np.asarray(v, float)
    measured.VALUES_STOP = 2.0
    measured_fit.A0 = measured_fit.B0 = 1e4
    measured_fit.KAPPA0 = 0.01
    try:
        yield
    finally:
        measured.normal_scores, measured_fit.A0, measured_fit.B0, measured_fit.KAPPA0, measured.VALUES_STOP = saved


def oracle(h: bm.History) -> tuple[int | None, int]:
    """Both means (0 and -shift) and the spread (1) known; positions 0..N, culprit in 1..N."""
    n, delta = bm.N, h.shift
    ks = np.arange(1, n + 1)
    xs = np.linspace(-8 - delta, 8, 801)
    dx = xs[1] - xs[0]

    def pdf(x, mean):
        return np.exp(-0.5 * (x - mean) ** 2) / np.sqrt(2 * np.pi)

    def entropy(p):
        return -(p * np.log(np.maximum(p, 1e-300))).sum() * dx
    noise = entropy(pdf(xs, 0.0))
    logp, seen, runs = np.zeros(n), {}, 0
    while runs < bm.BUDGET:
        post = np.exp(logp - logp.max())
        post /= post.sum()
        if post.max() >= STOP:
            return int(ks[post.argmax()]), runs
        bad_side = np.cumsum(post)                   # P(k <= c): a run at c is on the bad side
        gains = [entropy((1 - b) * pdf(xs, 0.0) + b * pdf(xs, -delta)) - noise for b in np.r_[0.0, bad_side]]
        c = int(np.argmax(gains))
        x = h.run(c, seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
        runs += 1
        logp += np.where(ks <= c, np.log(pdf(x, -delta)), np.log(pdf(x, 0.0)))
    return None, runs


def grid(h: bm.History, baselines: np.ndarray, drops: np.ndarray) -> tuple[int | None, int]:
    """The exact posterior over (culprit, baseline, drop) on a grid, the spread (1) and the
    direction known; each run where it tells most about the culprit; one run at each end first."""
    n = bm.N
    ks = np.arange(1, n + 1)
    b0, d = (a.ravel() for a in np.meshgrid(baselines, drops, indexing="ij"))
    xs = np.linspace(-10, 6, 321)
    dx = xs[1] - xs[0]

    def pdf(x, mean):
        return np.exp(-0.5 * (x - mean) ** 2) / np.sqrt(2 * np.pi)
    good, bad = pdf(xs[None, :], b0[:, None]), pdf(xs[None, :], (b0 - d)[:, None])   # [theta, x]
    loglik, seen, runs, first = np.zeros((len(b0), n)), {}, 0, [0, n]
    while runs < bm.BUDGET:
        joint = np.exp(loglik - loglik.max())
        joint /= joint.sum()
        pk = joint.sum(0)
        if not first and pk.max() >= STOP:
            return int(ks[pk.argmax()]), runs
        if first:
            c = first.pop(0)
        else:
            cond = joint / np.maximum(pk, 1e-300)              # P(theta | k)
            given_k_good, given_k_bad = cond.T @ good, cond.T @ bad     # [k, x]
            gains = []
            for cand in range(n + 1):
                dens = np.where((ks <= cand)[:, None], given_k_bad, given_k_good)
                mix = pk @ dens
                h_y = -(mix * np.log(mix + 1e-300)).sum() * dx
                h_yk = -(dens * np.log(dens + 1e-300)).sum(1) * dx
                gains.append(h_y - (pk * h_yk).sum())
            c = int(np.argmax(gains))
        x = h.run(c, seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
        runs += 1
        loglik += -0.5 * (x - np.where((ks <= c)[None, :], (b0 - d)[:, None], b0[:, None])) ** 2
    return None, runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--shifts", default="1,2,4")
    ap.add_argument("--commits", default="32,64")
    ap.add_argument("--grid", type=int, default=0, metavar="H", help="also the grid searches on H histories")
    args = ap.parse_args()
    print("| commits | shift (seed spreads) | shipped: right / wrong / none, runs (p95) | told the spread | oracle |")
    print("|---|---|---|---|---|")
    for commits in (int(c) for c in args.commits.split(",")):
        bm.N = commits - 1          # positions 0..N: GOOD, the commits after it, BAD the last
        for shift in (float(s) for s in args.shifts.split(",")):
            t0 = time.perf_counter()
            hs = [bm.History("normal", shift, 1000 * i + 7) for i in range(args.histories)]
            truth = [h.culprit for h in hs]
            shipped = [bm.measured(h)[:2] for h in hs]
            with told_the_spread():
                told = [bm.measured(h)[:2] for h in hs]
            best = [oracle(h) for h in hs]
            print(f"| {commits} | {shift:g} | {bm.tally(shipped, truth)} | {bm.tally(told, truth)} | "
                  f"{bm.tally(best, truth)} |", flush=True)
            print(f"  ({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
            if args.grid:
                few, drops = hs[:args.grid], np.linspace(0.25, 6, 24)
                told = [grid(h, np.linspace(-3, 3, 25), drops) for h in few]
                base = [grid(h, np.zeros(1), drops) for h in few]
                cut = [h.culprit for h in few]
                print(f"  first {len(few)}: shipped {bm.tally(shipped[:len(few)], cut)}; exact, told the spread and "
                      f"the direction {bm.tally(told, cut)}; told the baseline too {bm.tally(base, cut)}", flush=True)


if __name__ == "__main__":
    main()
