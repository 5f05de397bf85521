"""`rlbisect run --flaky` when nothing in GOOD..BAD changed the failure rate, against git-bayesect.

The user marked a BAD that is no worse than GOOD: every commit fails at one rate. The right answer
is "nothing to bisect" (rlbisect's exit 5 ``no_regression`` or 6 ``good_fails``); naming a commit
is wrong. Per rate, over ``bench_flaky``'s simulated histories (a case whose sides fail alike; the
tools in alternating order): how often each tool answered that, named a commit, or gave no answer
(the run budget spent; the peer, which has no budget, past ``--peer-cap`` runs), and its mean runs.
git-bayesect 1.2 has no "nothing changed" answer: it converges on a commit or on GOOD.

    python benchmarks/bench_flaky_nochange.py [--rates 0.05,0.1,0.2,0.5,0.8,0.9] [--histories 40]
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
import bayesect_peer  # noqa: E402

NOTHING = ("no_regression", "good_fails")


def answer(tool: str, outcome: tuple) -> str:
    """``bench_flaky.simulate_history``'s outcome of one tool as nothing / named / none."""
    if tool == "peer":
        return "named" if outcome[0] is not None else "none"
    return "nothing" if outcome[2] in NOTHING else "named" if outcome[2] == "found" else "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="0.05,0.1,0.2,0.5,0.8,0.9",
                    help="constant failure rates, comma-separated, each in [0, 1]")
    ap.add_argument("--histories", type=int, default=40)
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--peer-cap", type=int, default=420, help="the peer's runs before 'none'")
    ap.add_argument("--no-peer", action="store_true", help="rlbisect only")
    args = ap.parse_args()
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        ap.error(f"--rates: numbers in [0, 1], comma-separated, not {args.rates!r}")
    if not rates or not all(0 <= r <= 1 for r in rates) or args.histories < 1 \
            or args.commits < 2:
        ap.error("rates in [0, 1], --histories >= 1, --commits >= 2")
    if not args.no_peer and (why := bayesect_peer.available()):
        sys.exit(f"{why} (or --no-peer)")
    n, start = args.commits - 1, time.time()
    tools = ("rlbisect",) if args.no_peer else ("rlbisect", "peer")
    print(f"{args.histories} histories per rate, {args.commits} commits, seed {args.seed}; "
          f"per tool: answered 'nothing changed' / named a commit (wrong) / no answer, "
          f"mean runs", flush=True)
    print("| rate | " + " | ".join(f"{t}: nothing / named / none, runs" for t in tools) + " |")
    print("|---|" + "---|" * len(tools))
    # a constant rate is a case whose two sides fail alike: bench_flaky's histories as they are
    bench_flaky.CASES = tuple((f"{r:g}", r, r) for r in rates)
    bench_flaky.TOOLS = tools
    with Pool(2) as pool:
        for case, rate in enumerate(rates):
            res = pool.map(bench_flaky.simulate_history,
                           [(case, h, n, args.seed, args.peer_cap, (0.95, 0.95), "")
                            for h in range(args.histories)])
            cells = []
            for t in tools:
                answers = [answer(t, r[t]) for r in res]
                cells.append(" / ".join(str(answers.count(a)) for a in ("nothing", "named",
                                                                        "none"))
                             + f", {np.mean([r[t][1] for r in res]):.1f}")
            print(f"| {rate:g} | " + " | ".join(cells) + " |", flush=True)
    print(f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
