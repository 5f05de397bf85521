"""The measured search against the cheapest per-commit method that is as accurate.

``bench_measured.py`` compares the measured search with per-commit methods at one setting each
(pinpoint with 20 repeats, today's short-run rule), and at one seed spread those are right in half
the histories or less: their runs are not the price of an answer. This script asks what a
per-commit method has to spend to reach the accuracy the measured search is held to (at least 95%
right and at most 2% wrong): it runs a grid of per-commit settings on the same histories and draws
and names the cheapest that reaches it.

* fixed repeats (Pinpoint, ``bench_measured.pinpoint``): R runs at every probed commit and at
  GOOD, Mann-Whitney against GOOD's at alpha, bad below it;
* sequential (``bench_measured.short_run`` with another :class:`~rlbisect.runs.stats.Rule`):
  Welch against GOOD's runs at k0, k0 + step, ..., cap seeds, bad below alpha / looks, good at
  p >= the "good" bar, and at the cap bad below alpha / 2 (no skip, so no history ends for want
  of a verdict).

Every setting drives git's bisection over ``bench_measured.py``'s 64-commit histories (unmatched
seeds, the culprit uniform; the same draws as the measured search). Chosen on the histories they
are scored on (the default), the per-commit settings get their best case: the cheapest of 288
that happens to meet the bar there. ``--tune T`` chooses them on the histories of seed T and
scores them on ``--seed``'s, as a user who picks a setting in advance would. The three cheapest
that met the bar are printed with the measured search's runs over theirs.

Usage: python benchmarks/bench_per_commit_best.py [--histories 200] [--rows "normal 1,normal 2"]
       [--seed 7] [--tune 3] [--verbose] [--plot docs/per-commit-best.png]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_measured as bm   # noqa: E402
from rlbisect.runs.stats import Rule   # noqa: E402

RIGHT, WRONG = 0.95, 0.02   # the accuracy the measured search is held to
FIXED = [(r, a) for r in (10, 15, 20, 30, 40, 50, 60, 80) for a in (0.01, 0.003, 0.001)]
SEQUENTIAL = sorted({(k0, step, k0 * c, a, same)
                     for k0 in (4, 6, 8, 12, 16, 20) for step in (2, k0 // 2) for c in (2, 3, 4, 5)
                     for a in (0.02, 0.01, 0.005) for same in (0.3, 0.5)})


def score(outcomes: list[tuple[int | None, int]], truth: list[int]) -> tuple[float, float, float]:
    """(share right, share wrong, mean runs)."""
    n = len(truth)
    right = sum(c == t for (c, _), t in zip(outcomes, truth)) / n
    wrong = sum(c is not None and c != t for (c, _), t in zip(outcomes, truth)) / n
    return right, wrong, float(np.mean([r for _, r in outcomes]))


def settings() -> list[tuple[str, Callable[[bm.History], tuple[int | None, int]]]]:
    out = [(f"fixed x{r} alpha {a:g}", partial(bm.pinpoint, repeats=r, alpha=a)) for r, a in FIXED]
    return out + [(f"sequential {k0}+{s}..{cap} alpha {a:g} good at p {same:g}",
                   partial(bm.short_run, rule=Rule(alpha=a, same_p=same, k0=k0, step=s, max_seeds=cap), forced=a / 2))
                  for k0, s, cap, a, same in SEQUENTIAL]


def histories(name: str, seed: int, count: int) -> list[bm.History]:
    kind, shift = bm.ROWS[name]
    return [bm.History(kind, shift, 1000 * i + seed) for i in range(count)]


def plot(points: dict[str, tuple[list[tuple[float, float, float]], tuple[float, float, float]]], path: Path,
         count: int) -> None:
    """Per row, every per-commit setting's share right against its mean runs (filled where it meets
    the bar; on the histories it was chosen on), and the measured search's point."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    cols = min(len(points), 2)
    rows = -(-len(points) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(4.6 * cols, 6.0), 3.6 * rows), squeeze=False)
    for ax, (name, (grid, (mr, _, mruns))) in zip(axes.flat, points.items()):
        meets = [g for g in grid if g[0] >= RIGHT and g[1] <= WRONG]
        ax.scatter([g[2] for g in grid], [100 * g[0] for g in grid], s=10, facecolors="none",
                   edgecolors="grey", label="per-commit setting")
        ax.scatter([g[2] for g in meets], [100 * g[0] for g in meets], s=12, color="tab:blue",
                   label=f"... >= {RIGHT:.0%} right, <= {WRONG:.0%} wrong")
        ax.scatter([mruns], [100 * mr], marker="*", s=160, color="tab:red", label="measured search")
        if meets:
            best = min(g[2] for g in meets)
            ax.axvline(best / 2, color="tab:red", lw=0.8, ls=":")
            ax.annotate("half the cheapest", (best / 2, 5), fontsize=7, rotation=90, ha="right")
        ax.axhline(100 * RIGHT, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xticks([10, 20, 50, 100, 200, 500, 1000])
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylim(0, 101)
        kind, shift = bm.ROWS[name]
        ax.set_title(f"{'normal' if kind == 'normal' else 'heavy-tailed'} seeds, {shift:g} spread{'s' * (shift != 1)} lower",
                     fontsize=10)
        ax.set_xlabel("mean training runs (log)")
        ax.set_ylabel("right culprit (%)")
    for ax in list(axes.flat)[len(points):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="center left")
    fig.suptitle(f"Per-commit settings vs the measured search ({count} histories, {bm.N} commits)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def row(name: str, count: int, seed: int, tune: int, verbose: bool) -> tuple[list, tuple]:
    t0 = time.perf_counter()
    hs = histories(name, seed, count)
    truth = [h.culprit for h in hs]
    print(f"== {name} ({count} histories of {bm.N} commits, seed {seed}; per-commit grid of "
          f"{len(FIXED) + len(SEQUENTIAL)} settings, chosen on {'these histories' if tune == seed else f'seed {tune}'})")
    tuned = hs if tune == seed else histories(name, tune, count)
    meeting, grid = [], []
    for label, run in settings():
        right, wrong, runs = score([run(h) for h in tuned], [h.culprit for h in tuned])
        ok = right >= RIGHT and wrong <= WRONG
        grid.append((right, wrong, runs))
        meeting += [(runs, label, run)] if ok else []
        if verbose:
            print(f"  {label:48s} {100 * right:5.1f}% right, {100 * wrong:4.1f}% wrong, runs {runs:6.1f}"
                  f"{'  meets the bar' if ok else ''}", flush=True)
    measured = right, wrong, runs = score([bm.measured(h)[:2] for h in hs], truth)
    print(f"  measured search: {100 * right:.1f}% right, {100 * wrong:.1f}% wrong, runs {runs:.1f}")
    if not meeting:
        print(f"  no per-commit setting of the grid reaches {RIGHT:.0%} right and {WRONG:.0%} wrong at most")
    for tuned_runs, label, run in sorted(meeting, key=lambda m: m[0])[:3]:   # the three cheapest, scored here
        r, w, n = score([run(h) for h in hs], truth)
        held = r >= RIGHT and w <= WRONG
        print(f"  per-commit {label}: {100 * r:.1f}% right, {100 * w:.1f}% wrong, runs {n:.1f}"
              f"{'' if tune == seed else f' (chosen at {tuned_runs:.1f})'}{'' if held else ' -- misses the bar here'}; "
              f"the measured search {runs / n:.2f}x its runs")
    print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)
    return grid, measured


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--histories", type=int, default=200)
    p.add_argument("--rows", default="normal 1,normal 2,heavy 1,heavy 2",
                   help=f"comma-separated mean shifts, of: {', '.join(r for r in bm.ROWS if not r.startswith('spread'))}")
    p.add_argument("--seed", type=int, default=bm.SEED, help="the histories' seed (7: bench_measured's)")
    p.add_argument("--tune", type=int, default=None, help="choose the per-commit settings on the histories of "
                   "this seed (default: --seed, the per-commit side's best case)")
    p.add_argument("--verbose", action="store_true", help="print every setting of the grid")
    p.add_argument("--plot", type=Path, help="draw each setting's share right against its runs (PNG)")
    a = p.parse_args()
    rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in bm.ROWS or r.startswith("spread")]
    if unknown:
        p.error(f"unknown row(s) {unknown}: the rows are mean shifts, of {[r for r in bm.ROWS if not r.startswith('spread')]}")
    points = {name: row(name, a.histories, a.seed, a.seed if a.tune is None else a.tune, a.verbose) for name in rows}
    if a.plot:
        plot(points, a.plot, a.histories)


if __name__ == "__main__":
    main()
