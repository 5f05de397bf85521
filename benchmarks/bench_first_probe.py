"""What the first probe of `rlbisect run` costs on the demo history: with `rlbisect warm` up, with
the private fork server `rlbisect run` starts for itself, and cold (`RLBISECT_COLD=1`).

The cost of a probe is what the bisect waits for it: the predicate's own seconds plus rlbisect's
overhead around it (checkout, the server's start when there is one to start), both from the
run's JSON. The three ways alternate within each round, on one history, with the starting policy
cached first; medians over the rounds. The check values must be identical in every run.

Usage: python benchmarks/bench_first_probe.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from history_fixtures import build_history  # noqa: E402


def rlbisect(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlbisect", *args], env=env, capture_output=True, text=True,
                          cwd=env["RLBISECT_BENCH_CWD"], timeout=900)


def first_probe(env: dict, history, out: Path) -> tuple[float, dict]:
    done = rlbisect(env, "run", f"{history.good}..{history.bad}", "--repo", history.path, "--no-cache",
                    "--json", str(out))
    if done.returncode != 0:
        raise SystemExit(f"rlbisect run exited {done.returncode}: {done.stderr[-800:]}")
    probe = json.loads(out.read_text())["probes"][0]
    return probe["seconds"] + probe["overhead"], probe["values"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlb-", dir="/tmp") as tmp:   # short: a socket path
        history = build_history(Path(tmp) / "history", "sign_flip", 8, 3)
        (Path(tmp) / "warm").mkdir(mode=0o700)
        (Path(tmp) / "none").mkdir(mode=0o700)
        base = {**os.environ, "RLBISECT_BENCH_CWD": tmp}
        ways = {"warm server": {**base, "RLBISECT_WARM_DIR": f"{tmp}/warm"},
                "private server": {**base, "RLBISECT_WARM_DIR": f"{tmp}/none"},
                "cold": {**base, "RLBISECT_WARM_DIR": f"{tmp}/none", "RLBISECT_COLD": "1"}}
        rlbisect(ways["cold"], "check")                                   # the starting policy, cached
        started = rlbisect(ways["warm server"], "warm", "start", "--idle", "30")
        if started.returncode:
            raise SystemExit(f"rlbisect warm start: {started.stderr}")
        try:
            costs: dict[str, list[float]] = {w: [] for w in ways}
            values = set()
            for _ in range(a.rounds):
                for way, env in ways.items():
                    cost, checks = first_probe(env, history, Path(tmp) / "out.json")
                    costs[way].append(cost)
                    values.add(json.dumps(checks, sort_keys=True))
        finally:
            rlbisect(ways["warm server"], "warm", "stop")
    if len(values) != 1:
        raise SystemExit("the first probe's check values differ between runs")
    print(f"first probe of `rlbisect run` on the demo history (medians of {a.rounds}; identical check values)")
    for way, xs in costs.items():
        print(f"  {way:15} {statistics.median(xs):6.2f} s   (min {min(xs):.2f}, max {max(xs):.2f})")
    print("  target with the warm server: <= 0.6 s")


if __name__ == "__main__":
    main()
