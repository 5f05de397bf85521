"""What the default `rlbisect check` costs on TinyAgent, cold and with `rlbisect warm` up.

Cold: a fresh `rlbisect check --json` process (the console entry point a user runs), the starting
policy already cached; warm: the same command with a `rlbisect warm` server up, which it hands its
work to. Both in one run, alternating, medians; and `--no-runs` beside each, so the run-level
checks' share is visible. Every output must be the same JSON (the checks are deterministic).

Usage: python benchmarks/bench_check_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], env: dict) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    return time.perf_counter() - t, done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    exe = shutil.which("rlbisect")
    if exe is None:
        raise SystemExit("rlbisect is not on PATH: pip install -e .")
    with tempfile.TemporaryDirectory() as tmp:
        warm_dir = Path(tmp) / "warm"
        warm_dir.mkdir(mode=0o700)
        cold_env = {k: v for k, v in os.environ.items() if k != "RLBISECT_WARM_DIR"}
        warm_env = {**cold_env, "RLBISECT_WARM_DIR": str(warm_dir)}
        timed([exe, "check", "--json"], cold_env)          # the starting policy is cached first
        subprocess.run([exe, "warm", "start"], env=warm_env, check=True, capture_output=True)
        try:
            times: dict[str, list[float]] = {}
            outputs: dict[str, set[str]] = {}
            for _ in range(a.rounds):
                for name, extra, env in (("cold", [], cold_env), ("warm", [], warm_env),
                                         ("cold --no-runs", ["--no-runs"], cold_env),
                                         ("warm --no-runs", ["--no-runs"], warm_env)):
                    seconds, out = timed([exe, "check", "--json", *extra], env)
                    times.setdefault(name, []).append(seconds)
                    outputs.setdefault(name.split()[-1] if "--no-runs" in name else "default", set()).add(out)
        finally:
            subprocess.run([exe, "warm", "stop"], env=warm_env, capture_output=True)
    for name, ts in times.items():
        print(f"rlbisect check {name:<15} {statistics.median(ts):6.2f} s  (median of {len(ts)}; "
              f"{min(ts):.2f}-{max(ts):.2f})")
    same = all(len(v) == 1 for v in outputs.values())
    print(f"outputs identical across runs and between cold and warm: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
