"""What one invariants probe and `rlbisect check` cost, before and after the start-up work.

"Before" is a release of rlbisect extracted from this repository's history (default: f9d94d9, the
last commit before issue 16), run from its own folder by PYTHONPATH; "after" is this checkout.
Both check the same trainer code (this checkout's reference_trainer), with the starting policy
already cached, alternating in one run; medians. Each pair of outputs is compared byte for byte:
the check values must be identical.

  probe     the worker a bisect runs per commit: before `python -m ...invariants CHECKOUT`, after
            `python -I -m ...invariants --code-dir CHECKOUT --reply FILE` fresh, and forked from the
            fork server `rlbisect run` starts for its probes (its one-time start is shown too)
  check     `rlbisect check --json`
  matrix    `rlbisect check --matrix --json`, the chapter's eight rows (no fault + 7) and all rows
  warm      the same `rlbisect check` commands with `rlbisect warm start` up (after only: the
            previous release has no server), by the console entry point a user runs

Usage: python benchmarks/bench_probe.py [--before REF] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_ADAPTER = ROOT / "benchmarks" / "chapter_rows.py"
INVARIANTS = "rlbisect.bisect.predicates.invariants"


def extract(ref: str, into: Path) -> Path:
    """The release's rlbisect, read from git without touching the working tree or index; its
    reference_trainer is left out, so both sides import this checkout's trainer."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref, "rlbisect"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    seconds = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-800:]}")
    return seconds, r.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="f9d94d9")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    from rlbisect._proc import client
    with tempfile.TemporaryDirectory() as tmp:
        old = extract(a.before, Path(tmp) / "before")
        run_dir = Path(tmp) / "cwd"
        run_dir.mkdir()
        env_new = {**os.environ, "PYTHONPATH": str(ROOT)}
        env_old = {**os.environ, "PYTHONPATH": os.pathsep.join([str(old), str(ROOT)])}
        py = sys.executable
        cli = ["-c", "from rlbisect.cli.app import main; main()"]
        entry = ["-c", "from rlbisect.cli import main; main()"]      # the console script's
        matrix8 = ["check", "--matrix", "--json", "--adapter", f"{CHAPTER_ADAPTER}:make_adapter"]
        reply = Path(tmp) / "reply.json"
        cases = {
            "probe": ([py, "-m", INVARIANTS, str(ROOT)],
                      [py, "-I", "-m", INVARIANTS, "--code-dir", str(ROOT), "--reply", str(reply)]),
            "check": ([py, *cli, "check", "--json"], [py, *cli, "check", "--json"]),
            "matrix, 8 rows": ([py, *cli, *matrix8], [py, *cli, *matrix8]),
            "matrix, all rows": ([py, *cli, "check", "--matrix", "--json"],
                                 [py, *cli, "check", "--matrix", "--json"]),
            "check, warm": ([py, *cli, "check", "--json"], [py, *entry, "check", "--json"]),
            "matrix 8, warm": ([py, *cli, *matrix8], [py, *entry, *matrix8]),
        }
        warm_env = {**env_new, "RLBISECT_WARM_DIR": str(Path(tmp) / "warm")}
        (Path(tmp) / "warm").mkdir(mode=0o700)   # rlbisect refuses to create it
        timed([py, *cli, "check"], env_new, run_dir)      # the starting policy is cached first
        started = subprocess.run([py, *entry, "warm", "start"], env=warm_env, cwd=run_dir, capture_output=True)
        if started.returncode:
            raise SystemExit(f"rlbisect warm start: {started.stderr.decode()}")
        t0 = time.perf_counter()
        client._Private.socket()
        first, _ = client.ask(INVARIANTS, [], ROOT, None)
        start = time.perf_counter() - t0
        assert first is not None
        times = {name: ([], []) for name in cases}
        warm = []
        outputs = {}
        for _ in range(a.rounds):
            for name, (before, after) in cases.items():
                for side, argv, env in ((0, before, env_old), (1, after, warm_env if "warm" in name else env_new)):
                    seconds, out = timed(argv, env, run_dir)
                    if name == "probe" and side == 1:     # the reply, as the previous worker printed it
                        out = json.dumps(json.loads(reply.read_text())["detail"]["checks"]).encode()
                    elif name == "probe":
                        out = json.dumps(json.loads(out)).encode()
                    times[name][side].append(seconds)
                    outputs.setdefault((name, side), out)
                    if outputs[(name, side)] != out:
                        raise SystemExit(f"{name}: output differs between runs of the same code")
            r, done = client.ask(INVARIANTS, [], ROOT, None)
            warm.append(done.seconds)
            if r is None or json.dumps(r.detail["checks"]).encode() != outputs[("probe", 0)]:
                raise SystemExit("served probe: check values differ from the fresh probe's")
        served = subprocess.run([py, *entry, "warm", "status"], env=warm_env, cwd=run_dir, capture_output=True)
        subprocess.run([py, *entry, "warm", "stop"], env=warm_env, cwd=run_dir, capture_output=True)
        if f"checks served {2 * a.rounds}," not in served.stdout.decode():
            raise SystemExit(f"the warm server did not serve every warm check: {served.stdout.decode()}")
        print(f"{'':18} {'before':>8} {'after':>8} {'speed-up':>9}  (medians of {a.rounds}, before = {a.before})")
        for name, (before, after) in times.items():
            same = "identical output" if outputs[(name, 0)] == outputs[(name, 1)] else "OUTPUT DIFFERS"
            b, f = statistics.median(before), statistics.median(after)
            print(f"{name:18} {b:7.2f}s {f:7.2f}s {b / f:8.2f}x  {same}")
        b = statistics.median(times["probe"][0])
        w = statistics.median(warm)
        print(f"{'probe, served':18} {b:7.2f}s {w:7.2f}s {b / w:8.2f}x  identical output "
              f"(target <= 1.0 s; the server's one-time start + first probe: {start:.2f}s)")


if __name__ == "__main__":
    main()
