"""The statistical rule behind short-run verdicts: exact distribution functions, degenerate cases,
and the sequential rule's false-positive rate and power by simulation."""

import random
import statistics

import pytest

from rlbisect.runs.stats import PAIRED_FLOOR, Rule, betainc, paired_p, resolution, t_sf, welch_p


@pytest.mark.parametrize("t, df, expected", [(2.0, 10, 0.036694), (1.0, 3, 0.195501), (0.0, 5, 0.5),
                                             (-1.0, 3, 0.804499), (3.5, 30, 0.000738)])
def test_t_tail_matches_tables(t, df, expected):
    # expected values: numerical integration of the t density (and printed tables)
    assert t_sf(t, df) == pytest.approx(expected, abs=2e-6)


def test_incomplete_beta():
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-4)
    assert betainc(1, 1, 0.3) == pytest.approx(0.3) and betainc(2, 2, 0) == 0 and betainc(2, 2, 1) == 1


def test_welch_directions_and_degenerate_spread():
    low, high = [0.3, 0.32, 0.28], [0.55, 0.5, 0.52]
    assert welch_p(high, low, "lower") < 0.01 and welch_p(high, low, "higher") > 0.99
    assert welch_p(high, low, "change") < 0.02 and welch_p(low, high, "change") < 0.02
    assert welch_p([0.5] * 3, [0.5] * 3) == 1.0            # identical code, matched seeds
    assert welch_p([0.5] * 3, [0.4] * 3) == 0.0 and welch_p([0.4] * 3, [0.5] * 3) == 1.0


def sequential(rule, draw_good, draw_probe, rng, direction="lower"):
    good, probe = [], []
    for k in rule.schedule():
        good += [draw_good(rng) for _ in range(k - len(good))]
        probe += [draw_probe(rng) for _ in range(k - len(probe))]
        verdict, _ = rule.decide(good, probe, direction)
        if verdict != "unknown":
            return verdict
    return "unknown"


def test_false_positive_rate_on_identical_distributions_is_at_most_alpha():
    rule, rng = Rule(), random.Random(0)
    for dist in (lambda r: r.gauss(0.55, 0.04), lambda r: r.choice([0.49, 0.57, 0.55, 0.6, 0.55, 0.58]),
                 lambda r: r.betavariate(2, 5)):
        verdicts = [sequential(rule, dist, dist, rng) for _ in range(2000)]
        fpr = verdicts.count("bad") / len(verdicts)
        assert fpr <= rule.alpha, fpr
        assert verdicts.count("good") / len(verdicts) > 0.5


def test_power_on_the_entropy_sign_sized_regression():
    rule, rng = Rule(), random.Random(1)
    verdicts = [sequential(rule, lambda r: r.gauss(0.55, 0.04), lambda r: r.gauss(0.30, 0.05), rng)
                for _ in range(500)]
    assert verdicts.count("bad") / len(verdicts) > 0.95


def test_small_shifts_end_unknown_rather_than_guessing():
    rule, rng = Rule(), random.Random(2)
    verdicts = [sequential(rule, lambda r: r.gauss(0.55, 0.1), lambda r: r.gauss(0.50, 0.1), rng) for _ in range(300)]
    assert verdicts.count("unknown") > 0.1 * len(verdicts)


def test_schedule_and_looks():
    assert Rule().schedule() == [3, 5, 7, 9] and Rule().looks == 4
    assert Rule(k0=4, step=2, max_seeds=4).schedule() == [4]


def test_a_dashboard_pays_for_its_metrics_and_names_the_one_that_moved():
    from rlbisect.runs.stats import Rule
    rule = Rule()
    good = {"reward": [0.5, 0.52, 0.48], "grad_norm": [1.0, 1.05, 0.97], "entropy": [0.3, 0.31, 0.29]}
    moved = {**good, "grad_norm": [4.0, 4.1, 3.9]}
    d = rule.judge(good, moved)
    assert d.verdict == "bad" and [t.metric for t in d.deciding] == ["grad_norm"]
    assert d.threshold == pytest.approx(0.05 / (rule.looks * 3))
    assert d.tests[0].moved == pytest.approx(3.0, abs=0.05) and d.tests[0].spreads > 10
    assert rule.judge(good, good).verdict == "good"
    assert rule.judge(good, {"other": [1, 2, 3]}).verdict == "unknown"   # nothing in common: no evidence
    # a move one metric alone would call bad is not enough among many: the threshold is per metric
    one = Rule().judge({"m": [0.0, 0.1, 0.2]}, {"m": [0.5, 0.6, 0.7]})
    many = Rule().judge({f"m{i}": [0.0, 0.1, 0.2] for i in range(30)},
                        {**{f"m{i}": [0.0, 0.1, 0.2] for i in range(29)}, "m29": [0.5, 0.6, 0.7]})
    assert one.verdict == "bad" and many.verdict != "bad"


