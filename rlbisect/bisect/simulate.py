"""A whole noisy search run against a simulated predicate: what tests and benchmarks measure.

    found = simulate(64, lambda i: "bad" if rng.random() < (0.6 if i >= 40 else 0.2) else "good")

``jobs=J`` plans rounds of J runs (:func:`rlbisect.bisect.noisy_batch.propose_batch`), decided on
before each round, as ``--flaky --jobs J`` would run them; ``rounds`` counts them.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from rlbisect.bisect.bayes import Decision, FlakySearch, default_max_runs
from rlbisect.bisect.noisy_batch import propose_batch
from rlbisect.errors import Verdict


class SimulatedSearch(NamedTuple):
    """A simulated search: its decision, the positions run in order, and the rounds."""

    decision: Decision
    runs: list[int]
    rounds: int = 0


def simulate(n: int, oracle: Callable[[int], Verdict], confidence: float = 0.95,
             max_runs: int | None = None, jobs: int = 1, distinct: bool = False,
             **kwargs) -> SimulatedSearch:
    """Run a whole search against ``oracle`` (position -> verdict); extra args go to
    :class:`FlakySearch`. ``max_runs`` defaults to :func:`default_max_runs`; ``jobs`` runs per
    round (``distinct``: no commit twice in a round)."""
    search = FlakySearch(n, **kwargs)
    cap = default_max_runs(n) if max_runs is None else max_runs
    runs: list[int] = []
    rounds, last = 0, 1
    while (d := search.decide(confidence, cap, since=last)).status == "probe":
        assert d.probe is not None
        batch = [d.probe] if jobs == 1 or cap - len(runs) <= 1 else propose_batch(
            search, min(jobs, cap - len(runs)), distinct)
        for pos in batch:
            search.observe(pos, oracle(pos))
        runs += batch
        rounds, last = rounds + 1, len(batch)
    return SimulatedSearch(d, runs, rounds)
