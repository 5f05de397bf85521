"""Per-probe overhead of `rlbisect run`: everything but the predicate's own time.

Builds a 64-commit repository in a temp dir, bisects it with a trivial predicate (read one file)
for several positions of the first bad commit, and prints the median overhead per probe
(target: <= 0.5 s), the fixed start/finish cost of a run, and a cached re-run's speed-up.

    python benchmarks/bench_bisect_overhead.py [--commits 64] [--runs 8]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rlbisect.bisect import bisect, make_predicate

PREDICATE = ["sh", "-c", 'test "$(cat state)" = good']


def build(path: Path, n: int, first_bad: int) -> None:
    """A line of ``n`` commits; ``state`` is good before ``first_bad`` and bad from it on."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream = []
    for i in range(n):
        body = "bad\n" if i >= first_bad else "good\n"
        msg = f"commit {i}\n"
        stream.append(f"commit refs/heads/main\n"
                      f"committer B <b@example.com> {1_700_000_000 + i} +0000\n"
                      f"data {len(msg)}\n{msg}"  # fast-import chains commits on a branch
                      f"M 100644 inline state\ndata {len(body)}\n{body}"
                      f"M 100644 inline n\ndata {len(str(i)) + 1}\n{i}\n\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input="".join(stream), text=True,
                   check=True)
    subprocess.run(["git", "reset", "-q", "--hard", "main"], cwd=path, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=64, help="commits in the test repository")
    ap.add_argument("--runs", type=int, default=8, help="bisects, each with another culprit")
    args = ap.parse_args()
    pred = make_predicate(command=PREDICATE)
    overheads, predicate_s, fixed, firsts, cached = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="rlbisect-bench-") as tmp:
        for k in range(args.runs):
            culprit = 1 + (k * 7919) % (args.commits - 1)
            repo = Path(tmp) / f"r{k}"
            build(repo, args.commits, culprit)
            t0 = time.perf_counter()
            res = bisect(repo, f"main~{args.commits - 1}..main", pred)
            total = time.perf_counter() - t0
            assert res.status == "found", res.status
            overheads += [p.overhead for p in res.probes]
            predicate_s += [p.seconds for p in res.probes]
            fixed.append(total - sum(p.overhead + p.seconds for p in res.probes))
            firsts.append(total)
            t0 = time.perf_counter()
            again = bisect(repo, f"main~{args.commits - 1}..main", pred)
            cached.append(time.perf_counter() - t0)
            assert all(p.cached for p in again.probes)
    print(f"{args.runs} bisects of {args.commits} commits, {len(overheads)} probes")
    print(f"median overhead per probe: {statistics.median(overheads):.3f} s "
          f"(max {max(overheads):.3f} s; target <= 0.5 s)")
    print(f"median predicate time per probe: {statistics.median(predicate_s):.3f} s")
    print(f"median fixed cost per run (start, private repository, cleanup): "
          f"{statistics.median(fixed):.3f} s")
    print(f"median run: {statistics.median(firsts):.3f} s; cached re-run: "
          f"{statistics.median(cached):.3f} s")


if __name__ == "__main__":
    main()
