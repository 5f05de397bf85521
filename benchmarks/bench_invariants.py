"""The checks (the chapter's nine and ours) on a 64-episode probe batch against one training update on the same batch,
timed alternately in one run (target: checks <= 3x the update). Usage: python benchmarks/bench_invariants.py"""

from __future__ import annotations

import statistics
import time

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import INVARIANTS, CheckContext, Thresholds


class _FixedBatch:
    """The adapter with its probe batch sampled once, so both sides time only their own work."""

    def __init__(self, adapter):
        self._a, self._probe = adapter, adapter.probe_batch()

    def probe_batch(self):
        return self._probe

    def __getattr__(self, name):
        return getattr(self._a, name)


def time_checks(adapter) -> float:
    t0 = time.perf_counter()
    ctx = CheckContext(adapter, Thresholds())
    for fn in INVARIANTS.values():
        fn(ctx)
    return time.perf_counter() - t0


def time_update(adapter) -> float:
    model = adapter.policy()
    batch, _ = adapter.probe_batch()
    t0 = time.perf_counter()
    adapter.update(model, batch, adapter.make_ref(model))
    return time.perf_counter() - t0


def main(repeats: int = 25) -> None:
    adapter = _FixedBatch(make_adapter(episodes=64, kl_coef=0.1))
    checks, updates = [], []
    for _ in range(repeats):          # alternate, so machine noise hits both sides alike
        updates.append(time_update(adapter))
        checks.append(time_checks(adapter))
    c, u = statistics.median(checks), statistics.median(updates)
    print(f"one training update (64 episodes, kl_coef 0.1)  {u * 1000:7.1f} ms")
    print(f"the checks ({len(INVARIANTS)}) on the same batch            {c * 1000:7.1f} ms")
    print(f"ratio checks / update                          {c / u:7.2f} x  (target <= 3)")


if __name__ == "__main__":
    main()
