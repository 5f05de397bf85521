"""A whole noisy search run against a simulated predicate: what tests and benchmarks measure.

    found = simulate(64, lambda i: "bad" if rng.random() < (0.6 if i >= 40 else 0.2) else "good")
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from rlbisect.bisect.bayes import Decision, FlakySearch, default_max_runs
from rlbisect.errors import Verdict


class SimulatedSearch(NamedTuple):
    """A simulated search: its decision and the positions run, in order."""

    decision: Decision
    runs: list[int]


def simulate(n: int, oracle: Callable[[int], Verdict], confidence: float = 0.95,
             max_runs: int | None = None, **kwargs) -> SimulatedSearch:
    """Run a whole search against ``oracle`` (position -> verdict); extra args go to
    :class:`FlakySearch`. ``max_runs`` defaults to :func:`default_max_runs`."""
    search = FlakySearch(n, **kwargs)
    cap = default_max_runs(n) if max_runs is None else max_runs
    runs: list[int] = []
    while (d := search.decide(confidence, cap)).status == "probe":
        assert d.probe is not None
        runs.append(d.probe)
        search.observe(d.probe, oracle(d.probe))
    return SimulatedSearch(d, runs)
