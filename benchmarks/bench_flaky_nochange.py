"""`rlbisect run --flaky` when nothing in GOOD..BAD changed the failure rate, against git-bayesect.

The user marked a BAD that is no worse than GOOD: every commit fails at one rate. The right answer
is "nothing to bisect" (rlbisect's exit 5 ``no_regression`` or 6 ``good_fails``); naming a commit
is wrong. Per rate, over the same simulated histories (``bench_flaky.draw``, the tools in
alternating order): how often each tool answered that, named a commit, or gave no answer (the
run budget spent; the peer, which has no budget, past ``--peer-cap`` runs), and its mean runs.
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
import bayesect_peer  # noqa: E402
from bench_flaky import draw  # noqa: E402

from rlbisect.bisect import bayes  # noqa: E402

NOTHING = ("no_regression", "good_fails")


def one(args: tuple) -> dict:
    """Both tools on history ``h`` of a constant ``rate``."""
    rate, h, n, seed, cap, with_peer = args
    hseed = seed * 1000 + round(rate * 1000) * 100_000 + h
    out = {}
    for tool in (("rlbisect", "peer") if h % 2 == 0 else ("peer", "rlbisect")):
        if tool == "peer" and not with_peer:
            continue
        count = [0]

        def fails(pos: int) -> bool:
            count[0] += 1
            return draw(hseed, count[0]) < round(1000 * rate)
        if tool == "rlbisect":
            d = bayes.simulate(n, lambda i: "bad" if fails(i) else "good").decision
            answer = ("nothing" if d.status in NOTHING else
                      "named" if d.status == "found" else "none")
        else:
            res = bayesect_peer.simulate(n, fails, 0.95, max_runs=cap)
            answer = "named" if res.culprit is not None else "none"
        out[tool] = (answer, count[0])
    return out


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
    with_peer = not args.no_peer
    if with_peer and (why := bayesect_peer.available()):
        sys.exit(f"{why} (or --no-peer)")
    n, start = args.commits - 1, time.time()
    tools = ("rlbisect", "peer") if with_peer else ("rlbisect",)
    print(f"{args.histories} histories per rate, {args.commits} commits, seed {args.seed}; "
          f"per tool: answered 'nothing changed' / named a commit (wrong) / no answer, "
          f"mean runs", flush=True)
    print("| rate | " + " | ".join(f"{t}: nothing / named / none, runs" for t in tools) + " |")
    print("|---|" + "---|" * len(tools))
    with Pool(2) as pool:
        for rate in rates:
            res = pool.map(one, [(rate, h, n, args.seed, args.peer_cap, with_peer)
                                 for h in range(args.histories)])
            cells = []
            for t in tools:
                answers = [r[t][0] for r in res]
                cells.append(" / ".join(str(answers.count(a)) for a in ("nothing", "named",
                                                                        "none"))
                             + f", {np.mean([r[t][1] for r in res]):.1f}")
            print(f"| {rate:g} | " + " | ".join(cells) + " |", flush=True)
    print(f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
