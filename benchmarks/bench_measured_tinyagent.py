"""The measured search on real TinyAgent short runs, over a history with a small-effect fault.

`history_fixtures.build_history` makes a repository of TinyAgent with COMMITS commits, one of them
(drawn per history) injecting FAULT. `accum_local` (4 length-bucketed microbatches, each normalised
on its own) looks healthy on the dashboard: over 8 steps, 8 seeds, its mean reward over the last
4 steps is 0.485 (spread 0.056) against the healthy 0.502 (0.022), about one healthy seed spread
lower; `stale_old_logp` (old log-probs taken per minibatch, so the ratio is 1 and nothing clips)
raises it to 0.548, about two spreads higher (`--direction higher`). Both searches run through the
command line, the trainer as the command:

    rlbisect run GOOD..BAD [--flaky] --predicate short-run --metric reward --direction DIR
        --steps 8 -- python -m rlbisect train --seed {seed} --steps {steps} --out {out}/metrics.jsonl

`--flaky` is the measured search (one run per probe, every run pooled); without it, the short-run
predicate decides each commit against GOOD with 3-9 seeds. TinyAgent is deterministic, so the
per-commit predicate's matched seeds repeat GOOD's runs exactly wherever the code is unchanged.
Reported: right / wrong / none, training runs (mean), minutes.

Usage: python benchmarks/bench_measured_tinyagent.py [--histories 4] [--first 0] [--fault accum_local] [--commits 10]
       [--direction lower]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_measured import tally   # noqa: E402
from history_fixtures import build_history   # noqa: E402

TRAIN = [sys.executable, "-m", "rlbisect", "train", "--seed", "{seed}", "--steps", "{steps}",
         "--eval-every", "{steps}", "--out", "{out}/metrics.jsonl"]


def search(h, flaky: bool, tmp: Path, direction: str) -> tuple[int | None, int, float]:
    """One search through the CLI -> (index of the commit it named among h.commits, or None;
    training runs; seconds)."""
    report = tmp / f"{'measured' if flaky else 'per-commit'}.json"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlbisect", "run", f"{h.good}..{h.bad}", "--repo", h.path,
                           *(["--flaky"] if flaky else []), "--no-cache", "--predicate", "short-run",
                           "--metric", "reward", "--direction", direction, "--steps", "8",
                           "--json", str(report), "--", *TRAIN],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    seconds = time.perf_counter() - t0
    if not report.exists():   # the run itself failed: no answer, and say so
        print(f"  rlbisect run failed: {done.stderr.strip()[-300:]}")
        return None, 0, seconds
    res = json.loads(report.read_text())
    shas = [c for c, _ in h.commits]
    named = shas.index(res["first_bad"]) if res.get("first_bad") in shas else None
    if flaky:
        runs = len(res["probes"])
    else:   # the probes' seeds, and GOOD's (as many as the most any probe used)
        seeds = [int(p["values"].get("seeds", 1)) for p in res["probes"]]
        runs = sum(seeds) + max(seeds + [0])
    return named, runs, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--histories", type=int, default=4)
    p.add_argument("--first", type=int, default=0, help="the first history's index (to extend an earlier run)")
    p.add_argument("--fault", default="accum_local")
    p.add_argument("--commits", type=int, default=10)
    p.add_argument("--direction", default="lower", help="lower, higher or change (stale_old_logp raises the reward)")
    a = p.parse_args()
    out: dict[str, list] = {"measured (--flaky)": [], "per-commit": []}
    truth = []
    for i in range(a.first, a.first + a.histories):
        bad_at = int(np.random.default_rng([a.commits, i]).integers(1, a.commits + 1))
        with tempfile.TemporaryDirectory() as tmp:
            h = build_history(Path(tmp) / "h", fault=a.fault, commits=a.commits, bad_at=bad_at)
            truth.append(bad_at - 1)
            for name, flaky in (("measured (--flaky)", True), ("per-commit", False)):
                named, runs, seconds = search(h, flaky, Path(tmp), a.direction)
                out[name].append((named, runs, seconds))
                print(f"history {i} (fault at {bad_at} of {a.commits}): {name:18s} named "
                      f"{'nothing' if named is None else named + 1}, {runs} runs, {seconds / 60:.1f} min", flush=True)
    print(f"== {a.fault}, {a.histories} histories of {a.commits} commits, 8-step runs")
    for name, rows in out.items():
        print(f"  {name:18s} {tally([(c, r) for c, r, _ in rows], truth)}; "
              f"{np.mean([s for *_, s in rows]) / 60:.1f} min a search")


if __name__ == "__main__":
    main()
