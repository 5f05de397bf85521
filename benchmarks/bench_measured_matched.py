"""The measured search on a deterministic trainer, where a seed repeats its run across commits.

64-commit histories, the culprit uniform in 1..64, 200 histories per row by default. Each commit
keeps its parent's random stream with probability KEEP (``--keep``); ``--untouched U``: the fault
leaves a share U of the seeds alone. Three ways of choosing seeds, on the same histories:

* ``paired``: as rlbisect runs it (:mod:`rlbisect.bisect.measured_pairs`), and its rounds with
  ``--jobs 4``;
* ``a seed per run``: every run a fresh draw, nothing to pair;
* ``seed n, unread``: the n-th run on seed n with the seeds hidden from the search, so a repeat
  counts as a new draw (the search before pairing).

``--step S``: the metric has levels S seed spreads apart (a pass rate over a few tasks) while
the rest of a run's record is distinct; ``paired, score only`` is the paired search reading
repeats on the score alone (before a run's fingerprint was read).

``--seed-blind``: the training script ignores the seed, so every run at a commit is the same; right
is then no answer (the search says the seed does not reach the run).

Usage: python benchmarks/bench_measured_matched.py [--histories 200] [--keep 0.9] [--untouched 0.3]
       [--step 0.25] [--seed-blind]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from bench_measured import BUDGET, N, History, MeasuredSearch, tally   # noqa: E402


class Deterministic(History):
    """A deterministic trainer: a run is a function of the code's random stream and its seed. A
    commit keeps its parent's stream with probability ``keep`` (a comment, a rename), else draws
    its own. The culprit changes what a run computes: a touched run is another draw, lower by
    ``shift``; a share ``untouched`` of the seeds (a fault in a path some runs never take) gives
    the same run as without the fault."""

    def __init__(self, shift: float, seed: int, keep: float, untouched: float = 0.0):
        super().__init__("normal", shift, seed)
        rng = np.random.default_rng([seed, 1])
        kept = rng.random(N + 1) < keep
        kept[0] = False
        self.stream = np.cumsum(~kept)
        self.spared = rng.random(100 * BUDGET) < untouched   # per seed

    def run(self, pos: int, j: int) -> float:
        touched = pos >= self.culprit and not self.spared[j % (100 * BUDGET)]
        x = np.random.default_rng([self.seed, int(self.stream[pos]), j, int(touched)]).normal()
        return x - (self.shift if touched else 0)


def matched(histories: int, keep: float, untouched: float, step: float = 0.0, blind: bool = False,
            seed: int = 7) -> None:
    """The measured search on a deterministic trainer, three ways: ``paired`` as rlbisect runs it
    (a commit's n-th run on seed n, a fresh seed where a run would only repeat, repeats read as
    such: rlbisect.bisect.measured_pairs); a seed of its own per commit and run (every run a fresh
    draw, nothing to pair); the n-th run on seed n with the seeds hidden from the search (every
    repeat counted as a new draw, as before pairing). With ``step``, the metric has levels
    ``step`` seed spreads apart (a pass rate over a few tasks) and the run's record stays distinct
    (its other metrics): ``paired, score only`` reads repeats on the score alone, as before
    fingerprints. ``blind``: the training script ignores the seed (every run at a commit the same)."""
    labels = ("paired", "paired, score only") if step else ("paired",)
    for shift in (1.0, 2.0):
        hs = [Deterministic(shift, 1000 * i + seed, keep, untouched) for i in range(histories)]
        truth = [h.culprit for h in hs]
        for label in (*labels, "a seed per run", "seed n, unread", "paired, --jobs 4"):
            got, t0, rounds, jobs = [], time.perf_counter(), 0, 4 if label.endswith("4") else 1
            for h in hs:
                s, seen, runs = MeasuredSearch(N, "lower"), {}, 0
                while (d := s.decide(0.95, BUDGET, runs)).status == "probe":
                    picks = [d.probe] if jobs == 1 else s.propose(min(jobs, BUDGET - runs), d.probe)
                    pending: list[tuple[int, int]] = []   # a round's seeds are chosen before any returns
                    for p in picks:
                        j = seen[p] = seen.get(p, -1) + 1
                        seed = s.next_seed(p, pending) if label.startswith("paired") else (
                            1000 * p + j if label == "a seed per run" else j)
                        pending.append((p, seed))
                    for p, seed in pending:
                        x = h.run(p, 0 if blind else seed)
                        score = float(np.round(x / step) * step) if step else x
                        s.observe(p, score, seed if label.startswith("paired") else None,
                                  None if label.endswith("score only") else repr(x))
                    runs, rounds = runs + len(picks), rounds + 1
                got.append((d.first_bad if d.status == "found" else None, runs))
            if label == "paired":
                sequential = np.mean([r for _, r in got])
            extra = (f"; rounds {rounds / histories:.1f} = {rounds / histories / sequential:.2f}x the sequential "
                     "search's runs") if jobs > 1 else ""
            print(f"  deterministic, keep {keep:g}, untouched {untouched:g}, step {step:g}, shift {shift:g}, "
                  f"{label:18s} "
                  f"{tally(got, truth)}{extra}  [{time.perf_counter() - t0:.0f} s]", flush=True)


def main() -> None:
    global BUDGET
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--histories", type=int, default=200)
    p.add_argument("--keep", type=float, default=1.0, help="the chance a commit keeps its parent's random stream")
    p.add_argument("--untouched", type=float, default=0.0, help="the share of seeds the fault leaves unchanged")
    p.add_argument("--step", type=float, default=0.0, help="the metric's levels, this many seed spreads apart")
    p.add_argument("--seed-blind", action="store_true", help="the trainer ignores the seed")
    p.add_argument("--budget", type=int, default=BUDGET, help="runs at most per search")
    p.add_argument("--seed", type=int, default=7, help="the histories' seed (0-999; 7: the docs' histories)")
    a = p.parse_args()
    BUDGET = a.budget
    matched(a.histories, a.keep, a.untouched, a.step, a.seed_blind, a.seed)


if __name__ == "__main__":
    main()
