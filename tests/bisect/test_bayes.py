"""bayes.py: the posterior against brute force, the choice rule, stopping, skips, determinism."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from rlbisect.bisect import bayes
from rlbisect.bisect.bayes import FlakySearch, simulate


def brute_force(n: int, obs: list[tuple[int, str]]) -> tuple[np.ndarray, np.ndarray]:
    """P(culprit) for 0..n and P(eps) by multiplying every run's likelihood, one at a time."""
    grid, prior = bayes.EPS_GRID, bayes.eps_prior()
    joint = np.zeros((n, len(grid)))
    for k, (j, eps) in itertools.product(range(1, n + 1), enumerate(grid)):
        p = prior[j] / n
        for pos, verdict in obs:
            if verdict != "skip":
                truly_bad = pos >= k
                p *= (1 - eps) if (verdict == "bad") == truly_bad else eps
        joint[k - 1, j] = p
    joint /= joint.sum()
    return np.concatenate([[0.0], joint.sum(axis=1)]), joint.sum(axis=0)


def entropy(p: np.ndarray) -> float:
    return float(-sum(x * math.log2(x) for x in p if x > 0))


def random_obs(rng: random.Random, n: int, m: int) -> list[tuple[int, str]]:
    return [(rng.randint(0, n), rng.choice(["good", "bad", "bad", "good", "skip"]))
            for _ in range(m)]


@pytest.mark.parametrize("n", range(1, 9))
def test_posterior_matches_brute_force_enumeration(n):
    rng = random.Random(n)
    for _ in range(6):
        obs = random_obs(rng, n, rng.randint(0, 12))
        s = FlakySearch(n)
        for pos, verdict in obs:
            s.observe(pos, verdict)
        culprit, eps = brute_force(n, obs)
        np.testing.assert_allclose(s.culprit_posterior(), culprit, atol=1e-12)
        np.testing.assert_allclose(s.eps_posterior(), eps, atol=1e-12)
        np.testing.assert_allclose(s.p_bad(), np.cumsum(culprit), atol=1e-12)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_information_gain_matches_brute_force(n):
    rng = random.Random(100 + n)
    grid, prior = bayes.EPS_GRID, bayes.eps_prior()
    for _ in range(5):
        obs = [o for o in random_obs(rng, n, rng.randint(0, 10)) if o[1] != "skip"]
        s = FlakySearch(n)
        for o in obs:
            s.observe(*o)
        culprit, _ = brute_force(n, obs)
        gain = s.information_gain()
        for i in range(1, n):
            # P(bad at i) = P(bad, obs) / P(obs), both by enumeration over (culprit, eps)
            def evidence(extra):
                total = 0.0
                for k, (j, eps) in itertools.product(range(1, n + 1), enumerate(grid)):
                    p = prior[j] / n
                    for pos, v in obs + extra:
                        p *= (1 - eps) if (v == "bad") == (pos >= k) else eps
                    total += p
                return total
            p_bad = evidence([(i, "bad")]) / evidence([])
            after = {v: brute_force(n, obs + [(i, v)])[0] for v in ("good", "bad")}
            expected = entropy(culprit) - (p_bad * entropy(after["bad"])
                                           + (1 - p_bad) * entropy(after["good"]))
            assert gain[i] == pytest.approx(expected, abs=1e-9)
        assert gain[0] == gain[n] == 0.0


@pytest.mark.parametrize("n", range(1, 9))
def test_one_lie_anywhere_in_the_first_twelve_runs_is_survived(n):
    # Exhaustive over culprit x position of the single wrong verdict.
    for k, lie in itertools.product(range(1, n + 1), range(12)):
        runs = []

        def oracle(i: int) -> str:
            runs.append(i)
            truth = i >= k
            return "bad" if truth != (len(runs) - 1 == lie) else "good"
        out = simulate(n, oracle)
        assert out.decision.status == "found" and out.decision.first_bad == k, (n, k, lie)


def test_without_flips_it_is_binary_search_plus_a_few_confirmations():
    n = 63                                           # a 64-commit history: GOOD + 63
    budget = math.ceil(math.log2(n)) + 3
    for k in range(1, n + 1):
        out = simulate(n, lambda i: "bad" if i >= k else "good")
        assert out.decision.first_bad == k and out.decision.p >= 0.95
        assert len(out.runs) <= budget, (k, out.runs)
        lo, hi, j = 0, n, 0    # until the culprit is cornered, each run (nearly) halves (lo, hi]
        while hi - lo > 1:
            pos = out.runs[j]
            assert lo < pos < hi and abs((pos - lo) - (hi - pos)) <= 2, (k, out.runs)
            lo, hi, j = *((lo, pos) if pos >= k else (pos, hi)), j + 1
        assert hi == k and j <= 7 and set(out.runs[j:]) <= {k - 1, k}  # then: confirmations


def test_it_stops_exactly_when_the_top_posterior_reaches_the_confidence():
    rng = random.Random(7)
    for conf in (0.8, 0.95, 0.99):
        s = FlakySearch(20)
        while (d := s.decide(conf)).status == "probe":
            assert s.culprit_posterior().max() < conf
            truth = d.probe >= 13
            s.observe(d.probe, "bad" if truth != (rng.random() < 0.1) else "good")
        assert d.status == "found" and d.p == pytest.approx(s.culprit_posterior().max())
        assert d.p >= conf and d.first_bad == int(np.argmax(s.culprit_posterior()))


