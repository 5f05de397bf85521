"""Runs on the same seed at different commits: repeats are read as repeats (measured_pairs)."""

import math

import numpy as np
import pytest

from rlbisect.bisect.measured import MeasuredSearch
from rlbisect.bisect import measured_pairs
from rlbisect.bisect.measured_pairs import coincide, distinct, fresh_seed, pair_loglik, pairs, seed_blind


def test_a_repeat_on_the_same_seed_is_not_a_new_draw():
    runs = [(0, 0, 1.0), (4, 0, 1.0), (4, 1, 1.0), (8, 0, 2.0), (6, None, 1.0), (2, 0, float("-inf")),
            (3, 0, float("-inf"))]
    # another seed or no seed is another draw; crashed runs are never paired
    assert distinct(runs).tolist() == [True, False, True, True, True, True, True]
    assert pairs(runs) == [(0, 4, True), (4, 8, False)]


def test_a_commit_pairs_first_then_draws_where_it_would_only_repeat():
    runs = [(0, 0, 1.0), (0, 1, 2.0), (8, 0, 5.0), (8, 1, 6.0)]
    assert fresh_seed(runs, 8, 4) == 0          # paired with GOOD's and BAD's first runs
    runs.append((4, 0, 1.0))                    # it repeats GOOD's: 1..4 kept the stream
    assert fresh_seed(runs, 8, 4) == fresh_seed(runs, 8, 2) == 2   # 0 and 1 ran in that block
    assert fresh_seed(runs, 8, 6) == 0 and fresh_seed(runs, 8, 8) == 2


def test_runs_that_never_repeat_say_nothing():
    runs = [(0, 0, 1.0), (4, 0, 1.5), (8, 0, 2.0), (8, 1, 3.0)]
    assert np.array_equal(pair_loglik(runs, 8), np.zeros(9))


def test_a_repeat_weighs_against_the_culprits_between_its_runs():
    ll = pair_loglik([(0, 0, 1.0), (4, 0, 1.0), (8, 0, 2.0)], 8)
    assert np.allclose(ll[1:5], ll[1]) and np.allclose(ll[5:], ll[0])
    assert ll[1] < ll[0] - 1.0   # 1..4 lie between two runs that repeat


def test_a_difference_where_every_commit_kept_the_stream_points_at_the_culprit():
    # seed 0 repeats over 0..3 and 4..8 (no stream change there); seed 1 differs between 2 and 6:
    # only a change at 3 or 4 (the one commit not proven) or the culprit between 2 and 6 explains it
    runs = [(0, 0, 1.0), (3, 0, 1.0), (4, 0, 5.0), (8, 0, 5.0), (2, 1, 7.0), (6, 1, 8.0)]
    ll = pair_loglik(runs, 8)
    assert ll[4] == max(ll) and ll[4] > ll[5] + 1.0 and ll[4] > ll[0] + 1.0
    # a proven difference: 3 and 4 proven too (seed 2 repeats across them), seed 1 still differs
    proven = pair_loglik(runs + [(2, 2, 3.0), (6, 2, 3.0)], 8)
    assert proven[0] < ll[0] - 1.0


def deterministic(seeds, culprit=37, shift=1.0, n=64, untouched=0.0):
    """A trainer whose every commit keeps the random stream; the culprit touches a run (another
    draw, lower by ``shift``) unless its seed is among the ``untouched`` share (every k-th seed).
    ``seeds``: "paired" (the search's choice), "fresh" (a seed per commit and run), or "hidden"
    (the n-th run on seed n, the seed not told: each repeat counted as a new draw)."""
    spared = (np.arange(10_000) % round(1 / untouched) == 0) if untouched else np.zeros(10_000, bool)
    s, seen = MeasuredSearch(n, "lower"), {}
    while (d := s.decide(0.95, 600)).status == "probe":
        j = seen[d.probe] = seen.get(d.probe, -1) + 1
        seed = {"paired": s.next_seed(d.probe), "fresh": 1000 * d.probe + j}.get(seeds, j)
        touched = d.probe >= culprit and not spared[seed % 10_000]
        value = np.random.default_rng([seed, int(touched)]).normal() - shift * touched
        s.observe(d.probe, value, seed if seeds == "paired" else None)
    return d, s.n_obs


def test_paired_seeds_find_the_culprit_of_a_deterministic_trainer_in_fewer_runs():
    for culprit in (5, 37, 63):
        paired, fresh = deterministic("paired", culprit), deterministic("fresh", culprit)
        assert paired[0].status == fresh[0].status == "found"
        assert paired[0].first_bad == fresh[0].first_bad == culprit
        assert paired[1] < fresh[1]


def test_a_fault_that_spares_some_runs_is_still_found():
    # repeats across the culprit (a third of the seeds untouched) must not read as "nothing
    # changed"; counted as draws instead, they hide the drop: no answer in the budget
    for culprit in (5, 37, 63):
        d, _ = deterministic("paired", culprit, untouched=0.34)
        assert d.status == "found" and d.first_bad == culprit
        assert deterministic("hidden", culprit, untouched=0.34)[0].status != "found"


def test_repeats_add_no_draws_to_the_value_model():
    # GOOD's two runs repeated at 1..4 (the stream kept), then a drop: two draws before, not ten
    s, hidden = MeasuredSearch(8, "lower"), MeasuredSearch(8, "lower")
    for pos in range(9):
        for j in range(2):
            v = float(j) if pos < 5 else float(j) - 0.5 - pos
            s.observe(pos, v, j)
            hidden.observe(pos, v)       # no seed: never paired, each run a draw
    assert s.sides(5)["before"]["runs"] == 2
    assert hidden.sides(5)["before"]["runs"] == 10 and s.sides(5)["after"]["runs"] == 8