GOOD = [0.51372052839, 0.47105831574, 0.54122681937]   # a continuous metric on three seeds (spread 0.0354)


def paired_sequential(rule, move, rng, spread=1.0, noise=0.0):
    """Runs on matched seeds: seed s's run is base(s) (+ noise: a trainer that does not repeat),
    moved by ``move`` at the probe, for every seed alike."""
    bases = [rng.gauss(0, spread) for _ in range(rule.max_seeds)]
    for k in rule.schedule():
        good = [b + rng.gauss(0, noise) for b in bases[:k]]
        probe = [b + move + rng.gauss(0, noise) for b in bases[:k]]
        verdict, _ = rule.decide(good, probe, "lower")
        if verdict != "unknown":
            return verdict
    return "unknown"


def test_paired_test_sees_a_move_the_same_on_every_seed_that_welch_cannot():
    # a deterministic trainer whose fault lowers every seed's reward by 0.6 of the seed spread
    welch, paired, rng = Rule(), Rule(paired=True), random.Random(5)
    assert [paired_sequential(paired, -0.6, rng) for _ in range(200)].count("bad") == 200
    assert [paired_sequential(welch, -0.6, rng) for _ in range(200)].count("bad") < 20
    down, up = [x - 0.02 for x in GOOD], [x + 0.02 for x in GOOD]   # 0.6 of GOOD's spread
    d = paired.judge({"reward": GOOD}, {"reward": down}, "lower")
    assert d.verdict == "bad" and d.tests[0].by_seed and "seed by seed" in d.tests[0].describe()
    assert welch.judge({"reward": GOOD}, {"reward": down}, "lower").verdict != "bad"
    assert paired.judge({"reward": GOOD}, {"reward": GOOD}, "lower").verdict == "good"
    # the move that way only: a rise is no regression of a "lower is worse" metric
    assert paired.judge({"reward": GOOD}, {"reward": up}, "lower").verdict == "good"


def test_paired_test_keeps_the_false_positive_rate():
    rule, rng = Rule(paired=True), random.Random(6)
    for noise in (0.0, 0.3, 5.0):   # repeats exactly, a little noise on top of the seed, independent runs
        verdicts = [paired_sequential(rule, 0.0, rng, noise=noise) for _ in range(2000)]
        assert verdicts.count("bad") / len(verdicts) <= rule.alpha, noise
    # and on independent draws of two distributions alike, as the unpaired rule
    dist = lambda r: r.gauss(0.55, 0.04)   # noqa: E731
    verdicts = [sequential(rule, dist, dist, rng) for _ in range(2000)]
    assert verdicts.count("bad") / len(verdicts) <= rule.alpha


def test_a_consistent_move_under_the_floor_is_not_called_bad_by_the_pairs():
    tiny = [x - 1e-6 for x in GOOD]              # an epsilon changed: every seed down, by nothing
    assert paired_p(GOOD, tiny) == 1.0 and Rule(paired=True).judge({"r": GOOD}, {"r": tiny}).verdict == "good"
    sd = statistics.stdev(GOOD)
    under = [x - PAIRED_FLOOR * sd * 0.99 for x in GOOD]
    over = [x - PAIRED_FLOOR * sd * 1.01 for x in GOOD]
    assert paired_p(GOOD, under) == 1.0 and paired_p(GOOD, over) < 1e-9
    assert paired_p(GOOD, GOOD[:2]) == 1.0       # unequal lengths are never paired


def test_a_metric_with_levels_is_not_paired_by_coincidence():
    # a share of 64 tasks: three independent pairs each two levels apart are no move on every seed
    good, probe = [2 / 64, 3 / 64, 2 / 64], [0.0, 1 / 64, 0.0]
    assert paired_p(good, probe) > 1e-3
    assert resolution(good + probe) == 1 / 64 and resolution(GOOD) == 0.0
    # ...while the same on a continuous metric is (the move is the same to the last digit)
    assert paired_p(GOOD, [x - 0.0312 for x in GOOD]) < 1e-9