def test_higher_confidence_costs_more_runs_on_average():
    def mean_runs(conf: float) -> float:
        total = 0
        for seed in range(40):
            rng = random.Random(seed)
            k = rng.randint(1, 31)
            total += len(simulate(31, lambda i: "bad" if (i >= k) != (rng.random() < 0.1)
                                  else "good", confidence=conf).runs)
        return total / 40
    assert mean_runs(0.8) < mean_runs(0.95) < mean_runs(0.99)


def test_run_budget_ends_in_unknown_with_a_credible_set():
    out = simulate(40, lambda i: "bad" if i >= 17 else "good", confidence=0.99, max_runs=3)
    d = out.decision
    assert d.status == "unknown" and len(out.runs) == 3 and d.first_bad is None
    assert 17 in d.candidates and d.p >= 0.99 and list(d.candidates) == sorted(d.candidates)


def test_repeats_count_and_order_does_not_matter():
    a, b = FlakySearch(10), FlakySearch(10)
    obs = [(4, "good"), (7, "bad"), (4, "bad"), (4, "good"), (6, "bad"), (5, "good")]
    for o in obs:
        a.observe(*o)
    for o in reversed(obs):
        b.observe(*o)
    np.testing.assert_allclose(a.culprit_posterior(), b.culprit_posterior(), atol=1e-14)
    assert a.goods[4] == 2 and a.bads[4] == 1
    # the same verdict again at the same commit moves the posterior further the same way
    before = a.p_bad()[5]
    a.observe(5, "good")
    assert a.p_bad()[5] < before


def test_the_search_repeats_a_commit_when_that_is_most_informative():
    # 5 said good once and bad once, its neighbours agree with either: run 5 again.
    s = FlakySearch(16)
    for pos, v in [(8, "bad"), (4, "good"), (6, "bad"), (5, "good"), (5, "bad")]:
        s.observe(pos, v)
    assert s.next_probe() == 5
    rng = random.Random(3)
    runs = simulate(63, lambda i: "bad" if (i >= 30) != (rng.random() < 0.1) else "good").runs
    assert len(runs) > len(set(runs))


def test_skip_is_no_information_and_is_not_probed_again():
    s = FlakySearch(9)
    s.observe(3, "good")
    before = s.culprit_posterior().copy()
    s.observe(5, "skip")
    np.testing.assert_array_equal(s.culprit_posterior(), before)
    assert s.information_gain()[5] == 0.0 and 5 in s.skipped
    for _ in range(10):
        s.observe(s.next_probe(), "good")
        assert s.next_probe() != 5


def test_only_skipped_commits_left_is_reported_like_git():
    # positions 0..6: good good skip skip skip bad bad -> culprit is one of 2..5 (git t6030)
    states = ["good", "good", "skip", "skip", "skip", "bad", "bad"]
    out = simulate(6, lambda i: states[i])
    assert out.decision.status == "skipped" and out.decision.candidates == (2, 3, 4, 5)
    all_skipped = simulate(3, lambda i: "skip")
    assert all_skipped.decision.status == "skipped"
    assert all_skipped.decision.candidates == (1, 2, 3) and all_skipped.runs == [1, 2]


def test_same_observations_same_choices_and_ties_go_to_the_lower_position():
    assert FlakySearch(3).next_probe() == 1           # 1 and 2 are mirror images
    assert FlakySearch(2).next_probe() == 1
    assert FlakySearch(1).decide().status == "found"  # one candidate: BAD itself, no run
    outs = []
    for _ in range(2):
        rng = random.Random(11)
        outs.append(simulate(63, lambda i: "bad" if (i >= 40) != (rng.random() < 0.2)
                             else "good"))
    assert outs[0].runs == outs[1].runs and outs[0].decision == outs[1].decision


def test_sure_marks_bracket_the_found_culprit():
    s = FlakySearch(12)
    for pos, v in [(6, "bad"), (3, "good"), (4, "good"), (5, "bad")] * 3:
        s.observe(pos, v)
    d = s.decide(0.95)
    assert d.status == "found" and d.first_bad == 5
    assert s.sure_marks(0.95) == (4, 5)
    assert FlakySearch(12).sure_marks(0.95) == (None, None)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        FlakySearch(4).decide(1.0)
    with pytest.raises(ValueError, match="verdict"):
        FlakySearch(4).observe(2, "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        FlakySearch(4).observe(5, "bad")
    with pytest.raises(ValueError, match="n >= 1"):
        FlakySearch(0)
    with pytest.raises(ValueError, match="flip rates"):
        FlakySearch(4, eps_grid=[0.1, 0.5])


def test_the_default_budget_grows_with_the_range():
    assert bayes.default_max_runs(1) == 20 and bayes.default_max_runs(63) == 72
    assert bayes.eps_prior()[0] == pytest.approx(bayes.P_EXACT)
    assert np.all(np.diff(bayes.eps_prior()[1:]) < 0)   # smaller flip rates are likelier
