"""A round of J runs for the noisy search (``--flaky --jobs J``): a batch design.

Pure: numpy only. :meth:`FlakySearch.next_probe <rlbisect.bisect.bayes.FlakySearch.next_probe>`
picks the one run that tells most about the culprit ``k``; a round of J runs on a cluster needs
J runs chosen before any of them reports. :func:`propose_batch` picks them greedily: each next run
is the one that adds most to what the whole round tells about ``k``, the mutual information
``I(k; y_1..y_j)`` of the round's outcomes. Given ``k``, a run at position ``i`` fails with the
posterior mean rate of its side (``E[f1 | k]`` if ``i >= k``, else ``E[f0 | k]``), and the runs
of a round are taken as independent given ``k``; so ``H(y | k)`` is a sum of binary entropies
and ``H(y)`` the entropy of the ``2^j`` outcome patterns, summed over ``k`` exactly. For ``J = 1``
this is :meth:`~rlbisect.bisect.bayes.FlakySearch.information_gain` itself, and the pick is the
sequential search's. A position may appear more than once in a round (a repeat on another seed)
unless ``distinct``; skipped positions never do. Ties go to the lower position.

The stop is not the batch's business: the caller asks :meth:`FlakySearch.decide` before each
round, so a search stops at the same evidence as the sequential one, only checked every J runs.
Measured in ``benchmarks/bench_noisy_batch.py`` (rounds against the sequential search's runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlbisect.bisect.bayes_fit import entropy_bits

if TYPE_CHECKING:
    from rlbisect.bisect.bayes import Decision, FlakySearch

MAX_JOBS = 12     #: 2^J outcome patterns are enumerated: beyond this, plan rounds of at most 12


def round_rates(search: FlakySearch) -> tuple[np.ndarray, np.ndarray]:
    """``(P(k), m)``: the culprit posterior (``n + 2``) and ``m[i, k]``, the chance a run at
    position ``i`` (0..n) fails if the culprit is ``k``, shape ``(n + 1, n + 2)``."""
    c = search._update()
    pos = np.arange(search.n + 1)[:, None]
    ks = np.arange(search.n + 2)[None, :]
    return c["post"], np.where(pos >= ks, c["f1"][None, :], c["f0"][None, :])


def propose_batch(search: FlakySearch, jobs: int, distinct: bool = False) -> list[int]:
    """Up to ``jobs`` positions to run together, most informative first (see the module)."""
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    testable = np.array([i for i in range(search.n + 1) if i not in search.skipped], dtype=int)
    if not len(testable):
        return []
    p, m = round_rates(search)
    m = np.clip(m, 0.0, 1.0)
    noise = entropy_bits(m) @ p                  # [i]: E_k H(y_i | k)
    patterns = np.ones((1, len(p)))              # [pattern, k]: P(outcomes so far | k)
    picked: list[int] = []
    for _ in range(min(jobs, MAX_JOBS)):
        pool = testable if not distinct else np.array([i for i in testable if i not in picked],
                                                      dtype=int)
        if not len(pool):
            break
        mi = m[pool][:, None, :]                                       # [cand, 1, k]
        joint = np.concatenate([patterns[None] * mi, patterns[None] * (1 - mi)], axis=1) @ p
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -np.where(joint > 0, joint * np.log2(joint), 0.0).sum(axis=1)   # [cand]
        gain = h - noise[pool]
        best = int(pool[int(np.argmax(gain >= gain.max() - 1e-12))])
        picked.append(best)
        patterns = np.concatenate([patterns * m[best], patterns * (1 - m[best])], axis=0)
    return picked


def plan_round(search: FlakySearch, decision: Decision, jobs: int, left: int) -> list[int]:
    """The positions of the next round: none once ``decision`` stops the search; its own pick
    alone when ``jobs`` is 1; else a batch of ``min(jobs, left)`` (``left``: runs the budget
    still allows), its first run that same pick up to ties."""
    if decision.status != "probe" or decision.probe is None:
        return []
    return [decision.probe] if jobs <= 1 or left <= 1 else propose_batch(search, min(jobs, left))


def batch_gain(search: FlakySearch, positions: list[int]) -> float:
    """Bits a round of runs at ``positions`` tells about ``k``: ``I(k; y)`` (the model above)."""
    p, m = round_rates(search)
    patterns = np.ones((1, len(p)))
    for i in positions:
        patterns = np.concatenate([patterns * m[i], patterns * (1 - m[i])], axis=0)
    joint = patterns @ p
    h = float(-(joint[joint > 0] * np.log2(joint[joint > 0])).sum())
    return h - float(sum(entropy_bits(m[i]) @ p for i in positions))
