"""noisy_batch.py: a round of J runs for the noisy search (--flaky --jobs J)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from rlbisect.bisect.bayes import FlakySearch
from rlbisect.bisect.noisy_batch import batch_gain, propose_batch, round_rates
from rlbisect.bisect.simulate import simulate


def flaky(culprit: int, before: float, after: float, rng: random.Random):
    return lambda i: "bad" if rng.random() < (after if i >= culprit else before) else "good"


def observed(n: int, seed: int, runs: int) -> FlakySearch:
    rng, s = random.Random(seed), FlakySearch(n)
    for _ in range(runs):
        i = rng.randint(0, n)
        s.observe(i, "bad" if rng.random() < (0.85 if i >= n // 3 else 0.15) else "good")
    return s


@pytest.mark.parametrize("seed", range(4))
def test_a_round_of_one_is_the_sequential_pick(seed):
    s = observed(20, seed, 3 * seed)
    assert propose_batch(s, 1) == [s.next_probe()]
    gain = s.information_gain()
    for i in range(21):
        assert batch_gain(s, [i]) == pytest.approx(gain[i], abs=1e-9)


def test_the_round_gain_matches_enumerating_every_outcome_by_hand():
    s = observed(12, 5, 10)
    p, m = round_rates(s)
    picks = [2, 7, 7]
    total = 0.0
    for ys in itertools.product((0, 1), repeat=len(picks)):
        per_k = np.prod([m[i] if y else 1 - m[i] for i, y in zip(picks, ys)], axis=0)
        pattern = float(per_k @ p)
        # I(k; y) = sum_y sum_k P(k) P(y | k) log2(P(y | k) / P(y))
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(per_k > 0, p * per_k * np.log2(per_k / pattern), 0.0)
        total += float(terms.sum())
    assert batch_gain(s, picks) == pytest.approx(total, abs=1e-9)


def test_the_round_spreads_where_the_best_single_runs_would_crowd():
    # without the joint design, the J runs that each tell most on their own sit side by side
    # around the middle and tell little more together than one of them
    s = FlakySearch(63)
    for _ in range(3):                   # GOOD passed and BAD failed three times each
        s.observe(0, "good")
        s.observe(63, "bad")
    gain = s.information_gain()
    crowd = sorted(range(64), key=lambda i: (-gain[i], i))[:4]
    batch = propose_batch(s, 4)
    assert max(crowd) - min(crowd) <= 4
    assert max(batch) - min(batch) >= 15 and len(set(batch)) == 4
    assert batch_gain(s, batch) > batch_gain(s, crowd) + 0.25   # measured: 1.28 against 0.98 bits


def test_skipped_positions_stay_out_and_distinct_rounds_do_not_repeat():
    s = observed(6, 1, 12)
    s.observe(3, "skip")
    s.observe(3, "skip")   # the second bars it
    for distinct in (False, True):
        batch = propose_batch(s, 12, distinct)
        assert 3 not in batch and all(0 <= i <= 6 for i in batch)
        if distinct:
            assert len(batch) == len(set(batch)) == 6
    with pytest.raises(ValueError):
        propose_batch(s, 0)


def test_rounds_of_four_take_about_a_quarter_of_the_runs_and_find_the_same_culprits():
    seq_runs, rounds, right = [], [], [0, 0]
    for seed in range(12):
        k = random.Random(seed).randint(1, 63)
        for j, jobs in enumerate((1, 4)):
            out = simulate(63, flaky(k, 0.1, 0.9, random.Random(100 + seed)), jobs=jobs)
            right[j] += out.decision.first_bad == k
            if jobs == 1:
                assert out.rounds == len(out.runs)
                seq_runs.append(len(out.runs))
            else:
                rounds.append(out.rounds)
                assert out.rounds >= len(out.runs) / 4
    assert right == [12, 12]
    assert sum(rounds) <= 0.35 * sum(seq_runs), (sum(rounds), sum(seq_runs))


def test_same_runs_same_rounds():
    outs = [simulate(40, flaky(17, 0.1, 0.9, random.Random(3)), jobs=3) for _ in range(2)]
    assert outs[0] == outs[1]


def test_the_posterior_strategy_plans_rounds_of_jobs_runs_and_counts_them():
    from rlbisect.bisect.posterior import Posterior
    from rlbisect.bisect.strategies import GitState
    from rlbisect.errors import Status, Verdict
    shas = [f"c{i}" for i in range(33)]
    rng = random.Random(3)
    for jobs in (1, 4):
        strategy = Posterior(0.95, jobs=jobs)
        strategy.start([(s, ()) for s in shas], shas[0], shas[-1], True)
        rounds = []
        while picks := strategy.plan(GitState("next")):
            rounds.append(picks)
            strategy.observe([(c, Verdict.BAD if rng.random() < (0.9 if int(c[1:]) >= 20 else 0.1)
                               else Verdict.GOOD) for c in picks])
        end = strategy.conclude(GitState("next"))
        assert (end.status, end.first_bad) == (Status.FOUND, "c20")
        assert {len(r) for r in rounds[:-1]} == {jobs} and strategy.runs == sum(map(len, rounds))
        assert end.extra["n_runs"] == strategy.runs