def test_runs_alike_in_score_but_not_in_record_are_no_repeat():
    # seed 0 scores 1.0 at GOOD and at 4 (a metric with few levels), but the records differ
    runs = [(0, 0, 1.0), (4, 0, 1.0), (8, 0, 1.0)]
    assert pairs(runs, ["a", "b", "b"]) == [(0, 4, None), (4, 8, True)]
    assert pairs(runs, ["a", None, "b"]) == [(0, 4, True), (4, 8, True)]   # a record unknown: the score decides
    # left out of the evidence: only the repeat 4 -> 8 weighs, against culprits 5..8
    ll = pair_loglik(runs, 8, ["a", "b", "b"])
    assert np.allclose(ll[:5], ll[0]) and ll[5] < ll[0] - 1.0
    assert np.array_equal(pair_loglik(runs[:2], 8, ["a", "b"]), np.zeros(9))
    # no new draw either, and a seed that only gives a score seen would not draw: the next is fresh
    assert distinct(runs).tolist() == [True, False, False]
    assert fresh_seed(runs, 8, 2) == 1


def few_levels(seeds=range(6), fingerprint=True) -> tuple[int, int]:
    """A pass rate with levels a quarter spread apart, a tenth of the commits changing the random
    stream: (wrong answers, runs) over the histories ``seeds``."""
    wrong = runs = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        culprit, stream = int(rng.integers(1, 65)), np.cumsum(rng.random(65) < 0.1)
        s = MeasuredSearch(64, "lower")
        while (d := s.decide(0.95, 600)).status == "probe":
            j, bad = s.next_seed(d.probe), int(d.probe >= culprit)
            x = np.random.default_rng([seed, int(stream[d.probe]), j, bad]).normal() - bad
            s.observe(d.probe, round(x * 4) / 4, j, repr(x) if fingerprint else None)
        wrong, runs = wrong + (d.status == "found" and d.first_bad != culprit), runs + s.n_obs
    return wrong, runs


def test_a_metric_with_few_levels_names_no_wrong_culprit(monkeypatch):
    # different runs often score alike; read as repeats they prove streams unchanged and weigh
    # against the true culprit. The record tells them apart; without one, two seeds scoring alike
    # show that the score cannot, and the pairs are not read
    assert few_levels()[0] == few_levels(fingerprint=False)[0] == 0
    monkeypatch.setattr(measured_pairs, "coincide", lambda *a: False)
    assert few_levels()[0] == 0 and few_levels(fingerprint=False)[0] == 3


def test_a_score_that_two_seeds_share_turns_the_pairs_off():
    runs = [(0, 0, 1.0), (0, 1, 2.0), (4, 0, 1.0), (8, 0, 3.0)]
    ll = pair_loglik(runs, 8)
    assert ll[2] < ll[0] - 1.0                        # 0 -> 4 repeats on seed 0
    alike = runs + [(8, 1, 1.0)]                     # seed 1 at 8 scores as seed 0 at 0
    assert coincide(alike) and np.array_equal(pair_loglik(alike, 8), np.zeros(9))
    assert not coincide(alike, ["a", "b", "a", "c", "d"])   # their records differ: the pairs stand
    ll = pair_loglik(alike, 8, ["a", "b", "a", "c", "d"])
    assert ll[2] < ll[0] - 1.0


@pytest.mark.parametrize("wobble", [0.0, 1.0])
def test_a_seed_that_does_not_reach_the_run_gives_no_answer(wobble):
    # wobble: each commit's one run differs (its own stream), which also reads as a second change
    # or a drift; the seed's absence is the reason to give, whichever check would fire first
    s = MeasuredSearch(16, "lower")
    while (d := s.decide(0.95, 200)).status == "probe":
        value = (0.0 if d.probe < 9 else -3.0) + wobble * math.sin(7.3 * d.probe)   # one run for every seed
        s.observe(d.probe, value, s.next_seed(d.probe), repr(value))
    assert d.status == "misfit" and "the seed does not reach the training run" in d.message, d.message
    assert seed_blind([0, 0, 8, 8], [0, 1, 0, 1], ["a", "a", "b", "b"]) == 2
    assert seed_blind([0, 0, 8, 8], [0, 1, 0, 1], ["a", "a", "b", "c"]) is None    # one commit's seeds differ
    assert seed_blind([0, 0, 8], [0, 1, 0], ["a", "a", "b"]) is None                # one commit: chance
    # records that differ by a number never reproducible (memory), one value for every seed: blind too
    assert seed_blind([0, 0, 8, 8, 4, 4], [0, 1, 0, 1, 0, 1], list("abcdef"), [1.0, 1.0, 0.5, 0.5, 0.2, 0.2]) == 3
    assert seed_blind([0, 0, 8, 8], [0, 1, 0, 1], ["a", "b", "c", "d"], [1.0, 1.0, 0.5, 0.5]) is None  # chance
    assert seed_blind([0, 0, 8, 8], [0, 1, 0, 1], ["a", "b", "c", "d"], [1.0, 1.0, 0.5, 0.7]) is None
    assert seed_blind([0, 0, 8, 8], [0, 1, 0, 1], ["a", "b", "c", "d"], [math.nan] * 4) is None   # crashes differ
