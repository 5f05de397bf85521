"""`rlbisect demo` twice on one kept history: the first run probes, the second answers from the
cache in `.git/rlbisect/` (target: >= 20x faster). Both runs are whole CLI processes, timed the same
way, with the starting policy already cached. Usage: python benchmarks/bench_demo_cache.py"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def demo(keep: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from rlbisect.cli.app import main; main()", "demo", "--keep", str(keep)],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def main(rounds: int = 2) -> None:
    firsts, cached = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            keep = Path(tmp) / "history"
            firsts.append(demo(keep))
            cached += [demo(keep) for _ in range(3)]
    first, again = min(firsts), min(cached)
    print(f"first run (3 probes)   {first:6.2f} s   (best of {len(firsts)})")
    print(f"cached re-run          {again:6.2f} s   (best of {len(cached)})")
    print(f"speed-up               {first / again:6.1f} x   (target >= 20)")


if __name__ == "__main__":
    main()
